"""Contractions (matmul, dense, batch matmul, convolution): a register-tiled micro-kernel,
its epilogue folded into the write-back, under one parallel tile loop.

Applies to a canonical stage with reduction variables whose output's last axis `v` (the
matmul column, the convolution's output width) has a partner spatial axis `u` (the matmul
row, the output channel) that some load along `v` does not use: that load's vector is then
reused for every `u` of a tile. A grouped convolution's input is read at channel
`o // G * Cg + rc`, which changes with the output channel `o` only from one group of G to
the next: with a row tile U dividing G the vector is reused all the same (ShuffleNet's
grouped 1x1 convs, 272 channels in 4 groups at 14 x 14: 0.177 ms accumulating in place on
their 14 columns, 0.081 ms as 4 x 14 tiles). The nest becomes

    fused(outer spatial loops, u0, v0)      parallel when there are cores and work to share
      init: U x V accumulators = 0          the local tile (decompose_reduction)
      reduction loops                       serial, in their order
        u1                                  unrolled: U accumulator rows
          v1                                vector lanes: V columns per row
      write-back: tile -> output            with the stages after it folded in

so each reduction step loads one vector along `v`, broadcasts one value per row and updates
U x V accumulators. They live in a `local` buffer (cache_write) that `compact_buffers`
shrinks to the U x V tile inside the tile loop, so LLVM keeps it in registers, and each
thread of the parallel loop has its own. When the output also moves along a third axis
`w` that the loads broadcast to the rows do not use (a dense blocked convolution's
output-channel chunks), W planes of the U x V tile along it are held together, unrolled
outside u1, so each broadcast value feeds W x V lanes (`plane_tile`; with 4 x 6 columns
at 56 and 28 columns: ResNet-50 45.0 -> 39.2 ms, DenseNet-121 32.0 -> 28.5, Inception v2
18.8 -> 16.9, SqueezeNet 4.29 -> 3.96; with 4 x 4 there, ResNet-50 37.2 -> 35.3 ms, 2
threads of an Intel Xeon with AVX-512). Elementwise stages that read the output right
after it (bias, residual add, activation) are folded into the write-back
(reverse_compute_inline), so the result goes to memory once. V is one or two vector
registers (or the whole axis when it is short), U fills about half the vector registers.

A symbolic output width splits by V with a guard; `unswitch_guards` (run after the rules)
gives every tile but the last a guard-free copy, so the symbolic case is tiled too, and so
is a constant width without a divisor made of half registers (V one register, the
`guarded_columns` decision). When the columns of a tile cannot run as guard-free vector
lanes otherwise (padding along them, a width a tuner cut with a guard but not into whole
registers) or a block primitive refuses, the rule falls back to accumulating in place in
the output, on one thread. A guarded scalar tile in a local buffer measured 4x slower than
in place (BERT's attention scores, 128 x 128 x 64: 16.7 vs 3.8 ms), and in place LLVM
keeps accumulators in registers only while it can prove the operands do not alias them,
which it cannot inside a parallel loop's outlined function (it reads the buffer pointers
from a struct): 2x slower on two threads than on one.

A tile's loads reused across its rows (a convolution's weights, W planes of them) are read
once per tile over the whole reduction. Where they outgrow L1 (CHUNK_ABOVE), every tile
streams them from L2 at one vector per U multiply-adds, so the nest is reordered to sweep
the first reduction loop in chunks (`reduction_chunk`, the input-channel chunks of a conv,
as MLAS's NCHWc kernels do): each chunk's weights (at most CHUNK_BYTES) stay in L1 while a
block of tiles (the row tiles of `block_rows` output rows) takes them in turn, and the
block's accumulators live in a local buffer between chunks:

    fused(outer spatial loops, rows / block rows)       parallel
      init: block of accumulators = 0
      chunks of the first reduction loop
        block rows, row tiles                           the block's tiles
          rest of the reduction, u1, v1                 the micro-kernel

Each output still sums its products in order, so the results keep their bits (ResNet-50's
deep convs in the model, 2 threads of an Intel Xeon: 1024 -> 256 channels 1 x 1 at
14 x 14 0.52 -> 0.41 ms a call, the stride-2 3 x 3 of 128 channels 1.13 -> 0.88).

Decisions (`decide`): V, U, W (`planes`), blocks of tiles along each (run one after the
other inside the tile loop, sharing loads in cache), the order of the two tile loops,
which tile loop of another axis (if any) runs innermost among the tile loops, unrolling
of the innermost reduction loop, whether to accumulate in a local tile, whether the tile loop
runs on threads, and (with the column tile loop outside) whether the load reused across
rows is first copied into a contiguous panel per thread (`pack`): a matmul whose right
operand is read down its columns then reads one run per reduction step instead of one
line (1024^3: 4.9 ms packed, 6.7-10 ms not, on 2 threads of an AMD EPYC). Untuned, a
large operand shared by enough row tiles is packed (`_pays_to_pack`). With a plane axis
and no blocks of tiles: the chunk of the first reduction loop (0: none) and the rows of
the tile loop outside the row tiles that a block holds (`block_rows`).
"""

