"""Winograd convolution F(4 x 4, 3 x 3) in the blocked layout: its input and output transforms.

A 3 x 3 stride-1 convolution computes each 4 x 4 tile of its output from a 6 x 6 tile of
input with 36 multiplications per (input, output) channel pair instead of 144 (Lavin and
Gray, "Fast Algorithms for Convolutional Neural Networks", 2016):

    Y = A^T [ sum over input channels of (G g G^T) * (B^T d B) ] A

with the interpolation points 0, 1, -1, 2, -2 and infinity (`BT`, `G`, `AT` below). tcc
runs it as three kernels, which alter-conv-layout puts in place of a `conv2d_nchwc`:

* `winograd_input_nchwc`: V = B^T d B for every tile and input channel, from NCHW{ci}c
  data, as (6, 6, N, tiles down, tiles across, C / ci, ci);
* a batched matmul over the 36 positions of the 6 x 6 tile and the blocks of co output
  channels, M[a, b, o] = V[a, b] @ U[a, b, o], with V viewed as (6, 6, 1, tiles, C) and
  the weights transformed at compile time (`winograd_weight`: U = G g G^T, as (6, 6,
  O / co, C, co)); each block's weights are one contiguous panel, which the product
  streams (as O columns of (C, O) at a stride, the 256-channel product at 14 x 14 ran
  1.33 ms a call inside ResNet-50, its 9.4 MB of weights read at 7 GB/s; as panels,
  0.59 ms);
* `winograd_output_nchwc`: Y = A^T M A (plus a bias) from M viewed as (6, 6, O / co, N,
  tiles down, tiles across, co), cropped to the output size, as NCHW{co}c.

Each transform element is a sum over the tile, done one axis and then the other: in the
input transform V[a, b] = sum over j of B^T[b, j] * (sum over i of B^T[a, i] * d[i, j]). The
coefficients are selects on the element's position in the tile (`a`, `b` in the input
transform; `h % 4`, `w % 4` in the output transform) and a term whose coefficient is zero
is a select that yields -0.0 without loading its entry (adding -0.0 changes no sum). Only a
column with a zero somewhere is tested, by one or two comparisons (its nonzero rows are a
run), and a coefficient of 1 is no product: scheduling and code generation walk the
expression once per unrolled copy, so its size is compile time. The elementwise rule
unrolls those positions next to the vector lanes and the backend emits only the branch
each copy takes, so every select is decided at compile time and the -0.0 terms fold away:
what runs is the nonzero terms (3 or 4 per inner sum in the input transform, 4 or 5 in the
output transform), and the copies that share a position share its inner sums, which the
backend emits once (its loads keyed by their indices with the position put in, its float
operations numbered: `tcc.emit.llvm_expr.ExprEmitter.reuse`; a 56 x 56 output transform's
IR went from 223 to 90 KB, its compile from 0.30 to 0.21 s). A 64-channel 56 x 56 input transform ran 1.42 ms with the selects at run
time, 0.07-0.09 ms unrolled (2 threads of an Intel Xeon). Its loads are guarded only where
a tap can fall in the padding or past the input's end (the first and last rows and columns
of taps): guarding all 36 made it 3.3x slower. A guarded tap is a select in straight-line
code (the backend reads a zero constant in place of an out-of-bounds address), so the
copies' loads of one tap merge into one.

Error: the transforms scale values by up to 8 x 8 (A) and 5 x 5 (B) and divide by up to
24 (G), so rounding grows with them. Compiled, in float32 throughout, one conv's largest
error was 4.1e-6 to 1.4e-5 of its largest output at 64 to 512 channels (weights of scale
1 / sqrt(9 C), 2 threads of an AMD EPYC; `benchmarks/winograd.py`); the tests hold it to
1e-3 of the largest output, the bound tcc promises against direct convolution.
"""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np

from tcc.ir import te
from tcc.ir.errors import ShapeError
from tcc.ir.graph import TensorType
from tcc.ir.ops._util import (
    accumulate_dtype,
    ceil_div,
    check_rank,
    float_operands,
    optional_tensor,
    te_type,
)
from tcc.ir.ops.registry import OpDef, Pattern, register, tensor

