"""Matmul on a GPU: tiles of the output per block, staged through shared memory, a small
tile per thread accumulated in registers (dlight's Matmul rule, without tensor cores).

Applies to a canonical contraction of two loads, `C[..., i, j] += A[..., i, k] * B[..., k,
j]` in any layout (the loads' indices are the stage's axes or constants): MatMul, Gemm,
batched MatMul and attention's two products, with transposes folded into the loads. Its
row axis `i` is the innermost output axis only `A` reads, its column axis `j` the innermost
only `B` reads, `A` and `B` named so that `j` is the later of the two in `C` (threadIdx.x
then runs along `C`'s rows in memory); each has a symbolic extent or at least `MIN_EXTENT`. Every other output
axis (a batch, attention heads) is a block of the grid's z axis, and so is an output axis
only `A` reads outside `i` (the rows of a [batch, sequence, features] activation).

Each block of TY x TX threads computes a BM x BN tile of `C` (BM = TY * VI, BN = TX *
VJ), each thread a VI x VJ piece of it, in registers (`local`, one thread's box of the
accumulator: tcc.lower.schedule.compact). The reduction steps by BK: per step the block's
threads copy the BM x BK tile of `A` and the BK x BN tile of `B` it needs into shared
memory together (consecutive threads, consecutive elements), wait at a barrier, and each thread
runs its VI x VJ x BK products from shared memory; a second barrier keeps the next copy
from overwriting a tile still being read. Both barriers are insert_barriers'. A thread's
reduction runs in order, k = 0, 1, ..., so each output is the serial loop's sum, bit for
bit. Ragged edges (a symbolic or indivisible extent) are the splits' guards: a copy past
the end of `A` or `B` reads nothing, and a thread whose element is past the end of `C`
computes nothing for it. The elementwise stages after the stage are folded into the
write-back.

The tile sizes are decisions (`<stage>.matmul_rows`, `.matmul_cols`: VI and VJ, the
thread's piece; `.matmul_step`: BK), so a tuner can revisit them; the threads are 16 x 16
(or fewer, for a short constant extent).
"""

from __future__ import annotations

from tcc.ir import expr as E
from tcc.ir.dtype import bit_width
from tcc.lower.rules.analysis import Axis, Stage, canonical_stage, plain_load
from tcc.lower.rules.decide import decide
from tcc.lower.rules.epilogue import fold_epilogues
from tcc.lower.schedule import Schedule
from tcc.lower.schedule.state import child_blocks

MIN_EXTENT = 16  # a constant row or column extent below which one thread per output wins
THREADS = 16  # threads along each of the block's two axes, at most
PIECES = (1, 2, 4, 8)  # a thread's rows (columns) of the output tile
STEPS = (4, 8, 16, 32)  # reduction values staged per step


def _reads(load: E.BufferLoad, axis: Axis) -> bool:
    return any(i is axis.var for i in load.indices)


def contraction(stage: Stage) -> tuple[int, int, Axis, Axis] | None:
    """(read index of A, of B, row axis i, column axis j) of a two-load contraction."""
    loads = [ld for ld in stage.loads if ld.buffer is not stage.store.buffer]
    if not stage.reduce or len(loads) != 2 or not stage.spatial:
        return None
    a, b = loads
    if a.buffer is b.buffer or not all(plain_load(ld, stage.axes) for ld in (a, b)):
        return None
    if not all(_reads(a, r) and _reads(b, r) for r in stage.reduce):
        return None
    rows = [ax for ax in stage.spatial if _reads(a, ax) and not _reads(b, ax)]
    cols = [ax for ax in stage.spatial if _reads(b, ax) and not _reads(a, ax)]
    if not rows or not cols:
        if not cols and len(rows) > 1:  # A[m, k] B[k, n] or the other way round
            return None
        a, b, rows, cols = b, a, cols, rows
        if not rows or not cols:
            return None
    i, j = rows[-1], cols[-1]
    order = list(stage.store.indices)
    if order.index(i.var) > order.index(j.var):  # threadIdx.x runs along C's rows
        a, b, i, j = b, a, j, i
    if any(x.extent is not None and x.extent < MIN_EXTENT for x in (i, j)):
        return None
    reads = [r.buffer for r in stage.block.reads]
    if reads.count(a.buffer) != 1 or reads.count(b.buffer) != 1:
        return None
    return reads.index(a.buffer), reads.index(b.buffer), i, j


