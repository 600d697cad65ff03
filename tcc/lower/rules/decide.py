"""Decisions: how a rule makes each choice that a tuner may revisit.

`decide` is a categorical sample in the schedule's trace whose default is what the rule
would pick untuned (DESIGN.md §5), so the default schedule is one point of the rule's
space, and the tuner's `Decisions` pick others by the sample's label. Every rule of every
target kind decides through here.
"""

from __future__ import annotations

from tcc.lower.schedule import Schedule
from tcc.lower.schedule.state import ScheduleError


def decide(sch: Schedule, label: str, candidates, default: int) -> int:
    """One of `candidates` (distinct ints, `default` among them), chosen by the schedule's
    decisions for `label`: the default unless a tuner says otherwise."""
    options = list(dict.fromkeys(candidates))
    if default not in options:
        raise ScheduleError(f"decide: {label}: default {default} is not among {options}")
    if len(options) == 1:
        return default
    probs = [1.0] * len(options)
    return sch.get(sch.sample_categorical(options, probs, default=options.index(default),
                                          label=label))


def decide_flag(sch: Schedule, label: str, default: bool) -> bool:
    """A yes/no decision (1/0 in the trace)."""
    return bool(decide(sch, label, [int(default), int(not default)], int(default)))