TILE, KERNEL, ALPHA = 4, 3, 6  # output tile, kernel and input tile sizes

BT = ((4, 0, -5, 0, 1, 0),
      (0, -4, -4, 1, 1, 0),
      (0, 4, -4, -1, 1, 0),
      (0, -2, -1, 2, 1, 0),
      (0, 2, -1, -2, 1, 0),
      (0, 4, 0, -5, 0, 1))
G = ((F(1, 4), 0, 0),
     (F(-1, 6), F(-1, 6), F(-1, 6)),
     (F(-1, 6), F(1, 6), F(-1, 6)),
     (F(1, 24), F(1, 12), F(1, 6)),
     (F(1, 24), F(-1, 12), F(1, 6)),
     (0, 0, 1))
AT = ((1, 1, 1, 1, 1, 0),
      (0, 1, -1, 2, -2, 0),
      (0, 1, 1, 4, 4, 0),
      (0, 1, -1, 8, -8, 1))


def winograd_weight(w: np.ndarray, block: int) -> np.ndarray:
    """OIHW 3 x 3 weights -> U = G g G^T as (6, 6, O / block, I, block), computed in
    float64: each block of output channels' weights is one contiguous panel."""
    o, i = w.shape[:2]
    if o % block:
        raise ValueError(f"winograd_weight: {o} output channels do not split into blocks of {block}")
    g = np.array(G, dtype=np.float64)
    gg = np.kron(g, g)
    out = np.empty((ALPHA, ALPHA, o // block, i, block), w.dtype)
    # U[(a, b), (o, i)] = sum over (k, l) of G[a, k] G[b, l] w[o, i, k, l]: one product per
    # block of output channels, 6x faster than einsum's loops at 256 channels (compile time:
    # ResNet-50 has 11 of them), and a block at a time keeps the float64 values small
    for ob in range(o // block):
        panel = w[ob * block:(ob + 1) * block].reshape(block * i, KERNEL * KERNEL)
        u = (gg @ panel.T.astype(np.float64)).reshape(ALPHA, ALPHA, block, i)
        out[:, :, ob] = u.transpose(0, 1, 3, 2)  # rounded once to the weights' dtype
    return out


def _tiles(size, pad_begin: int, pad_end: int):
    """(output size, tiles) along one axis of a 3 x 3 stride-1 window."""
    out = size + pad_begin + pad_end - (KERNEL - 1)
    return out, ceil_div(out, TILE)


def _padding(attrs) -> list[int]:
    padding = list(attrs["padding"] or [0, 0, 0, 0])
    if len(padding) != 4 or any(not isinstance(p, int) or p < 0 for p in padding):
        raise ShapeError(f"op winograd_input_nchwc: padding must be 4 non-negative ints "
                         f"(top, left, bottom, right), got {attrs['padding']}")
    return padding


# ---------------------------------------------------------------------------------------------
# input transform

_IN = "winograd_input_nchwc"


def _input_infer(args, attrs):
    x = tensor(args[0], _IN)
    check_rank(_IN, x, 5)
    pt, pl, pb, pr = _padding(attrs)
    if not all(isinstance(d, int) for d in x.shape[2:4]):
        raise ShapeError(f"op {_IN}: the input's height and width must be static, got {x}")
    oh, th = _tiles(x.shape[2], pt, pb)
    ow, tw = _tiles(x.shape[3], pl, pr)
    if oh < 1 or ow < 1:
        raise ShapeError(f"op {_IN}: the 3 x 3 window does not fit {x} with padding {[pt, pl, pb, pr]}")
    return TensorType((ALPHA, ALPHA, x.shape[0], th, tw, x.shape[1], x.shape[4]), x.dtype)


def _input_ref(x, *, padding):
    pt, pl, pb, pr = _padding({"padding": padding})
    n, cc, h, w, ci = x.shape
    (_, th), (_, tw) = _tiles(h, pt, pb), _tiles(w, pl, pr)
    d = np.zeros((n, cc, th * TILE + 2, tw * TILE + 2, ci), dtype=np.float64)
    d[:, :, pt:pt + h, pl:pl + w] = x
    bt = np.array(BT, dtype=np.float64)
    out = np.empty((ALPHA, ALPHA, n, th, tw, cc, ci))
    for i in range(th):
        for j in range(tw):
            tile = d[:, :, i * TILE:i * TILE + ALPHA, j * TILE:j * TILE + ALPHA]
            out[:, :, :, i, j] = np.einsum("ak,nckld,bl->abncd", bt, tile, bt)
    return out.astype(x.dtype)


def _position_sum(pos_a, pos_b, rows, value, dtype: str):
    """sum over j of rows[pos_b][j] * (sum over i of rows[pos_a][i] * value(i, j)), for row
    positions known only as expressions. Each term is the entry times its coefficient, in a
    select on the positions that yields -0.0 where the coefficient is zero (adding -0.0
    changes no sum), so once the positions are unrolled only the nonzero terms are left. The
    inner sums depend on `pos_a` alone: the unrolled copies that share it compute the same
    values, which the backend emits once (the transform done one axis, then the other)."""
    tests: dict = {}  # one object per test, shared by every term that makes it

    def equal(pos, k: int):
        key = (id(pos), k)
        if key not in tests:
            tests[key] = te.equal(pos, k)
        return tests[key]

    def is_row(pos, rows_with):
        """Whether `pos` (one of the rows) is one of `rows_with`, None where it always is: a
        run of rows (all those of these matrices) is one or two comparisons."""
        key = (id(pos), tuple(rows_with))
        if key in tests:
            return tests[key]
        lo, hi = rows_with[0], rows_with[-1]
        if rows_with != list(range(lo, hi + 1)):
            cond = None
            for k in rows_with:
                cond = equal(pos, k) if cond is None else te.logical_or(cond, equal(pos, k))
        elif lo == hi:
            cond = equal(pos, lo)
        else:
            after = None if lo == 0 else te.greater_equal(pos, lo)
            before = None if hi == len(rows) - 1 else te.less_equal(pos, hi)
            cond = before if after is None else after if before is None else \
                te.logical_and(after, before)
        tests[key] = cond
        return cond

    def coefficient(pos, column: int, rows_with):
        """The column's entry at row `pos`, one of `rows_with`: a constant where those rows
        agree, None where it is 1 (x * 1.0 is x, so the product is left out)."""
        values = [float(rows[k][column]) for k in rows_with]
        if len(set(values)) == 1:
            return None if values[0] == 1.0 else te.const(values[0], dtype)
        out = te.const(values[-1], dtype)
        for k, v in zip(reversed(rows_with[:-1]), reversed(values[:-1])):
            out = te.if_then_else(equal(pos, k), te.const(v, dtype), out)
        return out

    def weighted_sum(pos, terms):
        total = None
        for column, term in terms:
            used = [k for k, r in enumerate(rows) if r[column]]
            if not used or term is None:
                continue
            coef = coefficient(pos, column, used)
            if coef is not None:
                term = term * coef
            cond = is_row(pos, used)
            if cond is not None:
                term = te.if_then_else(cond, term, te.const(-0.0, dtype))
            total = term if total is None else total + term
        return total

    width = len(rows[0])
    inner = [(j, weighted_sum(pos_a, [(i, value(i, j)) for i in range(width)]))
             for j in range(width)]
    return weighted_sum(pos_b, inner)


def _input_compute(x, *, padding):
    dt = float_operands(_IN, x)
    acc = accumulate_dtype(dt)
    pt, pl, _, _ = _padding({"padding": padding})
    shape = _input_infer([te_type(x)], {"padding": padding}).shape
    h, w = x.shape[2], x.shape[3]
    th, tw = shape[3], shape[4]

    def bounds(pos, tap: int, pad: int, size, tiles) -> list:
        """The tests of `pos` that can fail: before the start only for taps in the begin
        padding, past the end only for taps the last tile reaches beyond the input."""
        conds = [te.greater_equal(pos, 0)] if tap < pad else []
        if not (isinstance(size, int) and isinstance(tiles, int)) or (
                (tiles - 1) * TILE + tap - pad >= size):
            conds.append(te.less(pos, size))
        return conds

    def body(a, b, n, ty, tx, cc, cb):
        def tap(i, j):
            y, xx = ty * TILE + i - pt, tx * TILE + j - pl
            v = te.cast(x[n, cc, y, xx, cb], acc)
            conds = bounds(y, i, pt, h, th) + bounds(xx, j, pl, w, tw)
            if not conds:
                return v
            cond = conds[0]
            for c in conds[1:]:
                cond = te.logical_and(cond, c)
            return te.if_then_else(cond, v, te.const(0.0, acc))

        return te.cast(_position_sum(a, b, BT, tap, acc), dt)

    return te.compute(shape, body, _IN)


register(
    OpDef(
        _IN,
        _input_infer,
        _input_ref,
        {"padding": None},
        Pattern.OUT_FUSABLE,
        compute=_input_compute,
        doc="Winograd F(4x4, 3x3) input transform B^T d B of every 4 x 4 output tile's 6 x 6 "
        "input tile of NCHW{ci}c data with `padding` (top, left, bottom, right), as (6, 6, N, "
        "tiles down, tiles across, C / ci, ci).",
    )
)


# ---------------------------------------------------------------------------------------------
# output transform

_OUT = "winograd_output_nchwc"


def _output_infer(args, attrs):
    m = tensor(args[0], _OUT)
    check_rank(_OUT, m, 7)
    oh, ow = attrs["height"], attrs["width"]
    if not all(isinstance(d, int) and d > 0 for d in (oh, ow)):
        raise ShapeError(f"op {_OUT}: height and width must be positive ints, got {oh} and {ow}")
    if m.shape[:2] != (ALPHA, ALPHA):
        raise ShapeError(f"op {_OUT}: the transformed tiles must lead with (6, 6), got {m}")
    if (m.shape[4], m.shape[5]) != (ceil_div(oh, TILE), ceil_div(ow, TILE)):
        raise ShapeError(f"op {_OUT}: {m} does not hold the 4 x 4 tiles of a {oh} x {ow} output")
    b = optional_tensor(args, 1, _OUT, "bias")
    if b is not None and b.shape != (m.shape[2], m.shape[6]):
        raise ShapeError(f"op {_OUT}: bias must be ({m.shape[2]}, {m.shape[6]}), got {b}")
    return TensorType((m.shape[3], m.shape[2], oh, ow, m.shape[6]), m.dtype)


def _output_ref(m, b=None, *, height, width):
    at = np.array(AT, dtype=np.float64)
    y = np.einsum("ia,abonhwc,jb->nohiwjc", at, m.astype(np.float64), at)
    n, oc, th, _, tw, _, co = y.shape
    y = y.reshape(n, oc, th * TILE, tw * TILE, co)[:, :, :height, :width]
    if b is not None:
        y = y + b[None, :, None, None, :]
    return np.ascontiguousarray(y.astype(m.dtype))


def _output_compute(m, b=None, *, height, width):
    dt = float_operands(_OUT, m, b)
    acc = accumulate_dtype(dt)
    shape = _output_infer([te_type(m), te_type(b)], {"height": height, "width": width}).shape

    def body(n, oc, h, w, cb):
        th, tw = h // TILE, w // TILE

        def entry(i, j):
            return te.cast(m[i, j, oc, n, th, tw, cb], acc)

        v = _position_sum(h % TILE, w % TILE, AT, entry, acc)
        if b is not None:
            v = v + te.cast(b[oc, cb], acc)
        return te.cast(v, dt)

    return te.compute(shape, body, _OUT)


register(
    OpDef(
        _OUT,
        _output_infer,
        _output_ref,
        {"height": None, "width": None},
        Pattern.OUT_FUSABLE,
        (1, 2),
        compute=_output_compute,
        doc="Winograd F(4x4, 3x3) output transform A^T M A of (6, 6, O / co, N, tiles down, "
        "tiles across, co) transformed products, plus an optional (O / co, co) bias, cropped "
        "to `height` x `width`, as NCHW{co}c.",
    )
)
