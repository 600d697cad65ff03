"""Convolution on a GPU: a block of threads per tile of output channels and positions, the
input's window and the weights staged through shared memory (TVM's direct conv2d schedule
for CUDA, in the style of the matmul rule).

Applies to a canonical stage `C[..., f, ..., y, x] += D[..., g(rc), y * s + ry - p, ...] *
W[f, rc, ry, rx]` with any number of window axes (conv1d, conv2d, conv3d; a 1 x 1 conv
keeps its unit window axes): two loads besides the accumulator, the weights `W` read with
plain indices at every reduction axis and at one output axis `f` (the output channels)
that the input `D` does not read, and `D` read at every other output axis and every
reduction axis. The *window axes* are the output axes `D` reads together with a
reduction axis (positions of the output); the last two are the tile's rows and columns, and
every other output axis (a batch, a third window axis) is a block of the grid's z axis
together with the channel tiles. `D` may be read under a padding condition: its tile in
shared memory is copied where it lies inside `D` (compute_at guards the copy at the edges),
and the stage's own condition keeps it from reading the rest. Grouped and depthwise
convolutions read `f` in `D` and are left to the other rules.

Each block of TF x TY x TX threads (threadIdx z, y, x) computes BF x TY x BX outputs (BF =
TF * VF channels, BX = TX * VX columns), each thread VF channels x VX columns of one row,
accumulated in registers. The first reduction axis (the input channels) steps by BK: per
step the block's threads copy the input window those outputs need (BK channels x the rows
and columns under the window) and the BF x BK weights into shared memory, wait at a
barrier, and each thread runs its products from shared memory in the serial loop's order
(the input channels, then the window's rows and columns), so each output is the serial
loop's sum, bit for bit. A second barrier keeps the next step's copy from overwriting a
tile still being read. Ragged edges are the splits' guards. The elementwise stages after
the stage (bias, activation) are folded into the write-back.

The tile sizes are decisions (`<stage>.conv_channels`: VF; `.conv_columns`: VX;
`.conv_step`: BK), so a tuner can revisit them; the threads follow the extents: 16
columns and 4 rows (fewer where an extent is shorter), and as many channel groups as fill
256 threads (16 for a conv1d, whose rows are one).
"""

from __future__ import annotations

from tcc.ir import expr as E
from tcc.ir.dtype import bit_width
from tcc.lower.rules.analysis import Stage, canonical_stage, plain_load
from tcc.lower.rules.cuda.matmul import threads_along
from tcc.lower.rules.decide import decide
from tcc.lower.rules.epilogue import fold_epilogues
from tcc.lower.schedule import Schedule
from tcc.lower.schedule.regions import bounds, const_value
from tcc.lower.schedule.state import child_blocks

COLUMN_THREADS, ROW_THREADS = 16, 4  # at most, along x and y
THREADS = 256  # a block's threads at most: channel groups (z) fill what columns and rows leave
CHANNEL_PIECES = (1, 2, 4, 8)  # output channels a thread computes
COLUMN_PIECES = (1, 2, 4)  # output columns a thread computes
STEPS = (1, 2, 4, 8, 16)  # input channels staged per step
MIN_CHANNELS = 8  # output channels below which one thread per output wins
MAX_GRID_Z = 65535  # CUDA's limit on gridDim.z


def _vars(e: E.PrimExpr) -> set[int]:
    return {id(v) for v in E.free_vars(e)}


def convolution(stage: Stage):
    """(read index of D, of W, the channel axis f, the window axes, the grid's other axes)
    of a convolution, or None."""
    loads = [ld for ld in stage.loads if ld.buffer is not stage.store.buffer]
    if not stage.reduce or len(loads) != 2 or loads[0].buffer is loads[1].buffer:
        return None
    for data, weights in (loads, loads[::-1]):
        if not plain_load(weights, stage.axes):
            continue
        in_w = set().union(*(_vars(i) for i in weights.indices))
        in_d = [_vars(i) for i in data.indices]
        read_by_d = set().union(*in_d)
        if not all(id(r.var) in in_w and id(r.var) in read_by_d for r in stage.reduce):
            continue
        channels = [a for a in stage.spatial if id(a.var) in in_w]
        if len(channels) != 1 or id(channels[0].var) in read_by_d:
            continue
        rest = [a for a in stage.spatial if a is not channels[0]]
        if not all(id(a.var) in read_by_d for a in rest):
            continue
        reduce_ids = {id(r.var) for r in stage.reduce}
        windows = [a for a in rest if any(id(a.var) in v and v & reduce_ids for v in in_d)]
        if not windows:
            continue
        reads = [r.buffer for r in stage.block.reads]
        if reads.count(data.buffer) != 1 or reads.count(weights.buffer) != 1:
            return None
        order = [next(k for k, i in enumerate(stage.store.indices) if i is a.var) for a in windows]
        windows = [a for _, a in sorted(zip(order, windows), key=lambda t: t[0])]
        tile = windows[-2:]
        others = [a for a in rest if all(a is not t for t in tile)]
        return reads.index(data.buffer), reads.index(weights.buffer), channels[0], tile, others
    return None


def _tile_elements(load: E.BufferLoad, ranges: dict) -> int | None:
    """Elements of the box `load` reads while the variables in `ranges` (by id: inclusive
    constant bounds) vary and the others stay fixed; None when it is not constant."""
    total = 1
    for index in load.indices:
        iv = bounds(index, {k: (E.const(lo), E.const(hi)) for k, (lo, hi) in ranges.items()})
        extent = None if iv is None else const_value(E.simplify(iv[1] - iv[0] + 1))
        if extent is None:
            return None
        total *= extent
    return total