from __future__ import annotations

import math

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.dtype import bit_width
from tcc.lower.rules.analysis import (
    Axis,
    Stage,
    canonical_stage,
    constant,
    divisor_at_most,
    guarded_load_along,
    stride,
    subexprs,
)
from tcc.lower.rules.cpu.machine import (
    MAX_WHOLE_VECTOR,
    Machine,
    enough_to_share,
    threads_decided,
)
from tcc.lower.rules.decide import decide, decide_flag
from tcc.lower.rules.epilogue import fold_epilogues
from tcc.lower.schedule import LoopRV, Schedule, ScheduleError
from tcc.lower.schedule.state import child_blocks

MAX_ROWS = 8  # unrolled rows of the micro-kernel
# untuned, a strided operand is packed when this large and shared by this many row tiles
PACK_MIN_BYTES = 512 * 1024
PACK_MIN_ROW_TILES = 4
# untuned, a tile whose reused loads (its planes' weights) over the whole reduction exceed
# CHUNK_ABOVE bytes sweeps the reduction in chunks of at most CHUNK_BYTES of them, each
# chunk held in L1 while a block of about BLOCK_TILES tiles uses it (`reduction_chunk`)
CHUNK_ABOVE = 64 * 1024
CHUNK_BYTES = 24 * 1024
BLOCK_TILES = 8


def register_axes(stage: Stage) -> tuple[Axis, Axis, int | None] | None:
    """(u, v, group): v the output's innermost axis, u the innermost other spatial axis that
    a load moving along v does not use (that load is reused across u), or uses only as
    `u // group` (a grouped convolution's input channels): reused across rows that stay in
    one group, so the row tile must divide `group` (None: any row tile)."""
    v = stage.innermost_write_axis()
    if v is None:
        return None
    along_v = [ld for ld in stage.loads if stride(ld, v.var) != 0]
    for u in reversed(stage.spatial):
        if u is v or u.extent == 1:
            continue
        if any(stride(ld, u.var) == 0 for ld in along_v):
            return u, v, None
    for u in reversed(stage.spatial):
        if u is v or u.extent == 1:
            continue
        group = next((g for g in (_group_of(ld, u.var) for ld in along_v) if g), None)
        if group is not None:
            return u, v, group
    return None


