"""Import-time evaluation of shape arithmetic on (possibly symbolic) integer vectors.

`Shape(x)` of a tensor with dims (n, 128) is the symbolic vector [n, 128]; Gather, Slice,
Concat, Unsqueeze, arithmetic and friends on such vectors are computed here, so a later
Reshape/Expand sees a shape made of size-variable expressions instead of a run-time
tensor. A node is handled here only when one of its operands is such a vector (or it is
`Shape`/`Size`); everything else goes to the node's converter.
"""

from __future__ import annotations

import numpy as np

from tcc.ir.expr import Dim, as_dim, binop, prove_equal
from tcc.ir.facts import bounds

_INT_DTYPES = ("int64", "int32", "int16", "int8", "uint8", "uint16", "uint32", "uint64")


def _axis_attr(node, default=0):
    return node.attrs.get("axis", default)


def try_propagate(ctx, node) -> bool:
    """Compute `node`'s output as a symbolic vector when possible; True if done."""
    if node.domain != "" or len(node.outputs) != 1:
        return False
    rule = _RULES.get(node.op_type)
    if rule is None:
        return False
    if node.op_type not in ("Shape", "Size") and not any(n in ctx.sym for n in node.inputs if n):
        return False
    try:
        result = rule(ctx, node)
    except (ValueError, IndexError, TypeError, ZeroDivisionError):
        return False
    if result is None:
        return False
    dims, scalar = result[0], result[1]
    dtype = result[2] if len(result) > 2 else "int64"
    if dtype == "bool":
        arr = np.array([bool(d) for d in dims], dtype=bool)
        ctx.set_known(node.outputs[0], arr.reshape(()) if scalar else arr)
    else:
        ctx.set_sym(node.outputs[0], dims, scalar, dtype)
    return True


def _vec(ctx, node, i):
    if not node.has_input(i):
        return None
    return ctx.sym_value(node.inputs[i])


def _shape(ctx, node):
    t = ctx.type_of(node, 0)
    if t is None:
        return None
    n = t.ndim
    start = node.attrs.get("start", 0)
    end = node.attrs.get("end", n)
    start = max(0, min(n, start + n if start < 0 else start))
    end = max(0, min(n, end + n if end < 0 else end))
    return list(t.shape[start:end]), False


def _size(ctx, node):
    t = ctx.type_of(node, 0)
    out: Dim = 1
    for d in t.shape:
        out = as_dim(binop("mul", out, d))
    return [out], True


def _gather(ctx, node):
    data, idx = _vec(ctx, node, 0), ctx.const_value(node, 1)
    if data is None or idx is None or data[1] or _axis_attr(node) not in (0, -1):
        return None
    dims = data[0]
    flat = [dims[int(i)] for i in np.asarray(idx).reshape(-1)]
    return flat, np.asarray(idx).ndim == 0, _dtype(ctx, node, 0)


def _concat(ctx, node):
    out: list[Dim] = []
    for i in range(len(node.inputs)):
        v = _vec(ctx, node, i)
        if v is None or v[1]:
            return None
        out += v[0]
    return out, False, _dtype(ctx, node, 0)


def _slice(ctx, node):
    data = _vec(ctx, node, 0)
    if data is None or data[1]:
        return None
    if node.opset < 10:
        starts, ends = node.attrs["starts"], node.attrs["ends"]
        axes, steps = node.attrs.get("axes", [0]), [1]
    else:
        starts, ends = ctx.const_value(node, 1), ctx.const_value(node, 2)
        axes, steps = ctx.const_value(node, 3), ctx.const_value(node, 4)
        if starts is None or ends is None:
            return None
        axes = [0] if axes is None else axes
        steps = [1] * len(starts) if steps is None else steps
    if list(np.asarray(axes).reshape(-1)) not in ([0], [-1]):
        return None
    s, e, st = (int(np.asarray(x).reshape(-1)[0]) for x in (starts, ends, steps))
    n = len(data[0])
    s = max(-n - 1, min(n, s))
    e = max(-n - 1, min(n, e))
    return data[0][slice(s, e, st)], False, _dtype(ctx, node, 0)


def _unsqueeze(ctx, node):
    data = _vec(ctx, node, 0)
    axes = node.attrs.get("axes") if node.opset < 13 else ctx.const_value(node, 1)
    if data is None or axes is None:
        return None
    axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    if data[1] and axes in ([0], [-1]):
        return data[0], False, _dtype(ctx, node, 0)
    return None


def _squeeze(ctx, node):
    data = _vec(ctx, node, 0)
    if data is None or data[1] or len(data[0]) != 1:
        return None
    return data[0], True, _dtype(ctx, node, 0)


