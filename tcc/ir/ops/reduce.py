"""Reductions and ops built around them: reduce_*, arg max/min, the softmax family, scans,
top-k, classification losses, normalizations and the signal ops (DFT, STFT, windows).

Reduction axes are attributes: `axes=None` reduces every axis. The ONNX conformance models
also feed axes (and scan axes, top-k counts, window sizes) as run-time tensors; those ops
accept the value as an optional extra operand instead, and dimensions that depend on it
are fresh size variables bound when the program runs. Only the attribute form has a
static loop structure; the operand form exists so such models still import and run.
"""

from __future__ import annotations

import numpy as np

from tcc.ir.dtype import is_float, is_int, to_numpy
from tcc.ir.errors import ShapeError
from tcc.ir.expr import Dim, fresh_var
from tcc.ir.graph import TensorType
from tcc.ir.ops.registry import (
    OpDef,
    Pattern,
    normalize_axis,
    register,
    same_dtype,
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


def _static_length(t: TensorType, op: str, what: str) -> int:
    """Length of a 1-D (or scalar) integer operand whose values are only known at run time."""
    if not is_int(t.dtype) or t.ndim > 1:
        raise ShapeError(f"op {op}: {what} must be a 1-D integer tensor, got {t}")
    n = t.shape[0] if t.ndim == 1 else 1
    if not isinstance(n, int):
        raise ShapeError(f"op {op}: {what} must have a static length, got {t}; make it a constant")
    return n


def _operand(args, i: int):
    return args[i] if len(args) > i else None


def _scalar(arr) -> int:
    """The single integer held by a run-time scalar or 1-element operand."""
    return int(np.asarray(arr).reshape(-1)[0])


# ---------------------------------------------------------------------------------------------
# reductions


def _reduce_infer(name: str):
    def infer(args, attrs):
        x = tensor(args[0], name)
        axes_t = _operand(args, 1)
        if axes_t is None:
            axes = reduce_axes(attrs["axes"], x.ndim, name)
            return TensorType(reduced_shape(x.shape, axes, attrs["keepdims"]), x.dtype)
        if attrs["axes"] is not None:
            raise ShapeError(f"op {name}: give axes as an attribute or an operand, not both")
        k = _static_length(tensor(axes_t, name, "axes"), name, "axes")
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


def _reduce_ref(name: str):
    fn = _REDUCERS[name]

    def ref(x, axes_tensor=None, *, axes, keepdims):
        if axes_tensor is not None:
            axes = (
                None if np.asarray(axes_tensor).size == 0 else np.asarray(axes_tensor).reshape(-1)
            )
        ax = reduce_axes(axes, x.ndim, name)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = np.asarray(fn(x, ax, keepdims))
        return out.astype(x.dtype, copy=False)

    return ref


def reduction(name: str) -> OpDef:
    """Register the reduction `name` (axes attribute, or a run-time axes operand)."""
    return register(
        OpDef(
            name,
            _reduce_infer(name),
            _reduce_ref(name),
            attrs={"axes": None, "keepdims": True},
            pattern=Pattern.COMM_REDUCE,
            num_args=(1, 2),
            doc=_REDUCE_DOCS[name],
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


for _name, _fn in (("argmax", np.argmax), ("argmin", np.argmin)):
    register(
        OpDef(
            _name,
            _arg_infer(_name),
            _arg_ref(_fn),
            attrs={"axis": 0, "keepdims": True, "select_last_index": False},
            pattern=Pattern.COMM_REDUCE,
            doc=f"Index (int64) of the {_name[3:]}imum along `axis`; ties pick the first "
            "occurrence, or the last with `select_last_index`.",
        )
    )


# ---------------------------------------------------------------------------------------------
# softmax family: normalize over a block of axes
#
# These ops take a list of axes because ONNX before opset 13 normalizes over the flattened
# block of every axis from `axis` on. They are OPAQUE, as in TVM: each is a max reduction,
# an exp-sum reduction and an elementwise epilogue, so it does not fuse like one reduction.


def _softmax_infer(name: str):
    def infer(args, attrs):
        x = tensor(args[0], name)
        if not is_float(x.dtype):
            raise ShapeError(f"op {name}: input must be a float tensor, got {x.dtype}")
        reduce_axes(attrs["axes"], x.ndim, name)
        return x

    return infer


def _stable_exp(x, axes):
    m = np.max(x, axis=axes, keepdims=True)
    return x - m, np.exp(x - m)


def _softmax(x, axes):
    _, e = _stable_exp(x, axes)
    return e / np.sum(e, axis=axes, keepdims=True)


def _log_softmax(x, axes):
    shifted, e = _stable_exp(x, axes)
    return shifted - np.log(np.sum(e, axis=axes, keepdims=True))


def _hardmax(x, axes):
    """One-hot of the first maximum in row-major order over the block of `axes`."""
    rest = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, rest + list(axes))
    flat = moved.reshape(moved.shape[: len(rest)] + (-1,))
    hot = np.zeros_like(flat)
    np.put_along_axis(hot, np.argmax(flat, axis=-1)[..., None], 1, axis=-1)
    return np.transpose(hot.reshape(moved.shape), np.argsort(rest + list(axes)))


def _softmax_ref(fn):
    def ref(x, *, axes):
        if x.size == 0:
            return x.copy()
        return fn(x, reduce_axes(axes, x.ndim, "softmax")).astype(x.dtype, copy=False)

    return ref


for _name, _fn, _what in (
    ("softmax", _softmax, "exp(x) / sum(exp(x))"),
    ("log_softmax", _log_softmax, "x - log(sum(exp(x)))"),
    ("hardmax", _hardmax, "one-hot of the first maximum"),
):
    register(
        OpDef(
            _name,
            _softmax_infer(_name),
            _softmax_ref(_fn),
            attrs={"axes": [-1]},
            pattern=Pattern.OPAQUE,
            doc=f"{_what} over the block of `axes`.",
        )
    )


# ---------------------------------------------------------------------------------------------
# scans


def _scan_infer(name: str):
    def infer(args, attrs):
        x = tensor(args[0], name)
        axis_t = _operand(args, 1)
        if axis_t is None:
            normalize_axis(attrs["axis"], x.ndim, name)
        elif _static_length(tensor(axis_t, name, "axis"), name, "axis") != 1:
            raise ShapeError(f"op {name}: the axis operand must hold one value, got {axis_t}")
        return x

    return infer


def _scan_ref(name: str, fn, identity: int):
    def ref(x, axis_tensor=None, *, axis, exclusive, reverse):
        if axis_tensor is not None:
            axis = _scalar(axis_tensor)
        axis = normalize_axis(axis, x.ndim, name)
        y = np.flip(x, axis) if reverse else x
        out = fn(y, axis=axis, dtype=x.dtype)
        if exclusive:  # shift by one along the axis, starting from the identity
            head = np.full_like(np.take(out, [0], axis=axis), identity)
            out = np.concatenate([head, np.take(out, range(out.shape[axis] - 1), axis=axis)], axis)
        return np.flip(out, axis) if reverse else out

    return ref


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
            doc=f"Running {_what} along `axis` (or a run-time scalar axis operand); "
            "`exclusive` leaves out the current element, `reverse` runs from the end.",
        )
    )


