"""The compile driver behind `tcc compile` / `tcc emit` and `tcc.compile`.

One flat pipeline, each stage named (DESIGN.md §1):

    import (ONNX or a PyTorch program -> IRModule) -> optimize (graph passes, tcc.lower.passes.PIPELINE)
      -> legalize (op calls -> call_tir + PrimFuncs) [-> tuning (schedules of a database)]
      -> vm (graph functions -> bytecode)
      -> kernels (each PrimFunc scheduled by the default CPU rules, tcc.lower.rules, and
         compiled to object code, in parallel and through the cache: tcc.emit.cpu_kernels)
      -> pack

The driver lives beside the rooms, not in one: it is the one place that calls all of them.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tcc.errors import TccError


class CompileError(TccError):
    """The module cannot be compiled for the target (e.g. an op without a loop program)."""


@dataclass
class StageTimes:
    seconds: dict[str, float] = field(default_factory=dict)
    # buffer accesses of a loaded .tcir that could not be proven in bounds and were guarded
    guarded: list[str] = field(default_factory=list)
    # one-line warnings of the tuning database: lines skipped, records that do not replay
    tuning_warnings: list[str] = field(default_factory=list)
    tuned: int = 0  # kernels scheduled by a tuning record
    reverted: int = 0  # kernels with a record that the in-model verdict left on the default
    kernels_cached: int = 0  # kernels whose object code came from the compile cache
    kernels_compiled: int = 0
    # files the import read besides the source (an ONNX model's external data), relative
    # to the source's folder
    read: list[str] = field(default_factory=list)
    from_pack_cache: bool = False  # the whole pack came from the pack cache
    cacheable: bool = True  # whether the target's kernels go through the compile cache


def is_torch_program(source) -> bool:
    """True for a `torch.export.ExportedProgram` or the path of a saved one (.pt2); torch
    is not imported to tell."""
    if isinstance(source, (str, os.PathLike)):
        return Path(source).suffix == ".pt2"
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(source, torch.export.ExportedProgram)


def load_module(source, guarded: list[str] | None = None, read: list[str] | None = None):
    """An IRModule from an ONNX model (ModelProto, bytes or .onnx path), a PyTorch program
    (`torch.export.ExportedProgram` or .pt2 path) or a .tcir path.

    A .tcir file comes from outside this process, so its kernels' buffer accesses that cannot
    be proven in bounds are guarded (tcc.ir.verify.guard_module; listed in `guarded`): no
    index a file states reaches memory outside its buffer. (TCC_VERIFY=1 refuses them.)
    The files an ONNX model's external data lies in are added to `read`."""
    from tcc.frontend.onnx import from_onnx
    from tcc.ir.module import IRModule

    if isinstance(source, IRModule):
        return source
    if is_torch_program(source):
        from tcc.frontend.torch import from_exported_program

        return from_exported_program(source)
    if isinstance(source, (str, os.PathLike)) and Path(source).suffix == ".tcir":
        from tcc.ir.irfile import load_module as load_tcir
        from tcc.ir.verify import guard_module

        mod = load_tcir(source)
        found = guard_module(mod)
        if guarded is not None:
            guarded += found
        return mod
    return from_onnx(source, read=read)


def _legalized(mod):
    from tcc.emit.vm import VIEW_OPS, VM_OPS
    from tcc.lower.legalize import legalize, unlegalized_ops

    # Views (reshape, squeeze, ...) stay graph calls: the VM runs them without copying.
    lowered = legalize(mod, keep=VIEW_OPS)
    left = {op: n for op, n in sorted(unlegalized_ops(lowered).items()) if op not in VM_OPS}
    return lowered, left


def _refused(lowered, left) -> list[dict]:
    from tcc.lower.legalize import no_loop_reason, unlegalized_calls

    return [{"op": call.op, "node": name, "reason": no_loop_reason(call)}
            for name, call in unlegalized_calls(lowered) if call.op in left]


def calls_without_loop_program(mod) -> list[dict]:
    """Each op call `tcc compile` would refuse: the op, the value it binds (named after the
    ONNX node's output) and why its loop program does not cover it."""
    return _refused(*_legalized(mod))


WORKAROUND = (
    "run the model with the reference interpreter instead (`tcc import MODEL -o m.tcir`, "
    "then `tcc run m.tcir`)"
)


def lower(mod):
    """Legalize; refuse ops that have neither a loop program nor a VM builtin."""
    lowered, left = _legalized(mod)
    from tcc.ir.verify import guard_module, verify_if_asked

    # every kernel is made safe whatever wrote it: size preconditions, else guarded accesses
    verify_if_asked(lowered, "legalization", guard_module(lowered))
    if left:
        listed = ", ".join(f"{op} (x{n})" for op, n in left.items())
        first = _refused(lowered, left)[0]
        raise CompileError(
            f"no loop program yet for op{'s' if len(left) > 1 else ''} {listed}; "
            f"the first is {first['node']!r} ({first['reason']}); {WORKAROUND}"
        )
    return lowered


