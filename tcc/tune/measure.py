"""Measuring candidate schedules of one kernel: built here, run in a worker process of their own.

Each candidate is compiled (LLVM) in this process, then called in a forked worker on the same
seeded random inputs as the task's default schedule, at the sizes `shapes` gives (a size
variable it does not name is 1). A worker that crashes, hangs past `timeout` or computes
outputs other than the default's (floats within rtol 1e-4, atol 1e-5 of the largest
magnitude; everything else exactly) gives a failed measurement with the reason, never an
exception: the tuner goes on. Timing: one warm-up call, then `repeats` timed repeats, each
of enough calls to last about a millisecond; the record keeps the time of one call per
repeat (its median is the record's latency).
"""

from __future__ import annotations

import multiprocessing
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.dtype import to_numpy
from tcc.ir.errors import TccError

SYMBOL = "candidate"
MIN_REPEAT_S = 1e-3  # each timed repeat runs the kernel at least this long
MAX_CALLS = 1000


@dataclass(frozen=True)
class Measurement:
    seconds: tuple[float, ...] = ()
    status: str = "ok"  # or "failed"
    error: str = ""


def concrete_inputs(func: T.PrimFunc, shapes: dict[str, int], seed: int = 0) -> list[np.ndarray]:
    """Seeded arrays for every parameter of `func` (buffers, then scalars as 0-d arrays), at
    the sizes `shapes` names (1 for any other size variable): floats ~ N(0, 1), integers in
    [0, 4), bools uniform."""
    env: dict = {}
    for p in func.params:
        dims = p.shape if isinstance(p, T.Buffer) else ()
        for v in E.free_vars(list(dims)) + ([] if isinstance(p, T.Buffer) else [p]):
            env.setdefault(v, int(shapes.get(v.name, 1)))
    rng = np.random.default_rng(seed)
    arrays = []
    for p in func.params:
        if not isinstance(p, T.Buffer):
            arrays.append(np.array(env[p], to_numpy(p.dtype)))
            continue
        shape = [d if isinstance(d, int) else int(E.evaluate(d, env)) for d in p.shape]
        dtype = np.dtype(to_numpy(p.dtype))
        if dtype.kind == "f":
            arrays.append(rng.standard_normal(shape).astype(dtype))
        elif dtype.kind == "b":
            arrays.append(rng.random(shape) < 0.5)
        else:
            arrays.append(rng.integers(0, 4, shape).astype(dtype))
    return arrays


def build(func: T.PrimFunc, target) -> bytes:
    """The shared object of one kernel, exported as SYMBOL."""
    from tcc.emit.llvm import compile_prim_funcs

    module = compile_prim_funcs({SYMBOL: func}, target)
    if module.shared_object is None:
        raise TccError(f"target {target}: kernels for another machine cannot be measured here")
    return module.shared_object


def _time_calls(shared_object: bytes, arrays: list[np.ndarray], repeats: int) -> tuple:
    """In the worker: the outputs of one call, then the time of one call per repeat."""
    from tcc.rt.kernels import KernelLibrary

    with KernelLibrary(shared_object) as lib:
        lib.call(SYMBOL, arrays)  # warm-up; its results are the ones checked
        outputs = [a.copy() for a in arrays]
        start = time.perf_counter()
        lib.call(SYMBOL, arrays)
        once = max(time.perf_counter() - start, 1e-9)
        calls = max(1, min(MAX_CALLS, int(MIN_REPEAT_S / once)))
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(calls):
                lib.call(SYMBOL, arrays)
            seconds.append((time.perf_counter() - start) / calls)
    return outputs, tuple(seconds)


def _worker(conn, work: Callable, args: tuple) -> None:
    try:
        conn.send(("ok", work(*args)))
    except BaseException as e:  # a failure of the candidate, reported as data
        first = str(e).splitlines()[0] if str(e) else ""
        conn.send(("error", f"{type(e).__name__}: {first}" if first else type(e).__name__))
    finally:
        conn.close()


def run_isolated(work: Callable, args: tuple, timeout: float):
    """`work(*args)` in a forked process: ("ok", result), or ("error"|"crash"|"timeout",
    reason). The process is killed when it outlives `timeout`."""
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_worker, args=(send, work, args), daemon=True)
    proc.start()
    send.close()
    try:
        if not receive.poll(timeout):
            proc.kill()
            proc.join()
            return "timeout", f"still running after {timeout:g} s; killed"
        try:
            return receive.recv()
        except EOFError:  # the pipe closed unsent: the worker is dying
            proc.join(timeout)
        code = proc.exitcode
        how = (f"signal {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exit code {code}")
        return "crash", f"the worker died ({how})"
    finally:
        receive.close()
        if proc.is_alive():
            proc.kill()
            proc.join()


def _mismatch(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> str:
    for i, (g, w) in enumerate(zip(got, want)):
        if w.dtype.kind == "f":
            scale = float(np.nanmax(np.abs(w))) if w.size and np.isfinite(w).any() else 0.0
            bad = ~np.isclose(g, w, rtol=1e-4, atol=1e-5 * max(scale, 1.0), equal_nan=True)
        else:
            bad = g != w
        if bad.any():
            return (f"argument {i}: {int(bad.sum())} of {bad.size} elements differ from the "
                    "default schedule's")
    return ""


def measure(default: T.PrimFunc, candidates: Sequence[T.PrimFunc], shapes: dict[str, int],
            target, repeats: int = 3, timeout: float = 10.0,
            work: Callable = _time_calls) -> tuple[Measurement, list[Measurement]]:
    """The default schedule's measurement and each candidate's (in order). `work` runs in
    the worker (`_time_calls`; tests pass one that crashes or hangs)."""
    inputs = concrete_inputs(default, shapes)

    def one(func: T.PrimFunc, reference: list | None):
        try:
            shared = build(func, target)
        except Exception as e:  # a candidate that does not build is a failed measurement
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            return Measurement(status="failed", error=f"build: {reason}"), None
        status, result = run_isolated(work, (shared, [a.copy() for a in inputs], repeats), timeout)
        if status != "ok":
            return Measurement(status="failed", error=f"{status}: {result}"), None
        outputs, seconds = result
        if reference is not None:
            problem = _mismatch(outputs, reference)
            if problem:
                return Measurement(status="failed", error=f"wrong result: {problem}"), None
        return Measurement(tuple(seconds)), outputs

    base, reference = one(default, None)
    if reference is None:
        raise TccError(f"the default schedule could not be measured ({base.error})")
    return base, [one(c, reference)[0] for c in candidates]

