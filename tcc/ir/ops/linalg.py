"""Linear-algebra ops: matmul, gemm, einsum, attention, quantization.

Contractions (matmul, gemm, einsum and their integer/quantized forms) are OUT_FUSABLE:
each lowers to one reduction kernel whose elementwise epilogue may fuse. Attention and the
recurrent ops are OPAQUE: one record each, so a backend can lower them to one fused kernel
instead of a chain of small ones.
"""

from __future__ import annotations

import string

import numpy as np

from tcc.ir.dtype import FLOAT8_DTYPES, is_float, round_to_bfloat16, to_low_precision, to_numpy
from tcc.ir.errors import ShapeError
from tcc.ir.expr import Dim
from tcc.ir.graph import TensorType
from tcc.ir.ops.registry import (
    REQUIRED,
    OpDef,
    Pattern,
    broadcast_shapes,
    normalize_axis,
    register,
    same_dtype,
    tensor,
    tuple_type,
)

# ---------------------------------------------------------------------------------------------
# shape helpers


def _check_dim(a: Dim, b: Dim, op: str, what: str) -> Dim:
    """`a`, after checking it can equal `b` (symbolic dims are trusted to match at run time)."""
    if isinstance(a, int) and isinstance(b, int) and a != b:
        raise ShapeError(f"op {op}: {what} must match, got {a} and {b}")
    return a if isinstance(a, int) or not isinstance(b, int) else b


def _matmul_shape(a: TensorType, b: TensorType, op: str) -> tuple[Dim, ...]:
    """Result shape of numpy matmul: 1-D operands are promoted then squeezed; batch dims
    broadcast."""
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"op {op}: operands must have rank >= 1, got ranks {a.ndim} and {b.ndim}")
    a_shape = a.shape if a.ndim > 1 else (1, a.shape[0])
    b_shape = b.shape if b.ndim > 1 else (b.shape[0], 1)
    _check_dim(a_shape[-1], b_shape[-2], op, "the contracted dimensions")
    batch = broadcast_shapes([a_shape[:-2], b_shape[:-2]], op)
    rows = (a_shape[-2],) if a.ndim > 1 else ()
    cols = (b_shape[-1],) if b.ndim > 1 else ()
    return batch + rows + cols


def _unidirectional(shape, target, op: str, what: str) -> None:
    """Check `shape` broadcasts to `target` without changing it (ONNX unidirectional)."""
    if len(shape) > len(target):
        raise ShapeError(
            f"op {op}: {what} of rank {len(shape)} does not broadcast to rank {len(target)}"
        )
    for d, t in zip(reversed(shape), reversed(target)):
        if not (isinstance(d, int) and d == 1):
            _check_dim(d, t, op, f"{what} dimensions")


# ---------------------------------------------------------------------------------------------
# matmul, gemm, einsum, det


def _matmul_infer(args, attrs):
    a, b = tensor(args[0], "matmul"), tensor(args[1], "matmul")
    return TensorType(_matmul_shape(a, b, "matmul"), same_dtype([a, b], "matmul"))


register(
    OpDef(
        "matmul",
        _matmul_infer,
        lambda a, b: np.matmul(a, b).astype(a.dtype, copy=False),
        pattern=Pattern.OUT_FUSABLE,
        num_args=(2, 2),
        doc="numpy matmul: batched matrix product with broadcast batch dims; 1-D operands "
        "are treated as a row (left) or column (right) vector whose dim is then dropped.",
    )
)


def _gemm_infer(args, attrs):
    a, b = tensor(args[0], "gemm", "A"), tensor(args[1], "gemm", "B")
    dtype = same_dtype([a, b], "gemm")
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeError(f"op gemm: A and B must be 2-D, got ranks {a.ndim} and {b.ndim}")
    m, k = a.shape[::-1] if attrs["trans_a"] else a.shape
    k2, n = b.shape[::-1] if attrs["trans_b"] else b.shape
    _check_dim(k, k2, "gemm", "the contracted dimensions of A and B")
    if args[2] is not None:
        c = tensor(args[2], "gemm", "C")
        same_dtype([a, c], "gemm")
        _unidirectional(c.shape, (m, n), "gemm", "C")
    return TensorType((m, n), dtype)


def _gemm_ref(a, b, c, alpha, beta, trans_a, trans_b):
    out = np.matmul(a.T if trans_a else a, b.T if trans_b else b) * alpha
    if c is not None and beta != 0:
        out = out + c * beta
    return out.astype(a.dtype, copy=False)


