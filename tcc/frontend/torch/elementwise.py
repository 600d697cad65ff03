"""Converters for elementwise ATen ops: math, activations, comparisons, logic, casts.

Operands are promoted as torch promotes them (`torch.result_type`, where a Python number
does not widen a tensor's dtype), then the tcc op of the same meaning is called.
"""

from __future__ import annotations

import math

from tcc.frontend.torch.base import converter
from tcc.frontend.torch.importer import torch_dtype
from tcc.ir.dtype import INT_DTYPES
from tcc.ir.expr import PrimExpr
from tcc.ir.graph import Expr, type_of


def _meta(value):
    """A stand-in torch.result_type can read for `value`: an empty tensor of its dtype and
    rank class (0-d tensors promote like numbers), or the number itself."""
    import torch

    if isinstance(value, Expr):
        t = type_of(value)
        shape = (1,) if t.ndim else ()
        return torch.empty(shape, dtype=getattr(torch, t.dtype), device="meta")
    if isinstance(value, PrimExpr):
        return 1
    return value


def promoted(a, b) -> str:
    """The dtype torch computes `a` op `b` in."""
    import torch

    return torch_dtype(torch.result_type(_meta(a), _meta(b)))


def _binary(op: str, *names: str, compare: bool = False):
    """`names` compute tcc's `op` on operands 0 and 1: in torch's result dtype for
    arithmetic, in the promoted dtype of the operands for comparisons."""

    def convert(ctx, node):
        a, b = node.arg(0, "self"), node.arg(1, "other")
        dtype = promoted(a, b) if compare else ctx.out_dtype(node)
        return ctx.emit(op, ctx.tensor(a, dtype), ctx.tensor(b, dtype))

    converter(*names)(convert)


_binary("mul", "aten.mul.Tensor", "aten.mul.Scalar")
_binary("maximum", "aten.maximum.default")
_binary("minimum", "aten.minimum.default")
_binary("pow", "aten.pow.Tensor_Tensor", "aten.pow.Tensor_Scalar", "aten.pow.Scalar")
_binary("floor_mod", "aten.remainder.Tensor", "aten.remainder.Scalar")
_binary("trunc_mod", "aten.fmod.Tensor", "aten.fmod.Scalar")
_binary("equal", "aten.eq.Tensor", "aten.eq.Scalar", compare=True)
_binary("less", "aten.lt.Tensor", "aten.lt.Scalar", compare=True)
_binary("less_equal", "aten.le.Tensor", "aten.le.Scalar", compare=True)
_binary("greater", "aten.gt.Tensor", "aten.gt.Scalar", compare=True)
_binary("greater_equal", "aten.ge.Tensor", "aten.ge.Scalar", compare=True)


@converter("aten.ne.Tensor", "aten.ne.Scalar")
def _ne(ctx, node):
    a, b = node.arg(0, "self"), node.arg(1, "other")
    dtype = promoted(a, b)
    return ctx.emit("logical_not", ctx.emit("equal", ctx.tensor(a, dtype), ctx.tensor(b, dtype)))


def _logical(op: str, *names: str):
    def convert(ctx, node):
        a, b = (ctx.tensor(node.arg(i, n), "bool") for i, n in ((0, "self"), (1, "other")))
        return ctx.emit(op, a, b)

    converter(*names)(convert)


_logical("logical_and", "aten.logical_and.default")
_logical("logical_or", "aten.logical_or.default")
_logical("logical_xor", "aten.logical_xor.default")


def _bitwise(op: str, logical: str, *names: str):
    def convert(ctx, node):
        dtype = ctx.out_dtype(node)
        a, b = ctx.tensor(node.arg(0, "self"), dtype), ctx.tensor(node.arg(1, "other"), dtype)
        return ctx.emit(logical if dtype == "bool" else op, a, b)

    converter(*names)(convert)


_bitwise("bitwise_and", "logical_and", "aten.bitwise_and.Tensor", "aten.bitwise_and.Scalar")
_bitwise("bitwise_or", "logical_or", "aten.bitwise_or.Tensor", "aten.bitwise_or.Scalar")
_bitwise("bitwise_xor", "logical_xor", "aten.bitwise_xor.Tensor", "aten.bitwise_xor.Scalar")


@converter("aten.add.Tensor", "aten.add.Scalar", "aten.sub.Tensor", "aten.sub.Scalar",
           "aten.rsub.Tensor", "aten.rsub.Scalar")
