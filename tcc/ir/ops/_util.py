"""Helpers shared by several op families: optional and run-time operands, axis and
dimension checks, dimension arithmetic, the spatial building blocks (padding, sliding
window views, window scatter) of the convolution, pooling and image ops, and the head
layout and loop-program checks of the attention, flex-attention and rotary ops.

Spatial helpers assume channels-first layouts (NC + spatial dims); `padding` lists every
spatial axis's begin pad, then every axis's end pad (ONNX order).
"""

from __future__ import annotations

import itertools

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tcc.ir import expr as E
from tcc.ir import facts, te
from tcc.ir.dtype import is_float, is_int, to_numpy
from tcc.ir.errors import NoLoopProgram, ShapeError
from tcc.ir.expr import BinOp, Dim, Var, as_dim, fresh_var, max_expr, min_expr, prove_equal
from tcc.ir.graph import TensorType
from tcc.ir.ops.registry import OpDef, Pattern, normalize_axis, register, tensor

# ---------------------------------------------------------------------------------------------
# operands


def operand(args, i: int):
    """Optional operand `i` (None when absent or not passed at all)."""
    return args[i] if i < len(args) else None


def optional_tensor(args, i: int, op: str, what: str) -> TensorType | None:
    """Operand `i` when present (trailing optional operands may be left out)."""
    return tensor(args[i], op, what) if i < len(args) and args[i] is not None else None


def ints(a) -> list[int]:
    """A run-time integer operand as a list of Python ints."""
    return [int(v) for v in np.asarray(a).reshape(-1)]


def scalar_value(a):
    """The single value (as a Python scalar) of a run-time scalar or 1-element operand."""
    return np.asarray(a).reshape(-1)[0].item()


def scalar_int(arr) -> int:
    """The single integer held by a run-time scalar or 1-element operand."""
    return int(np.asarray(arr).reshape(-1)[0])


def vector_length(t, op: str, what: str) -> int:
    """Static length of a 1-D integer operand that holds a shape-like vector."""
    t = tensor(t, op, what)
    if t.ndim != 1 or not isinstance(t.shape[0], int):
        raise ShapeError(f"op {op}: {what} must be a 1-D tensor of static length, got {t}")
    if not is_int(t.dtype):
        raise ShapeError(f"op {op}: {what} must have an integer dtype, got {t.dtype}")
    return t.shape[0]


def static_length(t: TensorType, op: str, what: str) -> int:
    """Length of a 1-D (or scalar) integer operand whose values are only known at run time."""
    if not is_int(t.dtype) or t.ndim > 1:
        raise ShapeError(f"op {op}: {what} must be a 1-D integer tensor, got {t}")
    n = t.shape[0] if t.ndim == 1 else 1
    if not isinstance(n, int):
        raise ShapeError(f"op {op}: {what} must have a static length, got {t}; make it a constant")
    return n


# ---------------------------------------------------------------------------------------------
# shape checks


def normalize_axes(axes, ndim: int, op: str) -> list[int]:
    """Non-negative `axes` of a rank-`ndim` input; repeated axes are an error."""
    out = [normalize_axis(int(a), ndim, op) for a in axes]
    if len(set(out)) != len(out):
        raise ShapeError(f"op {op}: repeated axis in {list(axes)}")
    return out


def check_rank(op: str, t: TensorType, rank: int, what: str = "input") -> None:
    """Reject a tensor whose rank is not `rank`."""
    if t.ndim != rank:
        raise ShapeError(f"op {op}: {what} must have rank {rank}, got shape {t}")


def nonscalar(t: TensorType, op: str, what: str = "data") -> TensorType:
    """`t`, after rejecting a scalar."""
    if t.ndim == 0:
        raise ShapeError(f"op {op}: {what} must have rank >= 1, got a scalar")
    return t


def check_dim(a: Dim, b: Dim, op: str, what: str) -> None:
    """Reject two dimensions that must match but provably differ (symbolic ones are trusted)."""
    if isinstance(a, int) and isinstance(b, int) and a != b:
        raise ShapeError(f"op {op}: {what}: dimension {b} does not match {a}")


def match_dim(a: Dim, b: Dim, op: str, what: str) -> Dim:
    """`a`, after checking it can equal `b` (symbolic dims are trusted to match at run time)."""
    if isinstance(a, int) and isinstance(b, int) and a != b:
        raise ShapeError(f"op {op}: {what} must match, got {a} and {b}")
    return a if isinstance(a, int) or not isinstance(b, int) else b


