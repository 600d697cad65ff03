"""Signal ops: DFT, STFT, window functions and the mel filter bank.

Lengths, axes and window sizes may come as run-time operands; dimensions that depend on
them are fresh size variables bound when the program runs.
"""

from __future__ import annotations

import math

import numpy as np

from tcc.ir import expr as E
from tcc.ir import te
from tcc.ir.dtype import is_float, to_numpy
from tcc.ir.errors import NoLoopProgram, ShapeError
from tcc.ir.expr import Dim, fresh_var
from tcc.ir.graph import TensorType
from tcc.ir.ops._util import clamp_index, no_loop, operand, scalar_int, static_length
from tcc.ir.ops.registry import OpDef, Pattern, StaticForm, normalize_axis, register, tensor

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
        if operand(args, i) is not None:
            static_length(tensor(args[i], "dft", what), "dft", what)
    irfft = attrs["inverse"] and attrs["onesided"]
    last: Dim = 1 if irfft else 2
    if operand(args, 2) is not None:  # a run-time axis: only an unchanged length is known
        if operand(args, 1) is None and attrs["length"] is None and not attrs["onesided"]:
            return TensorType(x.shape[:-1] + (last,), x.dtype)
        return TensorType(tuple(fresh_var("n") for _ in x.shape[:-1]) + (last,), x.dtype)
    axis = _dft_axis(attrs["axis"], x.ndim)
    n: Dim
    if operand(args, 1) is not None:
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
        length = scalar_int(length_tensor)
    if axis_tensor is not None:
        axis = scalar_int(axis_tensor)
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


def _turned(re, im, j, k, n, sign: float, imaginary: bool):
    """The real (or imaginary) part of (re + i im) e^(sign 2 pi i (j k mod n) / n), in
    float64: the angle reduced in integers first, so it stays exact for long transforms."""
    m = te.cast(j, "int64") * te.cast(k, "int64") % te.cast(n, "int64")
    theta = te.cast(m, "float64") * (2 * math.pi) / te.cast(n, "float64")
    cos, sin = te.cos(theta), te.sin(theta) * sign
    return im * cos + re * sin if imaginary else re * cos - im * sin


def _pairs(shape, real, imag, dtype: str, name: str, scale=lambda v: v):
    """(re, im) pairs along a last axis of 2, from a stage of each part."""
    return te.compute(shape + (2,), lambda *i: te.cast(scale(te.if_then_else(
        te.equal(i[-1], 0), real[i[:-1]], imag[i[:-1]])), dtype), name)


def _dft_compute(x, length_tensor=None, axis_tensor=None, *, length, axis, inverse, onesided):
    """The transform as its defining sum (quadratic along the axis), in float64: each output
    bin sums the input bins it reads, each turned by the angle 2 pi (j k mod n) / n. The
    inverse of a onesided spectrum (irfft) extends it Hermitian-symmetrically: bins other
    than 0 and n/2 count twice and their mirror images' imaginary parts cancel."""
    if length_tensor is not None or axis_tensor is not None:
        raise no_loop("dft", "a run-time length or axis operand")
    axis = _dft_axis(axis, len(x.shape))
    f64, size, complex_in = "float64", x.shape[axis], x.shape[-1] == 2
    irfft = inverse and onesided
    n = length if length is not None else (2 * (size - 1) if irfft else size)
    out_len = n if irfft or not onesided else n // 2 + 1
    used = n // 2 + 1 if irfft else n  # input bins read (fewer present: zero padding)
    spatial = x.shape[:axis] + (out_len,) + x.shape[axis + 1 : -1]
    turn = 1.0 if inverse else -1.0

    def load(i, j, c):
        return te.cast(x[i[:axis] + (j,) + i[axis + 1 :] + (c,)], f64)

    def part(imaginary: bool):
        def body(*i):
            j = te.reduce_axis(size, "j")
            re, im = load(i, j, 0), load(i, j, 1) if complex_in else te.const(0.0, f64)
            value = _turned(re, im, j, i[axis], n, turn, imaginary)
            if irfft:
                edge = te.logical_or(te.equal(j, 0), te.equal(j * 2, n))
                value = te.if_then_else(edge, value, value * 2.0)
            where = None if isinstance(size, int) and isinstance(used, int) and size <= used \
                else te.less(j, used)
            return te.sum(value, axis=[j], where=where)
        return te.compute(spatial, body, "dft_imag" if imaginary else "dft_real")

    scale = (lambda v: v / te.cast(n, f64)) if inverse else (lambda v: v)
    real = part(False)
    if irfft:
        return te.compute(spatial + (1,), lambda *i: te.cast(scale(real[i[:-1]]), x.dtype), "dft")
    return _pairs(spatial, real, part(True), x.dtype, "dft", scale)


