"""simplify-algebra: replace op calls that compute nothing new by the value they copy.

May change: in each graph function, a call that returns one of its operands unchanged is
removed and its uses read that operand (`x * 1`, `1 * x`, `x + 0`, `0 + x`, `x - 0`,
`x / 1`, `pow(x, 1)` with the neutral value held in a module constant of any shape that
does not enlarge x; a float `pow(x, 2)` becomes `x * x` (the same correctly rounded
square, and a product vectorizes where pow is a library call), and `pow(x, 3)` becomes
`(x * x) * x` (see below), the square bound first; `cast` to x's own dtype; `identity`;
a reshape, squeeze or expand_dims chain, or a transpose, that gives x's own shape and
element order back); any other reshape/squeeze/expand_dims of such a chain becomes one
reshape of the chain's source, and a transpose of a transpose becomes one transpose with
the composed permutation; a pad by zero everywhere is its input, and a convolution of a
zero pad of the spatial axes reads the pad's input with the pads added to its own padding;
a reshape that unflattens the rows of `matmul(reshape(x), w)` (plus a bias), single-use,
becomes `matmul(x, w)` (plus the bias; reshaped where its target is another shape): each
element is the same dot product of a row of x and a column of w, though the schedule
rules may split its sum differently for the unflattened shape (the last bits may differ).
Every rewrite keeps the binding's result type (dtype and shape,
provably equal dimensions), and one forward sweep reaches the fixed point, since each rule
only looks at values defined earlier, already simplified.

Preserves each function's parameters, returned values (by position and public name; a
returned value may become a parameter or another output, which a function may return
directly) and numerics, with two exceptions: `-0.0 + 0` is `+0.0` while the rewritten
value keeps `-0.0` (they compare equal), and a float cube is rounded twice, as onnxruntime
rounds it (its Pow gives `(x * x) * x` bit for bit), where libm's powf rounds once.
`x * 0` is never simplified (NaN and inf times 0 are NaN), nor is an integer `pow` with a
float exponent (the reference rounds large integers through float64 there). A value is
never replaced by a bare constant: that is constant folding, and a function's outputs must
stay variables. Producers left unused are dropped by dead-code-elimination; the input
module is not changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import numpy as np

from tcc.ir import graph as G
from tcc.ir.builder import infer_call
from tcc.ir.dtype import INT_DTYPES
from tcc.ir.expr import prove_equal
from tcc.ir.module import IRModule
from tcc.ir.ops.registry import prod
from tcc.lower.passes import register_pass

# Binary op -> (its neutral value, the operand positions where that value is neutral).
NEUTRAL = {
    "add": (0, (0, 1)),
    "sub": (0, (1,)),
    "mul": (1, (0, 1)),
    "div": (1, (1,)),
    "pow": (1, (1,)),
}
# Ops that keep the elements in row-major order and only change the shape.
RESHAPES = frozenset({"reshape", "squeeze", "expand_dims"})


@dataclasses.dataclass
class _Scope:
    """What a rule may look at: the (simplified) call bound to each variable defined so far
    in the function, and the module's constant values."""

    defs: dict[int, G.Call]
    const_values: Mapping[str, np.ndarray]
    uses: Mapping[int, int] = dataclasses.field(default_factory=dict)  # id(var) -> reads

    def producer(self, e: G.Expr | None, ops: frozenset[str]) -> G.Call | None:
        """The call that defines `e` when it is one of `ops`."""
        call = self.defs.get(id(e)) if isinstance(e, G.Var) else None
        return call if call is not None and call.op in ops else None


# A rule takes a call, the result type of its binding and the scope; it returns an existing
# variable that replaces the binding, a new call with the same result type, or None.
Rule = Callable[[G.Call, G.Type, _Scope], G.Expr | None]


def _same_type(a: G.Type, b: G.Type) -> bool:
    if isinstance(a, G.TensorType) and isinstance(b, G.TensorType):
        return a.dtype == b.dtype and G.same_shape(a, b)
    return a == b


def _replaces(e: G.Expr | None, out: G.Type) -> bool:
    """`e` is a variable that may stand for a result of type `out`."""
    return isinstance(e, G.Var) and _same_type(e.type, out)