class ConvTilingRule:
    name = "cuda-conv-tiling"

    def apply(self, sch: Schedule, block: str, target) -> Schedule | None:
        sch = sch.copy()
        stage = canonical_stage(sch, sch.get_block(block))
        found = None if stage is None else convolution(stage)
        if found is None:
            return None
        d_index, w_index, channel, tile, others = found
        if channel.extent is not None and channel.extent < MIN_CHANNELS:
            return None
        vf = decide(sch, f"{block}.conv_channels", CHANNEL_PIECES, 4)
        vx = decide(sch, f"{block}.conv_columns", COLUMN_PIECES, 1)
        bk = decide(sch, f"{block}.conv_step", STEPS, 8)
        col = tile[-1]
        row = tile[0] if len(tile) == 2 else None
        tx = threads_along(col.extent, vx, COLUMN_THREADS)
        ty = 1 if row is None else threads_along(row.extent, 1, ROW_THREADS)
        tf = threads_along(channel.extent, vf, max(1, THREADS // (tx * ty)))
        if tf * ty * tx > target.max_threads_per_block:
            return None
        loads = [ld for ld in stage.loads if ld.buffer is not stage.store.buffer]
        data = next(ld for ld in loads if ld.buffer is stage.block.reads[d_index].buffer)
        weights = next(ld for ld in loads if ld is not data)
        first = stage.reduce[0]
        if any(r.extent is None for r in stage.reduce[1:]):
            return None
        ranges = {id(r.var): (0, r.extent - 1) for r in stage.reduce[1:]}
        ranges[id(first.var)] = (0, bk - 1)
        ranges[id(col.var)] = (0, tx * vx - 1)
        if row is not None:
            ranges[id(row.var)] = (0, ty - 1)
        ranges[id(channel.var)] = (0, tf * vf - 1)
        d_tile, w_tile = _tile_elements(data, ranges), _tile_elements(weights, ranges)
        if d_tile is None or w_tile is None:
            return None
        if (d_tile + w_tile) * max(1, bit_width(stage.dtype) // 8) > target.max_shared_memory_per_block:
            return None
        z_blocks = -(-channel.extent // (tf * vf)) if channel.extent is not None else None
        for a in others:
            z_blocks = None if z_blocks is None or a.extent is None else z_blocks * a.extent
        if z_blocks is not None and z_blocks > MAX_GRID_Z:
            return None

        stages = [b.name for b in child_blocks(sch.func.body)]
        compute = sch.get_block(block)
        write_back = sch.cache_write(compute, 0, "local")
        bf, thread_f, ff = sch.split(channel.loop, [None, tf, vf])
        bx, thread_x, xx = sch.split(col.loop, [None, tx, vx])
        if row is not None:
            by, thread_y = sch.split(row.loop, [None, ty])
        window = [ax.loop for ax in stage.reduce[1:]]
        ko, ki = sch.split(first.loop, [None, bk])
        z = [ax.loop for ax in others] + [bf]
        rows = [by] if row is not None else []
        threads = [thread_f] + ([thread_y] if row is not None else []) + [thread_x]
        sch.reorder(*z, *rows, bx, ko, *threads, ki, *window, ff, xx)
        bz = sch.fuse(*z) if len(z) > 1 else z[0]  # adjacent now
        grid = [bx, *rows, bz]
        for loop, axis in zip(grid, "xyz" if row is not None else "xz"):
            sch.bind(loop, f"blockIdx.{axis}")
        names = ["threadIdx.z"] + (["threadIdx.y"] if row is not None else []) + ["threadIdx.x"]
        for loop, name in zip(threads, names):
            sch.bind(loop, name)
        sch.unroll(ff)
        sch.unroll(xx)

        init = sch.decompose_reduction(compute, ko)
        init_loops = sch.get_loops(init)[len(grid):]
        for loop, name in zip(init_loops, names):
            sch.bind(loop, name)
        for loop in init_loops[len(names):]:  # constant indices: the accumulator stays in registers
            sch.unroll(loop)

        for index in (d_index, w_index):
            copy = sch.cache_read(compute, index, "shared")
            sch.compute_at(copy, ko)
            box = sch.get_loops(copy)[len(grid) + 1:]
            flat = sch.fuse(*box) if len(box) > 1 else box[0]
            _, *parts = sch.split(flat, [None, tf, ty, tx] if row is not None else [None, tf, tx])
            for loop, name in zip(parts, names):
                sch.bind(loop, name)

        sch.reverse_compute_at(write_back, grid[0], preserve_unit_loops=True)
        out = sch.get_loops(write_back)[len(grid):]  # one per dimension of C
        indices = stage.store.indices
        at = {id(v): k for k, v in enumerate(indices)}
        wf, wff = sch.split(out[at[id(channel.var)]], [tf, vf])
        wx, wxx = sch.split(out[at[id(col.var)]], [tx, vx])
        order = [wf] + ([out[at[id(row.var)]]] if row is not None else []) + [wx]
        sch.reorder(*order, wff, wxx)
        for loop, name in zip(order, names):
            sch.bind(loop, name)
        sch.unroll(wff)
        sch.unroll(wxx)
        fold_epilogues(sch, write_back, stages[stages.index(block) + 1:])
        return sch