register(
    OpDef(
        "dft",
        _dft_infer,
        _dft_ref,
        attrs={"length": None, "axis": 1, "inverse": False, "onesided": False},
        pattern=Pattern.OPAQUE,
        num_args=(1, 3),
        compute=_dft_compute,
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
    window, step_t, length_t = operand(args, 1), operand(args, 2), operand(args, 3)
    for t, what in ((step_t, "frame_step"), (length_t, "frame_length")):
        if t is not None:
            static_length(tensor(t, "stft", what), "stft", what)
    length: Dim | None = attrs["frame_length"]
    if window is not None:
        length = tensor(window, "stft", "window").shape[0]
    elif length_t is not None:
        length = fresh_var("len")
    if length is None:
        raise ShapeError("op stft: give frame_length or a window")
    bins = length // 2 + 1 if attrs["onesided"] else length
    if attrs["bins"] is not None:
        bins = attrs["bins"]
    elif length_t is not None and window is None:  # known when the program runs
        bins = fresh_var("bins")
    if attrs["frames"] is not None:
        frames: Dim = attrs["frames"]
    elif step_t is not None or length_t is not None:
        frames = fresh_var("frames")
    else:
        frames = (x.shape[1] - length) // attrs["frame_step"] + 1
    return TensorType((x.shape[0], frames, bins, 2), x.dtype)


def _stft_ref(x, window=None, step_t=None, length_t=None, *, frame_step, frame_length, onesided,
              frames=None, bins=None):
    step = scalar_int(step_t) if step_t is not None else frame_step
    if window is not None:
        n = window.shape[0]
    else:
        n = scalar_int(length_t) if length_t is not None else frame_length
    frames = (x.shape[1] - n) // step + 1
    starts = np.arange(frames) * step
    z = _complex_in(x)[:, starts[:, None] + np.arange(n)]
    if window is not None:
        z = z * window
    out = np.fft.fft(z, axis=-1)
    if onesided:
        out = out[..., : n // 2 + 1]
    return _complex_out(out, x.dtype)


def _stft_compute(x, window=None, step_t=None, length_t=None, *, frame_step, frame_length,
                  onesided, frames, bins):
    """Each frame's transform as the defining sum in float64 (as dft's loop program)."""
    if step_t is not None or length_t is not None:
        raise no_loop("stft", "a frame step or length not read at run time")
    n = window.shape[0] if window is not None else frame_length
    f64, complex_in = "float64", x.shape[-1] == 2
    if bins is None:
        bins = n // 2 + 1 if onesided else n
    if frames is None:
        frames = (x.shape[1] - n) // frame_step + 1
    shape = (x.shape[0], frames, bins)

    def part(imaginary: bool):
        def body(b, f, k):
            j = te.reduce_axis(n, "j")
            # f * step + j < length holds for every frame; clamped so the bounds proof sees it
            at = clamp_index(f * frame_step + j, x.shape[1])
            re = te.cast(x[b, at, 0], f64)
            im = te.cast(x[b, at, 1], f64) if complex_in else te.const(0.0, f64)
            if window is not None:
                w = te.cast(window[j], f64)
                re, im = re * w, im * w
            return te.sum(_turned(re, im, j, k, n, -1.0, imaginary), axis=[j])
        return te.compute(shape, body, "stft_imag" if imaginary else "stft_real")

    return _pairs(shape, part(False), part(True), x.dtype, "stft")


def _stft_static(types, sizes, out, attrs):
    """STFT with its frame step (and length) read at run time: sizes its kernel takes."""
    x, window = types[0], types[1] if len(types) > 1 else None
    step = sizes[2][0] if 2 in sizes else attrs["frame_step"]
    if window is not None:
        length = window.shape[0]
    else:
        length = sizes[3][0] if 3 in sizes else attrs["frame_length"]
    if length is None:
        raise NoLoopProgram("stft: no frame length")
    checks = [(E.compare("ge", step, 1), "frame_step must be at least 1"),
              (E.Logic("and", E.compare("ge", length, 1), E.compare("le", length, x.shape[1])),
               f"the frame length is outside [1, the signal's length {x.shape[1]}]")]
    count = (x.shape[1] - length) // step + 1
    half = length // 2 + 1 if attrs["onesided"] else length
    # plain sizes for the kernel, bound to the counts
    frames, bins = E.fresh_var("frames"), E.fresh_var("bins")
    return StaticForm("stft", (0, 1), {**attrs, "frame_step": step, "frame_length": length,
                                       "frames": frames, "bins": bins},
                      (x.shape[0], count, half, 2), tuple(checks),
                      binds=((frames, count), (bins, half)))


register(
    OpDef(
        "stft",
        _stft_infer,
        _stft_ref,
        attrs={"frame_step": 1, "frame_length": None, "onesided": True, "frames": None,
               "bins": None},
        pattern=Pattern.OPAQUE,
        num_args=(1, 4),
        compute=_stft_compute,
        shape_operands=(2, 3),
        to_static=_stft_static,
        doc="Short-time Fourier transform of (batch, length, 1|2) signals: frames of "
        "`frame_length` (the window's length when one is given) every `frame_step` samples, "
        "each windowed and transformed; result (batch, frames, bins, 2). Operands: signal, "
        "window, then run-time frame_step and frame_length replacing the attributes. "
        "`frames` and `bins`, when given, are the frame and bin counts (sizes the loop "
        "program takes).",
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
    size_t = operand(args, 0)
    if size_t is not None:
        static_length(tensor(size_t, "window", "size"), "window", "size")
        return TensorType((fresh_var("w"),), attrs["dtype"])
    if attrs["size"] is None:
        raise ShapeError("op window: size is required, as an attribute or an operand")
    return TensorType((attrs["size"],), attrs["dtype"])


def _window_ref(size_tensor=None, *, size, kind, periodic, dtype):
    if size_tensor is not None:
        size = scalar_int(size_tensor)
    n = size if periodic else size - 1
    i = np.arange(size, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        w = sum((-1) ** k * a * np.cos(2 * np.pi * k * i / n) for k, a in enumerate(WINDOWS[kind]))
    return np.asarray(w).astype(to_numpy(dtype))


def _window_compute(size_tensor=None, *, size, kind, periodic, dtype):
    """The cosine sum in float64, as the reference computes it."""
    if size_tensor is not None or size is None:
        raise no_loop("window", "a size not read at run time")
    f64 = "float64"
    period = te.cast(size if periodic else size - 1, f64)

    def point(i):
        angle = te.cast(i, f64) * (2 * math.pi) / period
        total = None
        for k, a in enumerate(WINDOWS[kind]):
            term = te.const(a, f64) if k == 0 else te.cos(angle * float(k)) * ((-1) ** k * a)
            total = term if total is None else total + term
        return te.cast(total, dtype)

    return te.compute((size,), point, "window")


def _window_static(types, sizes, out, attrs):
    (size,) = sizes[0]
    return StaticForm("window", (), {**attrs, "size": size}, (size,),
                      ((E.compare("ge", size, 0), "the window size is negative"),))


register(
    OpDef(
        "window",
        _window_infer,
        _window_ref,
        attrs={"size": None, "kind": "hann", "periodic": True, "dtype": "float32"},
        pattern=Pattern.OPAQUE,
        num_args=(0, 1),
        compute=_window_compute,
        shape_operands=(0,),
        to_static=_window_static,
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
