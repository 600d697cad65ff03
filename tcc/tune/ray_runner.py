"""Measuring on a Ray cluster (`tcc tune --runner ray`): candidates built and timed by actors
spread over the cluster's nodes.

Each `MeasureActor` holds a `tcc.tune.measure.Worker` and, per task, a `KernelBench` of its
own, so a candidate is built and timed, paired with the default schedule, on the node that
runs it: ratios taken on different nodes of one target compare, latencies would not. By
default there is one actor per node, so two timings never share a node's cores. Every node
must be the machine the target names; an actor on another node refuses its candidates
(each recorded as failed, saying which node).

Results come back one candidate at a time, in order, and the tuner appends each as it comes.
An actor that dies during the tune (its process killed, its node lost) fails only what it
had not finished: each of those candidates is tried once more on another actor, then
recorded as failed, and a fresh actor takes the dead one's place. Ray is an optional extra
(`pip install 'tcc[ray]'`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Sequence

from tcc.errors import TccError
from tcc.ir import tir as T
from tcc.tune.measure import KernelBench, Measurement, Worker, kernel_of

START_SECONDS = 120.0  # an actor's build, plus the candidate's timeout, before giving up


def require_ray():
    """The ray module, or a one-line error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise TccError("--runner ray needs Ray: pip install 'tcc[ray]'") from None
    return ray


class MeasureActor:
    """The remote side (a Ray actor): benches per task, one worker process, this node."""

    def __init__(self, target_text: str, repeats: int, timeout: float):
        from tcc.target import parse_target

        self.target = parse_target(target_text)
        here = parse_target("llvm")
        self.refusal = ""
        if str(here) != str(self.target):
            self.refusal = (f"node {socket.gethostname()} is {here.triple} -mcpu={here.cpu}, "
                            f"not the target {target_text.split()[0]} -mcpu={self.target.cpu}")
        self.repeats, self.timeout = repeats, timeout
        self.worker = Worker()
        self.benches: dict[str, KernelBench] = {}

    def pid(self) -> int:
        return os.getpid()

    def _bench(self, key: str, default: T.PrimFunc, shapes: dict) -> KernelBench:
        if key not in self.benches:
            self.benches[key] = KernelBench(default, shapes, self.target, self.repeats,
                                            self.timeout, worker=self.worker)
        return self.benches[key]

    def measure(self, key: str, default: T.PrimFunc, shapes: dict, func: T.PrimFunc | None,
                repeats: int | None) -> tuple[str, object]:
        """("ok", the default's measurement when `func` is None, else the candidate's), or
        ("error", why the task's default cannot be measured here)."""
        if self.refusal:
            return "error", self.refusal
        try:
            bench = self._bench(key, default, shapes)
        except TccError as e:
            return "error", str(e)
        if func is None:
            return "ok", bench.default
        return "ok", bench.measure([func], repeats)[0]


class RayRunner:
    """Actors on a Ray cluster (started locally when `address` is None and none is running;
    joined at `address` otherwise): `actors` of them, one per node when None."""

    def __init__(self, target, address: str | None = None, actors: int | None = None,
                 repeats: int = 3, timeout: float = 10.0):
        ray = self.ray = require_ray()
        if not ray.is_initialized():
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False,
                         configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as e:
                first = str(e).splitlines()[0] if str(e) else type(e).__name__
                raise TccError(f"--ray-address {address}: cannot join the Ray cluster ({first})"
                               ) from None
        self.target_text = str(target)
        self.options = (self.target_text, repeats, timeout)
        self.timeout = timeout
        self.remote = ray.remote(num_cpus=0)(MeasureActor)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        self.nodes = [n["NodeID"] for n in nodes] or [None]
        self.count = actors or len(self.nodes)
        self.actors: list = []
        self._turn = 0

    def _start(self, i: int):
        node = self.nodes[i % len(self.nodes)]
        options = {"max_restarts": 0}
        if node is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=True)
        return self.remote.options(**options).remote(*self.options)

    def bench(self, default: T.PrimFunc, shapes: dict, target) -> RayBench:
        return RayBench(self, default, shapes)

    def _call(self, index: int, key: str, default, shapes, func, repeats):
        return self.actors[index].measure.remote(key, default, shapes, func, repeats)

    def _get(self, ref):
        """The actor's answer, or None when the actor died."""
        ray = self.ray
        try:
            return ray.get(ref, timeout=START_SECONDS + self.timeout)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError,
                ray.exceptions.WorkerCrashedError):
            return None

    def _replace(self, index: int, ref_actor) -> None:
        """A fresh actor in the place of a dead one (unless another call replaced it)."""
        if self.actors[index] is ref_actor:
            try:
                self.ray.kill(ref_actor)
            except Exception:  # already gone
                pass
            self.actors[index] = self._start(index)

    def run_each(self, key: str, default, shapes, funcs: Sequence,
                 repeats: int | None) -> Iterator[tuple[str, object]]:
        """Each function's answer, in order, spread over the actors."""
        if not self.actors:
            self.actors = [self._start(i) for i in range(self.count)]
        sent = []
        for func in funcs:
            index = self._turn % len(self.actors)
            self._turn += 1
            sent.append((index, self.actors[index],
                         self._call(index, key, default, shapes, func, repeats)))
        for func, (index, actor, ref) in zip(funcs, sent):
            answer = self._get(ref)
            if answer is None:  # the actor died: once more, on another one
                self._replace(index, actor)
                other = (index + 1) % len(self.actors)
                answer = self._get(self._call(other, key, default, shapes, func, repeats))
                if answer is None:
                    self._replace(other, self.actors[other])
                    answer = ("died", "the Ray actor measuring it died, and so did the one "
                                      "that tried again")
            yield answer

    def close(self) -> None:
        for actor in self.actors:
            try:
                self.ray.kill(actor)
            except Exception:  # already gone
                pass
        self.actors = []


class RayBench:
    """A task's bench on the cluster: the default measured on one actor, candidates on all
    (each paired with the default as its own actor measured it)."""

    def __init__(self, runner: RayRunner, default: T.PrimFunc, shapes: dict):
        from tcc.ir.structural import structural_hash

        self.runner, self.default_func, self.shapes = runner, default, shapes
        self.key = f"{structural_hash(default)}:{sorted(shapes.items())}"
        (status, result), = runner.run_each(self.key, default, shapes, [None], None)
        if status != "ok":
            raise TccError(f"the default schedule could not be measured ({result})")
        self.default = result

    @property
    def default_latency(self) -> float:
        return self.default.latency

    def measure_each(self, candidates: Sequence,
                     repeats: int | None = None) -> Iterator[Measurement]:
        funcs = [kernel_of(c) for c in candidates]  # actors get finished kernels
        for status, result in self.runner.run_each(self.key, self.default_func, self.shapes,
                                                   funcs, repeats):
            if status == "ok":
                yield result
            else:
                yield Measurement(status="failed", error=f"{status}: {result}")

    def measure(self, candidates: Sequence[T.PrimFunc],
                repeats: int | None = None) -> list[Measurement]:
        return list(self.measure_each(candidates, repeats))
