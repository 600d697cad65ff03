"""Measuring on a Ray cluster (`tcc tune --cluster auto|ray://HOST:PORT`): candidates built
and timed by actors on the cluster's nodes whose machine is the target's.

Each `MeasureActor` holds a `tcc.tune.measure.Worker` and, per task, a `KernelBench` of its
own, so a candidate is built and timed, paired with the default schedule, on the node that
runs it: ratios taken on different nodes of one target compare, latencies would not. The
runner first asks every node which machine it is (a small task pinned to the node) and
places one actor on each node whose machine is the target's, so two timings never share a
node's cores and nothing is measured on other hardware; a cluster with no such node is an
error that names the machines it has. An actor that finds itself on another machine anyway
(its node gone, Ray placed it elsewhere) refuses its candidates, each recorded as failed.

Results come back one candidate at a time, in order, and the tuner appends each as it comes.
An actor that dies during the tune (its process killed, its node lost) fails only what it
had not finished: each of those candidates is tried once more on another actor, then
recorded as failed, and a fresh actor takes the dead one's place. Ray is an optional extra
(`pip install 'tcc[distributed]'`).
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
        raise TccError("--cluster needs Ray: pip install 'tcc[distributed]'") from None
    return ray


def machine_of(target) -> str:
    """A target's machine in a few words: its triple and CPU."""
    return f"{target.triple} -mcpu={target.cpu}"


def this_machine() -> str:
    """The canonical target string of the machine this runs on (run on each node)."""
    from tcc.target import parse_target

    return str(parse_target("llvm"))


def matching_nodes(machines: dict[str, str | None], target_text: str) -> list[str]:
    """The nodes (by id, in order) whose machine is the target's; `machines` gives each
    node's canonical target string, None for a node that did not answer. No such node is a
    one-line error naming the machines the cluster has."""
    nodes = [node for node, machine in machines.items() if machine == target_text]
    if nodes:
        return nodes
    from tcc.target import parse_target

    seen = sorted({machine_of(parse_target(m)) for m in machines.values() if m})
    silent = sum(m is None for m in machines.values())
    has = "; ".join(seen) + (f"; {silent} node(s) did not answer" if silent else "")
    raise TccError(f"--cluster: none of the Ray cluster's {len(machines)} node(s) is the "
                   f"target machine {machine_of(parse_target(target_text))} (it has: "
                   f"{has or 'no nodes'}); tune on a cluster of the target's machines")


def connect(ray, address: str) -> None:
    """Join the cluster at `address` ('auto': the one running on this machine, else a new
    one started here, its node on the loopback address)."""
    options = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        if address == "auto":
            try:
                ray.init(address="auto", **options)
            except ConnectionError:  # none is running here: start one
                ray.init(address="local", _node_ip_address="127.0.0.1", **options)
        else:
            ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise TccError(f"--cluster {address}: cannot join the Ray cluster ({first})") from None


class MeasureActor:
    """The remote side (a Ray actor): benches per task, one worker process, this node."""

    def __init__(self, target_text: str, repeats: int, timeout: float):
        from tcc.target import parse_target

        self.target = parse_target(target_text)
        here = parse_target("llvm")
        self.refusal = ""
        if str(here) != str(self.target):
            self.refusal = (f"node {socket.gethostname()} is {machine_of(here)}, not the "
                            f"target machine {machine_of(self.target)}")
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
    """Actors on the nodes of a Ray cluster whose machine is the target's (the cluster is
    joined at `address` unless Ray is connected already): `actors` of them, one per such
    node when None."""

    def __init__(self, target, address: str = "auto", actors: int | None = None,
                 repeats: int = 3, timeout: float = 10.0):
        ray = self.ray = require_ray()
        if not ray.is_initialized():
            connect(ray, address)
        self.target_text = str(target)
        self.options = (self.target_text, repeats, timeout)
        self.timeout = timeout
        self.remote = ray.remote(num_cpus=0)(MeasureActor)
        self.nodes = matching_nodes(self._machines(), self.target_text)
        self.count = actors or len(self.nodes)
        self.actors: list = []
        self._turn = 0

    def _machines(self) -> dict[str, str | None]:
        """Each live node's machine (its canonical target string), asked on the node; None
        for a node that does not answer within START_SECONDS."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self.ray
        probe = ray.remote(num_cpus=0)(this_machine)
        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        refs = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                              max_retries=0).remote() for node in nodes]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=START_SECONDS)
        machines: dict[str, str | None] = {}
        for node, ref in zip(nodes, refs):
            try:
                machines[node] = ray.get(ref) if ref in ready else None
            except ray.exceptions.RayError:
                machines[node] = None
        return machines

    def _start(self, i: int):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        strategy = NodeAffinitySchedulingStrategy(self.nodes[i % len(self.nodes)], soft=True)
        return self.remote.options(max_restarts=0,
                                   scheduling_strategy=strategy).remote(*self.options)

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
