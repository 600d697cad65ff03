"""A kernel's design space: the points the default rules reach with other decisions.

A point is the decision each labelled sample of the rules takes (label -> candidate value,
`tcc.lower.rules.cpu.machine.decide`). `realize` schedules the kernel at a point (decisions not
named take their default) and gives the schedule, whose trace is what a record stores;
`sample` draws a point at random; `mutate` changes one decision of a point to another of its
candidates. The rules' control flow may depend on earlier decisions (a tile width that does
not divide leaves the accumulation in place), so a point is realized by running the rules
again, not by editing a trace: every realized point is a schedule the rules build from
checked primitives, and computes what the default does.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from functools import cached_property

from tcc.forked import forked_map
from tcc.ir.structural import structural_hash
from tcc.ir.tir import PrimFunc
from tcc.lower.rules import finish_schedule, schedule_kernel
from tcc.lower.schedule import Schedule
from tcc.lower.schedule.sampling import Decisions
from tcc.lower.schedule.trace import Trace

Point = dict[str, int]


@dataclass(frozen=True)
class Candidate:
    """A realized point: its decisions, the candidates of each, the schedule's trace and the
    kernel as the rules left it (with its structural hash: two points may give the same
    kernel). The search scores many more candidates than it measures, so the kernel is
    finished (`finish_schedule`: compaction, unswitched guards; about as long again as the
    rules) only when `func` is asked for, to be built."""

    point: dict
    choices: dict  # label -> candidate values
    trace: Trace
    scheduled: PrimFunc
    key: str

    @cached_property
    def func(self) -> PrimFunc:
        return finish_schedule(self.scheduled)


def decisions_of(trace: Trace) -> tuple[Point, dict[str, list[int]]]:
    """The point a trace realizes and the candidates of each of its labelled samples."""
    point, choices = {}, {}
    for inst in trace.instructions:
        if inst.kind != "sample_categorical":
            continue
        attrs = dict(inst.attrs)
        label = attrs.get("label")
        if label:
            candidates = list(attrs["candidates"])
            point[label] = candidates[inst.decision]
            choices[label] = candidates
    return point, choices


def _candidate(sch: Schedule) -> Candidate:
    trace = sch.trace
    point, choices = decisions_of(trace)
    return Candidate(point, choices, trace, sch.func, structural_hash(sch.func))


def realize(func: PrimFunc, target, point: Point | None = None) -> Candidate:
    """`func` scheduled by the rules at `point` (the default where it names nothing)."""
    return _candidate(schedule_kernel(func, target, Decisions(point or {})))


def _realize_one(func: PrimFunc, target, point_and_seed: tuple) -> Candidate:
    point, seed = point_and_seed
    return _drawn(func, target, seed) if point is None else realize(func, target, point)


def realize_many(func: PrimFunc, target, points: list[Point | None], jobs: int = 1,
                 seeds: list[int] | None = None) -> list[Candidate]:
    """`realize` of each point, in order (a None point: drawn at random with the seed at
    its place in `seeds`); by `jobs` forked processes (`forked_map`) when there are enough
    points to pay for them. The rules are Python, and a round realizes a hundred points or
    so: on one core that took as long as building the round's candidates on all of them."""
    items = list(zip(points, seeds or [0] * len(points)))
    return forked_map(functools.partial(_realize_one, func, target), items, jobs,
                      serial_below=4 * jobs, chunksize=max(1, len(items) // (4 * jobs)))


def _drawn(func: PrimFunc, target, seed: int) -> Candidate:
    return _candidate(schedule_kernel(func, target, Decisions(sample=True, seed=seed)))


def sample(func: PrimFunc, target, rng: random.Random) -> Candidate:
    """A point drawn at random: every decision drawn with its probabilities."""
    return _drawn(func, target, rng.getrandbits(32))


def mutate(candidate: Candidate, rng: random.Random) -> Point | None:
    """The candidate's point with one decision changed to another of its candidates (None
    when no decision has another)."""
    open_labels = [label for label, values in candidate.choices.items() if len(values) > 1]
    if not open_labels:
        return None
    label = rng.choice(sorted(open_labels))
    others = [v for v in candidate.choices[label] if v != candidate.point[label]]
    return {**candidate.point, label: rng.choice(others)}