def _call(op: str, args: tuple, attrs: dict, out: G.Type) -> G.Call | None:
    """A new call, or None when its inferred type is not provably `out`."""
    attrs, result = infer_call(op, args, attrs)
    return G.Call(op, args, attrs) if _same_type(result, out) else None


# -- rules -----------------------------------------------------------------------------------


def _all_equal(value: np.ndarray | None, scalar) -> bool:
    """Every element of a constant equals `scalar` (False when its value is not loaded).
    The first element is checked alone first: most weights fail there, unread."""
    if value is None:
        return False
    value = np.asarray(value)
    return (value.size == 0 or value.flat[0] == scalar) and bool(np.all(value == scalar))


def _neutral_operand(call: G.Call, out: G.Type, scope: _Scope) -> G.Expr | None:
    """`x op c` (or `c op x`) is x when every element of the constant c is neutral."""
    neutral, positions = NEUTRAL[call.op]
    for pos in positions:
        const, other = call.args[pos], call.args[1 - pos]
        if not (isinstance(const, G.Constant) and _replaces(other, out)):
            continue
        if not _all_equal(scope.const_values.get(const.name), neutral):
            continue
        if call.op == "pow" and out.dtype in INT_DTYPES and const.type.dtype not in INT_DTYPES:
            continue
        return other
    return None


def _square(call: G.Call, out: G.Type, scope: _Scope) -> G.Expr | None:
    """`pow(x, 2)` of floats is `x * x`: both are the correctly rounded square, and the
    product vectorizes where pow is a library call."""
    x, const = call.args
    if not (isinstance(const, G.Constant) and _replaces(x, out) and out.dtype not in INT_DTYPES):
        return None
    if not _all_equal(scope.const_values.get(const.name), 2):
        return None
    return _call("mul", (x, x), {}, out)


def _cube(call: G.Call, out: G.Type, scope: _Scope) -> G.Expr | None:
    """`pow(x, 3)` of floats is `(x * x) * x`, as onnxruntime computes it: two roundings
    instead of libm's one, and products that vectorize where pow is a library call (GELU's
    tanh form cubes its input; 6.7 ns an element as powf)."""
    x, const = call.args
    if not (isinstance(const, G.Constant) and _replaces(x, out) and out.dtype not in INT_DTYPES):
        return None
    if not _all_equal(scope.const_values.get(const.name), 3):
        return None
    square = _call("mul", (x, x), {}, out)
    return None if square is None else G.Call("mul", (square, x), {})


def _same_dtype_cast(call: G.Call, out: G.Type, scope: _Scope) -> G.Expr | None:
    x = call.args[0]
    return x if _replaces(x, out) and x.type.dtype == call.attrs["dtype"] else None


def _copy(call: G.Call, out: G.Type, scope: _Scope) -> G.Expr | None:
    x = call.args[0]
    return x if _replaces(x, out) else None


def _reshape_chain(e: G.Expr | None, scope: _Scope) -> list[G.Expr | None]:
    """`e`, then the operand of its reshape-like producer, and so on back to a source that
    no reshape-like op defines."""
    chain = [e]
    while (producer := scope.producer(chain[-1], RESHAPES)) is not None:
        chain.append(producer.args[0])
    return chain


def _collapse_reshapes(call: G.Call, out: G.Type, scope: _Scope) -> G.Expr | None:
    """A reshape-like op over a reshape-like chain: the earliest value of the chain with the
    result's shape (its elements are in the same order), else one reshape of the chain's
    source (keeping a reshape's own target, which may hold a -1)."""
    chain = _reshape_chain(call.args[0], scope)
    for e in reversed(chain):
        if _replaces(e, out):
            return e
    if len(chain) == 1:
        return None
    attrs = call.attrs if call.op == "reshape" else {"shape": list(out.shape)}
    return _call("reshape", (chain[-1],), attrs, out)


def _permutation(axes, ndim: int) -> list[int]:
    return list(range(ndim))[::-1] if axes is None else [a % ndim for a in axes]


def _identity_transpose(call: G.Call, out: G.Type, scope: _Scope) -> G.Expr | None:
    x = call.args[0]
    if not _replaces(x, out):
        return None
    return x if _permutation(call.attrs.get("axes"), out.ndim) == list(range(out.ndim)) else None


