"""Reductions and ops built around them: reduce_*, arg max/min, the scans (cumsum,
cumprod) and top-k.

Reduction axes are attributes: `axes=None` reduces every axis. The ONNX conformance models
also feed axes (and scan axes, top-k counts) as run-time tensors; those ops accept the value
as an optional extra operand instead, and dimensions that depend on it are fresh size
variables bound when the program runs. A reduction's axes operand is read into sizes by the
lower-dynamic-shapes pass, which gives the reduction, with keepdims, two size attributes per
axis: `extents`, how many positions it reduces (the dimension, or 1), and `kept`, what
is left of the axis (1, or the dimension); a reshape then drops the kept axes. Its loop
program reduces every axis over `extents` and indexes `r + o`: one of the two ranges is a
single point, so the same kernel reduces whichever axes the run asks for. The scans' and
top-k's operand forms have none.

Loop programs accumulate half floats in float32 and bools in int64 (as numpy's sums do),
and round back to the op's dtype once at the end. `reduce_stage` and `source_index` are
the building blocks the softmax and normalization families reuse.
"""

from __future__ import annotations

import numpy as np

from tcc.ir import expr as E
from tcc.ir import te
from tcc.ir.dtype import is_float
from tcc.ir.errors import ShapeError
from tcc.ir.expr import Dim, as_dim, fresh_var
from tcc.ir.graph import TensorType
from tcc.ir.ops._util import (
    axis_flags,
    clamp_index,
    kept_dims,
    no_loop,
    operand,
    orders_before,
    pick_dim,
    same_value,
    scalar_int,
    static_length,
)
from tcc.ir.ops.registry import (
    OpDef,
    Pattern,
    StaticForm,
    normalize_axis,
    prod,
    register,
    tensor,
    tuple_type,
)

# ---------------------------------------------------------------------------------------------
# axis helpers shared by the inference functions and the references


def reduce_axes(axes, ndim: int, op: str) -> tuple[int, ...]:
    """Sorted, deduplicated non-negative axes; None means every axis."""
    if axes is None:
        return tuple(range(ndim))
    return tuple(sorted({normalize_axis(int(a), ndim, op) for a in axes}))


