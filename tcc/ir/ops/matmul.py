"""Contractions: matmul, gemm, einsum, det, and the integer and quantized matmuls
(matmul_integer, qlinear_matmul).

Contractions are OUT_FUSABLE: each lowers to one reduction kernel whose elementwise
epilogue may fuse. det is OPAQUE.

Loop programs: one reduction stage over the contracted dimension, accumulating half floats
in float32 (as numpy's matmul does) and integers in their own dtype (wrapping, as numpy's),
then an epilogue stage where the reference rounds, scales or requantizes. Broadcast batch
dimensions read index 0 where they are 1, and a select where a symbolic dimension may be 1
or the full size at run time. det has no loop program; neither do bool operands, nor half
float einsum (numpy rounds its float16 einsum accumulator to float16 after every step, an
order a te reduction cannot state).
"""

from __future__ import annotations

import string

import numpy as np

from tcc.ir import te
from tcc.ir.dtype import is_float
from tcc.ir.errors import NoLoopProgram, ShapeError
from tcc.ir.expr import Dim, PrimExpr
from tcc.ir.graph import TensorType
from tcc.ir.ops._util import accumulate_dtype, broadcast_index, data_op, match_dim, te_type
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
# loop-program helpers


def _no_bool(op: str, *tensors) -> None:
    for t in tensors:
        if t is not None and t.dtype == "bool":
            raise NoLoopProgram(f"op {op}: bool operands have no loop program")


def _contract(a, b, shape, acc: str, name: str, load_a=None, load_b=None) -> te.Tensor:
    """sum_k load_a(a[..., i, k]) * load_b(b[..., k, j]) in `acc`, numpy matmul indexing.

    `load_x(value, row_or_col)` maps a loaded element (and its row of A / column of B, or
    None for a 1-D operand) to `acc`; the default casts."""
    load_a = load_a or (lambda v, _: te.cast(v, acc))
    load_b = load_b or (lambda v, _: te.cast(v, acc))
    nb = len(shape) - (a.ndim > 1) - (b.ndim > 1)
    ka, kb = a.shape[-1], b.shape[-2 if b.ndim > 1 else 0]
    r = te.reduce_axis(ka if isinstance(ka, int) else kb, "k")

    def body(*idx):
        batch, i, j = idx[:nb], idx[nb] if a.ndim > 1 else None, idx[-1] if b.ndim > 1 else None
        ai = (r,) if a.ndim == 1 else (*broadcast_index(a.shape[:-2], shape[:nb], batch), i, r)
        bi = (r,) if b.ndim == 1 else (*broadcast_index(b.shape[:-2], shape[:nb], batch), r, j)
        return te.sum(data_op("mul", load_a(a[ai], i), load_b(b[bi], j)), axis=[r])

    return te.compute(shape, body, name)


def _cast_stage(t: te.Tensor, dtype: str, name: str) -> te.Tensor:
    if t.dtype == dtype:
        return t
    return te.compute(t.shape, lambda *i: te.cast(t[i], dtype), name)


# ---------------------------------------------------------------------------------------------
# matmul, gemm, einsum, det


def _matmul_infer(args, attrs):
    a, b = tensor(args[0], "matmul"), tensor(args[1], "matmul")
    return TensorType(_matmul_shape(a, b, "matmul"), same_dtype([a, b], "matmul"))


def _matmul_compute(a, b):
    _no_bool("matmul", a)
    shape = _matmul_shape(te_type(a), te_type(b), "matmul")
    acc = _contract(a, b, shape, accumulate_dtype(a.dtype), "matmul")
    return _cast_stage(acc, a.dtype, "matmul_cast")


