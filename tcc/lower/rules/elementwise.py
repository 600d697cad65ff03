"""Elementwise, broadcast and injective stages (and the injective chains fuse-ops inlines
into one stage): vector lanes over the innermost loop, threads over the rest.

Applies to a canonical stage without reduction variables. The innermost loop runs as vector
lanes (stores along it are contiguous whenever it indexes the output's last dimension, which
te programs always do; loads may gather, as in a transpose) unless a padding select along
it would keep the backend from doing so, and the loops outside it are fused into one
parallel loop when the stage is large enough to share. Decisions (`decide`): the lanes
loop's width and whether the outer loops run on threads.
"""

from __future__ import annotations

from tcc.lower.rules.analysis import canonical_stage, guarded_load_along
from tcc.lower.rules.machine import Machine, parallelize, vector_split
from tcc.lower.schedule import Schedule


class ElementwiseRule:
    name = "elementwise"

    def apply(self, sch: Schedule, block: str, machine: Machine) -> Schedule | None:
        sch = sch.copy()
        stage = canonical_stage(sch, sch.get_block(block))
        if stage is None or stage.reduce or not stage.axes:
            return None
        inner = stage.axes[-1]
        outer = [a.loop for a in stage.axes]
        if not guarded_load_along(stage, inner.var):
            rest, lanes = vector_split(sch, inner.loop, inner.extent, machine.lanes(stage.dtype),
                                       f"{block}.lanes")
            if lanes is not None:
                outer = outer[:-1] + ([rest] if rest is not None else [])
                sch.vectorize(lanes)
        parallelize(sch, outer, stage.work(), machine, f"{block}.threads")
        return sch