def compile_to_bytes(source, target: str = "llvm", **options) -> bytes:
    """Compile `source` (see load_module) into the bytes of a .tvmpack, running the graph
    passes first unless `optimize` is False (`disable_passes` skips some of them), and
    scheduling every kernel by the default rules unless `schedule` is False. With
    `plan_memory` (the default) kernel outputs share arenas (docs/vm.md, "Memory
    planning"); without it each is allocated on its own. `sign` is the path of an Ed25519
    private key (PEM) that signs the pack (docs/security.md). `db` is a tuning database whose
    best record for each kernel and this target schedules it instead of the default rules
    (docs/tuning.md). With `cache`, a file compiled before with the same options comes
    whole from the pack cache (tcc.emit.pack_cache; CPU packs, not signed ones), and kernels
    compiled before come from the kernel cache (tcc.emit.object_cache): the pack is the
    same either way. `jobs` processes compile the kernels (default: this process's cores).
    `on_stage(name)` is called as each stage begins, and `times` (a StageTimes) gets their
    times and what the caches gave."""
    return b"".join(_compile(source, target, output=None, **options)[1])


def compile_to_file(source, output, target: str = "llvm", **options) -> int:
    """Compile `source` as compile_to_bytes does, and write the pack to the path `output`,
    whole or not at all; its size in bytes. The pack is written from the weights where they
    lie, without the copies one buffer of it takes (ResNet-50's 100 MB, twice), and a new pack
    cache entry shares the file written where it can instead of writing the pack again."""
    return _compile(source, target, output=output, **options)[0]



def _compile(
    source,
    target: str = "llvm",
    on_stage: Callable[[str], None] | None = None,
    times: StageTimes | None = None,
    optimize: bool = True,
    disable_passes: Iterable[str] = (),
    schedule: bool = True,
    plan_memory: bool = True,
    sign=None,
    db=None,
    cache: bool = True,
    jobs: int | None = None,
    output=None,
) -> tuple[int, list | None]:
    """The pack's size and buffers (tcc.emit.pack.pack_parts), also written to `output` if
    given; a pack the pack cache wrote to `output` has no buffers here (None)."""
    from tcc.emit.pack import PackFile
    from tcc.emit.vm import compile_module
    from tcc.target import parse_target

    parsed_target = parse_target(target)
    signer = None
    if sign is not None:  # before any work, so that a bad key fails fast
        from tcc.emit.signing import load_signing_key

        signer = load_signing_key(sign)
    times = times if times is not None else StageTimes()
    state: dict = {}

    def stage(name: str, fn):
        if on_stage:
            on_stage(name)
        t0 = time.perf_counter()
        out = fn()
        times.seconds[name] = time.perf_counter() - t0
        return out

    packs, key, key_beside = None, None, None
    if (cache and sign is None and parsed_target.kind == "llvm"
            and isinstance(source, (str, os.PathLike))):
        from tcc.emit.pack_cache import PackCache

        packs = PackCache()
    if packs is not None and packs.limit:
        options = {"optimize": optimize, "disable_passes": sorted(disable_passes),
                   "schedule": schedule, "plan_memory": plan_memory}

        def look():
            if not packs.may_hold(source):  # a miss: the new entry's key is hashed beside
                return packs.key_beside(source, str(parsed_target), options, db), None, None
            return None, *packs.lookup(source, str(parsed_target), db, options, output)

        key_beside, key, hit = stage("cache", look)
        if hit is not None:
            data, header = hit
            warnings = header.get("warnings", {})
            times.guarded += warnings.get("guarded", [])
            times.tuning_warnings += warnings.get("tuning_warnings", [])
            times.tuned, times.from_pack_cache = warnings.get("tuned", 0), True
            times.reverted = warnings.get("reverted", 0)
            return header["size"], None if data is None else [data]

    try:
        state["mod"] = stage("import", lambda: load_module(source, times.guarded, times.read))
    finally:
        if key_beside is not None:  # joined before anything forks
            key = key_beside.result()
    if optimize:
        from tcc.lower.passes import run_pipeline

        state["mod"] = stage(
            "optimize", lambda: run_pipeline(state["mod"], disable_passes, target=parsed_target)
        )
    state["lowered"] = stage("legalize", lambda: lower(state["mod"]))
    state["tuned"] = {}
    if schedule and db is not None:
        state["tuned"] = stage(
            "tuning", lambda: _tuned(state["lowered"], str(parsed_target), db, times))
    state["exe"] = stage("vm", lambda: compile_module(state["lowered"], plan=plan_memory))
    # the pack goes to `output` as it becomes known; a cache entry needs its digest
    pack_file = (PackFile(output, digest=key is not None)
                 if output is not None or key is not None else None)
    try:
        parts, written = _kernels_and_pack(state, parsed_target, schedule, jobs, cache, signer,
                                           times, stage, pack_file)

        def write():
            if pack_file is not None:
                pack_file.write(parts[written:])
                pack_file.commit()
            if key is not None:
                packs.put(key, parts, source, times.read, {
                    "guarded": times.guarded, "tuning_warnings": times.tuning_warnings,
                    "tuned": times.tuned, "reverted": times.reverted}, written=output,
                    sha256=pack_file.sha256)

        if pack_file is not None:
            stage("write", write)
    except BaseException:
        if pack_file is not None:
            pack_file.discard()
        raise
    return sum(memoryview(part).nbytes for part in parts), parts


