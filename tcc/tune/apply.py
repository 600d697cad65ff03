"""Applying a tuning database when compiling: a kernel whose workload (the structural hash of
its PrimFunc as legalized) has a successful record for the target gets the best record's
trace replayed in place of the default rules. A record made for another target is never
looked at; one whose trace no longer replays (written by another tcc version, say), or whose
schedule leaves an access that cannot be proven in bounds, leaves the kernel to the default
rules, with a one-line warning. A kernel the database's latest in-model verdict on this
model reverted (tcc.tune.model_check) keeps the default rules while its best record is the
one the model was timed with."""

from __future__ import annotations

from tcc.ir.errors import TccError
from tcc.ir.module import IRModule
from tcc.ir.tir import PrimFunc
from tcc.ir.verify import guard_accesses
from tcc.lower.rules import finish_schedule
from tcc.lower.schedule import Schedule, ScheduleError
from tcc.lower.schedule.trace import Trace
from tcc.tune.database import Database, trace_digest
from tcc.tune.tasks import model_key, workload_key


def replay(func: PrimFunc, trace_json: dict) -> PrimFunc:
    """`func` scheduled by a recorded trace (ScheduleError when it does not replay)."""
    sch = Schedule(func)
    Trace.from_json(trace_json).apply(sch)
    return finish_schedule(sch.func)


def reverted_kernels(mod: IRModule, target: str, db: Database) -> set[str]:
    """The kernels of `mod` that the database's latest in-model verdict for `mod` on `target`
    reverted to the default schedule, while the best record of each is still the one the
    model was timed with."""
    verdict = db.check(model_key(mod), target) if db.checks else None
    if verdict is None or not verdict.reverted:
        return set()
    reverted = set()
    for name, func in mod.prim_funcs.items():
        workload = workload_key(func)
        digest = verdict.reverted.get(workload)
        record = db.best(workload, target) if digest else None
        if record is not None and trace_digest(record.trace) == digest:
            reverted.add(name)
    return reverted


def tuned_prim_funcs(mod: IRModule, target: str, db: Database,
                     reverted: set[str] | None = None) -> tuple[dict[str, PrimFunc], list[str]]:
    """The kernels of `mod` the database has records for on `target`, each scheduled by its
    best record except those in `reverted` (None: the in-model verdict's,
    `reverted_kernels`), and one warning for each record that does not replay."""
    tuned: dict[str, PrimFunc] = {}
    warnings: list[str] = []
    if reverted is None:
        reverted = reverted_kernels(mod, target, db)
    for name, func in mod.prim_funcs.items():
        if name in reverted:
            continue
        workload = workload_key(func)
        record = db.best(workload, target)
        if record is None:
            continue
        where = f"{db.path}: the best record of kernel {name!r} (workload {workload[:12]})"
        try:
            scheduled = replay(func, record.trace)
        except (ScheduleError, TccError) as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            warnings.append(f"{where} does not replay ({first}); it gets the default schedule")
            continue
        # a database is input from outside: its schedules must keep every access provably
        # in bounds, as the default rules do
        _, unproven = guard_accesses(scheduled, name)
        if unproven:
            warnings.append(f"{where} leaves {len(unproven)} access(es) not provably in bounds "
                            f"(first: {unproven[0]}); it gets the default schedule")
            continue
        tuned[name] = scheduled
    return tuned, warnings
