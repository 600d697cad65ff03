"""`tcc tune MODEL.onnx|FILE.tcir --db DB [--trials N] [--budget 10m]`: measured search for the
fastest schedule of each kernel, every measurement appended to the database as it is taken."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from tcc.cli.run_cmd import parse_shapes
from tcc.errors import TccError
from tcc.infile import not_a_file

_UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_budget(text: str) -> float:
    """Seconds from '90', '90s', '10m' or '1.5h'."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if m is None or float(m.group(1)) <= 0:
        raise TccError(f"--budget {text!r}: expected a positive time such as 90s, 10m or 1h")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def _us(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:,.1f}"


ROWS = 12  # tasks shown live; the rest share a line


def _busy() -> str:
    """Why this machine looks too busy to time kernels on, or "". A schedule on fewer
    threads suffers less from another process's load than the default it is timed beside,
    so a tune beside other work can confirm schedules that are slower on an idle machine."""
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        return ""
    if load <= 0.5 * cores:
        return ""
    return (f"this machine is busy (load average {load:.1f} on {cores} cores); kernels timed "
            "beside other work may pick schedules that are slower on an idle machine")


def _table(progress, title: str, rows: int | None = ROWS) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("kernel", "calls", "trials", "default us", "best us", "speedup"):
        table.add_column(col, justify="left" if col == "kernel" else "right")
    states = sorted(progress.states, key=lambda s: -(s.task.weight * (s.default_seconds or 0)))
    for s in states[:rows]:
        speedup = "-" if s.speedup is None else f"{s.speedup:.2f}x"
        name = s.task.name + (" (done)" if s.exhausted and not s.error else "")
        name += f" (not measured: {s.error})" if s.error else ""
        table.add_row(name, str(s.task.weight), str(s.trials), _us(s.default_seconds),
                      _us(s.best_seconds), speedup)
    if rows is not None and len(states) > rows:
        table.add_row(f"... {len(states) - rows} more", "", "", "", "", "")
    before, after = progress.estimate(best=False), progress.estimate()
    elapsed = time.monotonic() - progress.started
    table.caption = (f"trials {progress.trials}/{progress.trials_wanted}, {elapsed:.0f} s; "
                     f"kernel time of one run (estimated): default {_us(before)} us, "
                     f"tuned {_us(after)} us")
    table.caption_justify = "left"
    return table


@click.command("tune")
@click.argument("source", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--db", required=True, type=click.Path(dir_okay=False, path_type=Path),
              metavar="DB", help="The tuning database: read to resume, appended to as each "
                                 "measurement is taken (created when missing).")
@click.option("--target", default="llvm", show_default=True,
              help="'llvm' (this CPU) or 'llvm -mtriple=... -mcpu=... -mattr=...'; the "
                   "kernels are measured here, so it must be this machine's.")
@click.option("--trials", type=click.IntRange(min=1), default=2000, show_default=True,
              help="Measurements in all, over every kernel, counting those the database has "
                   "already (so a stopped tune resumes).")
@click.option("--budget", metavar="TIME",
              help="Stop the search after this long (90s, 10m, 1h), everything measured so "
                   "far kept; the in-model check (seconds) runs after it.")
@click.option("--shape", "shape_pairs", multiple=True, metavar="NAME=DIMS",
              help="Sizes to tune at: an input's shape (input_ids=1,128) or a symbolic "
                   "dimension by name (batch=1). Other symbolic dimensions: 1 when leading, "
                   "else 128.")
@click.option("--search", type=click.Choice(["evolutionary", "random"]), default="evolutionary",
              show_default=True, help="How candidates are chosen: evolved and ranked by the "
                                      "cost model, or drawn at random.")
@click.option("--batch", type=click.IntRange(min=1), default=16, show_default=True,
              help="Candidates measured per round of one kernel.")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="Processes that build candidates and realize the search's points "
                   "(default: the cores tcc may run on; with --cluster, the nodes build).")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="Seconds a candidate may run before it is killed and recorded as failed.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the search.")
@click.option("--cluster", metavar="ADDRESS",
              help="Build and time candidates on a Ray cluster instead of here, one actor on "
                   "each node whose CPU is the target's: 'auto' joins the cluster running on "
                   "this machine or starts one here, ray://HOST:PORT joins that one "
                   "(pip install 'tcc[distributed]').")
@click.option("--model-check/--no-model-check", default=True, show_default=True,
              help="End by timing the model itself in the C runtime with its tuned kernels, "
                   "with only the largest gains (half, a quarter, ..., none), and keeping the "
                   "fastest: a kernel faster alone can slow its neighbours. Needs the C "
                   "runtime (make runtime); not run after Ctrl-C.")