# ---------------------------------------------------------------------------------------------
# top-k


def _topk_infer(args, attrs):
    x = tensor(args[0], "topk")
    axis = normalize_axis(attrs["axis"], x.ndim, "topk")
    k_t = _operand(args, 1)
    if k_t is not None:
        if attrs["k"] is not None:
            raise ShapeError("op topk: give k as an attribute or an operand, not both")
        _static_length(tensor(k_t, "topk", "k"), "topk", "k")
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
        k = _scalar(k_tensor)
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


register(
    OpDef(
        "topk",
        _topk_infer,
        _topk_ref,
        attrs={"k": None, "axis": -1, "largest": True, "sorted": True},
        pattern=Pattern.OPAQUE,
        num_args=(1, 2),
        doc="(values, int64 indices) of the k largest (or smallest) elements along `axis`, "
        "in order (also when `sorted` is false, which leaves the order open); ties go to "
        "the lower index. k is an attribute or a run-time operand.",
    )
)


# ---------------------------------------------------------------------------------------------
# losses

REDUCTION_MODES = ("none", "sum", "mean")


def _nll_infer(args, attrs):
    x, target = tensor(args[0], "nll_loss"), tensor(args[1], "nll_loss", "target")
    if attrs["reduction"] not in REDUCTION_MODES:
        raise ShapeError(
            f"op nll_loss: reduction must be one of {REDUCTION_MODES}, got {attrs['reduction']!r}"
        )
    if x.ndim < 2 or target.ndim != x.ndim - 1 or not is_int(target.dtype):
        raise ShapeError(
            f"op nll_loss: expected input (N, C, d...) and integer target (N, d...), got {x} and {target}"
        )
    weight = _operand(args, 2)
    if weight is not None:
        same_dtype([x, tensor(weight, "nll_loss", "weight")], "nll_loss")
    if attrs["reduction"] != "none":
        return TensorType((), x.dtype)
    return TensorType((x.shape[0],) + x.shape[2:], x.dtype)


