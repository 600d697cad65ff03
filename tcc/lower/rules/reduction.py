"""Reductions without operand reuse to block for (softmax and layer-norm statistics, pooling,
mean, sums, matrix-vector products): threads over the output, vector lanes where the
output's last axis allows.

Applies to a canonical stage with reduction variables. When the spatial axis that indexes
the output's last dimension moves every load by one element or not at all (pooling with
stride 1, a column sum), it moves inside the reduction loops and runs as vector lanes,
each lane accumulating its own output element. When a load would gather along it (a row
sum reads along the reduced axis) the reduction stays innermost and serial: reordering the
additions would change rounding. The spatial loops outside are fused into one parallel loop.
Decisions (`decide`): the lanes loop's width and whether the outer loops run on threads.
"""

from __future__ import annotations

from tcc.lower.rules.analysis import Stage, canonical_stage, guarded_load_along, stride
from tcc.lower.rules.machine import Machine, parallelize, vector_split
from tcc.lower.schedule import Schedule


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
            rest, lanes = vector_split(sch, axis.loop, axis.extent, machine.lanes(stage.dtype),
                                       f"{block}.lanes")
            if lanes is not None:
                outer.remove(axis.loop)
                outer += [rest] if rest is not None else []
                sch.reorder(*outer, *(a.loop for a in stage.reduce), lanes)
                sch.vectorize(lanes)
        parallelize(sch, outer, stage.work(), machine, f"{block}.threads")
        return sch
