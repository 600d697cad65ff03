"""A model's CPU kernels, each scheduled and compiled on its own: in parallel, through the cache.

`compile_kernels` takes a legalized module's PrimFuncs and gives the CpuModule (one object
and one shared object holding every kernel) that `compile_prim_funcs` would give of them
scheduled. Each kernel is scheduled (by its tuning record when there is one, else by the
default rules, or not at all) and compiled into an LLVM module of its own, so

* kernels are scheduled and compiled by `jobs` forked processes, which inherit the
  functions (ResNet-50: 1.1 s of rules and 3.3 s of LLVM on one core);
* a kernel compiled before, by the same tcc for the same target, comes from the object
  cache (`tcc.emit.object_cache`) without being scheduled again;

and the objects are linked with the runtime state, an object of its own (`Runtime`). Objects
do not depend on which process compiled them or whether they came from the cache, so
neither changes the pack. The objects are linked by the system C compiler, for this
machine: without one, or for another machine's target, the kernels are compiled as one
module instead, without the cache.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tcc.emit import llvm
from tcc.emit.llvm import CpuModule, ObjectFile, compile_object, compile_prim_funcs, link_objects
from tcc.emit.object_cache import ObjectCache
from tcc.emit.support import c_compiler
from tcc.forked import available_cores, forked_map
from tcc.ir import tir as T
from tcc.ir.module import IRModule
from tcc.ir.printer import print_prim_func
from tcc.ir.verify import verify_if_asked
from tcc.target import Target, parse_target


@dataclass(frozen=True)
class KernelBuild:
    module: CpuModule
    cached: int  # kernels whose object came from the cache
    compiled: int  # kernels scheduled and compiled here


def _scheduled(name: str, func: T.PrimFunc, target: Target, how: str, tuned) -> T.PrimFunc:
    if how == "unscheduled":
        return func
    if how == "tuned":
        out, by = tuned, "the tuning database's schedule"
    else:
        from tcc.lower.rules import schedule_prim_func

        out, by = schedule_prim_func(func, target), "the default schedule rules"
    verify_if_asked(IRModule(functions={name: out}), by)
    return out


def _compile_one(target: Target, job: tuple) -> ObjectFile:
    name, func, how, tuned = job
    # no IR text: a CpuModule keeps `llvm_ir` only when compiled whole (compile_prim_funcs)
    return compile_object({name: _scheduled(name, func, target, how, tuned)}, target, "kernels",
                          keep_ir=False)


@functools.lru_cache(maxsize=8)
def _state_object(target: str, opt_level: int, unroll: bool, lsr: bool) -> ObjectFile:
    """The runtime state's object, the same for every model compiled for `target` with
    these LLVM settings: compiled once per process (21 ms, as long as a small kernel)."""
    return compile_object({}, target, "state")


def _encode(obj: ObjectFile) -> bytes:
    return bytes([obj.uses_openmp]) + obj.object_code


def _decode(data: bytes) -> ObjectFile:
    return ObjectFile(data[1:], bool(data[0]))


def compile_kernels(funcs: Mapping[str, T.PrimFunc], target: str | Target = "llvm",
                    schedule: bool = True, tuned: Mapping[str, T.PrimFunc] | None = None,
                    jobs: int | None = None, cache: ObjectCache | None = None,
                    meanwhile: Callable[[], object] | None = None) -> KernelBuild:
    """The kernels `funcs` (legalized, by exported name) compiled for `target`: scheduled by
    the default rules unless `schedule` is False, those in `tuned` as it gives them (already
    scheduled); `jobs` processes (default: the cores this process may run on); objects
    looked up in and added to `cache` when one is given. `meanwhile` is other work of the
    caller's, run by this process while the kernels compile (`forked_map`)."""
    target = parse_target(target)
    tuned = dict(tuned or {})
    jobs = jobs or available_cores()
    work = []
    for name in sorted(funcs):
        how = "tuned" if name in tuned else "rules" if schedule else "unscheduled"
        work.append((name, funcs[name], how, tuned.get(name)))
    if c_compiler() is None or not target.is_host:
        scheduled = {name: _scheduled(name, f, target, how, t) for name, f, how, t in work}
        module = compile_prim_funcs(scheduled, target)
        if meanwhile is not None:
            meanwhile()
        return KernelBuild(module, 0, len(work))

    objects: list[ObjectFile | None] = [None] * len(work)
    texts = [print_prim_func(name, t if how == "tuned" else f) for name, f, how, t in work]
    keys = []
    if cache is not None:
        keys = [ObjectCache.key(str(target), how, text)
                for (_, _, how, _), text in zip(work, texts)]
        for i, key in enumerate(keys):
            data = cache.get(key)
            objects[i] = _decode(data) if data else None
    # the largest first (their text's length stands in for their compile time), so that no
    # long one is left to run alone at the end
    missing = sorted((i for i, o in enumerate(objects) if o is None),
                     key=lambda i: (-len(texts[i]), i))
    state: list[ObjectFile] = []

    def beside_children() -> None:  # this process's share: the runtime state, then the caller's
        state.append(_state_object(str(target), llvm.OPT_LEVEL, llvm.LLVM_UNROLL,
                                   llvm.LLVM_LSR))
        if meanwhile is not None:
            meanwhile()

    built = forked_map(functools.partial(_compile_one, target), [work[i] for i in missing], jobs,
                       serial_below=2 * min(jobs, 2), meanwhile=beside_children)
    for i, obj in zip(missing, built):
        objects[i] = obj
        if cache is not None:
            cache.put(keys[i], _encode(obj))
    module = link_objects([*state, *objects], [name for name, *_ in work], target)
    return KernelBuild(module, len(work) - len(missing), len(missing))