def channels_match(op: str, a: Dim, b: Dim, what: str) -> None:
    """Reject two static sizes that differ; symbolic ones are checked when the program runs."""
    if isinstance(a, int) and isinstance(b, int) and a != b:
        raise ShapeError(f"op {op}: {what}: {a} vs {b}")


def check_vector(op: str, t: TensorType | None, length: Dim, what: str) -> None:
    """Reject a present per-channel operand `t` that is not 1-D of `length` entries."""
    if t is None:
        return
    if t.ndim != 1:
        raise ShapeError(f"op {op}: {what} must be 1-D, got {t}")
    channels_match(op, t.shape[0], length, f"{what} length must equal the channel count")


# ---------------------------------------------------------------------------------------------
# dimension arithmetic and registration


def fresh_vars(n: int, hint: str) -> tuple[Var, ...]:
    """`n` fresh size variables named after `hint`."""
    return tuple(fresh_var(hint) for _ in range(n))


def known_nonneg(e: Dim) -> bool:
    """True when `e` is provably >= 0: size variables are never negative, and the ranges
    of tcc.ir.facts bound them further (`n // 20 - 1` where n >= 20)."""
    if isinstance(e, int):
        return e >= 0
    if isinstance(e, Var):
        return True
    if isinstance(e, BinOp) and e.op in ("add", "mul", "floordiv", "min") and (
            known_nonneg(e.a) and known_nonneg(e.b)):
        return True
    if isinstance(e, BinOp) and e.op == "max" and (known_nonneg(e.a) or known_nonneg(e.b)):
        return True
    return facts.known_nonneg(e)


def nonneg(e: Dim) -> Dim:
    """max(e, 0), without the max when it provably changes nothing."""
    if isinstance(e, int):
        return max(e, 0)
    return e if known_nonneg(e) else max_expr(e, 0)


