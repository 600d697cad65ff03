"""Epilogues folded into a write-back, so a result goes to memory once, for every target kind.

A stage that accumulates in a local buffer (`cache_write`) writes it back in a block of its
own; the elementwise stages after it that read what it stores (a bias, an activation)
become part of that write-back, one element for one element.
"""

from __future__ import annotations

from tcc.lower.schedule import BlockRV, Schedule, ScheduleError


def fold_epilogues(sch: Schedule, write_back: BlockRV, stages: list[str]) -> None:
    """Fold the stages that follow, in order, into the write-back while each reads what the
    write-back stores and reverse_compute_inline accepts it (one element per element)."""
    for name in stages:
        stored = sch.get(write_back).writes[0].buffer
        consumer = sch.get_block(name)
        if not any(r.buffer is stored for r in sch.get(consumer).reads):
            return
        try:
            sch.reverse_compute_inline(consumer)
        except ScheduleError:
            return