def _add_sub(ctx, node):
    """a + alpha * b, a - alpha * b, and rsub's b - alpha * a."""
    dtype = ctx.out_dtype(node)
    a, b = ctx.tensor(node.arg(0, "self"), dtype), ctx.tensor(node.arg(1, "other"), dtype)
    alpha = node.arg(2, "alpha", 1)
    op = node.target.split(".")[1]
    if op == "rsub":
        a, b = b, a
    if alpha != 1:
        b = ctx.emit("mul", b, ctx.tensor(alpha, dtype))
    return ctx.emit("add" if op == "add" else "sub", a, b)


@converter("aten.div.Tensor", "aten.div.Scalar", "aten.div.Tensor_mode", "aten.div.Scalar_mode")
def _div(ctx, node):
    mode = node.arg(2, "rounding_mode")
    dtype = ctx.out_dtype(node)
    a, b = ctx.tensor(node.arg(0, "self"), dtype), ctx.tensor(node.arg(1, "other"), dtype)
    q = ctx.emit("div", a, b)  # floats: true division; integers: toward zero
    if mode == "floor":
        if dtype in INT_DTYPES:  # exact: a - (a mod b) is a multiple of b
            return ctx.emit("div", ctx.emit("sub", a, ctx.emit("floor_mod", a, b)), b)
        return ctx.emit("floor", q)
    if mode == "trunc" and dtype not in INT_DTYPES:
        return _trunc(ctx, q)
    return q


def _trunc(ctx, x):
    """Rounding toward zero: floor of the magnitude, with the sign put back."""
    return ctx.emit("mul", ctx.emit("sign", x), ctx.emit("floor", ctx.emit("abs", x)))


# ATen ops that are tcc ops of the same name
_UNARY = ("abs", "neg", "exp", "log", "sqrt", "sin", "cos", "tan", "tanh", "sigmoid", "relu",
          "erf", "reciprocal", "floor", "ceil", "sign", "asin", "acos", "atan", "sinh", "cosh",
          "asinh", "acosh", "atanh")


def _unary(op: str, name: str):
    def convert(ctx, node):
        return ctx.emit(op, ctx.tensor(node.arg(0, "self"), ctx.out_dtype(node)))

    converter(name)(convert)


for _op in _UNARY:
    _unary(_op, f"aten.{_op}.default")


@converter("aten.round.default")
def _round(ctx, node):
    return ctx.emit("round", node.arg(0, "self"))  # half to even, as torch rounds


@converter("aten.trunc.default")
def _trunc_op(ctx, node):
    x = node.arg(0, "self")
    return x if ctx.dtype_of(x) in INT_DTYPES | {"bool"} else _trunc(ctx, x)


@converter("aten.rsqrt.default")
def _rsqrt(ctx, node):
    return ctx.emit("reciprocal", ctx.emit("sqrt", ctx.tensor(node.arg(0, "self"), ctx.out_dtype(node))))


@converter("aten.log1p.default", "aten.expm1.default", "aten.log2.default",
           "aten.log10.default", "aten.exp2.default")
def _log_exp_variants(ctx, node):
    dtype = ctx.out_dtype(node)
    x = ctx.tensor(node.arg(0, "self"), dtype)
    kind = node.target.split(".")[1]
    if kind == "log1p":
        return ctx.emit("log", ctx.emit("add", x, ctx.tensor(1.0, dtype)))
    if kind == "expm1":
        return ctx.emit("sub", ctx.emit("exp", x), ctx.tensor(1.0, dtype))
    if kind == "exp2":
        return ctx.emit("pow", ctx.tensor(2.0, dtype), x)
    base = 2.0 if kind == "log2" else 10.0
    return ctx.emit("mul", ctx.emit("log", x), ctx.tensor(1.0 / math.log(base), dtype))


@converter("aten.logical_not.default", "aten.bitwise_not.default")
def _not(ctx, node):
    x = node.arg(0, "self")
    if ctx.dtype_of(x) == "bool" or node.target == "aten.logical_not.default":
        return ctx.emit("logical_not", ctx.tensor(x, "bool"))
    return ctx.emit("bitwise_not", x)


@converter("aten.isnan.default")
def _isnan(ctx, node):
    return ctx.emit("is_nan", node.arg(0, "self"))


@converter("aten.isinf.default")
def _isinf(ctx, node):
    return ctx.emit("is_inf", node.arg(0, "self"))