def _nll_ref(x, target, weight=None, *, reduction, ignore_index):
    """-x[n, target[n, d], d] * weight[target[n, d]], zero (and weight 0) where ignored."""
    ignored = target == ignore_index if ignore_index is not None else np.zeros(target.shape, bool)
    safe = np.where(ignored, 0, target).astype(np.int64)
    picked = np.take_along_axis(x, safe[:, None], axis=1)[:, 0]
    w = np.ones(target.shape, x.dtype) if weight is None else np.take(weight, safe)
    w = np.where(ignored, 0, w).astype(x.dtype)
    loss = -picked * w
    if reduction == "sum":
        return np.asarray(np.sum(loss), dtype=x.dtype)
    if reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray(np.sum(loss) / np.sum(w), dtype=x.dtype)
    return loss.astype(x.dtype, copy=False)


register(
    OpDef(
        "nll_loss",
        _nll_infer,
        _nll_ref,
        attrs={"reduction": "mean", "ignore_index": None},
        pattern=Pattern.OPAQUE,
        num_args=(2, 3),
        doc="Negative log-likelihood loss of log-probabilities (N, C, d...) against class "
        "indices (N, d...), optionally weighted per class; `mean` divides by the total "
        "weight of the targets that are not `ignore_index`.",
    )
)


# ---------------------------------------------------------------------------------------------
# normalizations


def _lp_ref(x, *, axis, p):
    norm = (
        np.sum(np.abs(x), axis=axis, keepdims=True)
        if p == 1
        else np.sqrt(np.sum(np.square(x), axis=axis, keepdims=True))
    )
    return np.where(norm == 0, 0, x / np.where(norm == 0, 1, norm)).astype(x.dtype)


def _lp_infer(args, attrs):
    x = tensor(args[0], "lp_normalize")
    normalize_axis(attrs["axis"], x.ndim, "lp_normalize")
    if attrs["p"] not in (1, 2):
        raise ShapeError(f"op lp_normalize: p must be 1 or 2, got {attrs['p']}")
    return x


register(
    OpDef(
        "lp_normalize",
        _lp_infer,
        _lp_ref,
        attrs={"axis": -1, "p": 2},
        pattern=Pattern.OPAQUE,
        doc="x divided by its L1 (p=1) or L2 (p=2) norm along `axis` (0 where the norm is 0).",
    )
)


def _mvn_infer(args, attrs):
    x = tensor(args[0], "mean_variance_normalize")
    reduce_axes(attrs["axes"], x.ndim, "mean_variance_normalize")
    return x


def _mvn_ref(x, *, axes):
    ax = reduce_axes(axes, x.ndim, "mean_variance_normalize")
    mean = np.mean(x, axis=ax, keepdims=True)
    std = np.sqrt(np.mean(np.square(x - mean), axis=ax, keepdims=True))
    return ((x - mean) / (std + 1e-9)).astype(x.dtype)


register(
    OpDef(
        "mean_variance_normalize",
        _mvn_infer,
        _mvn_ref,
        attrs={"axes": [0, 2, 3]},
        pattern=Pattern.OPAQUE,
        doc="(x - mean) / (std + 1e-9) with mean and (population) std taken over `axes`.",
    )
)


# ---------------------------------------------------------------------------------------------
# signal: DFT, STFT, windows, mel filter bank
#
# Complex values are real tensors whose last dimension holds (re, im); a real signal has a
# last dimension of 1.


def _complex_in(x):
    """The complex signal of a (re, im) tensor, kept in the input's precision (numpy's FFT
    then runs in single precision for float32, matching the ONNX reference results)."""
    return x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0]


def _complex_out(z, dtype):
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)


def _dft_infer(args, attrs):
    x = tensor(args[0], "dft")
    if not is_float(x.dtype) or x.ndim < 2 or x.shape[-1] not in (1, 2):
        raise ShapeError(f"op dft: input must be float with a last dimension of 1 or 2, got {x}")
    for i, what in ((1, "dft_length"), (2, "axis")):
        if _operand(args, i) is not None:
            _static_length(tensor(args[i], "dft", what), "dft", what)
    irfft = attrs["inverse"] and attrs["onesided"]
    last: Dim = 1 if irfft else 2
    if _operand(args, 2) is not None:  # a run-time axis: only an unchanged length is known
        if _operand(args, 1) is None and attrs["length"] is None and not attrs["onesided"]:
            return TensorType(x.shape[:-1] + (last,), x.dtype)
        return TensorType(tuple(fresh_var("n") for _ in x.shape[:-1]) + (last,), x.dtype)
    axis = _dft_axis(attrs["axis"], x.ndim)
    n: Dim
    if _operand(args, 1) is not None:
        n = fresh_var("n")
    elif attrs["length"] is not None:
        n = attrs["length"]
    else:
        n = 2 * (x.shape[axis] - 1) if irfft else x.shape[axis]
    if attrs["onesided"] and not irfft:
        n = n // 2 + 1
    return TensorType(x.shape[:axis] + (n,) + x.shape[axis + 1 : -1] + (last,), x.dtype)


