"""Elementwise, broadcast and injective stages (and the injective chains fuse-ops inlines
into one stage): vector lanes over the innermost loop, threads over the rest.

Applies to a canonical stage without reduction variables. The innermost loop runs as vector
lanes (stores along it are contiguous whenever it indexes the output's last dimension, which
te programs always do; loads may gather, as in a transpose) unless a padding select along
it would keep the backend from doing so, and the loops outside it are fused into one
parallel loop when the stage is large enough to share; when they give the cores nothing to
share (a single row), the lanes loop is cut into a part per core instead. Over symbolic
extents the last of those loops (a row, in vector steps) stays serial inside the threads'
loop when the others give every core work: the fused loop's variable is taken apart into
the stage's indices by divisions by the extents, which for symbolic extents are real
divisions, once a row rather than once a vector step (a 4 x 800 x 800 attention mask select of a wav2vec2 export: 0.83
ms with them at every vector step, 0.52 ms once a row, 2 threads). Decisions (`decide`):
the lanes loop's width, whether the outer loops run on threads, whether a row stays inside
them (`row_inside_threads`, symbolic stages only), and, for a transpose whose load gathers
along the lanes, whether it runs in tiles (`transpose_tile`, static stages: R iterations of
the axis that load is contiguous along, unrolled, around one vector step of L lanes, which
the backend loads as L contiguous rows and transposes in registers; NCHW -> NCHW16c of 64
channels at 56 x 56 ran 0.062 ms with gathers and 0.012 ms in 14 x 16 tiles, NCHW16c ->
NCHW of 272 channels at 14 x 14 0.016 and 0.006 ms; `transpose_columns` picks L), else
whether that axis moves next to the lanes (`transpose_order`: for NCHWc -> NCHW the 16
channels of a block then reuse the gathered cache lines from L1, where the default order
comes back to them from L2 after a whole plane), and whether loops whose position selects
test (`unroll_positions`: the Winograd transforms pick their coefficients by position in
the tile) run unrolled next to the lanes, where every select is decided at compile time: a
64-channel 56 x 56 input transform ran 1.42 ms with the selects at run time, 0.07-0.09 ms
unrolled (2 threads, Intel Xeon).
"""

from __future__ import annotations

import math

from tcc.ir import expr as E
from tcc.lower.rules.analysis import (
    Axis,
    Stage,
    canonical_stage,
    chosen_by_position,
    divisor_at_most,
    guarded_load_along,
    stride,
)
from tcc.lower.rules.cpu.machine import (
    Machine,
    enough_to_share,
    parallelize,
    pieces_for_threads,
    vector_split,
)
from tcc.lower.rules.decide import decide, decide_flag
from tcc.lower.schedule import Schedule

MAX_PERIOD = 8  # positions a select may choose among for its loop to be unrolled
MAX_UNROLLED_POSITIONS = 64  # copies of the stage those unrolled loops may make


class ElementwiseRule:
    name = "elementwise"

    def apply(self, sch: Schedule, block: str, machine: Machine) -> Schedule | None:
        sch = sch.copy()
        stage = canonical_stage(sch, sch.get_block(block))
        if stage is None or stage.reduce or not stage.axes:
            return None
        inner = stage.axes[-1]
        axes = list(stage.axes)
        along = _gathered_along(stage)
        tiled = _transpose_tile(sch, stage, along, machine, block)
        if tiled is not None:
            parallelize(sch, tiled, stage.work(), machine, f"{block}.threads")
            return sch
        if along is not None and along is not axes[-2] and decide_flag(
                sch, f"{block}.transpose_order", False):
            axes = [a for a in axes if a is not along and a is not inner] + [along, inner]
            sch.reorder(*[a.loop for a in axes])
        outer = [a.loop for a in axes]
        kept = _unroll_positions(sch, stage, axes, block)
        if kept is not None:
            outer = kept + [inner.loop]
        if not guarded_load_along(stage, inner.var):
            rest, lanes = vector_split(sch, inner.loop, inner.extent, machine.lanes(stage.dtype),
                                       f"{block}.lanes",
                                       pieces_for_threads(sch, outer[:-1], stage.work(), machine))
            if lanes is not None:
                outer = outer[:-1] + ([rest] if rest is not None else [])
                sch.vectorize(lanes)
        if len(outer) >= 2 and stage.work() is None and decide_flag(
                sch, f"{block}.row_inside_threads", enough_to_share(sch, outer[:-1], machine)):
            outer = outer[:-1]
        parallelize(sch, outer, stage.work(), machine, f"{block}.threads")
        return sch