def _kernels_and_pack(state: dict, target, schedule: bool, jobs, cache: bool, signer,
                      times: StageTimes, stage, pack_file) -> tuple[list, int]:
    """The `kernels` and `pack` stages: the pack's buffers, and how many of them (the
    weights, written to `pack_file` while the CPU kernels compile) are in it already."""
    from tcc.emit.cpu_kernels import compile_kernels
    from tcc.emit.object_cache import ObjectCache
    from tcc.emit.pack import pack_parts, weights_member

    lowered, exe = state["lowered"], state["exe"]
    if target.kind == "cuda":
        from tcc.emit.cuda import compile_cuda_module

        cuda = stage("kernels", lambda: compile_cuda_module(
            lowered.prim_funcs, target, schedule, state["tuned"]))
        times.kernels_compiled, times.cacheable = len(cuda.kernels), False
        return stage("pack", lambda: pack_parts(
            exe, None, str(target), lowered.const_values, sign=signer,
            device_kernels={"cuda": cuda.device_kernels(target)})), 0

    def weights():  # this process's work while the kernels compile
        state["weights"] = weights_member(lowered.const_values)
        if pack_file is not None:
            pack_file.write(state["weights"].tar_parts)

    built = stage("kernels", lambda: compile_kernels(
        lowered.prim_funcs, target, schedule, state["tuned"], jobs,
        ObjectCache() if cache else None, meanwhile=weights))
    times.kernels_cached, times.kernels_compiled = built.cached, built.compiled
    parts = stage("pack", lambda: pack_parts(
        exe, built.module, str(target), state["weights"], sign=signer))
    return parts, len(state["weights"].tar_parts)  # the pack's first buffers (pack_parts)


def _tuned(lowered, target: str, db, times: StageTimes) -> dict:
    """The kernels the tuning database `db` (a path) schedules; its warnings go to `times`."""
    from tcc.tune.apply import reverted_kernels, tuned_prim_funcs
    from tcc.tune.database import Database

    database = Database(db)
    reverted = reverted_kernels(lowered, target, database)
    tuned, warnings = tuned_prim_funcs(lowered, target, database, reverted)
    times.tuning_warnings += database.problems + warnings
    times.tuned, times.reverted = len(tuned), len(reverted)
    return tuned


def compile(  # noqa: A001
    model_or_path, target: str = "llvm", output=None, optimize: bool = True,
    schedule: bool = True, sign=None,
) -> bytes | None:
    """Compile a model into a .tvmpack: returns its bytes, or writes `output` and returns None.
    `optimize=False` skips the graph passes, `schedule=False` the default schedule rules;
    `sign` (an Ed25519 private key's PEM file) signs the pack."""
    if output is None:
        return compile_to_bytes(model_or_path, target, optimize=optimize, schedule=schedule, sign=sign)
    compile_to_file(model_or_path, output, target, optimize=optimize, schedule=schedule, sign=sign)
    return None


def compile_onnx(model, target: str = "llvm", optimize: bool = True, schedule: bool = True):
    """Compile an ONNX model (or any source load_module reads) and load it: returns
    `fn(*arrays) -> list of outputs` in the graph's output order. `schedule=False` skips
    the default schedule rules."""
    import tempfile

    data = compile_to_bytes(model, target, optimize=optimize, schedule=schedule)
    with tempfile.NamedTemporaryFile(suffix=".tvmpack", delete=False) as f:
        f.write(data)
        path = f.name
    try:
        return load_fn(path)
    finally:
        os.unlink(path)  # the pack is memory-mapped: the mapping outlives the name


def compile_program(program, target: str = "llvm", optimize: bool = True, schedule: bool = True):
    """Compile a `torch.export.ExportedProgram` (or a .pt2 path) and load it: returns
    `fn(*arrays) -> list of outputs` in the program's output order."""
    if not is_torch_program(program):
        raise TccError(f"expected a torch.export.ExportedProgram or a .pt2 path, got "
                       f"{type(program).__name__}")
    return compile_onnx(program, target, optimize=optimize, schedule=schedule)


def load_fn(path):
    """Load a pack as `fn(*arrays) -> list of outputs` of its main function, with the loaded
    module as `fn.module`."""
    from tcc.rt import load

    module = load(path)

    def fn(*arrays):
        return module["main"](*arrays)

    fn.module = module
    return fn