def reduced_shape(shape, axes: tuple[int, ...], keepdims: bool) -> tuple[Dim, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


# ---------------------------------------------------------------------------------------------
# loop-program building blocks (also used by softmax.py and norm.py)

_TE_REDUCE = {"sum": te.sum, "prod": te.prod, "max": te.max, "min": te.min}


def value_kind(op: str, dtype: str) -> str:
    """The arithmetic a loop program does on `dtype`: "float", "int" or "bool"; other
    dtypes (complex, strings, low-precision storage types) have no loop program."""
    if is_float(dtype):
        return "float"
    if dtype == "bool":
        return "bool"
    if dtype in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        return "int"
    raise no_loop(op, f"dtype {dtype}")


def accumulator(dtype: str) -> str:
    """The dtype a sum of `dtype` values runs in: half floats in float32, bools in int64."""
    if dtype in ("float16", "bfloat16"):
        return "float32"
    return "int64" if dtype == "bool" else dtype


def wide_int(dtype: str) -> str:
    """The dtype numpy sums an integer dtype in (int64, or uint64 for unsigned ones)."""
    return "uint64" if dtype.startswith("uint") else "int64"


def source_index(out_idx, reduce_vars, axes, ndim: int, keepdims: bool) -> tuple:
    """The input index of output point `out_idx` of a reduction over `axes` (sorted), with
    `reduce_vars` (one per axis) standing for the reduced positions."""
    outs, rvs, idx = iter(out_idx), iter(reduce_vars), []
    for d in range(ndim):
        if d in axes:
            idx.append(next(rvs))
            if keepdims:
                next(outs)
        else:
            idx.append(next(outs))
    return tuple(idx)


def reduce_stage(x: te.Tensor, axes, keepdims: bool, value, kind: str, name: str) -> te.Tensor:
    """A stage reducing `value(in_idx, out_idx)` with `kind` (sum/prod/max/min) over `axes`
    of `x`, shaped as `reduced_shape`; over no axes it is the elementwise `value`."""
    shape = reduced_shape(x.shape, axes, keepdims)
    if not axes:
        return te.compute(shape, lambda *i: value(i, i), name)

    def body(*i):
        rv = [te.reduce_axis(x.shape[a], f"r{a}") for a in axes]
        return _TE_REDUCE[kind](value(source_index(i, rv, axes, x.ndim, keepdims), i), axis=rv)

    return te.compute(shape, body, name)


def count_of(shape, axes):
    """The number of elements a reduction over `axes` combines (a Dim)."""
    return prod([shape[a] for a in axes])


def map_stage(t: te.Tensor, fn, name: str) -> te.Tensor:
    """The elementwise stage `fn(t[i])` over t's shape."""
    return te.compute(t.shape, lambda *i: fn(t[i]), name)


# ---------------------------------------------------------------------------------------------
# reductions


def _reduce_infer(name: str):
    def infer(args, attrs):
        x = tensor(args[0], name)
        axes_t = operand(args, 1)
        if attrs["extents"] is not None:
            if axes_t is not None or attrs["axes"] is not None or not attrs["keepdims"]:
                raise ShapeError(f"op {name}: `extents` take keepdims and no other axes")
            if not len(attrs["extents"]) == len(attrs["kept"] or ()) == x.ndim:
                raise ShapeError(f"op {name}: `extents` and `kept` need one size per axis")
            return TensorType(tuple(attrs["kept"]), x.dtype)
        if axes_t is None:
            axes = reduce_axes(attrs["axes"], x.ndim, name)
            return TensorType(reduced_shape(x.shape, axes, attrs["keepdims"]), x.dtype)
        if attrs["axes"] is not None:
            raise ShapeError(f"op {name}: give axes as an attribute or an operand, not both")
        k = static_length(tensor(axes_t, name, "axes"), name, "axes")
        if k == 0:  # an empty axes list reduces everything
            return TensorType(
                reduced_shape(x.shape, tuple(range(x.ndim)), attrs["keepdims"]), x.dtype
            )
        rank = x.ndim if attrs["keepdims"] else x.ndim - k
        return TensorType(tuple(fresh_var("r") for _ in range(rank)), x.dtype)

    return infer


def _lowest(dtype: np.dtype):
    if dtype == np.bool_:
        return False
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype: np.dtype):
    if dtype == np.bool_:
        return True
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max


def _log_sum_exp(x, axes, keepdims):
    # Subtract the (finite) maximum first so large inputs do not overflow exp.
    if x.dtype.kind != "f":
        x = x.astype(np.float64)
    m = np.maximum.reduce(x, axis=axes, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0).astype(x.dtype)
    out = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axes)


def _mean(x, axes, keepdims):
    count = int(np.prod([x.shape[a] for a in axes]))
    return (
        np.sum(x, axis=axes, keepdims=keepdims, dtype=np.float64 if x.dtype.kind in "iub" else None)
        / count
    )


_REDUCERS = {
    "reduce_sum": lambda x, a, k: np.sum(x, axis=a, keepdims=k),
    "reduce_prod": lambda x, a, k: np.prod(x, axis=a, keepdims=k),
    "reduce_max": lambda x, a, k: np.maximum.reduce(
        x, axis=a, keepdims=k, initial=_lowest(x.dtype)
    ),
    "reduce_min": lambda x, a, k: np.minimum.reduce(
        x, axis=a, keepdims=k, initial=_highest(x.dtype)
    ),
    "reduce_mean": _mean,
    "reduce_l1": lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k),
    "reduce_l2": lambda x, a, k: np.sqrt(np.sum(np.square(x), axis=a, keepdims=k)),
    "reduce_sum_square": lambda x, a, k: np.sum(np.square(x), axis=a, keepdims=k),
    "reduce_log_sum": lambda x, a, k: np.log(np.sum(x, axis=a, keepdims=k)),
    "reduce_log_sum_exp": _log_sum_exp,
}

