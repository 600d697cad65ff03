"""Default schedule rules: every PrimFunc gets a fast schedule for its target without tuning.

The rules are kept per target kind, each kind a folder with its `RULE_SET`
(`tcc/lower/rules/cpu/` for `llvm`, `tcc/lower/rules/cuda/` for `cuda`); the driver here
asks the target's kind which set applies, so a new target is a new folder and one line
in `RULE_SETS`.

A kernel is a sequence of stages (the child blocks of its root block: a convolution and
its epilogue, the max, exp, sum and output stages of a softmax). A kernel rule (row-wise
kernels) may schedule all the stages together; otherwise each stage gets the first stage
rule that applies to it, recognised by structure (iteration-variable kinds, how loads move
along each axis, extents), never by kernel name. A rule returns None when its
preconditions do not hold; a primitive that refuses (`ScheduleError`) discards the rule's
whole schedule for that stage and the next rule is tried, so a stage ends up scheduled
correctly or left as it was, never changed in meaning. Rules use only schedule primitives,
which check that the result is unchanged; a rule may fold the stages after its own into it
(an epilogue into a write-back). Once every stage is scheduled, `compact_buffers` allocates
each intermediate buffer where it is used, at the size used, and `unswitch_guards` gives
every tile whose guards (and padding selects) can be tested up front a copy without them.

Every choice a rule makes that a tuner may revisit (tile sizes, vector widths, threads,
which rule goes first) is a categorical sample in one schedule's trace whose default is
the untuned choice (`decide`, DESIGN.md §5): `schedule_kernel` with the tuner's
`Decisions` gives other points of the same space, and a rule written later is tunable by
construction.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from tcc.ir import tir as T
from tcc.ir.module import IRModule
from tcc.ir.verify import verify_if_asked
from tcc.lower.rules.decide import decide, decide_flag
from tcc.lower.schedule import Schedule, ScheduleError, compact_buffers, unswitch_guards
from tcc.lower.schedule.barriers import insert_barriers
from tcc.lower.schedule.reduction import decompose_empty_reductions
from tcc.lower.schedule.sampling import Decisions
from tcc.lower.schedule.state import child_blocks

__all__ = [
    "RULE_SETS",
    "UNSCHEDULED",
    "RuleSet",
    "decide",
    "decide_flag",
    "finish_schedule",
    "rule_coverage",
    "rule_set",
    "schedule_kernel",
    "schedule_module",
    "schedule_prim_func",
    "stage_rules",
]

UNSCHEDULED = "unscheduled"


@dataclass(frozen=True)
class RuleSet:
    """The rules of one target kind: kernel rules (`apply(sch, machine)`), tried first on a
    kernel of several stages, then stage rules (`apply(sch, block_name, machine)`) in order;
    `machine` gives what the rules read of a target. `prepare(sch, machine)`, when given,
    gives the schedule every kernel starts from (the GPU rules inline elementwise stages there)."""

    kernel_rules: tuple
    stage_rules: tuple
    machine: Callable[[object], object]
    prepare: Callable[[Schedule, object], Schedule] | None = None


def _rule_sets() -> dict[str, RuleSet]:
    from tcc.lower.rules import cpu, cuda

    return {"llvm": cpu.RULE_SET, "cuda": cuda.RULE_SET}


RULE_SETS: dict[str, RuleSet] = {}


def rule_set(target) -> RuleSet:
    """The rules for `target`'s kind (a Target, or what a rule set's `machine` gives)."""
    if not RULE_SETS:
        RULE_SETS.update(_rule_sets())
    kind = getattr(target, "kind", None)
    if kind not in RULE_SETS:
        raise ValueError(f"no schedule rules for target kind {kind!r}; known: {', '.join(RULE_SETS)}")
    return RULE_SETS[kind]


def _stages(func: T.PrimFunc) -> list[str]:
    return [b.name for b in child_blocks(func.body)]


def _scheduled(func: T.PrimFunc, target, decisions: Decisions | None) -> tuple[Schedule, list[str]]:
    """The schedule with every stage scheduled, and the rule each stage got. Which rules
    are tried first is itself decided: the kernel rules, then each stage's rules in order,
    untuned; a tuner may skip the kernel rules or start a stage at a later rule."""
    rules = rule_set(target)
    machine = rules.machine(target)
    sch = Schedule(func, decisions=decisions or Decisions())
    if rules.prepare is not None:
        sch = rules.prepare(sch, machine)
    stages = _stages(sch.func)
    if len(stages) > 1 and rules.kernel_rules and decide_flag(sch, "kernel.whole", True):
        for rule in rules.kernel_rules:
            try:
                done = rule.apply(sch, machine)
            except ScheduleError:
                continue
            if done is not None:
                return done, [rule.name] * len(stages)
    ordered = rules.stage_rules
    used: list[str] = []
    for block in stages:
        if block not in _stages(sch.func):  # folded into an earlier stage by that stage's rule
            used.append(used[-1])
            continue
        first = decide(sch, f"{block}.rule", range(len(ordered)), 0)
        for rule in ordered[first:] + ordered[:first]:
            try:
                done = rule.apply(sch, block, machine)
            except ScheduleError:
                continue
            if done is not None:
                sch = done
                used.append(rule.name)
                break
        else:
            used.append(UNSCHEDULED)
    return sch, used


def schedule_kernel(func: T.PrimFunc, target, decisions: Decisions | None = None) -> Schedule:
    """The schedule the rules give `func` for `target` (a `Target`, or a rule set's machine),
    its choices made by `decisions` (default: each rule's untuned choice). Its trace replays
    the schedule; `finish_schedule` of its function is the kernel to compile."""
    return _scheduled(func, target, decisions)[0]


def schedule_prim_func(func: T.PrimFunc, target) -> T.PrimFunc:
    """`func` scheduled by the default rules for `target`, then finished (`finish_schedule`)."""
    return finish_schedule(schedule_kernel(func, target).func)


def finish_schedule(func: T.PrimFunc) -> T.PrimFunc:
    """A scheduled `func` with its buffers compacted: once every stage is scheduled, since
    the primitives expect buffers allocated in blocks (a micro-kernel's local tile becomes
    registers); then tiles cut by a split that does not divide get a guard-free copy for all
    but the last, and a GPU block's threads wait where they share memory (insert_barriers;
    nothing changes in a CPU kernel). First, a reduction that may run over no values gets its
    init split off (`decompose_empty_reductions`), so that it still writes it."""
    return insert_barriers(unswitch_guards(compact_buffers(decompose_empty_reductions(func))))


def stage_rules(func: T.PrimFunc, target) -> list[str]:
    """The rule each stage of `func` gets, in stage order (`UNSCHEDULED` where none applies)."""
    return _scheduled(func, target, None)[1]


def schedule_module(mod: IRModule, target, scheduled: dict | None = None) -> IRModule:
    """A new module whose PrimFuncs are scheduled by the default rules, except those
    `scheduled` gives already (by name: tuned ones); graph functions and constants are shared
    with `mod`, which is not changed."""
    machine = rule_set(target).machine(target)
    scheduled = scheduled or {}
    functions = {
        name: scheduled.get(name) or schedule_prim_func(f, machine)
        if isinstance(f, T.PrimFunc) else f
        for name, f in mod.functions.items()
    }
    scheduled = dataclasses.replace(mod, functions=functions)
    verify_if_asked(scheduled, "the default schedule rules")
    return scheduled


def rule_coverage(mod: IRModule, target) -> Counter:
    """How many stages of the module's PrimFuncs each rule schedules."""
    machine = rule_set(target).machine(target)
    return Counter(r for f in mod.prim_funcs.values() for r in stage_rules(f, machine))