register(
    OpDef(
        "gemm",
        _gemm_infer,
        _gemm_ref,
        attrs={"alpha": 1.0, "beta": 1.0, "trans_a": False, "trans_b": False},
        pattern=Pattern.OUT_FUSABLE,
        num_args=(2, 3),
        doc="alpha * op(A) @ op(B) + beta * C, op = optional transpose; 2-D A and B, C "
        "(optional) broadcasts to the (M, N) result.",
    )
)


def parse_einsum(equation: str, ranks: list[int]) -> tuple[list[str], str, str]:
    """(per-operand subscripts, output subscripts, ellipsis letters) of an einsum equation.

    Each `...` becomes letters the equation does not use, one per broadcast dim,
    right-aligned across operands; an implicit output is made explicit (numpy rules: the
    ellipsis dims, then the letters used once, sorted)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ShapeError(
            f"op einsum: equation {equation!r} names {len(terms)} operands, got {len(ranks)}"
        )
    ell_rank = 0
    for t, r in zip(terms, ranks):
        if not t.replace("...", "").isalpha() and t.replace("...", ""):
            raise ShapeError(f"op einsum: bad subscripts {t!r} in {equation!r}")
        named = len(t.replace("...", ""))
        if ("..." in t and named > r) or ("..." not in t and named != r):
            raise ShapeError(f"op einsum: subscripts {t!r} do not match an operand of rank {r}")
        if "..." in t:
            ell_rank = max(ell_rank, r - named)
    free = [c for c in string.ascii_letters if c not in eq]
    ell = "".join(free[:ell_rank])
    expanded = [
        t.replace("...", ell[ell_rank - (r - len(t) + 3) :]) if "..." in t else t
        for t, r in zip(terms, ranks)
    ]
    if arrow:
        out = rhs.replace("...", ell)
    else:
        letters = "".join(expanded)
        out = ell + "".join(
            sorted(c for c in set(letters) if c not in ell and letters.count(c) == 1)
        )
    return expanded, out, ell


def _einsum_infer(args, attrs):
    ts = [tensor(t, "einsum") for t in args]
    dtype = same_dtype(ts, "einsum")
    terms, out, ell = parse_einsum(attrs["equation"], [t.ndim for t in ts])
    sizes: dict[str, Dim] = {}
    for term, t in zip(terms, ts):
        for c, d in zip(term, t.shape):
            broadcast_one = c in ell and isinstance(d, int) and d == 1
            if c not in sizes or (c in ell and isinstance(sizes[c], int) and sizes[c] == 1):
                sizes[c] = d
            elif not broadcast_one:
                sizes[c] = _check_dim(sizes[c], d, "einsum", f"dimensions labelled {c!r}")
    missing = [c for c in out if c not in sizes]
    if missing:
        raise ShapeError(f"op einsum: output label {missing[0]!r} appears in no operand")
    return TensorType(tuple(sizes[c] for c in out), dtype)


def _einsum_ref(*arrays, equation):
    terms, out, _ = parse_einsum(equation, [a.ndim for a in arrays])
    spec = ",".join(terms) + "->" + out
    return np.asarray(np.einsum(spec, *arrays)).astype(arrays[0].dtype, copy=False)


register(
    OpDef(
        "einsum",
        _einsum_infer,
        _einsum_ref,
        attrs={"equation": REQUIRED},
        pattern=Pattern.OUT_FUSABLE,
        num_args=(1, None),
        doc="Einstein summation over the operands as `equation` (numpy syntax, with `...`).",
    )
)


def _det_infer(args, attrs):
    x = tensor(args[0], "det")
    if x.ndim < 2:
        raise ShapeError(f"op det: input must have rank >= 2, got {x.ndim}")
    _check_dim(x.shape[-2], x.shape[-1], "det", "the last two dimensions (square matrices)")
    if not is_float(x.dtype):
        raise ShapeError(f"op det: input must be floating point, got {x.dtype}")
    return TensorType(x.shape[:-2], x.dtype)


register(
    OpDef(
        "det",
        _det_infer,
        lambda x: np.asarray(np.linalg.det(x)).astype(x.dtype),
        pattern=Pattern.OPAQUE,
        doc="Determinant of each square matrix in the last two dims.",
    )
)

# ---------------------------------------------------------------------------------------------
# quantization

_QUANT_RANGE = {
    "uint8": (0, 255),
    "int8": (-128, 127),
    "uint16": (0, 65535),
    "int16": (-32768, 32767),
    "int32": (-(2**31), 2**31 - 1),
    "uint4": (0, 15),
    "int4": (-8, 7),
    "uint2": (0, 3),
    "int2": (-2, 1),
}
# Float types values are quantized to by rounding to nearest even; their saturation is the
# conversion's (float4 has no inf or NaN, so it always saturates).
_QUANT_FLOATS = FLOAT8_DTYPES | {"float4_e2m1fn"}
QUANT_DTYPES = (*_QUANT_RANGE, *sorted(_QUANT_FLOATS))


def _check_quantized(dtype: str, op: str, what: str) -> None:
    if dtype not in QUANT_DTYPES:
        raise ShapeError(
            f"op {op}: unsupported {what} dtype {dtype}; expected one of {', '.join(QUANT_DTYPES)}"
        )


def _check_quant_params(x: TensorType, p: TensorType, attrs, op: str, what: str) -> None:
    """`p` (scale or zero point) is per tensor (one element), per axis (1-D along `axis`) or
    blocked (x's shape with the axis dim divided by block_size, rounded up)."""
    if all(isinstance(d, int) and d == 1 for d in p.shape):
        return
    axis = normalize_axis(attrs["axis"], x.ndim, op)
    bs = attrs["block_size"]
    if not bs:
        if p.ndim != 1:
            raise ShapeError(f"op {op}: {what} must be a scalar or 1-D, got shape {p.shape}")
        _check_dim(p.shape[0], x.shape[axis], op, f"{what} length and the input's axis {axis}")
        return
    if p.ndim != x.ndim:
        raise ShapeError(f"op {op}: blocked {what} must have rank {x.ndim}, got {p.ndim}")
    for i, (d, xd) in enumerate(zip(p.shape, x.shape)):
        want = (xd + bs - 1) // bs if i == axis else xd
        _check_dim(d, want, op, f"{what} dimension {i} (block_size {bs})")


def expand_quant_param(p: np.ndarray, shape: tuple, axis: int, block_size: int) -> np.ndarray:
    """Make a scale/zero point broadcastable to the input: per tensor as is, per axis as a
    1-D along `axis`, blocked by repeating each entry `block_size` times along `axis`."""
    if p.size == 1:
        return p.reshape(())
    axis = axis % len(shape)
    if not block_size:
        return p.reshape([-1 if i == axis else 1 for i in range(len(shape))])
    return np.repeat(p, block_size, axis=axis).take(range(shape[axis]), axis=axis)


def _quantize_infer(args, attrs):
    x, scale = tensor(args[0], "quantize_linear", "x"), tensor(args[1], "quantize_linear", "scale")
    out = attrs["out_dtype"]
    _check_quantized(out, "quantize_linear", "output")
    _check_quant_params(x, scale, attrs, "quantize_linear", "scale")
    if args[2] is not None:
        zp = tensor(args[2], "quantize_linear", "zero point")
        if zp.dtype != out:
            raise ShapeError(
                f"op quantize_linear: zero point dtype {zp.dtype} differs from the output dtype {out}"
            )
        _check_quant_params(x, zp, attrs, "quantize_linear", "zero point")
    return TensorType(x.shape, out)


def _quantize_ref(x, scale, zero_point, axis, block_size, saturate, out_dtype, precision):
    scale = expand_quant_param(scale, x.shape, axis, block_size)
    if precision is not None:
        x, scale = x.astype(to_numpy(precision)), scale.astype(to_numpy(precision))
    y = x / scale
    zp = None if zero_point is None else expand_quant_param(zero_point, x.shape, axis, block_size)
    if out_dtype in _QUANT_FLOATS:
        return to_low_precision(y if zp is None else y + zp.astype(y.dtype), out_dtype, saturate)
    q = np.rint(y).astype(np.int64)
    if zp is not None:
        q = q + zp.astype(np.int64)
    lo, hi = _QUANT_RANGE[out_dtype]
    return np.clip(q, lo, hi).astype(to_numpy(out_dtype))


register(
    OpDef(
        "quantize_linear",
        _quantize_infer,
        _quantize_ref,
        attrs={
            "axis": 1,
            "block_size": 0,
            "saturate": True,
            "out_dtype": "uint8",
            "precision": None,
        },
        pattern=Pattern.INJECTIVE,
        num_args=(2, 3),
        doc="saturate(round_half_even(x / scale) + zero_point) in `out_dtype`; scale and "
        "zero point per tensor, per `axis`, or per block of `block_size` along `axis`; "
        "`precision` (a float dtype) is the type the division runs in. Float8 and float4 "
        "outputs round x / scale + zero_point to nearest even; `saturate` (float8 only) "
        "clamps overflow to the largest finite value instead of inf/NaN.",
    )
)


def _dequantize_infer(args, attrs):
    x, scale = (
        tensor(args[0], "dequantize_linear", "x"),
        tensor(args[1], "dequantize_linear", "scale"),
    )
    if not is_float(scale.dtype):
        raise ShapeError(f"op dequantize_linear: scale must be floating point, got {scale.dtype}")
    _check_quantized(x.dtype, "dequantize_linear", "input")
    _check_quant_params(x, scale, attrs, "dequantize_linear", "scale")
    if args[2] is not None:
        zp = tensor(args[2], "dequantize_linear", "zero point")
        if zp.dtype != x.dtype:
            raise ShapeError(
                f"op dequantize_linear: zero point dtype {zp.dtype} differs from the input dtype {x.dtype}"
            )
        _check_quant_params(x, zp, attrs, "dequantize_linear", "zero point")
    return TensorType(x.shape, attrs["out_dtype"] or scale.dtype)


def _dequantize_ref(x, scale, zero_point, axis, block_size, out_dtype):
    dx = x.astype(np.float32)
    if zero_point is not None:
        dx = dx - expand_quant_param(zero_point, x.shape, axis, block_size)
    y = dx * expand_quant_param(scale, x.shape, axis, block_size)
    return y.astype(to_numpy(out_dtype) if out_dtype else scale.dtype)


register(
    OpDef(
        "dequantize_linear",
        _dequantize_infer,
        _dequantize_ref,
        attrs={"axis": 1, "block_size": 0, "out_dtype": None},
        pattern=Pattern.INJECTIVE,
        num_args=(2, 3),
        doc="(x - zero_point) * scale, computed in float32, in `out_dtype` (default: the "
        "scale's dtype); scale and zero point laid out as for quantize_linear.",
    )
)


def _dynamic_quantize_infer(args, attrs):
    x = tensor(args[0], "dynamic_quantize_linear")
    if x.dtype != "float32":
        raise ShapeError(f"op dynamic_quantize_linear: input must be float32, got {x.dtype}")
    return tuple_type(
        TensorType(x.shape, "uint8"), TensorType((), "float32"), TensorType((), "uint8")
    )


def _dynamic_quantize_ref(x):
    hi = np.float32(max(0.0, float(x.max()))) if x.size else np.float32(0)
    lo = np.float32(min(0.0, float(x.min()))) if x.size else np.float32(0)
    scale = np.float32(1.0 if hi == lo else hi - lo) / np.float32(255)
    zp = np.rint(np.clip(np.float32(0) - lo / scale, 0, 255))
    y = np.clip(np.rint(x / scale) + zp, 0, 255)
    return y.astype(np.uint8), np.array(scale, np.float32), np.array(zp, np.uint8)


register(
    OpDef(
        "dynamic_quantize_linear",
        _dynamic_quantize_infer,
        _dynamic_quantize_ref,
        pattern=Pattern.OPAQUE,
        doc="(y, scale, zero_point): uint8 quantization of x over its range widened to include 0.",
    )
)


def _int_matmul_infer(op: str, a_idx: int, b_idx: int, zps: tuple[int, int]):
    def infer(args, attrs):
        a, b = tensor(args[a_idx], op, "A"), tensor(args[b_idx], op, "B")
        for t, z in ((a, zps[0]), (b, zps[1])):
            if t.dtype not in ("int8", "uint8"):
                raise ShapeError(f"op {op}: operands must be int8 or uint8, got {t.dtype}")
            if z < len(args) and args[z] is not None and tensor(args[z], op).dtype != t.dtype:
                raise ShapeError(
                    f"op {op}: zero point dtype {args[z].dtype} differs from {t.dtype}"
                )
        shape = _matmul_shape(a, b, op)
        if op == "matmul_integer":
            return TensorType(shape, "int32")
        return TensorType(shape, tensor(args[7], op, "y_zero_point").dtype)

    return infer


def _row_param(p: np.ndarray, a: np.ndarray) -> np.ndarray:
    """A per-row quantization parameter of A (1-D of length M) as a column to broadcast."""
    return p.reshape(-1, 1) if p.ndim == 1 and p.size > 1 and a.ndim > 1 else p


def _centered(x: np.ndarray, zp: np.ndarray | None, per_row: bool) -> np.ndarray:
    x32 = x.astype(np.int32)
    if zp is None:
        return x32
    return x32 - (_row_param(zp, x) if per_row else zp).astype(np.int32)


register(
    OpDef(
        "matmul_integer",
        _int_matmul_infer("matmul_integer", 0, 1, (2, 3)),
        lambda a, b, a_zp=None, b_zp=None: np.matmul(
            _centered(a, a_zp, True), _centered(b, b_zp, False)
        ),
        pattern=Pattern.OUT_FUSABLE,
        num_args=(2, 4),
        doc="int32 matmul of (A - a_zero_point) and (B - b_zero_point); A's zero point per "
        "tensor or per row, B's per tensor or per column.",
    )
)


def _qlinear_matmul_ref(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp):
    acc = np.matmul(_centered(a, a_zp, True), _centered(b, b_zp, False))
    d = acc * (_row_param(a_scale, a) * b_scale / y_scale) + y_zp
    lo, hi = _QUANT_RANGE[y_zp.dtype.name]
    return np.clip(np.rint(d), lo, hi).astype(y_zp.dtype)


register(
    OpDef(
        "qlinear_matmul",
        _int_matmul_infer("qlinear_matmul", 0, 3, (2, 5)),
        _qlinear_matmul_ref,
        pattern=Pattern.OUT_FUSABLE,
        num_args=(8, 8),
        doc="Quantized matmul: operands (a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp); "
        "the int32 product is requantized to y's scale and zero point with saturation.",
    )
)

# ---------------------------------------------------------------------------------------------
# attention


def _heads(t: TensorType, heads, op: str, what: str) -> tuple[Dim, Dim, Dim, Dim]:
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


def _attention_infer(args, attrs):
    op = "attention"
    q, k, v = (tensor(args[i], op, n) for i, n in enumerate(("Q", "K", "V")))
    if not q.ndim == k.ndim == v.ndim:
        raise ShapeError(
            f"op {op}: Q, K and V must have the same rank, got {q.ndim}, {k.ndim}, {v.ndim}"
        )
    b, hq, sq, dh = _heads(q, attrs["q_num_heads"], op, "Q")
    _, hk, skv, dk = _heads(k, attrs["kv_num_heads"], op, "K")
    _, hv, _, dv = _heads(v, attrs["kv_num_heads"], op, "V")
    _check_dim(dh, dk, op, "Q and K head sizes")
    _check_dim(hk, hv, op, "K and V head counts")
    _gqa_heads(hq, hk, op)
    past = args[4] if len(args) > 4 else None
    total = skv
    if past is not None:
        pk = tensor(past, op, "past_key")
        if pk.ndim != 4:
            raise ShapeError(f"op {op}: past_key must be 4-D, got rank {pk.ndim}")
        total = pk.shape[2] + skv
    if len(args) > 3 and args[3] is not None and tensor(args[3], op, "attn_mask").ndim > 4:
        raise ShapeError(f"op {op}: attn_mask must have rank <= 4, got {args[3].ndim}")
    y = (b, hq, sq, dv) if q.ndim == 4 else (b, sq, hq * dv)
    outs = [
        TensorType(y, q.dtype),
        TensorType((b, hk, total, dh), k.dtype),
        TensorType((b, hk, total, dv), v.dtype),
        TensorType((b, hq, sq, total), q.dtype),
    ]
    return tuple_type(*outs[: attrs["num_outputs"]])


def _split_heads(x: np.ndarray, heads) -> np.ndarray:
    if x.ndim == 4:
        return x
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def _position_bias(allowed: np.ndarray, dtype) -> np.ndarray:
    """Additive bias: 0 where attending is allowed, -inf elsewhere."""
    return np.where(allowed, dtype.type(0), dtype.type(-np.inf))


def _frontier(sq: int, skv: int, offset) -> np.ndarray:
    """(absolute query position) - (key position) for each (query, key), shape (q, kv) or
    (batch, 1, q, kv) for a per-batch offset."""
    rel = np.arange(sq).reshape(-1, 1) - np.arange(skv).reshape(1, -1)
    if np.ndim(offset) == 0:
        return rel + int(offset)
    return rel + np.reshape(offset, (-1, 1, 1, 1))


def _attention_bias(mask, dtype, sq, skv, offset, nonpad, is_causal, windows):
    """The additive bias (broadcastable to (batch, heads, q, kv)) combining the mask, the
    causal frontier, the sliding window and the key padding, in the order ONNX specifies
    (so -inf and the float mask combine exactly as the reference does)."""
    if mask is not None and mask.shape[-1] < skv:
        pad = [(0, 0)] * (mask.ndim - 1) + [(0, skv - mask.shape[-1])]
        mask = np.pad(mask, pad, constant_values=False if mask.dtype == np.bool_ else -np.inf)
    if mask is not None and mask.dtype == np.bool_:
        mask = _position_bias(mask, dtype)
    bias = np.zeros((sq, skv), dtype) if mask is None else mask
    left, right = windows
    if is_causal:
        if left >= 0 or right >= 0:
            bias = np.zeros((sq, skv), dtype) + bias
        bias = bias + _position_bias(_frontier(sq, skv, offset) >= 0, dtype)
    elif mask is not None:
        bias = np.zeros((sq, skv), dtype) + bias
    if left >= 0 or right >= 0:
        diff = _frontier(sq, skv, offset)
        allowed = np.ones(diff.shape, bool)
        if left >= 0:
            allowed &= diff <= left
        if right >= 0:
            allowed &= -diff <= right
        bias = np.zeros((sq, skv), dtype) + bias + _position_bias(allowed, dtype)
    if nonpad is not None:
        keep = np.arange(skv).reshape(1, -1) < np.reshape(nonpad, (-1, 1))
        bias = bias + _position_bias(keep, dtype).astype(bias.dtype).reshape(-1, 1, 1, skv)
    return bias


def _no_rounding(x):
    return x


def _softmax_rows(x: np.ndarray, rnd=_no_rounding) -> np.ndarray:
    """Softmax over the last axis; a row that is all -inf gives zeros, not NaN. `rnd`
    rounds each intermediate (the row sum accumulates left to right, rounding each step)."""
    m = x.max(axis=-1, keepdims=True)
    e = rnd(np.exp(rnd(x - np.where(np.isneginf(m), x.dtype.type(0), m))))
    if rnd is _no_rounding:
        s = e.sum(axis=-1, keepdims=True)
    else:
        s = np.zeros_like(e[..., :1])
        for j in range(e.shape[-1]):
            s = rnd(s + e[..., j : j + 1])
    return rnd(e / np.where(s == 0, x.dtype.type(1), s))


def _attention_ref(
    q, k, v, mask=None, past_key=None, past_value=None, nonpad=None, *, scale, is_causal,
    q_num_heads, kv_num_heads, softcap, qk_matmul_output_mode, softmax_dtype,
    left_window_size, right_window_size, num_outputs, bfloat16,
):  # fmt: skip
    rank3, dt = q.ndim == 3, q.dtype
    # bfloat16 values are held as float32; ONNX computes each step in bfloat16.
    rnd = round_to_bfloat16 if bfloat16 else _no_rounding
    q, k, v = (
        _split_heads(q, q_num_heads),
        _split_heads(k, kv_num_heads),
        _split_heads(v, kv_num_heads),
    )
    if past_key is not None:
        k = np.concatenate([past_key, k], axis=2)
        v = np.concatenate([past_value, v], axis=2)
    present_k, present_v = k, v
    sq, skv = q.shape[2], k.shape[2]
    if past_key is not None:
        offset = past_key.shape[2]
    elif nonpad is not None:
        offset = np.reshape(nonpad, (-1,)) - sq
    else:
        offset = 0
    windows = (left_window_size, right_window_size)
    bias = _attention_bias(mask, dt, sq, skv, offset, nonpad, is_causal, windows)
    # Scale both operands by sqrt(scale), in the input dtype, to keep the product in range.
    s = rnd(dt.type(np.sqrt(scale if scale is not None else 1 / np.sqrt(q.shape[3]))))
    reps = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, reps, axis=1), np.repeat(v, reps, axis=1)
    logits = rnd(np.matmul(rnd(q * s), rnd(np.swapaxes(k, -1, -2) * s)).astype(dt, copy=False))
    if softcap > 0:
        logits = rnd(rnd(np.tanh(rnd(logits / softcap))) * softcap)
    scores = rnd(logits + bias)
    qk = scores if qk_matmul_output_mode == 2 else logits
    if softmax_dtype is not None:
        scores = scores.astype(to_numpy(softmax_dtype))
    probs = _softmax_rows(scores, rnd if softmax_dtype is None else _no_rounding)
    # A query with no attendable key (decided on the bias, not on possibly-NaN logits)
    # gives a zero row.
    probs = np.where(np.isneginf(bias.max(axis=-1, keepdims=True)), probs.dtype.type(0), probs)
    if qk_matmul_output_mode == 3:
        qk = probs
    y = rnd(np.matmul(probs.astype(dt), v).astype(dt, copy=False))
    if rank3:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    outs = (y, present_k, present_v, np.broadcast_to(qk, q.shape[:3] + (skv,)).astype(dt))
    return outs[:num_outputs]


