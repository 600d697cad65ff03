"""Measuring candidate schedules of one kernel: built in a process pool, run in a worker process.

Each candidate is compiled (LLVM) in a pool of forked builder processes (`jobs` at a time),
then called, one at a time so that timings do not disturb each other, in a worker process
(`Worker`: spawned fresh, its parallel loops on the same threads as the runtimes use) on the
same seeded random inputs as the task's default schedule, at the sizes `shapes` gives (a size
variable it does not name is 1). A worker that crashes, hangs past `timeout` or computes
outputs other than the default's (floats within rtol 1e-4, atol 1e-5 of the largest
magnitude; everything else exactly) gives a failed measurement with the reason, never an
exception: the tuner goes on.

Timing: one call whose outputs are checked, untimed warm-up calls (at least two, for at
least 20 ms: a fresh worker's first calls start threads and touch pages, and measured a 5 ms
matmul twice as slow), then `repeats` timed repeats, each of enough calls to last about a
millisecond; the record keeps the time of one call per repeat (its median is the record's
latency). A candidate is timed *paired* with the default schedule: the two alternate,
repeat by repeat, in the same worker call, and the default's times are kept beside the
candidate's as its baseline. On a shared machine the time of one kernel drifts by 2x over
minutes (other tenants' load); the ratio of two timings taken milliseconds apart does not,
so the tuner ranks candidates by `ratio`, never by latencies taken at different times. The
arguments are copied to 64-byte boundaries first, as the runtimes' arenas place tensors.
"""

from __future__ import annotations

import functools
import multiprocessing
import signal
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from tcc.forked import forked_map
from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.dtype import to_numpy
from tcc.ir.errors import TccError
from tcc.tune.database import paired_ratio

SYMBOL = "candidate"
MIN_REPEAT_S = 1e-3  # each timed repeat runs the kernel at least this long
MIN_WARMUP_S, MIN_WARMUP_CALLS = 0.02, 2  # untimed calls before the repeats
MAX_CALLS = 1000


@dataclass(frozen=True)
class Measurement:
    seconds: tuple[float, ...] = ()
    status: str = "ok"  # or "failed"
    error: str = ""
    baseline: tuple[float, ...] = ()  # the default's times, paired with these

    @property
    def latency(self) -> float | None:
        """The median repeat (as a record's), None when failed."""
        return statistics.median(self.seconds) if self.status == "ok" and self.seconds else None

    def ratio(self, default: float | None = None) -> float | None:
        """Latency relative to the paired default's (`database.paired_ratio`; `default` the
        default schedule's usual latency, to tell a disturbed pair)."""
        return paired_ratio(self.seconds, self.baseline, default) if self.status == "ok" else None


def size_env(func: T.PrimFunc, shapes: dict[str, int]) -> dict:
    """Each size variable of `func` (in its buffers' shapes, or a scalar parameter) bound to
    its value in `shapes` by name, else 1."""
    env: dict = {}
    for p in func.params:
        dims = p.shape if isinstance(p, T.Buffer) else ()
        for v in E.free_vars(list(dims)) + ([] if isinstance(p, T.Buffer) else [p]):
            env.setdefault(v, int(shapes.get(v.name, 1)))
    return env


def concrete_inputs(func: T.PrimFunc, shapes: dict[str, int], seed: int = 0) -> list[np.ndarray]:
    """Seeded arrays for every parameter of `func` (buffers, then scalars as 0-d arrays), at
    the sizes `shapes` names (1 for any other size variable): floats ~ N(0, 1), integers in
    [0, 4), bools uniform."""
    env = size_env(func, shapes)
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


