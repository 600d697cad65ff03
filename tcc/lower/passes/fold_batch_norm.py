"""fold-batch-norm: turn each inference batch_norm with constant statistics into weights.

May change: a `batch_norm(x, scale, bias, mean, var)` whose four statistics are module
constants with values and whose input is float16/32/64 is a per-channel affine map
y = x * s + t (s = scale / sqrt(var + epsilon), t = bias - mean * s). When x is the only use
of a conv1d/2d/3d, conv*_transpose, gemm or 2-D matmul call with a constant weight (and a
constant bias or C, if any), s is multiplied into that weight along its output-channel axis
and t into its bias (a bias operand is added to a conv without one; gemm's C becomes
beta * C * s + t with beta 1; matmul, which has no bias operand, is followed by an add of
t), and the batch_norm disappears. Any other such batch_norm becomes mul(x, s) then
add(., t) with constants shaped (C, 1, ..., 1) to broadcast along axis 1. The folded
constants are computed in float64, rounded once to the operand dtype, and named after the
constant they replace with a `_folded` suffix; constants no graph function refers to any
more are dropped. batch_norm_train, statistics that are not constants, and other dtypes
are left alone. Preserves each function's parameters, returned values (by position, type
and public name) and numerics up to float rounding. The input module is not changed.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable

import numpy as np

from tcc.ir import graph as G
from tcc.ir.builder import infer_call
from tcc.ir.dtype import to_numpy
from tcc.ir.module import IRModule
from tcc.lower.passes import register_pass

FOLDABLE_DTYPES = frozenset({"float16", "float32", "float64"})
SUFFIX = "_folded"


@dataclasses.dataclass(frozen=True)
class _Affine:
    """A batch_norm as y = x * scale + shift per channel, in float64."""

    scale: np.ndarray
    shift: np.ndarray
    shift_name: str  # the batch_norm's bias constant, which the folded shift replaces


class _Weights:
    """Reads constant values of the module being built and adds the folded ones to it."""

    def __init__(self, mod: IRModule):
        self.mod = mod

    def value(self, e: G.Expr | None) -> np.ndarray | None:
        """`e`'s value in float64 when it is a constant with a value, else None."""
        stored = self.stored(e)
        return None if stored is None else np.asarray(stored, dtype=np.float64)

    def stored(self, e: G.Expr) -> np.ndarray | None:
        """`e`'s value as stored (not converted), when it is a constant with a value."""
        if not isinstance(e, G.Constant) or e.name not in self.mod.const_values:
            return None
        return np.asarray(self.mod.const_values[e.name])

    def add(self, replaces: str, value: np.ndarray, dtype: str) -> G.Constant:
        name = self.mod.unique_constant_name(replaces + SUFFIX)
        return self.mod.add_constant(name, value.astype(to_numpy(dtype)), dtype)

    def add_product(self, replaces: str, value: np.ndarray, factor: np.ndarray,
                    dtype: str) -> G.Constant:
        """`add` of value * factor, multiplied in float64 and rounded once to `dtype`, as
        `add(value in float64 * factor)` gives it, without the float64 copies of a big
        weight (numpy converts it piece by piece)."""
        out = np.empty(np.broadcast_shapes(value.shape, factor.shape), to_numpy(dtype))
        np.multiply(value, factor, out=out, dtype=np.float64, casting="same_kind")
        name = self.mod.unique_constant_name(replaces + SUFFIX)
        return self.mod.add_constant(name, out, dtype)


def _affine(bn: G.Call, weights: _Weights) -> _Affine | None:
    stats = [weights.value(a) for a in bn.args[1:]]
    if any(v is None for v in stats):
        return None
    gamma, beta, mean, var = stats
    scale = gamma / np.sqrt(var + bn.attrs["epsilon"])
    return _Affine(scale, beta - mean * scale, bn.args[2].name)


# ---------------------------------------------------------------------------------------------
# folding into the producer: each returns (the producer call with the affine map folded in,
# a shift still to add after it or None), or None when the producer does not fold.

Fold = tuple[G.Call, G.Constant | None]


def _bias_value(arg: G.Expr | None, weights: _Weights, channels: int) -> np.ndarray | None:
    """A bias operand's value (zeros when absent), or None when it is not a constant."""
    return np.zeros(channels) if arg is None else weights.value(arg)


def _conv_scale(call: G.Call, weight: np.ndarray, s: np.ndarray) -> np.ndarray:
    """s laid out on an (O, C/groups, *kernel) weight: output channels are axis 0."""
    return s.reshape((-1,) + (1,) * (weight.ndim - 1))