register(
    OpDef(
        "attention",
        _attention_infer,
        _attention_ref,
        attrs={
            "scale": None,
            "is_causal": False,
            "q_num_heads": None,
            "kv_num_heads": None,
            "softcap": 0.0,
            "qk_matmul_output_mode": 0,
            "softmax_dtype": None,
            "left_window_size": -1,
            "right_window_size": -1,
            "num_outputs": 1,
            "bfloat16": False,
        },
        pattern=Pattern.OPAQUE,
        num_args=(3, 7),
        doc="Scaled dot-product attention as ONNX Attention (opset 23-25). Operands: Q, K, "
        "V, attn_mask, past_key, past_value, nonpad_kv_seqlen (the last four optional). "
        "Returns a tuple of the first `num_outputs` of (Y, present_key, present_value, "
        "qk_matmul_output). `bfloat16` marks bfloat16 operands (held as float32): every "
        "step is then rounded to bfloat16, as ONNX specifies.",
    )
)


def _gqa_heads(hq: Dim, hk: Dim, op: str) -> None:
    if isinstance(hq, int) and isinstance(hk, int) and hq % hk:
        raise ShapeError(f"op {op}: {hq} query heads are not a multiple of {hk} key/value heads")


def _scores_infer(args, attrs):
    op = "attention_scores"
    q, k = tensor(args[0], op, "Q"), tensor(args[1], op, "K")
    if q.ndim != 4 or k.ndim != 4:
        raise ShapeError(f"op {op}: Q and K must be 4-D, got ranks {q.ndim} and {k.ndim}")
    same_dtype([q, k], op)
    _check_dim(q.shape[3], k.shape[3], op, "Q and K head sizes")
    _gqa_heads(q.shape[1], k.shape[1], op)
    return TensorType(q.shape[:3] + (k.shape[2],), attrs["out_dtype"] or q.dtype)