def _merge_transposes(call: G.Call, out: G.Type, scope: _Scope) -> G.Expr | None:
    """transpose(transpose(x, p1), p2) reads axis p1[p2[k]] of x at output axis k."""
    inner = scope.producer(call.args[0], frozenset({"transpose"}))
    if inner is None:
        return None
    p1 = _permutation(inner.attrs.get("axes"), out.ndim)
    p2 = _permutation(call.attrs.get("axes"), out.ndim)
    return _call("transpose", inner.args, {"axes": [p1[k] for k in p2]}, out)


def _zero_pad(value: np.ndarray | None) -> bool:
    """A constant pad value of +0.0 (or 0): the zeros a convolution's own padding reads."""
    return _all_equal(value, 0) and not np.any(np.signbit(np.asarray(value)))


def _no_padding(call: G.Call, out: G.Type, scope: _Scope) -> G.Expr | None:
    x = call.args[0]
    pads = call.attrs.get("pads")
    if pads is None or any(not isinstance(p, int) or p != 0 for p in pads):
        return None
    return x if _replaces(x, out) else None


def _explicit_padding(call: G.Call, out: G.Type, scope: _Scope) -> G.Expr | None:
    """A convolution of a zero pad of the spatial axes is the convolution of the unpadded
    input with those pads added to its own: its window reads the same zeros (a
    TensorFlow-style "same" padding exported as a Pad before each convolution: Hugging
    Face's MobileNetV2 has 52, each a layout transform pair around a pad kernel in the
    blocked layout)."""
    pad = scope.producer(call.args[0], frozenset({"pad"}))
    if pad is None or pad.attrs.get("mode") != "constant":
        return None
    value = pad.args[1] if len(pad.args) > 1 else None
    if value is not None and not (isinstance(value, G.Constant)
                                  and _zero_pad(scope.const_values.get(value.name))):
        return None
    pads = pad.attrs.get("pads")
    if pads is None or any(not isinstance(p, int) or p < 0 for p in pads):
        return None
    ndim = len(pads) // 2
    begin, end = pads[:ndim], pads[ndim:]
    if any(begin[:2]) or any(end[:2]):  # batch and channels stay as they are
        return None
    spatial = ndim - 2
    own = call.attrs.get("padding") or [0] * (2 * spatial)
    padding = [a + b for a, b in zip(own, [*begin[2:], *end[2:]])]
    return _call(call.op, (pad.args[0], *call.args[1:]), {**call.attrs, "padding": padding}, out)


def _rows(x: G.Expr, flat: G.Expr) -> bool:
    """`flat` is `x` (rank >= 3) with its leading axes flattened into rows, the last kept."""
    xt, ft = G.type_of(x), G.type_of(flat)
    if not (isinstance(xt, G.TensorType) and isinstance(ft, G.TensorType)) or xt.ndim < 3 \
            or ft.ndim != 2 or not prove_equal(xt.shape[-1], ft.shape[-1]):
        return False
    return prove_equal(prod(xt.shape[:-1]), ft.shape[0])


def _unflattened_matmul(call: G.Call, out: G.Type, scope: _Scope) -> G.Expr | None:
    """A reshape of `matmul(reshape(x), w)`, or of that plus a bias, where the inner reshape
    flattens x's leading axes into rows: the reshape of `matmul(x, w)` (plus the bias)
    instead, without the flattening (PyTorch's nn.Linear, exported as `view`, `mm` or
    `addmm`, `view`; ONNX exports multiply x itself). A matmul over x then takes its
    neighbours into one kernel as it does for an ONNX export (the view between them kept
    LLaMA's gated MLP in three kernels where ONNX's needs two). The flattened product and
    its bias sum must have no other reader."""
    inner = call.args[0]
    bias = None
    add = scope.producer(inner, frozenset({"add"}))
    if add is not None and scope.uses.get(id(inner)) == 1:
        inner, bias = add.args
    product = scope.producer(inner, frozenset({"matmul"}))
    if product is None or scope.uses.get(id(inner)) != 1:
        return None
    flat, w = product.args
    flatten = scope.producer(flat, frozenset({"reshape"}))
    wt = G.type_of(w)
    if flatten is None or not isinstance(wt, G.TensorType) or wt.ndim != 2:
        return None
    x = flatten.args[0]
    if not _rows(x, flat):
        return None
    if bias is not None:
        bt = G.type_of(bias)
        if not isinstance(bt, G.TensorType) or bt.ndim > 1 or bt.dtype != out.dtype:
            return None
    attrs, result = infer_call("matmul", (x, w), product.attrs)
    value = G.Call("matmul", (x, w), attrs)
    if bias is not None:
        attrs, result = infer_call("add", (G.Var("sum", result), bias), add.attrs)
        value = G.Call("add", (value, bias), attrs)
    if _same_type(result, out):
        return value
    attrs, result = infer_call("reshape", (G.Var("product", result),), call.attrs)
    return G.Call("reshape", (value,), attrs) if _same_type(result, out) else None


