"""Contractions: matmul, gemm, einsum, det, and the integer and quantized matmuls
(matmul_integer, qlinear_matmul).

Contractions are OUT_FUSABLE: each lowers to one reduction kernel whose elementwise
epilogue may fuse. det is OPAQUE.
"""

from __future__ import annotations

import string

import numpy as np

from tcc.ir.dtype import is_float
from tcc.ir.errors import ShapeError
from tcc.ir.expr import Dim
from tcc.ir.graph import TensorType
from tcc.ir.ops._util import match_dim
from tcc.ir.ops.quantize import QUANT_RANGE
from tcc.ir.ops.registry import (
    REQUIRED,
    OpDef,
    Pattern,
    broadcast_shapes,
    register,
    same_dtype,
    tensor,
)


def _matmul_shape(a: TensorType, b: TensorType, op: str) -> tuple[Dim, ...]:
    """Result shape of numpy matmul: 1-D operands are promoted then squeezed; batch dims
    broadcast."""
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"op {op}: operands must have rank >= 1, got ranks {a.ndim} and {b.ndim}")
    a_shape = a.shape if a.ndim > 1 else (1, a.shape[0])
    b_shape = b.shape if b.ndim > 1 else (b.shape[0], 1)
    match_dim(a_shape[-1], b_shape[-2], op, "the contracted dimensions")
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
            match_dim(d, t, op, f"{what} dimensions")


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
    match_dim(k, k2, "gemm", "the contracted dimensions of A and B")
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
                sizes[c] = match_dim(sizes[c], d, "einsum", f"dimensions labelled {c!r}")
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
    match_dim(x.shape[-2], x.shape[-1], "det", "the last two dimensions (square matrices)")
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
    lo, hi = QUANT_RANGE[y_zp.dtype.name]
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