def plane_axis(stage: Stage, u: Axis, v: Axis) -> Axis | None:
    """A third spatial axis w of constant extent along which the output moves while every
    load moving along u (the value broadcast to a row) stays put: with W planes of U x V
    accumulators each broadcast value feeds W multiply-adds. A dense blocked convolution's
    output-channel chunks are such an axis (MLAS's NCHWc kernel holds 4 chunks of 16
    channels by 6 output columns); a batched matmul's batch is not (its rows differ from
    batch to batch)."""
    row_loads = [ld for ld in stage.loads
                 if ld.buffer is not stage.store.buffer and stride(ld, u.var) != 0]
    for w in reversed(stage.spatial):
        if w is u or w is v or w.extent is None or w.extent < 2:
            continue
        if stride(stage.store, w.var) != 0 and not any(_uses(ld, w) for ld in row_loads):
            return w
    return None


def plane_tile(rows_extent: int | None, plane_extent: int, columns: int, lanes: int,
               registers: int, windowed: bool = False) -> tuple[int, int] | None:
    """(W, U) for a stage with a plane axis, up to three quarters of the registers in
    accumulators: with at least 24 rows, 4 planes of the largest of 6, 5 and 4 rows that
    divides them (56 and 28 columns: 4 rows, which ran as fast as 6 with a guarded last
    tile, and compiled to a third of the code: DenseNet-121's 120 distinct 1 x 1 convs),
    else of 6 rows and a guarded last tile; with fewer, 2 planes of all the rows, or, when
    the rows are a window's outputs (`windowed`: a 3 x 3 conv's columns) and all of them
    fit, one plane of all the rows, since a row cut into tiles reads the window's overlap
    and pads its edges once a tile (256 -> 256 channels 3 x 3 at 14 x 14: 2 x 7 0.79 ms,
    1 x 14 0.71; at 16 x 16 2 x 8 1.91 ms, 1 x 16 1.08; 20 and 22 columns 7% faster, 18
    the same; 1 x 1 convs at 14 x 14 ran 14% faster as 2 x 7), else 2 planes of a divisor
    of the rows at least half what fits (7 and 14 columns: 2 x 7); None: one plane,
    `row_tile`'s rows. Measured
    on AVX-512 (32 registers) only, so other machines keep one plane untuned. One conv,
    2 threads of an Intel Xeon, 1 plane of 8 rows -> these: 64 -> 256 channels 1 x 1 at
    56 x 56 0.49 -> 0.41 ms, 1024 -> 256 at 14 x 14 0.61 -> 0.46, 64 -> 64 3 x 3 at 56 x 56
    1.18 -> 0.99, 512 3 x 3 at 7 x 7 1.04 -> 0.88; 4 planes of 7 rows (28 accumulators)
    spilled, and 4 planes over 7 or 14 columns of 3 x 3 conv (tiles 4 + 3, 5 + 5 + 4) ran
    1.3-2x slower than one plane."""
    if registers < 32 or rows_extent is None:
        return None
    per_row = math.ceil(columns / lanes)
    budget = registers * 3 // 4
    if rows_extent >= 24 and plane_extent % 4 == 0 and 4 * 6 * per_row <= budget:
        return 4, next((r for r in (6, 5, 4) if rows_extent % r == 0), 6)
    if plane_extent % 2 == 0:
        fit = budget // (2 * per_row)
        if rows_extent <= fit:
            return 2, rows_extent
        if windowed and rows_extent * per_row <= budget:
            return 1, rows_extent
        best = divisor_at_most(rows_extent, fit)
        if 2 * best >= fit:
            return 2, best
    return None


def plane_tiles(extent: int, rows: int, columns: int, lanes: int, registers: int) -> list[int]:
    """The W a tuner may choose: divisors of the plane axis up to 4 whose W x U x V
    accumulators leave four vector registers free."""
    per_plane = rows * math.ceil(columns / lanes)
    return [w for w in (1, 2, 3, 4) if extent % w == 0 and w * per_plane <= registers - 4]


