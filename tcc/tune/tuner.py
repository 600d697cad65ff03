"""The tuning loop: measured search over every task of a model, records appended as measured.

Each task (a distinct kernel, `tcc.tune.tasks`) is measured at the sizes one run of the
model gives it (`tcc.tune.shapes`). Its default schedule is measured first, so it is always
a candidate and a tuned kernel is never slower than the default. Then rounds: the task
scheduler picks a task, the search (`tcc.tune.search`) proposes a batch of its candidates,
they are built in a process pool and run one at a time in the tune's worker process
(`tcc.tune.measure.LocalRunner`: one worker for every task, started again after a crash or
hang) or by actors on the nodes of a Ray cluster (`tcc.tune.ray_runner.RayRunner`), each
paired with the default schedule, and every measurement is appended to the database as it
is taken. The cost model is retrained after each round.

Candidates are ranked by their latency relative to the default's (`Measurement.ratio`; a
pair whose default ran far slower than its usual latency counts against that latency). The
best of a round's many quick measurements is the one most likely to have been lucky, so
when it beats the task's best it is measured again, longer (CONFIRM_REPEATS), and only that
confirmed ratio makes it the task's best; the confirmation is a record of its own, which
`Database.best` prefers (never counted as a trial). The task's best is confirmed again beside
each challenger, and a schedule counts with the median of its confirmations, so a best that
was confirmed by luck does not stay ahead for the rest of the tune; a best confirmed at most
once is confirmed again when the tune ends (not when a deadline or Ctrl-C stopped it).

The task scheduler, after every task has had one round (heaviest calls x latency first),
gives the next round to the task with the largest expected end-to-end gain, as Ansor's
gradient scheduler does: calls per run x best latency x (its last rounds' relative
improvement + a little, so no task starves). A task whose space has no unmeasured point
left drops out.

Resuming: the database's records of a task (same workload, target and sizes) count as its
measured points and trials, and train the cost model, so a tune killed at any moment and
started again with the same database goes on where it stopped, measuring nothing twice.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tcc import __version__
from tcc.ir.errors import TccError
from tcc.ir.module import IRModule
from tcc.lower.schedule import ScheduleError
from tcc.lower.schedule.trace import Trace
from tcc.tune.cost_model import CostModel
from tcc.tune.database import (
    Database,
    Record,
    best_record,
    default_times,
    relative_latencies,
)
from tcc.tune.measure import KernelBench, LocalRunner, _time_calls
from tcc.tune.search import SEARCHES, TaskSpace, point_key
from tcc.tune.space import decisions_of
from tcc.tune.tasks import Task, extract_tasks

EXPLORE_GAIN = 0.05  # the scheduler's floor on a task's recent improvement
RESUME_FEATURES = 64  # a resumed task's best records that retrain the cost model
CONFIRM_REPEATS = 10  # repeats of a confirming measurement


@dataclass
class TaskState:
    task: Task
    space: TaskSpace
    bench: KernelBench | None = None  # or a runner's bench of the same interface
    default_seconds: float | None = None
    # every time of one default call seen: its own measurement's and the baselines each
    # candidate's measurement times beside it; default_seconds is their median
    default_times: list = field(default_factory=list)
    best_ratio: float = 1.0  # the best confirmed latency over the default's
    best_point: dict | None = None  # its decisions (None: the default is best)
    confirmations: dict = field(default_factory=dict)  # point key -> confirmed ratios
    trials: int = 0
    rounds: int = 0
    gains: list = field(default_factory=list)
    exhausted: bool = False
    error: str = ""

    @property
    def best_seconds(self) -> float | None:
        return None if self.default_seconds is None else self.default_seconds * self.best_ratio

    @property
    def speedup(self) -> float | None:
        return None if self.default_seconds is None else 1 / self.best_ratio


@dataclass
class Progress:
    """What a tune has done so far, for a progress display."""

    states: list[TaskState]
    trials: int
    trials_wanted: int
    started: float
    interrupted: bool = False

    def estimate(self, best: bool = True) -> float | None:
        """Kernel time of one run: sum of calls x latency (best, or default) over tasks."""
        total = 0.0
        for s in self.states:
            seconds = s.best_seconds if best else s.default_seconds
            if seconds is None:
                return None
            total += s.task.weight * seconds
        return total


class Tuner:
    def __init__(self, lowered: IRModule, target, db: Database, sizes: dict[str, dict],
                 search: str = "evolutionary", batch: int = 16, jobs: int = 2, seed: int = 0,
                 repeats: int = 3, timeout: float = 10.0, work: Callable = _time_calls,
                 runner=None):
        """`runner` builds and times candidates: a LocalRunner(jobs, timeout, repeats,
        work) by default (one worker process runs every task's candidates, in turn), or a
        tcc.tune.ray_runner.RayRunner."""
        self.target, self.target_text, self.db = target, str(target), db
        self.search = SEARCHES[search]()
        self.batch = batch
        self.rng = random.Random(seed)
        self.model = CostModel(seed)
        self.runner = runner or LocalRunner(jobs, timeout, repeats, work)
        self.states = []
        for task in extract_tasks(lowered):
            shapes = dict(sorted(sizes.get(task.name, {}).items()))
            self.states.append(TaskState(task, TaskSpace(task.func, target, shapes, jobs)))
        for state in self.states:
            self._resume(state)
        self.model.fit()

    # -- records ------------------------------------------------------------------------------

    def _resume(self, state: TaskState) -> None:
        records = [r for r in self.db.for_workload(state.task.workload, self.target_text)
                   if r.shapes == state.space.shapes]
        relative = {id(r): x for r, x in relative_latencies(records)}
        kept = []
        for r in records:
            try:
                point = decisions_of(Trace.from_json(r.trace))[0]
            except ScheduleError:
                continue  # another tcc's trace: measured again if the search proposes it
            ratio = relative.get(id(r)) if r.latency is not None else None
            key = point_key(point)
            if r.confirmed:
                if ratio is not None:
                    self._add_confirmation(state, key, ratio,
                                           point_measured=key in state.space.measured)
                continue
            state.space.measured[key] = ratio
            state.trials += 1
            if ratio is not None:
                kept.append((ratio, point))
        self._saw_default(state, default_times(records))
        self._settle_best(state)
        best = best_record(records)
        if not state.confirmations and best is not None and best[1] < 1.0:
            # killed before its leader was confirmed: the leader is what compile applies
            try:
                state.best_point = decisions_of(Trace.from_json(best[0].trace))[0]
                state.best_ratio = best[1]
            except ScheduleError:
                pass
        if kept:
            state.rounds = 1
        if state.default_seconds is None:
            return
        for ratio, point in sorted(kept, key=lambda x: x[0])[:RESUME_FEATURES]:
            try:
                c = state.space.realize(point)
            except TccError:
                continue
            state.space.measured_kernels.add(c.key)
            self.model.add(state.space.features(c), ratio)

    def _record(self, state: TaskState, trace: Trace, m, default: bool = False,
                confirmed: bool = False) -> None:
        self.db.append(Record(
            workload=state.task.workload, target=self.target_text, trace=trace.as_json(),
            seconds=m.seconds, status=m.status, shapes=state.space.shapes, error=m.error,
            tcc=__version__, default=default, baseline=m.baseline, confirmed=confirmed))

    # -- measuring ----------------------------------------------------------------------------

    def _bench(self, state: TaskState) -> KernelBench | None:
        """The task's bench, its default measured first (and recorded when new)."""
        if state.bench is not None or state.exhausted:
            return state.bench
        default = state.space.realize({})
        try:
            state.bench = self.runner.bench(default.func, state.space.shapes, self.target)
        except TccError as e:
            state.exhausted, state.error = True, str(e)
            return None
        if state.default_seconds is None:
            self._record(state, default.trace, state.bench.default, default=True)
            self._saw_default(state, state.bench.default.seconds)
            state.space.measured[point_key(default.point)] = 1.0
            state.trials += 1
            self.progress.trials += 1
        state.space.measured_kernels.add(default.key)
        return state.bench

    def _round(self, state: TaskState, count: int, on_trial: Callable) -> None:
        bench = self._bench(state)
        if bench is None:
            return
        before = state.best_ratio
        candidates = self.search.propose(state.space, self.model, self.rng, count)
        if not candidates:
            state.exhausted = True
            return
        leader = None  # the round's best candidate, with its ratio
        for c, m in zip(candidates, bench.measure_each(candidates)):
            self._record(state, c.trace, m)
            self._saw_default(state, m.baseline if m.status == "ok" else ())
            ratio = m.ratio(state.default_seconds)
            state.space.measured[point_key(c.point)] = ratio
            state.space.measured_kernels.add(c.key)
            self.model.add(state.space.features(c), ratio)
            if ratio is not None and (leader is None or ratio < leader[1]):
                leader = (c, ratio)
            state.trials += 1
            self.progress.trials += 1
            on_trial(self.progress)
        if leader is not None and leader[1] < state.best_ratio:
            self._confirm(state, leader[0])
        state.rounds += 1
        state.gains.append(before / state.best_ratio - 1)
        self.model.fit()

    def _confirm(self, state: TaskState, c) -> None:
        """Measure `c`, which looked better than the task's best, again and longer, and the
        task's best beside it, again: each schedule counts with the median of its
        confirmations (as `best_record` ranks them), so a best that was confirmed by luck
        loses its place to a challenger that is faster measured the same way."""
        contenders = [c]
        if state.best_point is not None and point_key(state.best_point) != point_key(c.point):
            try:
                contenders.append(state.space.realize(state.best_point))
            except TccError:
                pass
        measured = state.bench.measure([x.func for x in contenders], repeats=CONFIRM_REPEATS)
        for x, m in zip(contenders, measured):
            self._record(state, x.trace, m, confirmed=True)
            self._saw_default(state, m.baseline if m.status == "ok" else ())
            ratio = m.ratio(state.default_seconds)
            if ratio is not None:
                self._add_confirmation(state, point_key(x.point), ratio)
        self._settle_best(state)

    @staticmethod
    def _saw_default(state: TaskState, times) -> None:
        """Count times of one default call: the task's latency (which weighs it against the
        others, and the estimate of one run) is their median, so that one measurement
        disturbed by the machine (a kernel of microseconds timed at 24 ms once) does not
        draw every trial to that task."""
        if times:
            state.default_times.extend(times)
            state.default_seconds = statistics.median(state.default_times)

    @staticmethod
    def _add_confirmation(state: TaskState, key, ratio: float, point_measured: bool = True):
        """Count a confirmed ratio for the point `key`: the search goes on the median of the
        point's confirmations (when the point is among those it measured)."""
        state.confirmations.setdefault(key, []).append(ratio)
        if point_measured:
            state.space.measured[key] = statistics.median(state.confirmations[key])

    @staticmethod
    def _settle_best(state: TaskState) -> None:
        """The task's best: the confirmed schedule of least median ratio, or the default."""
        state.best_ratio, state.best_point = 1.0, None
        for key, ratios in state.confirmations.items():
            ratio = statistics.median(ratios)
            if ratio < state.best_ratio:
                state.best_ratio, state.best_point = ratio, dict(key)

    # -- scheduling ---------------------------------------------------------------------------

    def _next(self) -> TaskState | None:
        live = [s for s in self.states if not s.exhausted]
        if not live:
            return None
        for s in live:  # every default first: the scheduler weighs tasks by latency
            if s.default_seconds is None:
                return s
        fresh = [s for s in live if s.rounds == 0]
        if fresh:
            return max(fresh, key=lambda s: s.task.weight * s.default_seconds)

        def gain(s: TaskState) -> float:
            recent = max(s.gains[-2:]) if s.gains else 1.0
            return s.task.weight * s.best_seconds * (recent + EXPLORE_GAIN)

        return max(live, key=gain)

    def run(self, trials: int, deadline: float | None = None,
            on_trial: Callable = lambda progress: None) -> Progress:
        """Tune until `trials` measurements (counting the database's), the `deadline`
        (time.monotonic()), or every space is measured; Ctrl-C stops it the same way."""
        self.progress = Progress(self.states, sum(s.trials for s in self.states), trials,
                                 time.monotonic())
        try:
            while self.progress.trials < trials:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                state = self._next()
                if state is None:
                    break
                if state.default_seconds is None:
                    self._bench(state)
                    on_trial(self.progress)
                    continue
                self._round(state, min(self.batch, trials - self.progress.trials), on_trial)
            if deadline is None or time.monotonic() < deadline:
                self._confirm_leaders()
        except KeyboardInterrupt:
            self.progress.interrupted = True
        finally:
            self.runner.close()
        return self.progress

    def _confirm_leaders(self) -> None:
        """At the end of a tune, each task's best confirmed at most once (a resumed tune's
        best may not be) is measured once more beside the default, and counts with the
        median of its confirmations: a confirmation taken while other work loaded the
        machine can be luck (a resnet export's kernel confirmed at 3.0x ran 0.53x measured
        again), and compile applies the database's best."""
        for state in self.states:
            if state.best_point is None or len(state.confirmations.get(
                    point_key(state.best_point), ())) > 1:
                continue
            try:
                leader = state.space.realize(state.best_point)
            except TccError:
                continue
            if self._bench(state) is not None:  # a resumed task may have had no round
                self._confirm(state, leader)