@converter("aten.gelu.default")
def _gelu(ctx, node):
    return ctx.emit("gelu", node.arg(0, "self"), approximate=node.arg(1, "approximate", "none"))


@converter("aten.leaky_relu.default")
def _leaky_relu(ctx, node):
    return ctx.emit("leaky_relu", node.arg(0, "self"), alpha=float(node.arg(1, "negative_slope", 0.01)))


@converter("aten.elu.default")
def _elu(ctx, node):
    x = node.arg(0, "self")
    alpha = float(node.arg(1, "alpha", 1.0))
    scale, input_scale = float(node.arg(2, "scale", 1.0)), float(node.arg(3, "input_scale", 1.0))
    dtype = ctx.dtype_of(x)
    if input_scale != 1.0:
        x = ctx.emit("mul", x, ctx.tensor(input_scale, dtype))
    y = ctx.emit("elu", x, alpha=alpha)
    return y if scale == 1.0 else ctx.emit("mul", y, ctx.tensor(scale, dtype))


@converter("aten.hardtanh.default", "aten.clamp.default", "aten.clamp.Tensor",
           "aten.clamp_min.default", "aten.clamp_max.default")
def _clamp(ctx, node):
    x = node.arg(0, "self")
    dtype = ctx.out_dtype(node)
    kind = node.target.split(".")[1]
    if kind == "hardtanh":
        lo, hi = node.arg(1, "min_val", -1.0), node.arg(2, "max_val", 1.0)
    elif kind == "clamp_min":
        lo, hi = node.arg(1, "min"), None
    elif kind == "clamp_max":
        lo, hi = None, node.arg(1, "max")
    else:
        lo, hi = node.arg(1, "min"), node.arg(2, "max")
    x = ctx.tensor(x, dtype)
    if all(b is None or isinstance(b, (int, float)) for b in (lo, hi)):  # bounds of one value
        bounds = [None if b is None else ctx.tensor(b, dtype) for b in (lo, hi)]
        return ctx.emit("clip", x, *bounds) if any(b is not None for b in bounds) else x
    if lo is not None:
        x = ctx.emit("maximum", x, ctx.tensor(lo, dtype))
    if hi is not None:
        x = ctx.emit("minimum", x, ctx.tensor(hi, dtype))
    return x


@converter("aten.where.self")
def _where(ctx, node):
    dtype = ctx.out_dtype(node)
    return ctx.emit("where", ctx.tensor(node.arg(0, "condition"), "bool"),
                    ctx.tensor(node.arg(1, "self"), dtype), ctx.tensor(node.arg(2, "other"), dtype))


@converter("aten._to_copy.default")
def _to_copy(ctx, node):
    return ctx.cast(node.arg(0, "self"), ctx.out_dtype(node))


@converter("aten.clone.default", "aten.alias.default", "aten.lift_fresh_copy.default",
           "aten.detach.default", "aten.contiguous.default")
def _same(ctx, node):
    """A copy of a value is the value: tcc's values are never written in place."""
    return node.arg(0, "self")


@converter("aten.atan2.default")
def _atan2(ctx, node):
    """The angle of (x, y) in (-pi, pi]: atan(y / x), moved by pi into the left half-plane."""
    dtype = ctx.out_dtype(node)
    y, x = ctx.tensor(node.arg(0, "self"), dtype), ctx.tensor(node.arg(1, "other"), dtype)
    zero, pi = ctx.tensor(0.0, dtype), ctx.tensor(math.pi, dtype)
    base = ctx.emit("atan", ctx.emit("div", y, x))
    left = ctx.emit("less", x, zero)
    turn = ctx.emit("where", ctx.emit("less", y, zero), ctx.emit("neg", pi), pi)
    angle = ctx.emit("where", left, ctx.emit("add", base, turn), base)
    # on the y axis (x == 0) atan(y / 0) is already +-pi/2; the origin's atan(nan) is 0
    origin = ctx.emit("logical_and", ctx.emit("equal", x, zero), ctx.emit("equal", y, zero))
    return ctx.emit("where", origin, zero, angle)


@converter("aten.round.decimals")
def _round_decimals(ctx, node):
    dtype = ctx.out_dtype(node)
    x, decimals = node.arg(0, "self"), node.arg(1, "decimals", 0)
    scale = ctx.tensor(10.0 ** decimals, dtype)
    return ctx.emit("div", ctx.emit("round", ctx.emit("mul", x, scale)), scale)