def threads_along(extent: int | None, piece: int, most: int = THREADS) -> int:
    """Threads along an axis whose threads take `piece` elements each: `most`, or the power
    of two that covers a shorter extent."""
    if extent is None:
        return most
    return max(1, min(most, 1 << max(0, (-(-extent // piece) - 1).bit_length())))


class MatmulTilingRule:
    name = "cuda-matmul-tiling"

    def apply(self, sch: Schedule, block: str, target) -> Schedule | None:
        sch = sch.copy()
        stage = canonical_stage(sch, sch.get_block(block))
        found = None if stage is None else contraction(stage)
        if found is None:
            return None
        a_index, b_index, row, col = found
        vi = decide(sch, f"{block}.matmul_rows", PIECES, 4)
        vj = decide(sch, f"{block}.matmul_cols", PIECES, 4)
        bk = decide(sch, f"{block}.matmul_step", STEPS, 16)
        ty, tx = threads_along(row.extent, vi), threads_along(col.extent, vj)
        if ty * tx > target.max_threads_per_block:
            return None
        tile_bytes = max(1, bit_width(stage.dtype) // 8) * bk * (ty * vi + tx * vj)
        if tile_bytes > target.max_shared_memory_per_block:
            return None

        stages = [b.name for b in child_blocks(sch.func.body)]
        compute = sch.get_block(block)
        write_back = sch.cache_write(compute, 0, "local")
        batch = [ax.loop for ax in stage.spatial if ax is not row and ax is not col]
        reduce = [ax.loop for ax in stage.reduce]
        k = sch.fuse(*reduce) if len(reduce) > 1 else reduce[0]
        by, thread_y, ii = sch.split(row.loop, [None, ty, vi])
        bx, thread_x, jj = sch.split(col.loop, [None, tx, vj])
        ko, ki = sch.split(k, [None, bk])
        grid = [bx, by]
        if batch:
            grid.append(sch.fuse(*batch) if len(batch) > 1 else batch[0])
        sch.reorder(*reversed(grid), ko, thread_y, thread_x, ki, ii, jj)
        for loop, axis in zip(grid, "xyz"):
            sch.bind(loop, f"blockIdx.{axis}")
        sch.bind(thread_y, "threadIdx.y")
        sch.bind(thread_x, "threadIdx.x")
        sch.unroll(ii)
        sch.unroll(jj)

        init = sch.decompose_reduction(compute, ko)
        init_y, init_x, *piece = sch.get_loops(init)[len(grid):]
        sch.bind(init_y, "threadIdx.y")
        sch.bind(init_x, "threadIdx.x")
        for loop in piece:  # constant indices: the accumulator stays in registers
            sch.unroll(loop)

        for index in (a_index, b_index):
            copy = sch.cache_read(compute, index, "shared")
            sch.compute_at(copy, ko)
            tile = sch.get_loops(copy)[len(grid) + 1:]
            flat = sch.fuse(*tile) if len(tile) > 1 else tile[0]
            _, copy_y, copy_x = sch.split(flat, [None, ty, tx])
            sch.bind(copy_y, "threadIdx.y")
            sch.bind(copy_x, "threadIdx.x")

        sch.reverse_compute_at(write_back, grid[0], preserve_unit_loops=True)
        out = sch.get_loops(write_back)[len(grid):]  # one per dimension of C
        indices = stage.store.indices
        out_rows, out_cols = out[indices.index(row.var)], out[indices.index(col.var)]
        wy, wi = sch.split(out_rows, [ty, vi])
        wx, wj = sch.split(out_cols, [tx, vj])
        sch.reorder(wy, wx, wi, wj)
        sch.bind(wy, "threadIdx.y")
        sch.bind(wx, "threadIdx.x")
        sch.unroll(wi)
        sch.unroll(wj)
        fold_epilogues(sch, write_back, stages[stages.index(block) + 1:])
        return sch