RULES: dict[str, tuple[Rule, ...]] = {
    **{op: (_neutral_operand,) for op in NEUTRAL},
    "pow": (_neutral_operand, _square, _cube),
    "cast": (_same_dtype_cast,),
    "identity": (_copy,),
    **{op: (_collapse_reshapes,) for op in RESHAPES - {"reshape"}},
    "reshape": (_collapse_reshapes, _unflattened_matmul),
    "transpose": (_identity_transpose, _merge_transposes),
    "pad": (_no_padding,),
    **{op: (_explicit_padding,) for op in ("conv1d", "conv2d", "conv3d")},
}


# -- driver ----------------------------------------------------------------------------------


def _simplify(value: G.Call, out: G.Type, scope: _Scope) -> G.Expr:
    """Apply the rules until none does. Each new call reads a value defined earlier than
    the operand it replaces, so this ends."""
    while isinstance(value, G.Call):
        for rule in RULES.get(value.op, ()):
            new = rule(value, out, scope)
            if new is not None:
                value = new
                break
        else:
            break
    return value


def _bind_operand_calls(call: G.Call, var: G.Var, kept: list[G.Binding]) -> G.Call:
    """`call` with each operand that is a call itself (a rule's `(x * x) * x`) bound first
    to a variable of its own, named after `var` and the operand's op."""
    args = []
    for arg in call.args:
        if isinstance(arg, G.Call):
            arg = _bind_operand_calls(arg, var, kept)  # its own operand calls first
            operand = G.Var(f"{var.name}_{arg.op}", infer_call(arg.op, arg.args, arg.attrs)[1])
            kept.append(G.Binding(operand, arg))
            arg = operand
        args.append(arg)
    if all(a is b for a, b in zip(args, call.args)):
        return call
    return G.Call(call.op, tuple(args), call.attrs)


def _simplify_function(fn: G.Function, const_values: Mapping[str, np.ndarray]) -> G.Function:
    uses: dict[int, int] = {}
    for v in G.used_vars(tuple(b.value for b in fn.bindings)) + G.used_vars(fn.ret):
        uses[id(v)] = uses.get(id(v), 0) + 1
    scope = _Scope({}, const_values, uses)
    mapping: dict[int, G.Var] = {}
    kept = []
    for b in fn.bindings:
        value = G.substitute_vars(b.value, mapping)
        if isinstance(value, G.Call):
            value = _simplify(value, b.var.type, scope)
            if isinstance(value, G.Var):
                mapping[id(b.var)] = value
                continue
            value = _bind_operand_calls(value, b.var, kept)
            scope.defs[id(b.var)] = value
        kept.append(b if value is b.value else G.Binding(b.var, value))
    if len(kept) == len(fn.bindings) and all(a is b for a, b in zip(kept, fn.bindings)):
        return fn
    return dataclasses.replace(fn, bindings=tuple(kept), ret=G.substitute_vars(fn.ret, mapping))


@register_pass("simplify-algebra")
def simplify_algebra(mod: IRModule) -> IRModule:
    functions = {
        name: _simplify_function(f, mod.const_values) if isinstance(f, G.Function) else f
        for name, f in mod.functions.items()
    }
    return IRModule(functions, dict(mod.const_types), dict(mod.const_values))