_REDUCE_DOCS = {
    "reduce_sum": "Sum over `axes` (0 over an empty set).",
    "reduce_prod": "Product over `axes` (1 over an empty set).",
    "reduce_max": "Maximum over `axes` (the dtype's lowest value, -inf for floats, over an empty set).",
    "reduce_min": "Minimum over `axes` (the dtype's highest value, +inf for floats, over an empty set).",
    "reduce_mean": "Arithmetic mean over `axes` (NaN over an empty set).",
    "reduce_l1": "Sum of absolute values over `axes`.",
    "reduce_l2": "Euclidean norm over `axes`.",
    "reduce_sum_square": "Sum of squares over `axes`.",
    "reduce_log_sum": "log(sum) over `axes` (-inf over an empty set).",
    "reduce_log_sum_exp": "log(sum(exp)) over `axes`, computed stably (-inf over an empty set).",
}


_OPERAND = (" A run-time axes operand is read when the program runs; `extents` and `kept`"
            " (sizes per axis, with keepdims) are the form the lower-dynamic-shapes pass"
            " gives it.")


def _reduce_ref(name: str):
    fn = _REDUCERS[name]

    def ref(x, axes_tensor=None, *, axes, keepdims, extents=None, kept=None):
        if extents is not None:  # an axis is reduced when all of it is and 1 is left
            axes = [a for a, (e, k) in enumerate(zip(extents, kept)) if k == 1 and e == x.shape[a]]
            if not axes:
                return x.copy()
        if axes_tensor is not None:
            axes = (
                None if np.asarray(axes_tensor).size == 0 else np.asarray(axes_tensor).reshape(-1)
            )
        ax = reduce_axes(axes, x.ndim, name)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = np.asarray(fn(x, ax, keepdims))
        return out.astype(x.dtype, copy=False)

    return ref


def _plan(op: str, kind: str, dt: str, count):
    """(value of one input element, reduction kind, epilogue or None) of `op` on `dt`,
    following its numpy reference: integer sums wrap (numpy's int64 sum cast back agrees),
    and the float results of integer means, norms and logs are truncated back."""
    acc = accumulator(dt)
    back = None if acc == dt else (lambda s: te.cast(s, dt))
    f64 = "float64"
    if op in ("sum", "prod"):
        return (lambda v: te.cast(v, acc)), op, back
    if op in ("max", "min"):
        if kind == "bool":  # over no element the int8 identity (-128 or 127) says False/True
            return (lambda v: te.cast(v, "int8")), op, (lambda s: te.greater(s, te.const(0, "int8")))
        return (lambda v: v), op, None
    if op == "mean":
        ct = acc if kind == "float" else f64
        return (lambda v: te.cast(v, ct)), "sum", (lambda s: te.cast(s / te.cast(count, ct), dt))
    if op == "l1":
        if kind == "float":
            return (lambda v: te.cast(te.abs(v), acc)), "sum", back
        if dt.startswith("uint") or kind == "bool":
            return (lambda v: te.cast(v, acc)), "sum", back
        return te.abs, "sum", None
    if op == "sum_square":
        if kind == "int":
            return (lambda v: v * v), "sum", None
        if kind == "bool":  # a bool squared is itself
            return (lambda v: te.cast(v, acc)), "sum", back
        return (lambda v: te.cast(v, acc) * te.cast(v, acc)), "sum", back
    # l2 and log_sum: a float function of the sum; numpy takes it in float64 for integers
    fn = te.sqrt if op == "l2" else te.log
    if kind == "float":
        square = op == "l2"
        value = (
            (lambda v: te.cast(v, acc) * te.cast(v, acc)) if square else (lambda v: te.cast(v, acc))
        )
        return value, "sum", (lambda s: te.cast(fn(s), dt))
    wide = "int64" if kind == "bool" else wide_int(dt)
    if op == "l2" and kind == "int":
        value = lambda v: te.cast(v * v, wide)  # noqa: E731  (numpy squares in the dtype)
    else:
        value = lambda v: te.cast(v, wide)  # noqa: E731
    return value, "sum", (lambda s: te.cast(fn(te.cast(s, f64)), dt))


def _finite_or_zero(m):
    return te.if_then_else(te.logical_or(te.isinf(m), te.isnan(m)), te.const(0, m.dtype), m)