def command(source, db, target, trials, budget, shape_pairs, search, batch, jobs, timeout, seed,
            cluster, model_check):
    """Search for the fastest schedule of each kernel of a model, measured on this machine
    (or on the nodes of a Ray cluster, --cluster).

    Each distinct kernel is a task, weighted by its calls per run and measured at the sizes
    one run of the model at --shape gives it. Its default schedule is measured first; then
    the search measures points of the default rules' space, each timed beside the default,
    guided by a cost model, and gives trials to the kernels where they promise the most; a
    candidate that looks best is measured again before it counts. Tune on an otherwise
    idle machine. Every measurement is appended
    to DB as it is taken: Ctrl-C, --budget or a kill loses nothing, and running the same
    command again goes on from there. The tune ends by timing the model itself with and
    without its tuned kernels, and keeps the fastest set (--model-check). `tcc compile --db
    DB` uses the best schedules (docs/tuning.md).
    """
    from tcc.api import load_module, lower
    from tcc.lower.passes import run_pipeline
    from tcc.target import parse_target
    from tcc.tune.database import Database
    from tcc.tune.shapes import kernel_shapes
    from tcc.tune.tuner import Tuner

    why = not_a_file(source)
    if why:
        raise TccError(f"{source}: {why}")
    if db.exists() and not_a_file(db):
        raise TccError(f"--db {db}: {not_a_file(db)}")
    seconds = None if budget is None else parse_budget(budget)
    deadline = None if seconds is None else time.monotonic() + seconds
    named = parse_shapes(shape_pairs, "NAME=DIMS for an input (input_ids=1,128) or NAME=N "
                                      "for a symbolic dimension (batch=1)")
    parsed = parse_target(target)
    if cluster is not None:
        from tcc.tune.ray_runner import require_ray

        if not cluster.strip():
            raise TccError("--cluster '': expected 'auto' or a Ray address (ray://HOST:PORT)")
        require_ray()
    if parsed.kind == "cuda":
        raise TccError(f"--target {target!r}: tcc tune does not measure CUDA kernels yet; "
                       "tune for --target llvm, or compile for CUDA with the default rules")
    if not parsed.is_host:  # the model runs here once, for its kernels' sizes
        raise TccError(f"--target {target!r}: tcc tune measures kernels on this machine, which "
                       f"is {parse_target('llvm').triple}; tune on a machine of that target")
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    out = Console(highlight=False, soft_wrap=True)
    database = Database(db)
    for p in database.problems:
        console.print(f"warning: {p}", markup=False)
    with console.status("importing, optimizing and legalizing", spinner="dots"):
        lowered = lower(run_pipeline(load_module(source), target=parsed))
    with console.status("finding each kernel's sizes (one run of the model)", spinner="dots"):
        sizes, inputs = kernel_shapes(lowered, parsed, named)
    shown = ", ".join(f"{k}={'x'.join(map(str, v.shape))}" for k, v in inputs.items())
    out.print(f"tuning {source} at {shown} for {target} ({search} search, db {db})")
    busy = _busy()
    if busy and cluster is None:
        console.print(f"warning: {busy}", markup=False)
    if jobs is None:
        from tcc.forked import available_cores

        jobs = available_cores()
    measurer = None
    if cluster is not None:
        from tcc.tune.ray_runner import RayRunner

        with console.status(f"joining the Ray cluster ({cluster})", spinner="dots"):
            measurer = RayRunner(parsed, cluster, timeout=timeout)
        out.print(f"measuring on the {len(measurer.nodes)} Ray node(s) of the target's "
                  "machine, one actor each")
    tuner = Tuner(lowered, parsed, database, sizes, search=search, batch=batch, jobs=jobs,
                  seed=seed, timeout=timeout, runner=measurer)
    title = f"tcc tune {source.name}"
    if console.is_terminal:
        with Live(console=console, refresh_per_second=2, transient=True) as live:
            progress = tuner.run(trials, deadline,
                                 lambda p: live.update(_table(p, title)))
    else:
        last = [0.0]

        def report(p):
            if time.monotonic() - last[0] >= 10:
                last[0] = time.monotonic()
                before, after = p.estimate(best=False), p.estimate()
                console.print(f"trials {p.trials}/{p.trials_wanted}: kernel time of one run "
                              f"default {_us(before)} us, tuned {_us(after)} us")

        progress = tuner.run(trials, deadline, report)
    reason = ("interrupted" if progress.interrupted else
              f"{progress.trials} trials" if progress.trials >= trials else
              "the budget ran out" if deadline is not None and time.monotonic() >= deadline
              else "every kernel's space is measured")
    out.print(_table(progress, f"{title}: stopped ({reason})", rows=None))
    if model_check and not progress.interrupted:
        _model_check(lowered, parsed, database, inputs, jobs, console, out)
    out.print(f"{len(database.records)} records in {db}; compile with `tcc compile {source} "
              f"--db {db}`")


def _model_check(lowered, target, database, inputs, jobs, console, out) -> None:
    """Run the in-model check (tcc.tune.model_check) and say what it kept."""
    from tcc.outfile import scratch_dir
    from tcc.tune.model_check import check_model

    try:
        with console.status("in-model check", spinner="dots") as status, \
                scratch_dir("tcc-check-") as tmp:
            verdict = check_model(lowered, target, database, inputs, Path(tmp), jobs=jobs,
                                  on_stage=lambda text: status.update(f"in-model check: {text}"))
    except TccError as e:
        console.print(f"warning: in-model check skipped: {e}", markup=False)
        return
    if verdict is None:
        out.print("in-model check: no kernel has a schedule faster than its default")
        return
    medians = verdict.medians()
    tuned = verdict.variants[0]["tuned"]

    def label(k: int) -> str:
        return "untuned" if k == 0 else f"all {k} tuned" if k == tuned else f"largest {k}"

    shown = ", ".join(f"{label(v['tuned'])} {m:.4f} ms" for v, m in zip(verdict.variants, medians))
    out.print(f"in-model check (C runtime, median of {len(verdict.variants[0]['ms'])} rounds): "
              f"{shown}")
    out.print(f"kept {label(verdict.variants[verdict.chosen]['tuned'])}: "
              f"{medians[verdict.chosen] / medians[-1]:.2f}x untuned; "
              f"{len(verdict.reverted)} tuned kernel(s) keep the default schedule")