def _dft_axis(axis: int, ndim: int) -> int:
    """A signal axis counted over the full rank; the last axis holds (re, im) and is no axis."""
    axis = normalize_axis(axis, ndim, "dft")
    if axis == ndim - 1:
        raise ShapeError("op dft: axis must not be the last axis, which holds (re, im) pairs")
    return axis


def _dft_ref(x, length_tensor=None, axis_tensor=None, *, length, axis, inverse, onesided):
    if length_tensor is not None:
        length = _scalar(length_tensor)
    if axis_tensor is not None:
        axis = _scalar(axis_tensor)
    axis = _dft_axis(axis, x.ndim)
    z = _complex_in(x)
    if inverse and onesided:
        n = length if length is not None else 2 * (x.shape[axis] - 1)
        return np.fft.irfft(z, n=n, axis=axis)[..., None].astype(x.dtype)
    n = length if length is not None else x.shape[axis]
    out = np.fft.ifft(z, n=n, axis=axis) if inverse else np.fft.fft(z, n=n, axis=axis)
    if onesided:
        out = np.take(out, range(n // 2 + 1), axis=axis)
    return _complex_out(out, x.dtype)


register(
    OpDef(
        "dft",
        _dft_infer,
        _dft_ref,
        attrs={"length": None, "axis": 1, "inverse": False, "onesided": False},
        pattern=Pattern.OPAQUE,
        num_args=(1, 3),
        doc="Discrete Fourier transform along `axis` (counted over the full rank) of a "
        "(re, im) signal, zero-padded or cut to `length`; length and axis may instead be "
        "run-time operands. `onesided` keeps the n//2+1 unique bins (for the inverse it "
        "reads them and returns the real signal).",
    )
)


def _stft_infer(args, attrs):
    x = tensor(args[0], "stft")
    if not is_float(x.dtype) or x.ndim != 3 or x.shape[-1] not in (1, 2):
        raise ShapeError(f"op stft: signal must be float (batch, length, 1 or 2), got {x}")
    window, step_t, length_t = _operand(args, 1), _operand(args, 2), _operand(args, 3)
    for t, what in ((step_t, "frame_step"), (length_t, "frame_length")):
        if t is not None:
            _static_length(tensor(t, "stft", what), "stft", what)
    length: Dim | None = attrs["frame_length"]
    if window is not None:
        length = tensor(window, "stft", "window").shape[0]
    elif length_t is not None:
        length = fresh_var("len")
    if length is None:
        raise ShapeError("op stft: give frame_length or a window")
    bins = length // 2 + 1 if attrs["onesided"] else length
    if step_t is not None or length_t is not None:
        frames: Dim = fresh_var("frames")
    else:
        frames = (x.shape[1] - length) // attrs["frame_step"] + 1
    return TensorType((x.shape[0], frames, bins, 2), x.dtype)


def _stft_ref(x, window=None, step_t=None, length_t=None, *, frame_step, frame_length, onesided):
    step = _scalar(step_t) if step_t is not None else frame_step
    if window is not None:
        n = window.shape[0]
    else:
        n = _scalar(length_t) if length_t is not None else frame_length
    frames = (x.shape[1] - n) // step + 1
    starts = np.arange(frames) * step
    z = _complex_in(x)[:, starts[:, None] + np.arange(n)]
    if window is not None:
        z = z * window
    out = np.fft.fft(z, axis=-1)
    if onesided:
        out = out[..., : n // 2 + 1]
    return _complex_out(out, x.dtype)


register(
    OpDef(
        "stft",
        _stft_infer,
        _stft_ref,
        attrs={"frame_step": 1, "frame_length": None, "onesided": True},
        pattern=Pattern.OPAQUE,
        num_args=(1, 4),
        doc="Short-time Fourier transform of (batch, length, 1|2) signals: frames of "
        "`frame_length` (the window's length when one is given) every `frame_step` samples, "
        "each windowed and transformed; result (batch, frames, bins, 2). Operands: signal, "
        "window, then run-time frame_step and frame_length replacing the attributes.",
    )
)

# Cosine-sum windows: w[i] = sum_k (-1)^k a_k cos(2 pi k i / N).
WINDOWS = {
    "hann": (0.5, 0.5),
    "hamming": (25 / 46, 21 / 46),
    "blackman": (0.42, 0.5, 0.08),
}


def _window_infer(args, attrs):
    if attrs["kind"] not in WINDOWS:
        raise ShapeError(
            f"op window: kind must be one of {', '.join(WINDOWS)}, got {attrs['kind']!r}"
        )
    size_t = _operand(args, 0)
    if size_t is not None:
        _static_length(tensor(size_t, "window", "size"), "window", "size")
        return TensorType((fresh_var("w"),), attrs["dtype"])
    if attrs["size"] is None:
        raise ShapeError("op window: size is required, as an attribute or an operand")
    return TensorType((attrs["size"],), attrs["dtype"])


def _window_ref(size_tensor=None, *, size, kind, periodic, dtype):
    if size_tensor is not None:
        size = _scalar(size_tensor)
    n = size if periodic else size - 1
    i = np.arange(size, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        w = sum((-1) ** k * a * np.cos(2 * np.pi * k * i / n) for k, a in enumerate(WINDOWS[kind]))
    return np.asarray(w).astype(to_numpy(dtype))


register(
    OpDef(
        "window",
        _window_infer,
        _window_ref,
        attrs={"size": None, "kind": "hann", "periodic": True, "dtype": "float32"},
        pattern=Pattern.OPAQUE,
        num_args=(0, 1),
        doc="A hann, hamming or blackman window of `size` points (or a run-time size "
        "operand); `periodic` windows have period `size`, symmetric ones `size - 1`.",
    )
)


MEL_PARAMS = ("num_mel_bins", "dft_length", "sample_rate", "lower_hz", "upper_hz")


def _mel_infer(args, attrs):
    if args:  # every parameter is a run-time scalar
        if len(args) != len(MEL_PARAMS) or any(a is None for a in args):
            raise ShapeError(f"op mel_weight_matrix: expected operands {', '.join(MEL_PARAMS)}")
        return TensorType((fresh_var("bins"), fresh_var("mels")), attrs["dtype"])
    missing = [p for p in MEL_PARAMS if attrs[p] is None]
    if missing:
        raise ShapeError(f"op mel_weight_matrix: attribute(s) {', '.join(missing)} are required")
    return TensorType((attrs["dft_length"] // 2 + 1, attrs["num_mel_bins"]), attrs["dtype"])


def _mel_ref(*operands, dtype, **params):
    if operands:
        params = {p: np.asarray(v).reshape(-1)[0].item() for p, v in zip(MEL_PARAMS, operands)}
    return _mel_matrix(**params).astype(to_numpy(dtype))


def _mel_matrix(num_mel_bins, dft_length, sample_rate, lower_hz, upper_hz):
    """Triangular filters on the mel scale, sampled at the DFT bins.

    Follows the ONNX definition exactly, including its edge points spaced by
    (high - low) / (num_mel_bins + 2) mels and its floor division to bin indices.
    """

    def to_mel(hz):
        return 2595 * np.log1p(hz / 700) / np.log(10)

    step = (to_mel(upper_hz) - to_mel(lower_hz)) / (num_mel_bins + 2)
    mels = np.arange(num_mel_bins + 2) * step + to_mel(lower_hz)
    hz = 700 * np.expm1(mels / 2595 * np.log(10))
    points = ((dft_length + 1) * hz // sample_rate).astype(np.int64)
    out = np.zeros((dft_length // 2 + 1, num_mel_bins))
    for m in range(num_mel_bins):
        lo, mid, hi = (int(p) for p in points[m : m + 3])
        if mid == lo:
            out[mid, m] = 1
        for j in range(lo, mid + 1 if mid > lo else lo):
            out[j, m] = (j - lo) / (mid - lo)
        for j in range(mid, hi):
            out[j, m] = (hi - j) / (hi - mid)
    return out


register(
    OpDef(
        "mel_weight_matrix",
        _mel_infer,
        _mel_ref,
        attrs={**dict.fromkeys(MEL_PARAMS), "dtype": "float32"},
        pattern=Pattern.OPAQUE,
        num_args=(0, 5),
        doc="(dft_length//2+1, num_mel_bins) matrix mapping linear DFT bins to mel bins; "
        "its parameters are attributes, or all five are run-time scalar operands.",
    )
)