def _log_sum_exp_loop(x, stage, name):
    """Stable log-sum-exp in three stages: the maximum, the sum of exp(x - max), the log.
    `stage(value, kind, name)` builds one reduction stage over the op's axes."""
    kind = value_kind(name, x.dtype)
    mdt = x.dtype if kind == "float" else "float64"
    ct = accumulator(mdt)
    m = stage(lambda i, o: te.cast(x[i], mdt), "max", f"{name}_max")

    def shifted(v, o):
        return te.exp(te.cast(v, ct) - te.cast(_finite_or_zero(m[o]), ct))

    s = stage(lambda i, o: shifted(te.cast(x[i], mdt), o), "sum", f"{name}_sum")
    return te.compute(
        s.shape,
        lambda *o: te.cast(te.log(s[o]) + te.cast(_finite_or_zero(m[o]), ct), x.dtype),
        name,
    )


def _sized_stage(x: te.Tensor, extents, kept):
    """A `reduce_stage` reducing `extents[a]` positions of each axis a into `kept[a]`."""
    shape = tuple(kept)

    def stage(value, kind: str, name: str) -> te.Tensor:
        def body(*o):
            rv = [te.reduce_axis(e, f"r{a}") for a, e in enumerate(extents)]
            # one of r and o ranges over a single point: the index is the other one
            return _TE_REDUCE[kind](value(tuple(r + i for r, i in zip(rv, o)), o), axis=rv)

        return te.compute(shape, body, name)

    return stage


def _reduce_compute(name: str):
    def compute(x, axes_tensor=None, *, axes, keepdims, extents=None, kept=None):
        if axes_tensor is not None:
            raise no_loop(name, "a run-time axes operand")
        if extents is not None:
            stage = _sized_stage(x, extents, kept)
            count = prod(list(extents))
        else:
            ax = reduce_axes(axes, x.ndim, name)

            def stage(value, kind, stage_name):
                return reduce_stage(x, ax, keepdims, value, kind, stage_name)

            count = count_of(x.shape, ax)
        if name == "reduce_log_sum_exp":
            return _log_sum_exp_loop(x, stage, name)
        op = name[len("reduce_") :]
        value, kind, post = _plan(op, value_kind(name, x.dtype), x.dtype, count)
        load = lambda i, o: value(x[i])  # noqa: E731
        if post is None:
            return stage(load, kind, name)
        return map_stage(stage(load, kind, f"{name}_{kind}"), post, name)

    return compute


def _reduce_static(name: str):
    """The static form of a reduction whose axes operand is read at run time."""

    def to_static(types, sizes, out, attrs):
        x, axes = types[0], sizes[1]
        n = x.ndim
        hits, checks = axis_flags(axes, n, "axis")
        if not axes:  # the empty list reduces every axis (its noop form never gets here)
            hits = [E.const(1)] * n
        extents = [E.fresh_var("extent") for _ in range(n)]
        kept = [E.fresh_var("kept") for _ in range(n)] if not attrs["keepdims"] else list(out)
        hit_extents = [as_dim(E.select(E.compare("eq", h, 1), d, 1)) for h, d in zip(hits, x.shape)]
        hit_kept = [as_dim(E.select(E.compare("eq", h, 1), 1, d)) for h, d in zip(hits, x.shape)]
        attrs_ = {"axes": None, "keepdims": True, "extents": extents, "kept": kept}
        binds = tuple(zip(extents, hit_extents))
        if attrs["keepdims"]:
            return StaticForm(name, (0,), attrs_, tuple(hit_kept), tuple(checks), binds=binds)
        binds += tuple(zip(kept, hit_kept))
        dims = kept_dims(hits, x.shape, len(out))
        return StaticForm(name, (0,), attrs_, dims, tuple(checks),
                          then=("reshape", {"shape": list(out)}), binds=binds)

    return to_static


def reduction(name: str) -> OpDef:
    """Register the reduction `name` (axes attribute, or a run-time axes operand)."""
    return register(
        OpDef(
            name,
            _reduce_infer(name),
            _reduce_ref(name),
            attrs={"axes": None, "keepdims": True, "extents": None, "kept": None},
            pattern=Pattern.COMM_REDUCE,
            num_args=(1, 2),
            compute=_reduce_compute(name),
            doc=_REDUCE_DOCS[name] + _OPERAND,
            shape_operands=(1,),
            to_static=_reduce_static(name),
        )
    )