def _group_of(load: E.BufferLoad, var: E.Var) -> int | None:
    """G when every use of `var` in the load's indices is `var // G` (G > 1), else None."""
    groups, uses, divided = set(), 0, 0
    for index in load.indices:
        for x in subexprs(index):
            if x is var:
                uses += 1
            elif isinstance(x, E.BinOp) and x.op == "floordiv" and x.a is var:
                if not isinstance(x.b, E.IntImm) or x.b.value < 2:
                    return None
                groups.add(x.b.value)
                divided += 1
    return groups.pop() if len(groups) == 1 and uses == divided else None


def column_tile(extent: int | None, lanes: int) -> int:
    """V: the whole axis when short, else one or two registers' worth dividing it, else the
    largest divisor of the axis made of half registers, else one register (guarded: every
    tile but the last runs guard-free). A divisor of other lanes is no vector LLVM splits
    well: the LSTM export's 128 x 48 x 500 head ran 0.21 ms in 50-column tiles, 0.028 ms in
    16-column tiles with the last one guarded."""
    if extent is None:
        return lanes
    if extent <= min(2 * lanes, MAX_WHOLE_VECTOR):
        return extent
    for width in (2 * lanes, lanes):
        if extent % width == 0:
            return width
    best = divisor_at_most(extent, MAX_WHOLE_VECTOR)
    return best if 2 * best >= lanes and best % max(lanes // 2, 1) == 0 else lanes


def column_tiles(extent: int | None, lanes: int) -> list[int]:
    """The V a tuner may choose: half a register to four registers' worth (cutting a
    constant extent with a guard where they do not divide it), or the whole axis when
    short."""
    widths = [w for w in (lanes // 2, lanes, 2 * lanes, 3 * lanes, 4 * lanes) if w >= 1]
    if extent is None:
        return widths
    return [w for w in widths if w < extent] + (
        [extent] if extent <= min(4 * lanes, MAX_WHOLE_VECTOR) else [])


def row_tiles(extent: int | None, columns: int, lanes: int, registers: int) -> list[int]:
    """The U a tuner may choose: up to twice MAX_ROWS rows whose accumulators fit in the
    vector registers (and at most the extent)."""
    fit = max(1, (registers - 2) // math.ceil(columns / lanes))
    top = min(2 * MAX_ROWS, fit, extent or 2 * MAX_ROWS)
    return list(range(1, top + 1))


def row_tile(extent: int | None, columns: int, lanes: int, registers: int) -> int:
    """U: rows whose U x V accumulators fill about half the vector registers; a divisor of
    the extent at least half that, else the whole extent when its accumulators still fit
    the registers (13 rows: one tile instead of 8 + a guarded 5; SqueezeNet's convs over
    13 x 13 went 1.17 -> 1.05 ms and 0.25 -> 0.14 ms a call), else the fewest tiles of rows
    that fit, evened out, the last one guarded (27 rows: 14 + 13 rather than 8 + 8 + 8 + 3,
    as the tuner chose for AlexNet's grouped conv; SqueezeNet, with 55 x 55 and 27 x 27
    maps, 3.84 -> 3.65 ms, and AlexNet 17.6 -> 17.1 ms, 2 cores of an Intel Xeon), never
    fewer rows than half the registers' worth."""
    per_row = math.ceil(columns / lanes)
    want = max(1, min(MAX_ROWS, (registers // 2) // per_row))
    if extent is None:
        return want
    if extent <= want:
        return extent
    best = divisor_at_most(extent, want)
    if 2 * best >= want:
        return best
    fit = min(2 * MAX_ROWS, (registers - 2) // per_row)
    if extent <= fit:
        return extent
    tiles = -(-extent // fit)
    return max(want, -(-extent // tiles))


def local_tile(
    sch: Schedule, func: T.PrimFunc, block: str, outer: list[LoopRV], inner: list[LoopRV],
    reduction: LoopRV,
) -> tuple[LoopRV, list[LoopRV]]:
    """Fuse the tile loops into one and accumulate each tile (one iteration of the `inner`
    tile loops, when any) in a local buffer, initialised right before the `reduction` loop
    and written back (epilogues folded in) after it: the tile loop and the lanes loops of
    the init and the write-back."""
    rv = sch.get_block(block)
    tile = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    write_back = sch.cache_write(rv, 0, "local")
    sch.reverse_compute_at(write_back, inner[-1] if inner else tile)
    stages = [b.name for b in child_blocks(func.body)]
    fold_epilogues(sch, write_back, stages[stages.index(block) + 1 :])
    init = sch.decompose_reduction(rv, reduction)
    return tile, [sch.get_loops(init)[-1], sch.get_loops(write_back)[-1]]


def micro_kernel(sch: Schedule, block: str, machine: Machine, local: bool) -> Schedule | None:
    """The micro-kernel of the module docstring; accumulating in place on one thread unless
    `local` and the tile's columns run as guard-free lanes. Raises ScheduleError when a
    primitive refuses."""
    func = sch.func
    stage = canonical_stage(sch, sch.get_block(block))
    if stage is None or not stage.reduce:
        return None
    axes = register_axes(stage)
    if axes is None:
        return None
    u, v, group = axes
    lanes = machine.lanes(stage.dtype)
    cols = column_tile(v.extent, lanes)
    cols = decide(sch, f"{block}.columns", [cols, *column_tiles(v.extent, lanes)], cols)
    rows = row_tile(u.extent, cols, lanes, machine.vector_registers)
    options = row_tiles(u.extent, cols, lanes, machine.vector_registers)
    if group is not None:  # a tile's rows in one group
        rows = divisor_at_most(group, rows)
        options = [r for r in options if group % r == 0]
    w = plane_axis(stage, u, v) if group is None else None
    tile = None if w is None else plane_tile(u.extent, w.extent, cols, lanes,
                                             machine.vector_registers, _windowed(stage, u))
    if tile is not None:
        rows = tile[1]
    rows = decide(sch, f"{block}.rows", [rows, *options], rows)
    w1 = None
    if w is not None:
        fits = plane_tiles(w.extent, rows, cols, lanes, machine.vector_registers) or [1]
        planes = 1
        if tile is not None:  # the tuner's rows may leave room for fewer planes
            planes = tile[0] if tile[0] in fits else max(fits)
        planes = decide(sch, f"{block}.planes", [planes, *fits], planes)
        if planes > 1:
            w0, w1 = sch.split(w.loop, [None, planes])
    u0, u1 = sch.split(u.loop, [None, rows])
    v0, v1 = sch.split(v.loop, [None, cols])
    # tiles in blocks: a block's tiles run one after the other on one thread, sharing the
    # loads of their rows (or columns) in cache
    u0, um = _blocks(sch, block, "row_blocks", u0, u.extent, rows)
    v0, vm = _blocks(sch, block, "column_blocks", v0, v.extent, cols)
    panel = _packed_load(stage, u, v, cols)
    packs = local and panel is not None and _pays_to_pack(stage, u, v, panel, rows)
    swap = decide_flag(sch, f"{block}.columns_outside", packs)
    tiles = [v0, u0] if swap else [u0, v0]
    outer = []
    for a in stage.spatial:
        outer += ([tiles[0]] if a is u else [tiles[1]] if a is v
                  else [w0] if w1 is not None and a is w else [a.loop])
    axes = _swapped(stage, u, v) if swap else list(stage.spatial)  # the axis each steps
    outer, axes = _innermost_tile_loop(sch, block, outer, axes, u, v)
    inner = [lp for lp in ([vm, um] if swap else [um, vm]) if lp is not None]
    reduce = [a.loop for a in stage.reduce]
    k = stage.reduce[-1]
    steps = decide(sch, f"{block}.reduction_unroll",
                   [1, *(f for f in (2, 4, 8) if k.extent is not None and k.extent % f == 0
                         and k.extent > f)], 1)
    if steps > 1:  # the innermost reduction loop unrolled by `steps` (each sum in order)
        reduce[-1:] = sch.split(reduce[-1], [None, steps])
    planes_loop = [] if w1 is None else [w1]
    sch.reorder(*outer, *inner, *reduce, *planes_loop, u1, v1)
    # else a guard or padding would keep the lanes apart: scalar code, LLVM's try
    lanes_ok = not guarded_load_along(stage, v.var) and (
        v.extent is None or v.extent % cols == 0
        # a constant width cut by a guard: its last tile unswitched, as a symbolic one's
        or decide_flag(sch, f"{block}.guarded_columns", cols % lanes == 0))
    tile, vector_loops = None, [v1]
    chunk = None
    if local and lanes_ok and w is not None and not swap and not inner:
        chunk = _chunk_decided(sch, block, stage, planes * cols * bit_width(stage.dtype) // 8)
    if local and lanes_ok:
        packed = panel if swap else None
        if packed is not None and decide_flag(sch, f"{block}.pack", packs):
            # the tile loops the panel depends on outside, the others in each of its copies
            used = [lp for lp, a in zip(outer, axes) if _uses(packed, a)]
            rest = [lp for lp in outer if lp not in used]
            sch.reorder(*used, *rest)
            tile, nests = local_tile(sch, func, block, used, rest + inner, reduce[0])
            nests.append(_pack(sch, block, packed, tile))
        elif chunk is not None:
            tile_loops, chunks = _chunked(sch, block, outer, axes, u0, w, reduce[0], chunk,
                                          -(-u.extent // rows) if u.extent else BLOCK_TILES,
                                          machine)
            tile, nests = local_tile(sch, func, block, tile_loops, [], chunks)
        elif len(outer) >= 2 and stage.work() is None and decide_flag(
                sch, f"{block}.tile_inside_threads", enough_to_share(sch, outer[:-1], machine)):
            # the last tile loop serial inside the threads' loop: its tiles' indices count
            # up instead of coming out of divisions by symbolic extents, tile by tile
            tile, nests = local_tile(sch, func, block, outer[:-1], outer[-1:] + inner,
                                     reduce[0])
        else:
            tile, nests = local_tile(sch, func, block, outer, inner, reduce[0])
        vector_loops += nests
    if steps > 1:
        sch.unroll(reduce[-1])
    for loop in planes_loop:
        sch.unroll(loop)
    sch.unroll(u1)
    if lanes_ok:
        for loop in vector_loops:
            sch.vectorize(loop)
    if tile is not None and threads_decided(sch, tile, stage.work(), machine,
                                            f"{block}.threads"):
        sch.parallel(tile)
    return sch


def _innermost_tile_loop(sch: Schedule, block: str, outer: list[LoopRV], axes: list[Axis],
                         u: Axis, v: Axis) -> tuple[list[LoopRV], list[Axis]]:
    """The tile loops (and the axis each steps), with the decided loop of another axis than
    `u` and `v` moved innermost (-1, untuned: none; the order of u's and v's own tile
    loops is `columns_outside`). Which tiles follow each other decides what stays in cache
    from one to the next: a convolution's weights of one output-channel block, or (with
    the channel-block loop innermost) its input rows across the blocks."""
    steps = [constant(sch.get(lp).extent) != 1 for lp in outer]  # more than one tile
    # a loop with no stepping loop after it is innermost already
    others = [i for i, a in enumerate(axes)
              if a is not u and a is not v and steps[i] and any(steps[i + 1:])]
    moved = decide(sch, f"{block}.innermost_tile_loop", [-1, *others], -1)
    if moved < 0:
        return outer, axes
    order = [i for i in range(len(outer)) if i != moved] + [moved]
    return [outer[i] for i in order], [axes[i] for i in order]


def _swapped(stage: Stage, u: Axis, v: Axis) -> list[Axis]:
    """The axis each tile loop of the nest steps when the tile loops are swapped
    (`columns_outside`): u's place holds v's tile loop and v's place u's."""
    return [v if a is u else u if a is v else a for a in stage.spatial]


def _uses(load: E.BufferLoad, axis: Axis) -> bool:
    return E.uses(list(load.indices), axis.var)


def _windowed(stage: Stage, u: Axis) -> bool:
    """Whether a load's index follows `u` and a reduction axis of more than one step
    together, as a conv's input column does its output column and kernel column."""
    window = [r for r in stage.reduce if r.extent != 1]
    return any(E.uses(index, u.var) and any(E.uses(index, r.var) for r in window)
               for ld in stage.loads for index in ld.indices)


def _packed_load(stage: Stage, u: Axis, v: Axis, cols: int) -> E.BufferLoad | None:
    """The load reused across rows (moving along `v`, not using `u`) when it reads its
    panel of `cols` columns at a stride: copied into a contiguous panel once for all the
    row tiles, each reduction step then reads one run of `cols` elements."""
    load = next((ld for ld in stage.loads if stride(ld, v.var) not in (0, None)
                 and stride(ld, u.var) == 0), None)
    if load is None or stride(load, stage.reduce[-1].var) == cols:
        return None
    return load


def _pays_to_pack(stage: Stage, u: Axis, v: Axis, panel: E.BufferLoad, rows: int) -> bool:
    """Whether the untuned schedule packs `panel` (the load `_packed_load` finds; `pack`,
    with the column tiles outside): when the operand it reads is at least PACK_MIN_BYTES
    (constant extents) and at least PACK_MIN_ROW_TILES row tiles (a symbolic count:
    assumed many) share each panel. 2 threads of an Intel
    Xeon (AVX-512), M x K x N: 128 x 768 x 3072 4.35 -> 2.49 ms, 128 x 3072 x 768
    5.0 -> 2.5, 128 x 768 x 768 0.98 -> 0.58, 1024^3 16.2 -> 8.4; 128 x 512 x 512 0.27 ->
    0.26; at 256 KB and below no gain (128 x 256 x 256, 512 x 128 x 128), and the small
    corpus exports (hidden 64) ran 5-10% slower packing every strided panel."""
    extents = [v.extent, *(r.extent for r in stage.reduce)]
    if any(e is None for e in extents):
        return False
    if math.prod(extents) * bit_width(panel.buffer.dtype) // 8 < PACK_MIN_BYTES:
        return False
    return u.extent is None or u.extent >= PACK_MIN_ROW_TILES * rows


def reduction_chunk(step_bytes: int, steps: int | None) -> int | None:
    """The untuned chunk of the first reduction loop (`steps` iterations, each reading
    `step_bytes` of the tile's reused loads, all planes' weights): None (no chunks) when the
    whole reduction's are at most CHUNK_ABOVE bytes, which L1 holds for the tile, else the
    largest proper divisor of `steps` whose chunk is at most CHUNK_BYTES (at least 1)."""
    if steps is None or steps < 2 or steps * step_bytes <= CHUNK_ABOVE:
        return None
    return max(d for d in range(1, steps) if steps % d == 0
               and (d == 1 or d * step_bytes <= CHUNK_BYTES))


def block_rows(row_tiles: int, extent: int, tiles: int | None, cores: int) -> int:
    """How many steps of the tile loop outside the row tiles (a conv's output rows) one block
    holds untuned: the fewest dividing `extent` that give the block BLOCK_TILES tiles, fewer
    while the blocks (`tiles` loop iterations outside, None: many) would not give each core
    4 of them."""
    divisors = [d for d in range(1, extent + 1) if extent % d == 0]
    rows = next((d for d in divisors if d * row_tiles >= BLOCK_TILES), extent)
    while tiles is not None and rows > 1 and tiles * (extent // rows) < 4 * cores:
        rows = max(d for d in divisors if d < rows)
    return rows


def _chunk_decided(sch: Schedule, block: str, stage: Stage, plane_bytes: int) -> int | None:
    """The decided chunk of the first reduction loop (`reduction_chunk`; 0 in the trace:
    none), for a tile whose planes' reused loads take `plane_bytes` a reduction step."""
    first, rest = stage.reduce[0], stage.reduce[1:]
    if not rest or first.extent is None or any(r.extent is None for r in rest):
        return None
    step_bytes = plane_bytes * math.prod(r.extent for r in rest)
    default = reduction_chunk(step_bytes, first.extent) or 0
    divisors = [d for d in (1, 2, 4, 8, 16) if d < first.extent and first.extent % d == 0]
    return decide(sch, f"{block}.reduction_chunk", [default, 0, *divisors], default) or None


def _chunked(sch: Schedule, block: str, outer: list[LoopRV], axes: list[Axis], u0: LoopRV,
             w: Axis, first: LoopRV, chunk: int, row_tiles: int,
             machine: Machine) -> tuple[list[LoopRV], LoopRV]:
    """Reorder the nest for a chunked reduction: the tile loops (less the row tiles and the
    decided block of the loop outside them), the chunks of the `first` reduction loop, the
    block's tile loops, then the rest of the reduction and the micro-kernel. Returns the
    tile loops and the chunk loop, before which the block's accumulators start."""
    chunks, within = sch.split(first, [None, chunk])
    at = outer.index(u0)
    before, after, block_loops = outer[:at], outer[at + 1:], [u0]
    if at >= 1 and axes[at - 1] is not w:
        extent = constant(sch.get(before[-1]).extent)
        if extent is not None and extent > 1:
            others = [constant(sch.get(lp).extent) for lp in before[:-1] + after]
            tiles = None if None in others else math.prod(others)
            rows = block_rows(row_tiles, extent, tiles, machine.cores)
            rows = decide(sch, f"{block}.block_rows",
                          [rows, *(d for d in range(1, min(extent, 16) + 1) if extent % d == 0)],
                          rows)
            if rows > 1:
                steps, held = sch.split(before[-1], [None, rows])
                before, block_loops = [*before[:-1], steps], [held, u0]
    tile_loops = before + after
    sch.reorder(*tile_loops, chunks, *block_loops, within)
    return tile_loops, chunks


def _pack(sch: Schedule, block: str, load: E.BufferLoad, tile: LoopRV) -> LoopRV:
    """Copy what `load` reads under `tile` into a buffer of its own before the reduction
    (compact_buffers shrinks it to that panel, each thread's own); the copy's innermost
    loop, to run as vector lanes."""
    rv = sch.get_block(block)
    index = next(i for i, r in enumerate(sch.get(rv).reads) if r.buffer is load.buffer)
    copy = sch.cache_read(rv, index, "global")
    sch.compute_at(copy, tile)
    return sch.get_loops(copy)[-1]


def _blocks(sch: Schedule, block: str, what: str, loop: LoopRV, extent: int | None,
            tile: int) -> tuple[LoopRV, LoopRV | None]:
    """(outer, within-block) loops of a tile loop split into blocks of the decided number of
    tiles (1, untuned: no split), from the divisors of a constant tile count."""
    tiles = None if extent is None else -(-extent // tile)
    count = decide(sch, f"{block}.{what}",
                   [1, *(b for b in (2, 4, 8, 16) if tiles and tiles % b == 0 and tiles > b)], 1)
    if count == 1:
        return loop, None
    outer, within = sch.split(loop, [None, count])
    return outer, within


class ContractionRule:
    name = "contraction"

    def apply(self, sch: Schedule, block: str, machine: Machine) -> Schedule | None:
        sch = sch.copy()
        local = decide_flag(sch, f"{block}.local", True)
        try:
            return micro_kernel(sch.copy(), block, machine, local)
        except ScheduleError:
            if not local:
                raise
            return micro_kernel(sch.copy(), block, machine, local=False)
