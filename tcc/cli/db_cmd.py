"""`tcc db show DB` and `tcc db merge A B ... -o C`: what a tuning database holds, and the
union of several."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from tcc.errors import TccError
from tcc.infile import not_a_file
from tcc.tune.database import Database, best_record, default_latency, merge


@click.group("db")
def command():
    """Tuning databases: one JSON record a line, each a measured schedule of one kernel
    (docs/tuning.md). `tcc compile --db` applies the best record of each kernel."""


def _warn(problems: list[str]) -> None:
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    for p in problems:
        err.print(f"warning: {p}", markup=False)


@command.command("show")
@click.argument("db", type=click.Path(dir_okay=False, path_type=Path))
def show_command(db: Path):
    """The best record of each workload and target (the one `tcc compile --db` applies),
    with its speedup over the default schedule, measured alongside it; its time is the
    default's divided by that speedup, the default's the median of all its measurements
    (its own and those beside each candidate). Targets are shown by kind and CPU; the
    database holds their full strings. Then the latest in-model check of each model `tcc
    tune` checked: how many tuned kernels it keeps, and which keep the default schedule."""
    why = not_a_file(db)
    if why:
        raise TccError(f"{db}: {why}")
    database = Database(db)
    _warn(database.problems)
    keys = dict.fromkeys((r.workload, r.target) for r in database.records)
    table = Table(title=f"{db}: {len(database.records)} records, {len(keys)} workloads",
                  title_justify="left")
    for col in ("workload", "target", "ok", "failed", "default ms", "best ms", "speedup"):
        table.add_column(col, justify="right" if col not in ("workload", "target") else "left")
    for workload, target in keys:
        records = database.for_workload(workload, target)
        ok = [r for r in records if r.latency is not None]
        found = best_record(records)
        best = found[0] if found else None
        default = default_latency(records)
        speedup = f"{1 / found[1]:.2f}x" if default and found else "-"
        # the best at the pace the default was measured at: its own latency may have been
        # taken while the machine ran slower or faster
        best_ms = (f"{default * found[1] * 1e3:.3f}" if default and found else
                   "-" if best is None else f"{best.latency * 1e3:.3f}")
        table.add_row(workload[:12], _short_target(target), str(len(ok)),
                      str(len(records) - len(ok)),
                      "-" if default is None else f"{default * 1e3:.3f}", best_ms, speedup)
    out = Console(highlight=False, soft_wrap=True)
    out.print(table)
    latest = {(c.model, c.target): c for c in database.checks}
    for check in latest.values():
        out.print(_check_line(check), markup=False)


def _check_line(check) -> str:
    """The latest in-model verdict on one model and target, in one line."""
    medians = check.medians()
    kept = check.variants[check.chosen]["tuned"]
    shapes = ", ".join(f"{k}={'x'.join(map(str, v))}" for k, v in check.inputs.items())
    reverted = ", ".join(w[:12] for w in check.reverted) or "none"
    return (f"in-model check of model {check.model[:12]} ({_short_target(check.target)}, "
            f"{shapes}): keeps {kept} of {check.variants[0]['tuned']} tuned kernels, "
            f"{medians[check.chosen]:.4f} ms against {medians[-1]:.4f} ms untuned; "
            f"default schedule kept for: {reverted}")


def _short_target(target: str) -> str:
    """The target's kind and CPU: its feature list runs to a thousand characters."""
    words = target.split()
    return " ".join(words[:1] + [w for w in words[1:] if w.startswith("-mcpu=")])


@command.command("merge")
@click.argument("dbs", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The merged database to write (whole or not at all).")
def merge_command(dbs: tuple[Path, ...], output: Path):
    """Write every distinct record of the databases DBS into one."""
    for db in dbs:
        why = not_a_file(db)
        if why:
            raise TccError(f"{db}: {why}")
    count, problems = merge(dbs, output)
    _warn(problems)
    Console(highlight=False).print(f"merged {len(dbs)} databases -> {output}: {count} records")