REDUCTIONS = frozenset(reduction(name).name for name in _REDUCERS)


# ---------------------------------------------------------------------------------------------
# arg max / arg min


def _arg_infer(name: str):
    def infer(args, attrs):
        x = tensor(args[0], name)
        axis = normalize_axis(attrs["axis"], x.ndim, name)
        return TensorType(reduced_shape(x.shape, (axis,), attrs["keepdims"]), "int64")

    return infer


def _arg_ref(fn):
    def ref(x, *, axis, keepdims, select_last_index):
        if select_last_index:  # the last extremum is the first one of the reversed axis
            idx = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis, keepdims=keepdims)
        else:
            idx = fn(x, axis=axis, keepdims=keepdims)
        return np.asarray(idx, dtype=np.int64)

    return ref


def first_extremum(x: te.Tensor, axes, keepdims, m: te.Tensor, index, last: bool, name: str):
    """The stage of the lowest (or, with `last`, highest) `index(in_idx)` over `axes` where
    x equals its extremum `m` (shaped as the output): numpy's arg max/min. A NaN is every
    float extremum, as numpy's argmax/argmin and maximum/minimum make it, so once `m` is NaN
    the NaNs themselves are the candidates."""
    is_bool = x.dtype == "bool"

    def hit(i, o):
        v = te.cast(x[i], "int8") if is_bool else x[i]
        c = te.equal(v, m[o])
        return te.logical_or(c, te.isnan(v)) if is_float(x.dtype) else c

    def body(*o):
        rv = [te.reduce_axis(x.shape[a], f"r{a}") for a in axes]
        i = source_index(o, rv, axes, x.ndim, keepdims)
        pick = te.max if last else te.min
        return pick(te.cast(index(i), "int64"), axis=rv, where=hit(i, o))

    return te.compute(reduced_shape(x.shape, axes, keepdims), body, name)


def _arg_compute(name: str):
    kind = "max" if name == "argmax" else "min"

    def compute(x, *, axis, keepdims, select_last_index):
        value_kind(name, x.dtype)
        ax = (normalize_axis(axis, x.ndim, name),)
        as_int8 = x.dtype == "bool"  # extrema of bools are taken on 0/1 bytes
        m = reduce_stage(
            x,
            ax,
            keepdims,
            lambda i, o: te.cast(x[i], "int8") if as_int8 else x[i],
            kind,
            f"{name}_value",
        )
        return first_extremum(x, ax, keepdims, m, lambda i: i[ax[0]], select_last_index, name)

    return compute


for _name, _fn in (("argmax", np.argmax), ("argmin", np.argmin)):
    register(
        OpDef(
            _name,
            _arg_infer(_name),
            _arg_ref(_fn),
            attrs={"axis": 0, "keepdims": True, "select_last_index": False},
            pattern=Pattern.COMM_REDUCE,
            compute=_arg_compute(_name),
            doc=f"Index (int64) of the {_name[3:]}imum along `axis`; ties pick the first "
            "occurrence, or the last with `select_last_index`.",
        )
    )


# ---------------------------------------------------------------------------------------------
# scans


def _scan_infer(name: str):
    def infer(args, attrs):
        x = tensor(args[0], name)
        axis_t = operand(args, 1)
        if axis_t is None:
            if isinstance(attrs["axis"], int):  # else a size read at run time
                normalize_axis(attrs["axis"], x.ndim, name)
        elif static_length(tensor(axis_t, name, "axis"), name, "axis") != 1:
            raise ShapeError(f"op {name}: the axis operand must hold one value, got {axis_t}")
        return x

    return infer


def _scan_ref(name: str, fn, identity: int):
    def ref(x, axis_tensor=None, *, axis, exclusive, reverse):
        if axis_tensor is not None:
            axis = scalar_int(axis_tensor)
        axis = normalize_axis(axis, x.ndim, name)
        y = np.flip(x, axis) if reverse else x
        out = fn(y, axis=axis, dtype=x.dtype)
        if exclusive:  # shift by one along the axis, starting from the identity
            head = np.full_like(np.take(out, [0], axis=axis), identity)
            out = np.concatenate([head, np.take(out, range(out.shape[axis] - 1), axis=axis)], axis)
        return np.flip(out, axis) if reverse else out

    return ref