def ceil_div(a: Dim, b: int) -> Dim:
    """ceil(a / b) for a positive int `b`."""
    return a if b == 1 else as_dim((a + (b - 1)) // b)


def register_op(name, infer, ref, attrs=None, num_args=(1, 1), pattern=Pattern.INJECTIVE, doc="",
                **dynamic):
    """Register an `OpDef` given positionally; the pattern defaults to INJECTIVE. `dynamic`
    gives its other fields by name (a loop program, a dyn_* op's shape_operands and
    to_static)."""
    return register(OpDef(name, infer, ref, attrs or {}, pattern, num_args, doc=doc, **dynamic))


# ---------------------------------------------------------------------------------------------
# spatial (window) helpers of the convolution, pooling and image ops


def spatial_params(attrs: dict, nd: int) -> tuple[list, list, list]:
    """(strides, padding, dilation) with `None` filled by their identity values."""
    strides = list(attrs.get("strides") or [1] * nd)
    padding = list(attrs.get("padding") or [0] * (2 * nd))
    dilation = list(attrs.get("dilation") or [1] * nd)
    return strides, padding, dilation


def check_lengths(op: str, nd: int, strides, padding, dilation, kernel=None) -> None:
    """Reject spatial attribute lists whose lengths do not fit `nd` spatial axes."""
    if len(strides) != nd or len(dilation) != nd or len(padding) != 2 * nd:
        raise ShapeError(
            f"op {op}: expected {nd} strides/dilations and {2 * nd} pads for {nd} spatial "
            f"axes, got {len(strides)}/{len(dilation)}/{len(padding)}"
        )
    if kernel is not None and len(kernel) != nd:
        raise ShapeError(f"op {op}: kernel has {len(kernel)} axes, input has {nd} spatial axes")


def window_out_dim(size: Dim, k: Dim, s: int, pb: Dim, pe: Dim, d: int, ceil: bool = False) -> Dim:
    """Number of sliding windows along one axis; symbolic sizes give a symbolic count.

    In ceil mode a last partial window counts, unless it would start in the end padding.
    """
    span = size + pb + pe - d * (k - 1) - 1
    if not ceil:
        return as_dim(span // s + 1)
    out = as_dim((span + s - 1) // s + 1)
    starts_in_input = as_dim((size + pb - 1) // s + 1)
    if isinstance(out, int) and isinstance(starts_in_input, int):
        return min(out, starts_in_input)
    return min_expr(out, starts_in_input)


def check_positive(op: str, dims) -> None:
    """Reject an output spatial shape with a static dim <= 0."""
    for d in dims:
        if isinstance(d, int) and d <= 0:
            raise ShapeError(f"op {op}: output spatial shape {list(dims)} has a non-positive dim")


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """Half floats are computed in float32 (numpy has no fast float16 matmul)."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def pad_spatial(x: np.ndarray, padding, value=0) -> np.ndarray:
    """Pad the spatial axes; negative pads crop."""
    nd = x.ndim - 2
    begin, end = padding[:nd], padding[nd:]
    if any(p < 0 for p in padding):
        crop = tuple(
            slice(max(-b, 0), x.shape[2 + i] - max(-e, 0))
            for i, (b, e) in enumerate(zip(begin, end))
        )
        x = x[(slice(None), slice(None)) + crop]
        begin, end = [max(b, 0) for b in begin], [max(e, 0) for e in end]
    if not any(begin) and not any(end):
        return x
    widths = [(0, 0), (0, 0)] + list(zip(begin, end))
    return np.pad(x, widths, mode="constant", constant_values=value)


def sliding_windows(x: np.ndarray, kernel, strides, dilation, out) -> np.ndarray:
    """Read-only view (N, C, *out, *kernel) of the sliding windows of padded `x`."""
    nd = len(kernel)
    st = x.strides
    shape = x.shape[:2] + tuple(out) + tuple(kernel)
    steps = (
        st[:2]
        + tuple(st[2 + i] * strides[i] for i in range(nd))
        + tuple(st[2 + i] * dilation[i] for i in range(nd))
    )
    return as_strided(x, shape, steps, writeable=False)


def scatter_windows(cols, full, strides, dilation):
    """Inverse of `sliding_windows`: sum (N, C, *k, *blocks) window values into (N, C, *full)."""
    nd = len(full)
    kernel, blocks = cols.shape[2 : 2 + nd], cols.shape[2 + nd :]
    y = np.zeros(cols.shape[:2] + tuple(full), dtype=cols.dtype)
    for kidx in itertools.product(*(range(k) for k in kernel)):
        dst = tuple(
            slice(
                kidx[i] * dilation[i],
                kidx[i] * dilation[i] + strides[i] * (blocks[i] - 1) + 1,
                strides[i],
            )
            for i in range(nd)
        )
        y[(slice(None), slice(None)) + dst] += cols[(slice(None), slice(None)) + kidx]
    return y


def crop_spatial(y: np.ndarray, padding, out) -> np.ndarray:
    """y[..., pb : pb + out] per spatial axis, zero-extended where that leaves y."""
    nd = y.ndim - 2
    full = y.shape[2:]
    return pad_spatial(
        y, [-padding[i] for i in range(nd)] + [out[i] + padding[i] - full[i] for i in range(nd)]
    )


# ---------------------------------------------------------------------------------------------
# loop-program (te) helpers of the contraction, convolution and pooling ops


def te_type(t) -> TensorType | None:
    """The TensorType of a te tensor (None stays None), so a compute can reuse its op's
    inference for the output shape instead of restating it."""
    return None if t is None else TensorType(t.shape, t.dtype)


def accumulate_dtype(dtype: str) -> str:
    """The dtype a loop program accumulates `dtype` in: half floats in float32, as the numpy
    references do (`compute_dtype`)."""
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def window_taps(shape, out_idx, taps, strides, padding, dilation, check_end=None):
    """(input indices, in-bounds condition or None) of one tap of a sliding window.

    Axis i reads `out_idx[i] * stride - pad_begin + taps[i] * dilation` of spatial size
    `shape[i]`. A bound is only tested where it can fail: the begin when the begin pad may be
    positive, the end when the end pad may be (or `check_end[i]`, for ceil-mode windows)."""
    from tcc.ir import te

    nd = len(out_idx)
    idx, conds = [], []
    for i in range(nd):
        pb, pe = padding[i], padding[nd + i]
        pos = out_idx[i] * strides[i] - pb + taps[i] * dilation[i]
        idx.append(pos)
        if not isinstance(pb, int) or pb > 0:
            conds.append(te.greater_equal(pos, 0))
        if not isinstance(pe, int) or pe > 0 or (check_end is not None and check_end[i]):
            conds.append(te.less(pos, shape[i]))
    cond = None
    for c in conds:
        cond = c if cond is None else te.logical_and(cond, c)
    return idx, cond


def data_op(op: str, a, b):
    """`a op b` on tensor values, built as is: integer expressions are otherwise simplified
    as index arithmetic, which expands `(x - zx) * (w - zw)` into four products."""
    return BinOp(op, a, b, a.dtype)


# ---------------------------------------------------------------------------------------------
# attention, flex-attention and rotary ops: head layout, loop-program checks


def attention_heads(t: TensorType, heads, op: str, what: str) -> tuple[Dim, Dim, Dim, Dim]:
    """(batch, heads, seq, head_size) of a 4-D input, or of a 3-D (batch, seq, heads *
    head_size) input split into `heads` heads."""
    if t.ndim == 4:
        return t.shape  # type: ignore[return-value]
    if t.ndim != 3:
        raise ShapeError(f"op {op}: {what} must be 3-D or 4-D, got rank {t.ndim}")
    if not heads:
        raise ShapeError(f"op {op}: 3-D inputs need the number of heads for {what}")
    hidden = t.shape[2]
    if isinstance(hidden, int) and hidden % heads:
        raise ShapeError(f"op {op}: {what} hidden size {hidden} is not divisible by {heads} heads")
    return t.shape[0], heads, t.shape[1], hidden // heads


def check_gqa_heads(hq: Dim, hk: Dim, op: str) -> None:
    if isinstance(hq, int) and isinstance(hk, int) and hq % hk:
        raise ShapeError(f"op {op}: {hq} query heads are not a multiple of {hk} key/value heads")


def kv_group(hq: Dim, hk: Dim):
    """The K/V head a query head reads (np.repeat of the K/V heads)."""
    if isinstance(hq, int) and isinstance(hk, int) and hq == hk:
        return lambda h: h
    reps = hq // hk
    return lambda h: h // reps


def sqrt_scale(scale, head: Dim, dt: str, root_dtype: str):
    """sqrt(scale) (default scale 1/sqrt(head)) rounded to `dt`: the factor both Q and K are
    multiplied by. The root is taken in `root_dtype` (float64 for attention, float32 for the
    flex-attention scores), as the references take it."""
    np_root = to_numpy(root_dtype).type
    if scale is not None or isinstance(head, int):
        value = scale if scale is not None else 1 / np.sqrt(head)
        return te.const(float(to_numpy(dt).type(np.sqrt(np_root(value)))), dt)
    inv = te.const(1.0, "float64") / te.sqrt(te.cast(head, "float64"))
    return te.cast(te.sqrt(te.cast(inv, root_dtype)), dt)


def no_loop(op: str, what: str) -> NoLoopProgram:
    """The error a compute raises for a call its loop program does not cover."""
    return NoLoopProgram(f"op {op}: {what} has no loop program")


def float_operands(op: str, *tensors) -> str:
    """The common float dtype of the operands (None ones skipped), or NoLoopProgram."""
    dtypes = {t.dtype for t in tensors if t is not None}
    if len(dtypes) != 1 or not is_float(next(iter(dtypes))):
        raise no_loop(op, f"operand dtypes {', '.join(sorted(dtypes))} (not one float dtype)")
    dt = dtypes.pop()
    if dt == "bfloat16":
        raise no_loop(op, "bfloat16")
    return dt


def broadcast_axis_index(d: Dim, i):
    """Index `i` into an axis of symbolic extent `d` that is either 1 or the full extent at run
    time: a select, not `i % d`, so the bounds proof sees both cases (tcc.ir.verify)."""
    return te.if_then_else(te.equal(d, 1), 0, i)


def broadcast_index(in_shape, out_shape, idx) -> tuple:
    """The input index that output index `idx` reads when `in_shape` broadcasts to
    `out_shape` (numpy rules, dimensions aligned at the end)."""
    lead = len(out_shape) - len(in_shape)
    out = []
    for k, d in enumerate(in_shape):
        i, want = idx[lead + k], out_shape[lead + k]
        if isinstance(d, int) and d == 1:
            out.append(0)
        elif prove_equal(d, want):
            out.append(i)
        else:  # a symbolic extent that is either 1 or the target's at run time
            out.append(broadcast_axis_index(d, i))
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# sizes read at run time (the static forms of lower-dynamic-shapes)


def count_flags(flags) -> E.PrimExpr:
    """The number of 0/1 size expressions that are 1."""
    total = E.const(0)
    for f in flags:
        total = E.binop("add", total, f)
    return total


def axis_flags(values, ndim: int, what: str):
    """Per axis of a rank-`ndim` shape, 1 when one of `values` (axes read at run time, negative
    ones counted from the end) names it, else 0; and the (condition, message) checks that
    every value is an axis and none repeats. `what` names a value in the messages."""
    checks = [(E.Logic("and", E.compare("ge", v, -ndim), E.compare("lt", v, ndim)),
               f"{what} {k} is outside [-{ndim}, {ndim})") for k, v in enumerate(values)]
    normal = [E.select(E.compare("lt", v, 0), E.binop("add", v, ndim), v) for v in values]
    flags = []
    for a in range(ndim):
        hit = None
        for v in normal:
            eq = E.compare("eq", v, a)
            hit = eq if hit is None else E.Logic("or", hit, eq)
        flags.append(E.const(0) if hit is None else E.select(hit, 1, 0))
    if values:
        checks.append((E.compare("eq", count_flags(flags), len(values)), "the axes name an axis twice"))
    return flags, checks


def pick_dim(dims, index) -> Dim:
    """dims[index] for a run-time index (0 when it is none of them)."""
    out = E.const(0)
    for i, d in enumerate(dims):
        out = E.binop("add", out, E.select(E.compare("eq", index, i), d, 0))
    return as_dim(out)


def kept_dims(flags, shape, rank: int) -> tuple[Dim, ...]:
    """The `rank` dimensions of `shape` whose 0/1 flag is 0, in order: what is left when the
    flagged axes (read at run time) go."""
    dims = []
    for j in range(rank):
        dim, before = E.const(0), E.const(0)
        for f, d in zip(flags, shape):
            here = E.Logic("and", E.compare("eq", f, 0), E.compare("eq", before, j))
            dim = E.binop("add", dim, E.select(here, d, 0))
            before = E.binop("add", before, E.binop("sub", 1, f))
        dims.append(as_dim(dim))
    return tuple(dims)


# ---------------------------------------------------------------------------------------------
# data-dependent selections (nonzero, compress): counted first, then filled


def clamp_index(i, extent):
    """Index `i` clamped into an axis of `extent`: where an index read from data (or bound
    only by the program's logic) is used, so the bounds proof sees it in the axis."""
    return te.min(te.max(i, 0), te.const(extent, "int64") - 1)


def float_position(c, extent, margin: float):
    """A float64 position along an axis of `extent` as an int64, first held within `margin`
    of the axis: a far-out (or huge) coordinate converts exactly and stays outside it."""
    high = te.cast(extent, "float64") + margin
    return te.cast(te.min(te.max(c, te.const(-margin, "float64")), high), "int64")


def unravel(flat, dims) -> tuple:
    """The C-order position of flat index `flat` (0 <= flat < prod(dims)) in `dims`, each
    coordinate clamped into its axis so that the bounds proof sees it there."""
    out = []
    for d in reversed(dims):
        out.append(clamp_index(flat % d, d))
        flat = flat // d
    return tuple(reversed(out))


def same_value(dtype: str, a, b):
    """a equals b, NaN equalling NaN (as np.unique and stable sorts group them)."""
    if not is_float(dtype):
        return te.equal(a, b)
    return te.logical_or(te.equal(a, b), te.logical_and(te.isnan(a), te.isnan(b)))


def orders_before(dtype: str, a, b, largest: bool = False):
    """a comes before b in an ascending order (descending with `largest`), NaN counting as
    the largest value, as numpy sorts it."""
    if not is_float(dtype):
        return te.greater(a, b) if largest else te.less(a, b)
    nan_a, nan_b = te.isnan(a), te.isnan(b)
    if largest:
        return te.logical_or(te.logical_and(nan_a, te.logical_not(nan_b)), te.greater(a, b))
    return te.logical_or(te.logical_and(te.logical_not(nan_a), nan_b), te.less(a, b))


def count_type(op: str):
    """The inference of a counting op (OpDef.size_op): any tensor operands, one int64 count."""

    def infer(args, attrs):
        for a in args:
            tensor(a, op)
        return TensorType((1,), "int64")

    return infer


def count_selected(n: Dim, selected, name: str) -> te.Tensor:
    """A 1-vector: how many of the flat positions 0 <= p < n `selected(p)` holds at."""

    def count(i):
        p = te.reduce_axis(n, "p")
        return te.sum(te.const(1, "int64"), axis=[p], where=selected(p))

    if isinstance(n, int) and n > 0:
        return te.compute((1,), count, name)
    # a reduction over no position never runs its init: an empty input counts 0 here
    counted = te.compute((1,), count, f"{name}_sum")
    zero = te.const(0, "int64")
    return te.compute((1,), lambda i: te.if_then_else(te.equal(n, 0), zero, counted[i]), name)


def selected_positions(n: Dim, count: Dim, selected, name: str) -> te.Tensor:
    """The `count` flat positions 0 <= p < n where `selected(p)` holds, in order: position p
    is number j when j selected ones come before it. Two stages of n x n and count x n work
    (a te program has no running counter)."""

    def before(p):
        q = te.reduce_axis(n, "q")
        return te.sum(te.const(1, "int64"), axis=[q], where=te.logical_and(q < p, selected(q)))

    places = te.compute((n,), before, f"{name}_place")

    def position(j):
        p = te.reduce_axis(n, "p")
        hit = te.logical_and(selected(p), te.equal(places[p], j))
        return te.sum(te.cast(p, "int64"), axis=[p], where=hit)

    return te.compute((count,), position, name)