def _time_calls(shared_object: bytes, arrays: list[np.ndarray], repeats: int,
                threads: int = 0, baseline: bytes | None = None) -> tuple:
    """In the worker: the outputs of one call, then the time of one call per repeat, with
    parallel loops on `threads` threads (0: the OpenMP default); with a `baseline` shared
    object (the default schedule's), its times too, each repeat of it right before the
    candidate's: (outputs, seconds, baseline seconds)."""
    from contextlib import ExitStack

    from tcc.rt.kernels import KernelLibrary
    from tcc.rt.tensor import aligned_copy

    # aligned as the runtimes' arenas are: at numpy's 16-byte alignment, the default of a
    # 256x512x512 matmul ran 290 or 340 us depending on where its arrays landed
    arrays = [aligned_copy(a) for a in arrays]
    with ExitStack() as stack:
        lib = stack.enter_context(KernelLibrary(shared_object))
        lib.set_num_threads(threads)
        run = lib.bind(SYMBOL, arrays)  # arguments packed once: the loop times the kernel
        run()  # its results are the ones checked
        outputs = [a.copy() for a in arrays]
        runs = [run]
        if baseline is not None:
            runs.insert(0, stack.enter_context(KernelLibrary(baseline)).bind(SYMBOL, arrays))
        # warm-up: threads started, pages touched, caches and clocks settled, as they are
        # for a kernel called over and over in a model
        spent, calls = [0.0] * len(runs), 0
        while calls < MIN_WARMUP_CALLS or sum(spent) < MIN_WARMUP_S * len(runs):
            for i, f in enumerate(runs):
                start = time.perf_counter()
                f()
                spent[i] += time.perf_counter() - start
            calls += 1
        counts = [max(1, min(MAX_CALLS, int(MIN_REPEAT_S / max(s / calls, 1e-9))))
                  for s in spent]
        seconds: list[list[float]] = [[] for _ in runs]
        for _ in range(repeats):
            for i, f in enumerate(runs):
                start = time.perf_counter()
                for _ in range(counts[i]):
                    f()
                seconds[i].append((time.perf_counter() - start) / counts[i])
    return outputs, tuple(seconds[-1]), tuple(seconds[0]) if baseline is not None else ()


def _serve(conn) -> None:
    """The worker process: runs each `(work, args)` it receives and sends back ("ok",
    result) or ("error", reason), until the pipe closes."""
    import ctypes
    import ctypes.util

    # parallel kernels load the OpenMP runtime; kept loaded here, its threads stay up
    # while the candidates' libraries come and go
    gomp = ctypes.util.find_library("gomp")
    if gomp:
        try:
            ctypes.CDLL(gomp, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            pass
    conn.send(("ready", None))
    while True:
        try:
            work, args = conn.recv()
        except EOFError:
            return
        try:
            conn.send(("ok", work(*args)))
        except BaseException as e:  # a failure of the candidate, reported as data
            first = str(e).splitlines()[0] if str(e) else ""
            conn.send(("error", f"{type(e).__name__}: {first}" if first else type(e).__name__))


START_TIMEOUT = 60.0  # seconds a new worker may take to start (imports)


class Worker:
    """A process that runs candidates, started fresh ("spawn": a forked child of a process
    that ran parallel kernels could not start OpenMP threads again) and reused until one
    crashes or hangs; then it is killed and the next run starts another."""

    def __init__(self):
        self._proc = None
        self._conn = None

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        conn, child = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(child,), daemon=True)
        try:
            proc.start()
        except (OSError, RuntimeError) as e:  # e.g. spawn re-importing a script without
            conn.close()  # an `if __name__ == "__main__":` guard
            child.close()
            first = next((line.strip() for line in str(e).splitlines() if line.strip()), "")
            raise TccError(f"the measurement worker could not start: {first or type(e).__name__}"
                           ) from None
        self._proc, self._conn = proc, conn
        child.close()
        try:
            if self._conn.poll(START_TIMEOUT):
                self._conn.recv()
                return
            why = f"it did not start in {START_TIMEOUT:g} s"
        except (EOFError, OSError):
            why = f"it exited with code {self._proc.exitcode}"
        self.close()
        raise TccError(f"the measurement worker could not start: {why}")

    def run(self, work: Callable, args: tuple, timeout: float):
        """`work(*args)` in the worker: ("ok", result), or ("error"|"crash"|"timeout",
        reason). A worker that outlives `timeout` is killed."""
        if self._proc is None:
            self._start()
        try:
            self._conn.send((work, args))
            if not self._conn.poll(timeout):
                self.close()
                return "timeout", f"still running after {timeout:g} s; killed"
            return self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):  # the worker died
            proc = self._proc
            proc.join(timeout)
            code = proc.exitcode
            self.close()
            how = (f"signal {signal.Signals(-code).name}" if code is not None and code < 0
                   else f"exit code {code}")
            return "crash", f"the worker died ({how})"

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join()
            self._conn.close()
        self._proc = self._conn = None


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


def kernel_of(candidate) -> T.PrimFunc:
    """The kernel to build: a PrimFunc, or a search candidate's `func` (its schedule
    finished on first use, so a builder process finishes the candidates it builds instead
    of the tuner doing it for all of them, one after the other)."""
    return candidate if isinstance(candidate, T.PrimFunc) else candidate.func