def _scan_compute(name: str):
    """Each output element is its own masked reduction over the whole scan axis (quadratic
    work, but a plain te program); positions are visited in the reference's order, so float
    results round as numpy's sequential scan does. Bools scan in int64, as numpy adds them.

    An axis read at run time (a size variable, from the static form) scans over the longest
    dimension, masked to the chosen one; every axis's index is its own or, on the chosen
    axis, the scan position clamped into it (the mask drops the clamped ones)."""
    kind = "sum" if name == "cumsum" else "prod"

    def compute(x, axis_tensor=None, *, axis, exclusive, reverse):
        if axis_tensor is not None:
            raise no_loop(name, "a run-time axis operand")
        value_kind(name, x.dtype)
        acc = "int64" if x.dtype == "bool" else x.dtype
        if isinstance(axis, int):
            ax = normalize_axis(axis, x.ndim, name)
            n, longest = x.shape[ax], x.shape[ax]
        else:
            n, longest = pick_dim(x.shape, axis), _longest(x.shape)

        def body(*i):
            r = te.reduce_axis(longest, "r")
            pos = n - 1 - r if reverse else r
            if isinstance(axis, int):
                here, idx, inside = i[ax], i[:ax] + (pos,) + i[ax + 1 :], None
            else:
                here = pick_dim(i, axis)
                idx = tuple(te.if_then_else(te.equal(axis, j), clamp_index(pos, d), i[j])
                            for j, d in enumerate(x.shape))
                inside = te.less(r, n)
            if reverse:
                keep = te.greater(pos, here) if exclusive else te.greater_equal(pos, here)
            else:
                keep = te.less(pos, here) if exclusive else te.less_equal(pos, here)
            keep = keep if inside is None else te.logical_and(inside, keep)
            return _TE_REDUCE[kind](te.cast(x[idx], acc), axis=[r], where=keep)

        if acc == x.dtype:
            return te.compute(x.shape, body, name)
        return map_stage(
            te.compute(x.shape, body, f"{name}_{kind}"), lambda v: te.cast(v, x.dtype), name
        )

    return compute


def _longest(dims) -> Dim:
    out = dims[0] if dims else 1
    for d in dims[1:]:
        out = E.max_expr(out, d)
    return as_dim(out)


def _scan_static(name: str):
    """The static form of a scan whose axis operand is read at run time: the axis (checked,
    made non-negative) becomes a size variable the loop program takes."""

    def to_static(types, sizes, out, attrs):
        n = types[0].ndim
        (v,) = sizes[1]
        inside = E.Logic("and", E.compare("ge", v, -n), E.compare("lt", v, n))
        axis = fresh_var("axis")
        normal = as_dim(E.select(E.compare("lt", v, 0), E.binop("add", v, n), v))
        return StaticForm(name, (0,), {**attrs, "axis": axis}, tuple(types[0].shape),
                          ((inside, f"the axis is outside [-{n}, {n})"),), binds=((axis, normal),))

    return to_static


for _name, _fn, _identity, _what in (
    ("cumsum", np.cumsum, 0, "sum"),
    ("cumprod", np.cumprod, 1, "product"),
):
    register(
        OpDef(
            _name,
            _scan_infer(_name),
            _scan_ref(_name, _fn, _identity),
            attrs={"axis": 0, "exclusive": False, "reverse": False},
            pattern=Pattern.OPAQUE,
            num_args=(1, 2),
            compute=_scan_compute(_name),
            doc=f"Running {_what} along `axis` (or a run-time scalar axis operand); "
            "`exclusive` leaves out the current element, `reverse` runs from the end. "
            "The axis operand is read when the program runs (`axis` is then a size).",
            shape_operands=(1,),
            to_static=_scan_static(_name),
        )
    )


# ---------------------------------------------------------------------------------------------
# top-k