def _conv_transpose_scale(call: G.Call, weight: np.ndarray, s: np.ndarray) -> np.ndarray:
    """s laid out on a (C, O/groups, *kernel) weight: output channel g * O/groups + j is
    column j of the rows of input group g."""
    groups = call.attrs["groups"]
    cin, per_group = weight.shape[:2]
    rows = np.repeat(s.reshape(groups, per_group), cin // groups, axis=0)
    return rows.reshape(rows.shape + (1,) * (weight.ndim - 2))


def _conv_folder(weight_scale: Callable[[G.Call, np.ndarray, np.ndarray], np.ndarray]):
    def fold(call: G.Call, affine: _Affine, weights: _Weights) -> Fold | None:
        x, w_arg = call.args[:2]
        b_arg = call.args[2] if len(call.args) > 2 else None
        weight = weights.stored(w_arg)
        bias = _bias_value(b_arg, weights, len(affine.scale))
        if weight is None or bias is None:
            return None
        dtype = w_arg.type.dtype
        new_w = weights.add_product(w_arg.name, weight, weight_scale(call, weight, affine.scale),
                                    dtype)
        new_b = weights.add(affine.shift_name, bias * affine.scale + affine.shift, dtype)
        return G.Call(call.op, (x, new_w, new_b), dict(call.attrs)), None

    return fold


def _fold_gemm(call: G.Call, affine: _Affine, weights: _Weights) -> Fold | None:
    """alpha * A @ op(B) + beta * C with columns scaled: B's rows when transposed, else its
    columns; C absorbs the shift (beta becomes 1)."""
    a, b_arg = call.args[:2]
    c_arg = call.args[2] if len(call.args) > 2 else None
    b = weights.stored(b_arg)
    beta = call.attrs["beta"]
    c = 0.0 if c_arg is None or beta == 0 else weights.value(c_arg)
    if b is None or c is None:
        return None
    s = affine.scale
    dtype = b_arg.type.dtype
    new_c = weights.add(affine.shift_name, c * beta * s + affine.shift, dtype)
    new_b = weights.add_product(b_arg.name, b, s[:, None] if call.attrs["trans_b"] else s[None, :],
                                dtype)
    attrs = {**call.attrs, "beta": 1.0}
    return G.Call("gemm", (a, new_b, new_c), attrs), None


def _fold_matmul(call: G.Call, affine: _Affine, weights: _Weights) -> Fold | None:
    """A 2-D A times a 2-D constant W: channel axis 1 of the result is W's column axis."""
    a, w_arg = call.args
    weight = weights.stored(w_arg)
    if weight is None or weight.ndim != 2 or G.type_of(a).ndim != 2:
        return None
    dtype = w_arg.type.dtype
    new_w = weights.add_product(w_arg.name, weight, affine.scale[None, :], dtype)
    shift = weights.add(affine.shift_name, affine.shift, dtype)
    return G.Call("matmul", (a, new_w), dict(call.attrs)), shift


FOLDERS: dict[str, Callable[[G.Call, _Affine, _Weights], Fold | None]] = {
    **{f"conv{n}d": _conv_folder(_conv_scale) for n in (1, 2, 3)},
    **{f"conv{n}d_transpose": _conv_folder(_conv_transpose_scale) for n in (1, 2, 3)},
    "gemm": _fold_gemm,
    "matmul": _fold_matmul,
}


# ---------------------------------------------------------------------------------------------
# the rewrite of one function


def _call(op: str, *args: G.Expr) -> G.Call:
    """An attribute-less elementwise call, checked by the op's inference."""
    attrs, _ = infer_call(op, args, {})
    return G.Call(op, args, attrs)


def _scale_shift(y: G.Var, x: G.Expr, affine: _Affine, bn: G.Call, weights: _Weights):
    """Bindings computing y = x * s + t, the constants shaped (C, 1, ..., 1) so they
    broadcast along axis 1; x * s has y's type."""
    dtype = G.type_of(x).dtype
    shape = (-1,) + (1,) * (G.type_of(x).ndim - 2)
    s = weights.add(bn.args[1].name, affine.scale.reshape(shape), dtype)
    t = weights.add(affine.shift_name, affine.shift.reshape(shape), dtype)
    scaled = G.Var(f"{y.name}_scaled", y.type)
    return [G.Binding(scaled, _call("mul", x, s)), G.Binding(y, _call("add", scaled, t))]


def _rewrite(fn: G.Function, weights: _Weights) -> G.Function:
    uses = Counter(id(v) for b in fn.bindings for v in G.used_vars(b.value))
    uses.update(id(v) for v in G.used_vars(fn.ret))
    out: list[G.Binding] = []
    latest: dict[int, G.Binding] = {}  # a variable's binding in `out`, as rewritten so far
    moved: set[int] = set()  # bindings of producers folded into a later binding

    def emit(*bindings: G.Binding) -> None:
        out.extend(bindings)
        latest.update((id(b.var), b) for b in bindings)

    for b in fn.bindings:
        bn = b.value
        affine = None
        if isinstance(bn, G.Call) and bn.op == "batch_norm":
            if G.type_of(bn.args[0]).dtype in FOLDABLE_DTYPES:
                affine = _affine(bn, weights)
        if affine is None:
            emit(b)
            continue
        x = bn.args[0]
        made = latest.get(id(x)) if isinstance(x, G.Var) and uses[id(x)] == 1 else None
        producer = made.value if made is not None else None
        folder = FOLDERS.get(producer.op) if isinstance(producer, G.Call) else None
        folded = folder(producer, affine, weights) if folder else None
        if folded is None:
            emit(*_scale_shift(b.var, x, affine, bn, weights))
            continue
        moved.add(id(made))
        call, shift = folded
        if shift is None:
            emit(G.Binding(b.var, call))
        else:
            emit(G.Binding(x, call), G.Binding(b.var, _call("add", x, shift)))
    if len(out) == len(fn.bindings) and all(a is b for a, b in zip(out, fn.bindings)):
        return fn
    return dataclasses.replace(fn, bindings=tuple(b for b in out if id(b) not in moved))


@register_pass("fold-batch-norm")
def fold_batch_norm(mod: IRModule) -> IRModule:
    out = IRModule(dict(mod.functions), dict(mod.const_types), dict(mod.const_values))
    weights = _Weights(out)
    for name, f in mod.functions.items():
        if isinstance(f, G.Function):
            out.functions[name] = _rewrite(f, weights)
    out.prune_constants()
    return out
