"""Reductions without operand reuse to block for (softmax and layer-norm statistics, pooling,
mean, sums, matrix-vector products): threads over the output, vector lanes where the
output's last axis allows.

Applies to a canonical stage with reduction variables. When the spatial axis that indexes
the output's last dimension moves every load by one element or not at all (pooling with
stride 1, a column sum), it moves inside the reduction loops and runs as vector lanes,
each lane accumulating its own output element. When a load would gather along it (a row
sum reads along the reduced axis) the reduction stays innermost and serial: reordering the
additions would change rounding. A reduction whose result does not depend on the grouping
(a max or min, an integer sum: `exact_combiner`) with no such output axis (a whole-tensor
max, a row max) has its innermost reduction loop, when every load is contiguous along it,
split into vector lanes that each keep a partial result (`rfactor`), combined afterwards
(DynamicQuantizeLinear's range over 128 x 256 values: 155 -> 14 us). The spatial loops
outside are fused into one parallel loop; when they give the cores nothing to share (a
matrix-vector product's one row), the lanes loop is cut into a part per core instead
(`vector_split`), each output element still summing its products in order. Decisions
(`decide`): the lanes loop's width (for partial results too) and whether the outer loops
run on threads.
"""

from __future__ import annotations

from tcc.lower.rules.analysis import Stage, canonical_stage, guarded_load_along, stride
from tcc.lower.rules.cpu.machine import (
    Machine,
    parallelize,
    pieces_for_threads,
    vector_split,
)
from tcc.lower.rules.decide import decide
from tcc.lower.schedule import Schedule
from tcc.lower.schedule.rfactor import exact_combiner


def partial_lanes_axis(stage: Stage):
    """The innermost reduction axis when regrouping keeps the stage's result and every load
    moves by 0 or 1 elements along it, at least one by 1, with no padding select along it."""
    if not stage.reduce or exact_combiner(stage.block) is None:
        return None
    axis = stage.reduce[-1]
    steps = {stride(ld, axis.var) for ld in stage.loads}
    if 1 not in steps or not steps <= {0, 1} or guarded_load_along(stage, axis.var):
        return None
    return axis


def _partial_lanes(sch: Schedule, block, stage: Stage, machine: Machine) -> bool:
    """Split the stage's reduction into vector lanes of partial results (`rfactor`) when
    `partial_lanes_axis` allows; whether it did. The lanes are one to four registers wide
    (more registers: more independent chains, but more partials for each output element to
    combine), split off the axis, whose last tile is guarded where the width does not
    divide it."""
    axis = partial_lanes_axis(stage)
    if axis is None:
        return False
    lanes = machine.lanes(stage.dtype)
    widths = [w for w in (lanes, 2 * lanes, 4 * lanes)
              if axis.extent is None or w <= axis.extent]
    if not widths:
        return False
    values = 1  # values reduced into each output element (None: symbolic, assumed many)
    for a in stage.reduce:
        values = None if values is None or a.extent is None else values * a.extent
    dividing = [w for w in widths if axis.extent is not None and axis.extent % w == 0]
    default = max([w for w in dividing or widths if values is None or values >= 16 * w]
                  or [(dividing or widths)[0]])
    width = decide(sch, f"{stage.block.name}.partial_lanes", [*widths, 0], default)
    if width == 0:
        return False
    loop = axis.loop if width == axis.extent else sch.split(axis.loop, [None, width])[1]
    sch.rfactor(block, loop)
    sch.vectorize(loop)
    return True


def vector_axis(stage: Stage):
    """The output's innermost axis when every load moves by 0 or 1 elements along it and no
    padding select along it loads."""
    axis = stage.innermost_write_axis()
    if axis is None or guarded_load_along(stage, axis.var):
        return None
    if any(stride(ld, axis.var) not in (0, 1) for ld in stage.loads):
        return None
    return axis


class ReductionRule:
    name = "reduction"

    def apply(self, sch: Schedule, block: str, machine: Machine) -> Schedule | None:
        sch = sch.copy()
        stage = canonical_stage(sch, sch.get_block(block))
        if stage is None or not stage.reduce:
            return None
        outer = [a.loop for a in stage.spatial]
        axis = vector_axis(stage)
        if axis is not None:
            others = [lp for lp in outer if lp != axis.loop]
            rest, lanes = vector_split(sch, axis.loop, axis.extent, machine.lanes(stage.dtype),
                                       f"{block}.lanes",
                                       pieces_for_threads(sch, others, stage.work(), machine))
            if lanes is not None:
                outer.remove(axis.loop)
                outer += [rest] if rest is not None else []
                sch.reorder(*outer, *(a.loop for a in stage.reduce), lanes)
                sch.vectorize(lanes)
        else:
            _partial_lanes(sch, sch.get_block(block), stage, machine)
        parallelize(sch, outer, stage.work(), machine, f"{block}.threads")
        return sch