def _topk_infer(args, attrs):
    x = tensor(args[0], "topk")
    axis = normalize_axis(attrs["axis"], x.ndim, "topk")
    k_t = operand(args, 1)
    if k_t is not None:
        if attrs["k"] is not None:
            raise ShapeError("op topk: give k as an attribute or an operand, not both")
        static_length(tensor(k_t, "topk", "k"), "topk", "k")
        k: Dim = fresh_var("k")
    elif attrs["k"] is None:
        raise ShapeError("op topk: k is required, as an attribute or an operand")
    else:
        k = attrs["k"]
        if isinstance(k, int) and isinstance(x.shape[axis], int) and not 0 <= k <= x.shape[axis]:
            raise ShapeError(f"op topk: k={k} is out of range for axis of size {x.shape[axis]}")
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1 :]
    return tuple_type(TensorType(shape, x.dtype), TensorType(shape, "int64"))


def _topk_ref(x, k_tensor=None, *, k, axis, largest, sorted):
    if k_tensor is not None:
        k = scalar_int(k_tensor)
    axis = normalize_axis(axis, x.ndim, "topk")
    if largest:
        # A stable ascending sort of the reversed axis, read backwards, orders values
        # descending with ties at the lower index first.
        n = x.shape[axis]
        order = n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, range(k), axis=axis).astype(np.int64)
    return np.take_along_axis(x, idx, axis=axis), idx


def _topk_compute(x, k_tensor=None, *, k, axis, largest, sorted):
    """A sort as counting: an element's place is the number of elements that come before it
    (larger, or smaller, NaN counting as the largest; ties by index, as the reference's stable
    sort orders them), and result position t takes the element whose place is t. Quadratic
    along the axis, in three plain stages."""
    if k_tensor is not None:
        raise no_loop("topk", "a run-time k operand")
    if value_kind("topk", x.dtype) == "bool":
        raise no_loop("topk", "bool values")
    axis = normalize_axis(axis, x.ndim, "topk")
    n = x.shape[axis]

    def at(i, j):
        return i[:axis] + (j,) + i[axis + 1 :]

    def place(*i):
        r = te.reduce_axis(n, "r")
        a, b = x[at(i, r)], x[i]
        first = te.logical_or(orders_before(x.dtype, a, b, largest),
                              te.logical_and(same_value(x.dtype, a, b), te.less(r, i[axis])))
        return te.sum(te.const(1, "int64"), axis=[r], where=first)

    places = te.compute(x.shape, place, "topk_place")
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1 :]

    def index(*i):
        r = te.reduce_axis(n, "r")
        return te.sum(te.cast(r, "int64"), axis=[r], where=te.equal(places[at(i, r)], i[axis]))

    indices = te.compute(shape, index, "topk_indices")
    # clamped where read, so the bounds proof sees it (each place is taken exactly once)
    values = te.compute(
        shape, lambda *i: x[at(i, clamp_index(indices[i], n))], "topk_values"
    )
    return [values, indices]


def _topk_static(types, sizes, out, attrs):
    """TopK with k read at run time: a size the loop program takes, checked against the axis."""
    x = types[0]
    axis = normalize_axis(attrs["axis"], x.ndim, "topk")
    (k,) = sizes[1]
    fits = E.Logic("and", E.compare("ge", k, 0), E.compare("le", k, x.shape[axis]))
    dims = x.shape[:axis] + (k,) + x.shape[axis + 1 :]
    return StaticForm("topk", (0,), {**attrs, "k": k}, dims + dims,  # values, indices
                      ((fits, f"k is outside [0, the axis's length {x.shape[axis]}]"),))


register(
    OpDef(
        "topk",
        _topk_infer,
        _topk_ref,
        attrs={"k": None, "axis": -1, "largest": True, "sorted": True},
        pattern=Pattern.OPAQUE,
        num_args=(1, 2),
        compute=_topk_compute,
        doc="(values, int64 indices) of the k largest (or smallest) elements along `axis`, "
        "in order (also when `sorted` is false, which leaves the order open); ties go to "
        "the lower index. k is an attribute or a run-time operand, read when the program "
        "runs (`k` is then a size).",
        shape_operands=(1,),
        to_static=_topk_static,
    )
)
