"""Tuning tasks: the distinct kernels of a lowered module, each with its weight.

A task is one workload (the structural hash of a PrimFunc as legalized, the key of its
tuning records) and how many times one run of the entry function calls it: kernels that
several bindings call, within a model or across models, are tuned once. A call inside a
loop or scan body counts once, since the trip count is known only at run time.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass

from tcc.ir.graph import CallTIR
from tcc.ir.module import IRModule
from tcc.ir.structural import structural_hash
from tcc.ir.tir import PrimFunc


def workload_key(func: PrimFunc) -> str:
    """The key a kernel's tuning records are stored under: the structural hash of its
    PrimFunc as legalized (symbolic in its sizes, so one key serves every batch size)."""
    return structural_hash(func)


@dataclass(frozen=True)
class Task:
    workload: str
    name: str  # the first kernel of the module with this workload
    func: PrimFunc
    weight: int  # calls per run


def extract_tasks(mod: IRModule) -> list[Task]:
    """The tasks of a lowered module, heaviest first (ties in kernel order)."""
    calls: Counter[str] = Counter()
    for f in mod.graph_functions.values():
        for b in f.bindings:
            if isinstance(b.value, CallTIR):
                calls[b.value.func] += 1
    by_workload: dict[str, list] = {}
    for name, func in mod.prim_funcs.items():
        entry = by_workload.setdefault(workload_key(func), [name, func, 0])
        entry[2] += calls[name]
    tasks = [Task(w, name, func, weight) for w, (name, func, weight) in by_workload.items()]
    order = {t.workload: i for i, t in enumerate(tasks)}
    return sorted(tasks, key=lambda t: (-t.weight, order[t.workload]))


def model_key(mod: IRModule) -> str:
    """The key of a model's in-model verdicts: a hash of its tasks (workload and calls per
    run), so a model compiled as it was tuned finds them and a changed one does not."""
    tasks = sorted((t.workload, t.weight) for t in extract_tasks(mod))
    return hashlib.sha256(json.dumps(tasks).encode()).hexdigest()