def _scores_ref(q, k, scale, out_dtype):
    s = np.asarray(
        np.sqrt(np.float32(scale if scale is not None else 1 / np.sqrt(q.shape[3]))), q.dtype
    )
    k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)
    scores = np.matmul(q * s, np.swapaxes(k * s, -1, -2))
    return scores.astype(to_numpy(out_dtype) if out_dtype else q.dtype)


register(
    OpDef(
        "attention_scores",
        _scores_infer,
        _scores_ref,
        attrs={"scale": None, "out_dtype": None},
        pattern=Pattern.OUT_FUSABLE,
        num_args=(2, 2),
        doc="Q @ K^T * scale (default 1/sqrt(head_size)) for (batch, heads, seq, head) "
        "operands, each scaled by sqrt(scale) in Q's dtype; K's heads are repeated to Q's "
        "(grouped-query attention). The result is cast to `out_dtype` (default Q's).",
    )
)


def _values_infer(args, attrs):
    op = "attention_values"
    p, v = tensor(args[0], op, "probs"), tensor(args[1], op, "V")
    if p.ndim != 4 or v.ndim != 4:
        raise ShapeError(f"op {op}: probs and V must be 4-D, got ranks {p.ndim} and {v.ndim}")
    _check_dim(p.shape[3], v.shape[2], op, "probs keys and V sequence length")
    _gqa_heads(p.shape[1], v.shape[1], op)
    return TensorType(p.shape[:3] + (v.shape[3],), v.dtype)


