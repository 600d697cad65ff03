"""Fold a fused kernel's elementwise stages into their neighbours, before the GPU rules.

On a GPU every stage is a launch of its own, and a buffer between two launches lives in
global memory: an elementwise producer is recomputed in the stages that read it
(`compute_inline`) and an elementwise consumer of a single producer is folded into that
producer's write-back (`reverse_compute_inline`, a matmul's epilogue), so a kernel runs
as many launches as it has reductions and gathers. Both primitives refuse what would
change the result, and a refused inline leaves the stage as it was. Whether to inline at
all is a decision (`kernel.inline`), yes untuned.
"""

from __future__ import annotations

from tcc.lower.rules.decide import decide_flag
from tcc.lower.schedule import Schedule, ScheduleError
from tcc.lower.schedule.state import child_blocks


def _names(sch: Schedule) -> list[str]:
    return [b.name for b in child_blocks(sch.func.body)]


def _tried(sch: Schedule, primitive: str, name: str) -> Schedule:
    """`sch` with `primitive` applied to block `name`, or `sch` itself where it refuses."""
    trial = sch.copy()
    try:
        getattr(trial, primitive)(trial.get_block(name))
    except ScheduleError:
        return sch
    return trial


def inline_elementwise(sch: Schedule, target) -> Schedule:
    """Every stage inlined that can be: producers into readers, then consumers into writers."""
    if len(_names(sch)) < 2 or not decide_flag(sch, "kernel.inline", True):
        return sch
    for name in _names(sch)[:-1]:
        sch = _tried(sch, "compute_inline", name)
    for name in _names(sch)[1:]:
        sch = _tried(sch, "reverse_compute_inline", name)
    return sch