def _unroll_positions(sch: Schedule, stage: Stage, axes: list[Axis],
                      block: str) -> list | None:
    """Move the loops whose position selects test (`chosen_by_position`) just outside the
    lanes loop, one period each (an axis longer than its period is split, the outer part
    staying in place), and unroll them: each unrolled copy takes one branch of the selects,
    decided at compile time. The loops left outside them, or None when none is unrolled."""
    inner = axes[-1]
    periods = chosen_by_position(stage, MAX_PERIOD)
    periods.pop(inner.var, None)
    if not periods or math.prod(periods.values()) > MAX_UNROLLED_POSITIONS:
        return None
    if not decide_flag(sch, f"{block}.unroll_positions", True):
        return None
    kept, unrolled = [], []
    for a in axes[:-1]:
        period = periods.get(a.var)
        if period is None:
            kept.append(a.loop)
        elif period == a.extent:
            unrolled.append(a.loop)
        else:
            outer_part, inner_part = sch.split(a.loop, [None, period])
            kept.append(outer_part)
            unrolled.append(inner_part)
    sch.reorder(*kept, *unrolled, inner.loop)
    for loop in unrolled:
        sch.unroll(loop)
    return kept


def _transpose_tile(sch: Schedule, stage: Stage, along: Axis | None, machine: Machine,
                    block: str) -> list | None:
    """Loads that gather along the lanes, contiguous along `along`: tiles of R x L, R
    iterations of `along` (unrolled) around one vector step of L lanes, R the largest that
    divides its extent and fits a vector, L a width that divides the innermost extent and
    fits a vector (a power of two, or at most twice an odd number, which the backend also
    runs as one step; `transpose_columns`, `_preferred_width` by default), so the backend
    loads each tile's L rows whole and transposes them in registers
    (tcc.emit.llvm_transpose); at least 4 rows and 3 lanes, so an image's 3 channels
    qualify (ResNet-50's NCHW -> NCHW3c of its 224 x 224 input: 0.131 ms as 3-lane
    gathers, 0.067 ms as 16 x 3 tiles, 2 threads of an Intel Xeon). The loops outside the
    tile, or None when this does not apply or is decided against."""
    inner = stage.axes[-1]
    if along is None or stage.work() is None or guarded_load_along(stage, inner.var):
        return None
    lanes = machine.lanes(stage.dtype)
    rows = divisor_at_most(along.extent, lanes)
    widths = [d for d in range(3, lanes + 1)
              if inner.extent % d == 0 and (d & -d == d or d & -d < 4)]
    if rows < 4 or not widths or chosen_by_position(stage, MAX_PERIOD):
        return None
    if not decide_flag(sch, f"{block}.transpose_tile", True):
        return None
    columns = decide(sch, f"{block}.transpose_columns", widths, _preferred_width(widths))
    along_out, along_in = sch.split(along.loop, [None, rows])
    inner_out, inner_in = sch.split(inner.loop, [None, columns])
    outer = [along_out if a is along else a.loop for a in stage.axes[:-1]] + [inner_out]
    sch.reorder(*outer, along_in, inner_in)
    sch.unroll(along_in)
    sch.vectorize(inner_in)
    return outer


def _preferred_width(widths: list[int]) -> int:
    """The tile's default width among `widths`: a power of two of at least 8 lanes when one
    fits, else the widest. Its rows are stored as whole aligned vectors, where a width of
    twice an odd number stores part-vectors across cache lines: NCHW16c -> NCHW of 256
    channels at 56 x 56 ran 0.101 ms in 16 x 8 tiles and 0.119 ms in 16 x 14 (2 threads,
    Intel Xeon)."""
    aligned = [w for w in widths if w & -w == w and w >= 8]
    return max(aligned or widths)


def _gathered_along(stage: Stage) -> Axis | None:
    """The axis (not the innermost) along which a load that gathers along the innermost
    axis is contiguous: its last index follows that axis and not the innermost."""
    inner = stage.axes[-1]
    for load in stage.loads:
        if stride(load, inner.var) in (0, 1) or not load.indices:
            continue
        last = load.indices[-1]
        if E.uses(last, inner.var):
            continue
        for axis in stage.axes[:-1]:
            if E.uses(last, axis.var) and axis.extent not in (None, 1):
                return axis
    return None