def _values_ref(p, v):
    aligned = np.repeat(v, p.shape[1] // v.shape[1], axis=1).astype(p.dtype)
    return np.matmul(p, aligned).astype(v.dtype)


register(
    OpDef(
        "attention_values",
        _values_infer,
        _values_ref,
        pattern=Pattern.OUT_FUSABLE,
        num_args=(2, 2),
        doc="probs @ V in probs' dtype, V's heads repeated to probs' (grouped-query "
        "attention); the result has V's dtype.",
    )
)


def _rotary_infer(args, attrs):
    op = "rotary_embedding"
    x, cos, sin = (
        tensor(args[i], op, n) for i, n in enumerate(("input", "cos_cache", "sin_cache"))
    )
    same_dtype([x, cos, sin], op)
    head = _heads(x, attrs["num_heads"], op, "input")[3]
    rot = attrs["rotary_embedding_dim"] or head
    want_cache = 2 if len(args) > 3 and args[3] is not None else 3
    if cos.ndim != want_cache or sin.ndim != want_cache:
        raise ShapeError(
            f"op {op}: cos/sin caches must be {want_cache}-D, got {cos.ndim}-D and {sin.ndim}-D"
        )
    _check_dim(cos.shape[-1], rot // 2, op, "cos_cache last dimension and rotary_embedding_dim / 2")
    return x


def _rotary_ref(x, cos, sin, position_ids=None, *, interleaved, rotary_embedding_dim, num_heads):
    shape = x.shape
    # Work in (batch, seq, heads, head_size).
    x = x.transpose(0, 2, 1, 3) if x.ndim == 4 else x.reshape(shape[0], shape[1], num_heads, -1)
    rot = rotary_embedding_dim or x.shape[3]
    if position_ids is not None:
        cos, sin = cos[position_ids], sin[position_ids]
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    xr = x[..., :rot]
    x1, x2 = (
        (xr[..., 0::2], xr[..., 1::2])
        if interleaved
        else (xr[..., : rot // 2], xr[..., rot // 2 :])
    )
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    rotated = (
        np.stack([real, imag], -1).reshape(xr.shape)
        if interleaved
        else np.concatenate([real, imag], -1)
    )
    out = np.concatenate([rotated, x[..., rot:]], axis=-1)
    return out.reshape(shape) if len(shape) == 3 else out.transpose(0, 2, 1, 3)


register(
    OpDef(
        "rotary_embedding",
        _rotary_infer,
        _rotary_ref,
        attrs={"interleaved": False, "rotary_embedding_dim": 0, "num_heads": 0},
        pattern=Pattern.INJECTIVE,
        num_args=(3, 4),
        doc="Rotary position embedding (RoPE) of a (batch, heads, seq, head) or (batch, seq, "
        "hidden) input; cos/sin caches indexed by position_ids (or already per position).",
    )
)


def _linear_attention_infer(args, attrs):
    op = "linear_attention"
    q, k, v = (tensor(args[i], op, n) for i, n in enumerate(("query", "key", "value")))
    if not q.ndim == k.ndim == v.ndim == 3:
        raise ShapeError(f"op {op}: query, key and value must be 3-D")
    hq, hk = attrs["q_num_heads"], attrs["kv_num_heads"]
    if hq <= 0 or hk <= 0 or hq % hk:
        raise ShapeError(
            f"op {op}: q_num_heads {hq} must be a positive multiple of kv_num_heads {hk}"
        )
    b, _, _, dk = _heads(q, hq, op, "query")
    dv = _heads(v, hk, op, "value")[3]
    gated, delta = attrs["update_rule"] in ("gated", "gated_delta"), "delta" in attrs["update_rule"]
    if (args[4] is not None if len(args) > 4 else False) != gated:
        raise ShapeError(
            f"op {op}: update rule {attrs['update_rule']!r} {'needs' if gated else 'forbids'} decay"
        )
    if (args[5] is not None if len(args) > 5 else False) != delta:
        raise ShapeError(
            f"op {op}: update rule {attrs['update_rule']!r} {'needs' if delta else 'forbids'} beta"
        )
    state_dtype = tensor(args[3], op).dtype if len(args) > 3 and args[3] is not None else q.dtype
    return tuple_type(
        TensorType((b, q.shape[1], hq * dv), q.dtype), TensorType((b, hk, dk, dv), state_dtype)
    )


def _per_head(x: np.ndarray, heads: int) -> np.ndarray:
    """(batch, T, heads * d) -> (batch, heads, T, d) in float32."""
    b, t, _ = x.shape
    return x.reshape(b, t, heads, -1).transpose(0, 2, 1, 3).astype(np.float32)


def _linear_attention_ref(
    q, k, v, past=None, decay=None, beta=None, *, q_num_heads, kv_num_heads, scale, update_rule
):
    b, t, _ = q.shape
    q4, k4, v4 = (
        _per_head(x, h) for x, h in ((q, q_num_heads), (k, kv_num_heads), (v, kv_num_heads))
    )
    dk, dv = q4.shape[3], v4.shape[3]
    g = None if decay is None else _per_head(decay, kv_num_heads)  # per key dim or per head
    beta4 = None if beta is None else _per_head(beta, beta.shape[2])  # per head or shared
    state = (
        np.zeros((b, kv_num_heads, dk, dv), np.float32) if past is None else past.astype(np.float32)
    )
    scale = scale or 1.0 / np.sqrt(dk)
    out = np.zeros((b, q_num_heads, t, dv), np.float32)
    group = q_num_heads // kv_num_heads
    for i in range(t):
        k_t, v_t = k4[:, :, i], v4[:, :, i]
        if g is not None:
            state = state * np.exp(g[:, :, i])[..., None]
        if beta4 is not None:
            v_t = beta4[:, :, i] * (v_t - np.einsum("bhdm,bhd->bhm", state, k_t))
        state = state + k_t[..., :, None] * v_t[..., None, :]
        out[:, :, i] = scale * np.einsum(
            "bhd,bhdm->bhm", q4[:, :, i], np.repeat(state, group, axis=1)
        )
    y = out.transpose(0, 2, 1, 3).reshape(b, t, q_num_heads * dv).astype(q.dtype)
    return y, state.astype(q.dtype if past is None else past.dtype)


register(
    OpDef(
        "linear_attention",
        _linear_attention_infer,
        _linear_attention_ref,
        attrs={
            "q_num_heads": REQUIRED,
            "kv_num_heads": REQUIRED,
            "scale": 0.0,
            "update_rule": "gated_delta",
        },
        pattern=Pattern.OPAQUE,
        num_args=(3, 6),
        doc="Recurrent linear attention (ONNX LinearAttention): operands query, key, value, "
        "past_state, decay, beta; returns (output, present_state). The state is updated "
        "token by token with the `linear`, `gated`, `delta` or `gated_delta` rule, in float32.",
    )
)
