"""The in-model check that ends a tune: the model itself, timed with and without its tuned
kernels, decides which of them it keeps.

A kernel is tuned alone, called over and over on its own arrays. In a model it runs between
other kernels, and a schedule faster alone can make the model slower: its neighbours slow
down by more than it gained (a ResNet export: five tuned kernels, each faster alone, made
the model 3% slower; its two largest gains alone made it 12% faster). Where the time goes
is not always clear from a profile, which is why the model itself decides.

So the check ranks the tuned kernels by the time they claim to save in one run (calls per
run x the default's latency x (1 - relative latency)) and times the model with the
largest gains only: all of them, half, a quarter, ..., one, none. Each variant is a pack
compiled as `tcc compile --db` would compile it, run in the C runtime (no Python between
kernels, as deployed) on the tuning shapes, in alternating rounds so that drift falls on
every variant alike. The fastest by median over the rounds is kept, and the untuned model
is one of the variants, so the model as kept is never slower than untuned as timed here. The verdict is appended to the database (tcc.tune.database.ModelCheck), and
compiling the same model applies it. It changes which records apply, never a record.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tcc import __version__
from tcc.ir.module import IRModule
from tcc.tune.database import (
    Database,
    ModelCheck,
    best_record,
    default_latency,
    trace_digest,
)
from tcc.tune.tasks import extract_tasks, model_key

ROUNDS = 7
ROUND_MS = 200.0  # each variant's share of a round: tccrt's median of a few runs is cold
ENTRY = "main"


@dataclass(frozen=True)
class Gain:
    workload: str
    seconds: float  # the time its best record claims to save in one run
    trace: str  # trace_digest of that record


def ranked_gains(mod: IRModule, target: str, db: Database) -> list[Gain]:
    """The workloads of `mod` whose best record beats the default, largest claimed gain first."""
    gains = []
    for task in extract_tasks(mod):
        records = db.for_workload(task.workload, target)
        found, default = best_record(records), default_latency(records)
        if found is None or default is None or found[1] >= 1.0:
            continue
        gains.append(Gain(task.workload, task.weight * default * (1 - found[1]),
                          trace_digest(found[0].trace)))
    return sorted(gains, key=lambda g: -g.seconds)


def variant_sizes(n: int) -> list[int]:
    """How many of the largest gains each variant keeps: n, n/2, n/4, ..., 1, 0."""
    sizes, k = [n], n
    while k > 0:
        k //= 2
        sizes.append(k)
    return sorted(set(sizes), reverse=True)


def pick(round_times: list[list[float]]) -> int:
    """The variant of least median time over its rounds (the first of equals: the one that
    keeps the most tuned kernels)."""
    medians = [statistics.median(t) for t in round_times]
    return medians.index(min(medians))


def time_in_rounds(benches: list[Callable[[], float]], rounds: int) -> list[list[float]]:
    """Each bench (one call: one round's time) called once a round; each round starts one
    variant later, so none always runs first."""
    times: list[list[float]] = [[] for _ in benches]
    for r in range(rounds):
        for i in range(len(benches)):
            j = (r + i) % len(benches)
            times[j].append(benches[j]())
    return times


def check_model(lowered: IRModule, target, db: Database, inputs: dict, scratch: Path,
                rounds: int = ROUNDS, jobs: int | None = None,
                on_stage: Callable[[str], None] = lambda text: None) -> ModelCheck | None:
    """Time `lowered` (as tuned, on `target`) with the variants of its tuned kernels on
    `inputs` (name -> array), append the verdict to `db` and return it; None when no kernel
    has a record faster than its default. Packs are written under `scratch`. TccError when
    the C runtime is not built."""
    from tcc.emit.cpu_kernels import compile_kernels
    from tcc.emit.object_cache import ObjectCache
    from tcc.emit.pack import pack_parts, write_file_atomic
    from tcc.emit.vm import compile_module
    from tcc.rt.c_runtime import CRuntimePack, find_tccrt
    from tcc.tune.apply import tuned_prim_funcs
    from tcc.tune.tasks import workload_key

    find_tccrt()  # before any compiling: the check cannot run without it
    target_text = str(target)
    gains = ranked_gains(lowered, target_text, db)
    if not gains:
        return None
    tuned, _ = tuned_prim_funcs(lowered, target_text, db, reverted=set())
    workload_of = {name: workload_key(f) for name, f in lowered.prim_funcs.items()}
    sizes = variant_sizes(len(gains))
    executable = compile_module(lowered)
    cache = ObjectCache()
    packs = []
    for i, k in enumerate(sizes):
        on_stage(f"compiling the model with its {k} largest gains ({i + 1}/{len(sizes)})")
        keep = {g.workload for g in gains[:k]}
        chosen = {name: f for name, f in tuned.items() if workload_of[name] in keep}
        built = compile_kernels(lowered.prim_funcs, target, True, chosen, jobs, cache)
        path = scratch / f"variant{k}.tvmpack"
        write_file_atomic(path, pack_parts(executable, built.module, target_text,
                                           lowered.const_values))
        packs.append(CRuntimePack(path, ENTRY))
    on_stage(f"timing {len(packs)} variants of the model in the C runtime ({rounds} rounds)")
    per_run = packs[-1].bench(inputs, 20)[0]  # the untuned model
    runs = max(1, min(5000, round(ROUND_MS / max(per_run, 1e-3))))
    times = time_in_rounds([lambda p=p: p.bench(inputs, runs)[0] for p in packs], rounds)
    verdict = decide(model_key(lowered), target_text, inputs, gains, sizes, times)
    db.append(verdict)
    return verdict


def decide(model: str, target: str, inputs: dict, gains: list[Gain], sizes: list[int],
           times: list[list[float]]) -> ModelCheck:
    """The verdict on variants keeping the `sizes` largest `gains`, timed `times` (ms per
    round): the fastest is kept, and the gains it leaves out are reverted."""
    best = pick(times)
    return ModelCheck(
        model=model, target=target, inputs={name: list(a.shape) for name, a in inputs.items()},
        variants=tuple({"tuned": k, "ms": list(t)} for k, t in zip(sizes, times)), chosen=best,
        reverted={g.workload: g.trace for g in gains[sizes[best]:]}, tcc=__version__)