def _cast(ctx, node):
    data = _vec(ctx, node, 0)
    from tcc.frontend.onnx.base import onnx_dtype

    to = onnx_dtype(node.attrs["to"])
    if data is None or to not in _INT_DTYPES:
        return None
    return data[0], data[1], to


def _identity(ctx, node):
    data = _vec(ctx, node, 0)
    return None if data is None else (data[0], data[1], _dtype(ctx, node, 0))


def _reshape(ctx, node):
    data, shape = _vec(ctx, node, 0), ctx.const_value(node, 1)
    if data is None or shape is None:
        return None
    shape = [int(s) for s in np.asarray(shape).reshape(-1)]
    if shape in ([-1], [len(data[0])]):
        return data[0], False, _dtype(ctx, node, 0)
    if shape == [] and len(data[0]) == 1:
        return data[0], True, _dtype(ctx, node, 0)
    return None


def _elementwise(fn):
    def rule(ctx, node):
        vs = [_vec(ctx, node, i) for i in range(len(node.inputs))]
        if any(v is None for v in vs):
            return None
        n = max(len(v[0]) for v in vs)
        if any(len(v[0]) not in (1, n) for v in vs):
            return None
        cols = [[v[0][k if len(v[0]) > 1 else 0] for v in vs] for k in range(n)]
        out = [fn(*c) for c in cols]
        if any(o is None for o in out):
            return None
        scalar = all(v[1] for v in vs)
        return out, scalar, _dtype(ctx, node, 0)

    return rule


def _divide(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return int(a / b) if b else None  # ONNX integer Div truncates toward zero
    return as_dim(binop("floordiv", a, b))


def _equal(ctx, node):
    a, b = _vec(ctx, node, 0), _vec(ctx, node, 1)
    if a is None or b is None:
        return None
    n = max(len(a[0]), len(b[0]))
    out = []
    for k in range(n):
        x, y = a[0][k if len(a[0]) > 1 else 0], b[0][k if len(b[0]) > 1 else 0]
        if prove_equal(x, y):
            out.append(True)
        elif (isinstance(x, int) and isinstance(y, int)) or _apart(x, y):
            out.append(False)
        else:
            return None
    return out, a[1] and b[1], "bool"


def _apart(x: Dim, y: Dim) -> bool:
    """Whether the facts' ranges of `x` and `y` do not meet: a size against -1, the value
    torch's exporters compare every dimension of an expand's shape with."""
    (xlo, xhi), (ylo, yhi) = bounds(x), bounds(y)
    return (xhi is not None and ylo is not None and xhi < ylo) or (
        yhi is not None and xlo is not None and yhi < xlo)


def _where(ctx, node):
    cond = ctx.const_value(node, 0)
    a, b = _vec(ctx, node, 1), _vec(ctx, node, 2)
    if cond is None or a is None or b is None:
        return None
    c = [bool(x) for x in np.asarray(cond).reshape(-1)]
    n = max(len(c), len(a[0]), len(b[0]))

    def at(v, k):
        return v[k if len(v) > 1 else 0]

    out = [at(a[0], k) if at(c, k) else at(b[0], k) for k in range(n)]
    return out, np.asarray(cond).ndim == 0 and a[1] and b[1], _dtype(ctx, node, 1)


def _reduce_prod(ctx, node):
    data = _vec(ctx, node, 0)
    if data is None or data[1]:
        return None
    out: Dim = 1
    for d in data[0]:
        out = as_dim(binop("mul", out, d))
    keep = node.attrs.get("keepdims", 1)
    return [out], not keep, _dtype(ctx, node, 0)


def _dtype(ctx, node, i):
    name = node.inputs[i]
    if name in ctx.sym:
        return ctx.sym_dtype(name)
    t = ctx.type_of(node, i)
    return t.dtype if t is not None else "int64"


_RULES = {
    "Shape": _shape,
    "Size": _size,
    "Gather": _gather,
    "Concat": _concat,
    "Slice": _slice,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Cast": _cast,
    "Identity": _identity,
    "Reshape": _reshape,
    "Add": _elementwise(lambda a, b: as_dim(binop("add", a, b))),
    "Sub": _elementwise(lambda a, b: as_dim(binop("sub", a, b))),
    "Mul": _elementwise(lambda a, b: as_dim(binop("mul", a, b))),
    "Div": _elementwise(_divide),
    "Max": _elementwise(lambda *xs: _fold(xs, "max")),
    "Min": _elementwise(lambda *xs: _fold(xs, "min")),
    "Neg": _elementwise(lambda a: as_dim(binop("sub", 0, a))),
    "Equal": _equal,
    "Where": _where,
    "ReduceProd": _reduce_prod,
}


def _fold(xs, op):
    out = xs[0]
    for x in xs[1:]:
        out = as_dim(binop(op, out, x))
    return out