register(
    OpDef(
        "matmul",
        _matmul_infer,
        lambda a, b: np.matmul(a, b).astype(a.dtype, copy=False),
        pattern=Pattern.OUT_FUSABLE,
        num_args=(2, 2),
        compute=_matmul_compute,
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


def _scaled(v: PrimExpr, scale) -> PrimExpr:
    """`v * scale` with numpy's promotion of a Python scalar: a float scales an integer
    array in float64."""
    if isinstance(scale, float) and not is_float(v.dtype):
        v = te.cast(v, "float64")
    return v if scale == 1 and is_float(v.dtype) else v * te.const(scale, v.dtype)


def _gemm_compute(a, b, c, alpha, beta, trans_a, trans_b):
    _no_bool("gemm", a)
    trans = {"trans_a": trans_a, "trans_b": trans_b}
    m, n = _gemm_infer([te_type(a), te_type(b), te_type(c)], trans).shape
    k = a.shape[0] if trans_a else a.shape[1]
    acc = accumulate_dtype(a.dtype)
    r = te.reduce_axis(k, "k")
    ab = te.compute(
        (m, n),
        lambda i, j: te.sum(
            te.cast(a[r, i] if trans_a else a[i, r], acc)
            * te.cast(b[j, r] if trans_b else b[r, j], acc),
            axis=[r],
        ),
        "gemm",
    )

    def epilogue(i, j):
        v = _scaled(te.cast(ab[i, j], a.dtype), alpha)
        if c is not None and beta != 0:
            cv = _scaled(c[tuple(broadcast_index(c.shape, (m, n), (i, j)))], beta)
            if cv.dtype != v.dtype:  # one side went to float64, so both do
                v, cv = te.cast(v, "float64"), te.cast(cv, "float64")
            v = v + cv
        return te.cast(v, a.dtype)

    if alpha == 1 and (c is None or beta == 0) and acc == a.dtype and is_float(acc):
        return ab
    return te.compute((m, n), epilogue, "gemm_epilogue")


register(
    OpDef(
        "gemm",
        _gemm_infer,
        _gemm_ref,
        attrs={"alpha": 1.0, "beta": 1.0, "trans_a": False, "trans_b": False},
        pattern=Pattern.OUT_FUSABLE,
        num_args=(2, 3),
        compute=_gemm_compute,
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


def _einsum_compute(*ts, equation):
    _no_bool("einsum", *ts)
    if ts[0].dtype in ("float16", "bfloat16"):
        raise NoLoopProgram(f"op einsum: {ts[0].dtype} operands have no loop program")
    shape = _einsum_infer([te_type(t) for t in ts], {"equation": equation}).shape
    terms, out, _ = parse_einsum(equation, [t.ndim for t in ts])
    extent: dict[str, Dim] = dict(zip(out, shape))
    summed = [c for c in dict.fromkeys("".join(terms)) if c not in out]
    for term, t in zip(terms, ts):
        for c, d in zip(term, t.shape):  # a summed label's extent: any operand's non-1 dim
            if c in summed and (c not in extent or (isinstance(extent[c], int) and extent[c] == 1)):
                extent[c] = d
    axes = {c: te.reduce_axis(extent[c], f"r_{c}") for c in summed}

    def body(*idx):
        env = {**dict(zip(out, idx)), **axes}
        product = None
        for term, t in zip(terms, ts):
            ind = broadcast_index(t.shape, [extent[c] for c in term], [env[c] for c in term])
            v = t[tuple(ind)]
            product = v if product is None else data_op("mul", product, v)
        return te.sum(product, axis=list(axes.values())) if axes else product

    return te.compute(shape, body, "einsum")


register(
    OpDef(
        "einsum",
        _einsum_infer,
        _einsum_ref,
        attrs={"equation": REQUIRED},
        pattern=Pattern.OUT_FUSABLE,
        num_args=(1, None),
        compute=_einsum_compute,
        doc="Einstein summation over the operands as `equation` (numpy syntax, with `...`); "
        "no loop program for float16/bfloat16 (numpy rounds the accumulator every step).",
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
        doc="Determinant of each square matrix in the last two dims (no loop program).",
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


def _per_axis(p, operand, op: str, what: str):
    """`fn(i)` loading a quantization parameter that is per tensor or, when 1-D and longer
    than 1, per row of A / column of B (`i` that row or column; None for a 1-D operand)."""
    if p is None:
        return lambda i: None
    if p.ndim == 0:
        return lambda i: p[()]
    if p.ndim == 1 and isinstance(p.shape[0], int) and p.shape[0] == 1:
        return lambda i: p[0]
    if p.ndim == 1 and operand.ndim > 1:
        return lambda i: p[i]
    raise NoLoopProgram(f"op {op}: {what} of shape {p.shape} has no loop program")


def _centered_loader(zp, operand, op: str, what: str):
    load_zp = _per_axis(zp, operand, op, what)

    def load(v, i):
        z = load_zp(i)
        v = te.cast(v, "int32")
        return v if z is None else data_op("sub", v, te.cast(z, "int32"))

    return load


def _int_contract(a, a_zp, b, b_zp, op: str, shape) -> te.Tensor:
    return _contract(
        a,
        b,
        shape,
        "int32",
        op,
        _centered_loader(a_zp, a, op, "A's zero point"),
        _centered_loader(b_zp, b, op, "B's zero point"),
    )


def _matmul_integer_compute(a, b, a_zp=None, b_zp=None):
    shape = _matmul_shape(te_type(a), te_type(b), "matmul_integer")
    return _int_contract(a, a_zp, b, b_zp, "matmul_integer", shape)


register(
    OpDef(
        "matmul_integer",
        _int_matmul_infer("matmul_integer", 0, 1, (2, 3)),
        lambda a, b, a_zp=None, b_zp=None: np.matmul(
            _centered(a, a_zp, True), _centered(b, b_zp, False)
        ),
        pattern=Pattern.OUT_FUSABLE,
        num_args=(2, 4),
        compute=_matmul_integer_compute,
        doc="int32 matmul of (A - a_zero_point) and (B - b_zero_point); A's zero point per "
        "tensor or per row, B's per tensor or per column.",
    )
)


def _qlinear_matmul_ref(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp):
    acc = np.matmul(_centered(a, a_zp, True), _centered(b, b_zp, False))
    d = acc * (_row_param(a_scale, a) * b_scale / y_scale) + y_zp
    lo, hi = QUANT_RANGE[y_zp.dtype.name]
    return np.clip(np.rint(d), lo, hi).astype(y_zp.dtype)


def _qlinear_matmul_compute(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp):
    op = "qlinear_matmul"
    shape = _matmul_shape(te_type(a), te_type(b), op)
    acc = _int_contract(a, a_zp, b, b_zp, op, shape)
    a_s, b_s = _per_axis(a_scale, a, op, "a_scale"), _per_axis(b_scale, b, op, "b_scale")
    y_s, y_z = _per_axis(y_scale, b, op, "y_scale"), _per_axis(y_zp, b, op, "y_zero_point")
    lo, hi = QUANT_RANGE[y_zp.dtype]
    rows, cols = a.ndim > 1, b.ndim > 1

    def requantize(*idx):
        i, j = idx[-1 - cols] if rows else None, idx[-1] if cols else None
        # As the reference: the scale ratio in the scales' dtype, the product in float64.
        ratio = te.cast(a_s(i) * b_s(j) / y_s(j), "float64")
        d = te.cast(acc[idx], "float64") * ratio + te.cast(y_z(j), "float64")
        d = te.min(te.max(te.nearbyint(d), te.const(lo, "float64")), te.const(hi, "float64"))
        return te.cast(d, y_zp.dtype)

    return te.compute(shape, requantize, "qlinear_matmul_requantize")


register(
    OpDef(
        "qlinear_matmul",
        _int_matmul_infer("qlinear_matmul", 0, 3, (2, 5)),
        _qlinear_matmul_ref,
        pattern=Pattern.OUT_FUSABLE,
        num_args=(8, 8),
        compute=_qlinear_matmul_compute,
        doc="Quantized matmul: operands (a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp); "
        "the int32 product is requantized to y's scale and zero point with saturation.",
    )
)