def _build_one(candidate, target) -> tuple[str, object]:
    """("ok", shared object) or ("error", reason)."""
    try:
        return "ok", build(kernel_of(candidate), target)
    except Exception as e:  # a candidate that does not build is a failed measurement
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        return "error", reason


def build_all(candidates: Sequence, target, jobs: int = 1) -> list[tuple[str, object]]:
    """("ok", shared object) or ("error", reason) for each candidate (`kernel_of`), built by
    `jobs` forked processes (`forked_map`: they inherit the candidates, so nothing is
    pickled on the way in)."""
    return forked_map(functools.partial(_build_one, target=target), list(candidates), jobs)


class KernelBench:
    """One kernel at the shapes it is tuned at: the default schedule measured once (its
    outputs are what candidates must compute), then candidates measured paired with it."""

    def __init__(self, default: T.PrimFunc, shapes: dict[str, int], target, repeats: int = 3,
                 timeout: float = 10.0, jobs: int = 1, work: Callable = _time_calls,
                 threads: int = 0, worker: Worker | None = None):
        self.shapes, self.target, self.repeats, self.timeout = shapes, target, repeats, timeout
        self.jobs, self.work, self.threads = jobs, work, threads
        self.worker = worker or Worker()
        self.inputs = concrete_inputs(default, shapes)
        self.reference = self.baseline = None
        (status, built), = build_all([default], target)
        if status != "ok":
            raise TccError(f"the default schedule does not build ({built})")
        self.default, self.reference = self._run(built, repeats)
        if self.reference is None:
            raise TccError(f"the default schedule could not be measured ({self.default.error})")
        self.baseline = built

    @property
    def default_latency(self) -> float:
        return self.default.latency

    def _run(self, shared: bytes, repeats: int) -> tuple[Measurement, list | None]:
        args = (shared, [a.copy() for a in self.inputs], repeats, self.threads, self.baseline)
        status, result = self.worker.run(self.work, args, self.timeout)
        if status != "ok":
            return Measurement(status="failed", error=f"{status}: {result}"), None
        outputs, seconds, baseline = result
        if self.reference is not None:
            problem = _mismatch(outputs, self.reference)
            if problem:
                return Measurement(status="failed", error=f"wrong result: {problem}"), None
        return Measurement(tuple(seconds), baseline=tuple(baseline)), outputs

    def measure_each(self, candidates: Sequence,
                     repeats: int | None = None) -> Iterator[Measurement]:
        """Each candidate's measurement (a PrimFunc or a search candidate, `kernel_of`),
        paired with the default's, in order, as soon as it is taken (all are built first,
        in the pool)."""
        for status, built in build_all(candidates, self.target, self.jobs):
            if status != "ok":
                yield Measurement(status="failed", error=f"build: {built}")
            else:
                yield self._run(built, repeats or self.repeats)[0]

    def measure(self, candidates: Sequence[T.PrimFunc],
                repeats: int | None = None) -> list[Measurement]:
        """Each candidate's measurement, in order."""
        return list(self.measure_each(candidates, repeats))


class LocalRunner:
    """Candidates built by `jobs` forked processes and timed in one worker process of this
    machine, which every task's bench shares (closed by `close`; the next bench starts it
    again)."""

    def __init__(self, jobs: int = 1, timeout: float = 10.0, repeats: int = 3,
                 work: Callable = _time_calls):
        self.jobs, self.timeout, self.repeats, self.work = jobs, timeout, repeats, work
        self.worker = Worker()

    def bench(self, default: T.PrimFunc, shapes: dict[str, int], target) -> KernelBench:
        return KernelBench(default, shapes, target, self.repeats, self.timeout, self.jobs,
                           self.work, worker=self.worker)

    def close(self) -> None:
        self.worker.close()


def measure(default: T.PrimFunc, candidates: Sequence[T.PrimFunc], shapes: dict[str, int],
            target, repeats: int = 3, timeout: float = 10.0,
            work: Callable = _time_calls) -> tuple[Measurement, list[Measurement]]:
    """The default schedule's measurement and each candidate's (in order). `work` runs in
    the worker (`_time_calls`; tests pass one that crashes or hangs)."""
    worker = Worker()
    try:
        bench = KernelBench(default, shapes, target, repeats, timeout, work=work, worker=worker)
        return bench.default, bench.measure(candidates)
    finally:
        worker.close()
