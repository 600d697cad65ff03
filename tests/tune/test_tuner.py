"""The tuning loop: defaults measured first, every measurement appended as it is taken, a
resumed tune measuring nothing twice, failures recorded while the tune goes on, and the
records it writes applied by `tcc compile --db` to a pack that computes the same."""

from __future__ import annotations

import functools
import random
from pathlib import Path

import numpy as np
from onnx import TensorProto as TP
from onnx import helper

import tcc.rt
from tcc.api import compile_to_bytes, lower
from tcc.frontend.onnx import from_onnx
from tcc.lower.passes import run_pipeline
from tcc.lower.schedule.trace import Trace
from tcc.target import host_target
from tcc.tune.database import Database
from tcc.tune.measure import Measurement
from tcc.tune.search import point_key
from tcc.tune.shapes import kernel_shapes
from tcc.tune.space import decisions_of
from tcc.tune.tuner import Tuner
from tests.tune.failing_work import fail_on_call


def _model():
    """A matmul with a bias and relu, then a softmax over its rows: a contraction and a row
    kernel, the batch symbolic."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Softmax", ["r"], ["y"], axis=-1)]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TP.FLOAT, None)],
        [helper.make_tensor("w", TP.FLOAT, [64, 48], rng.standard_normal(64 * 48).tolist()),
         helper.make_tensor("b", TP.FLOAT, [48], rng.standard_normal(48).tolist())])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _setup(tmp_path: Path):
    target = host_target()
    lowered = lower(run_pipeline(from_onnx(_model()), target=target))
    sizes, inputs = kernel_shapes(lowered, target, {"batch": [32]})
    assert {k: list(v.shape) for k, v in inputs.items()} == {"x": [32, 64]}
    return lowered, target, sizes


def assert_tuned_pack_computes_what_the_untuned_does(tmp_path: Path, target, db: Path) -> None:
    x = np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32)
    outs = []
    for db_path in (None, db):
        pack = tmp_path / "m.tvmpack"
        pack.write_bytes(compile_to_bytes(_model(), str(target), db=db_path))
        with tcc.rt.load(pack) as m:
            outs.append(m["main"](x)[0])
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-6)


def _points(db: Database, confirmed: bool = False) -> list[tuple]:
    """The points of the trials (or of the confirmations) in the database."""
    return [(r.workload, point_key(decisions_of(Trace.from_json(r.trace))[0]))
            for r in db.records if r.confirmed == confirmed]


def _trials(db: Database) -> list:
    return [r for r in db.records if not r.confirmed]


# Long enough that a sound candidate finishes on a loaded 2-core machine (at 2 s one did
# not, and was recorded as a second timeout), short enough for the planted hang.
TIMEOUT = 6.0

def test_kernel_sizes_come_from_one_run_at_the_given_shapes(tmp_path):
    lowered, target, sizes = _setup(tmp_path)
    assert set(sizes) == set(lowered.prim_funcs)
    for name, bound in sizes.items():
        assert set(bound.values()) <= {32}, (name, bound)


def test_a_tune_records_every_measurement_and_a_resumed_one_measures_nothing_twice(tmp_path):
    lowered, target, sizes = _setup(tmp_path)
    db = Database(tmp_path / "t.db")
    progress = Tuner(lowered, target, db, sizes, batch=6, jobs=2).run(20)
    assert progress.trials == 20 and len(_trials(db)) == 20
    first = {r.workload: r for r in reversed(db.records)}
    assert all(r.default for r in first.values())  # each task's default measured first
    assert all(r.status == "ok" for r in db.records), [r.error for r in db.records]
    assert len(set(_points(db))) == 20
    # every candidate was timed beside the default; a confirmation re-measures a trial
    assert all(r.baseline for r in db.records if not r.default)
    assert set(_points(db, confirmed=True)) <= set(_points(db))

    again = Database(tmp_path / "t.db")
    resumed = Tuner(lowered, target, again, sizes, batch=6, jobs=2)
    assert sum(s.trials for s in resumed.states) == 20
    resumed.run(32)
    assert len(_trials(again)) == 32 and len(set(_points(again))) == 32
    assert not any(r.default for r in again.records[20:])  # the defaults were not re-measured
    for state in resumed.states:
        assert state.best_seconds <= state.default_seconds

    assert_tuned_pack_computes_what_the_untuned_does(tmp_path, target, tmp_path / "t.db")


def test_crashing_and_hanging_candidates_are_recorded_as_failed_and_the_tune_goes_on(tmp_path):
    lowered, target, sizes = _setup(tmp_path)
    for how, words in (("crash", "crash: the worker died (signal SIGKILL)"),
                       ("hang", "timeout: still running after 6 s; killed")):
        counter = tmp_path / f"{how}.count"
        counter.write_text("4")  # the defaults (2 tasks) pass, then the third candidate fails
        db = Database(tmp_path / f"{how}.db")
        work = functools.partial(fail_on_call, str(counter), how)
        Tuner(lowered, target, db, sizes, batch=4, jobs=1, timeout=TIMEOUT, work=work).run(10)
        failed = [r for r in db.records if r.status == "failed"]
        assert [r.error for r in failed] == [words]
        trials = _trials(db)
        assert len(trials) == 10 and trials.index(failed[0]) < 9  # and it went on


class _ScriptedBench:
    """A bench whose measurements of each kernel follow a script of ratios."""

    def __init__(self, script: dict):
        self.script = script  # id(func) -> ratios, taken in order

    def measure(self, funcs, repeats=None):
        return [Measurement(seconds=(self.script[id(f)].pop(0),), baseline=(1.0,))
                for f in funcs]


def test_a_challenger_is_confirmed_beside_the_best_whose_lucky_confirmation_stops_counting(tmp_path):
    lowered, target, sizes = _setup(tmp_path)
    db = Database(tmp_path / "t.db")
    tuner = Tuner(lowered, target, db, sizes)
    state = tuner.states[0]
    default = state.space.realize({}).key
    drawn = {c.key: c for c in state.space.draws(random.Random(0), 8, 16) if c.key != default}
    lucky, steady = list(drawn.values())[:2]
    state.bench = _ScriptedBench({id(lucky.func): [0.5, 1.3], id(steady.func): [0.8]})
    tuner._confirm(state, lucky)
    assert (state.best_point, state.best_ratio) == (lucky.point, 0.5)
    tuner._confirm(state, steady)  # the lucky one is measured again beside it: 1.3
    assert (state.best_point, state.best_ratio) == (steady.point, 0.8)
    # the database ranks it the same way (lucky: the median of 0.5 and 1.3), and so does a resume
    assert db.best(state.task.workload, str(target)).trace == steady.trace.as_json()
    resumed = Tuner(lowered, target, Database(tmp_path / "t.db"), sizes).states[0]
    assert (resumed.best_point, resumed.best_ratio) == (steady.point, 0.8)


def test_a_best_confirmed_once_is_confirmed_again_when_the_tune_ends(tmp_path):
    """A leader whose one confirmation was lucky (0.5) measures 1.6 at the end of the tune:
    with the median of the two (1.05) the default is the best again, in the tuner and in
    the database compile reads; a best confirmed twice is not measured again."""
    lowered, target, sizes = _setup(tmp_path)
    db = Database(tmp_path / "t.db")
    tuner = Tuner(lowered, target, db, sizes)
    state = tuner.states[0]
    default = state.space.realize({}).key
    lucky = next(c for c in state.space.draws(random.Random(0), 8, 16) if c.key != default)
    tuner._record(state, state.space.realize({}).trace,
                  Measurement(seconds=(1.0,), baseline=(1.0,)), default=True)
    script = {id(lucky.func): [0.5]}
    state.bench = _ScriptedBench(script)
    tuner._confirm(state, lucky)
    assert (state.best_point, state.best_ratio) == (lucky.point, 0.5)
    realize = state.space.realize
    state.space.realize = lambda point: lucky if point == lucky.point else realize(point)
    script[id(lucky.func)] = [1.6]
    tuner._confirm_leaders()
    assert (state.best_point, state.best_ratio) == (None, 1.0)
    assert db.best(state.task.workload, str(target)).default
    script[id(lucky.func)] = [0.4, 0.45]  # confirmed twice now: left alone at the end
    tuner._confirm(state, lucky)
    tuner._confirm_leaders()
    assert script[id(lucky.func)] == [0.45]


class _OnceSlowBench:
    """A bench whose default measured 24 ms once, where every candidate's paired baseline
    times it at 10 us."""

    default = Measurement(seconds=(0.024, 0.024, 0.024))

    def measure_each(self, candidates, repeats=None):
        for _ in candidates:
            yield Measurement(seconds=(9e-6,), baseline=(1e-5,))

    def measure(self, funcs, repeats=None):
        return list(self.measure_each(funcs, repeats))


def test_a_default_timed_slow_once_takes_the_latency_its_baselines_give(tmp_path):
    """A task's latency weighs it against the others: a default disturbed once by the
    machine (a kernel of microseconds timed at 24 ms) would draw every trial to that task.
    Its latency is the median of every time of the default seen, its own and the baselines
    timed beside each candidate, in the tune and after a resume."""
    import time

    from tcc.tune.tuner import Progress

    lowered, target, sizes = _setup(tmp_path)
    db = Database(tmp_path / "t.db")
    tuner = Tuner(lowered, target, db, sizes)
    tuner.progress = Progress(tuner.states, 0, 100, time.monotonic())
    state = tuner.states[0]
    state.bench = _OnceSlowBench()
    tuner._record(state, state.space.realize({}).trace, state.bench.default, default=True)
    tuner._saw_default(state, state.bench.default.seconds)
    assert state.default_seconds == 0.024
    tuner._round(state, 8, lambda progress: None)
    assert state.default_seconds == 1e-5
    resumed = Tuner(lowered, target, Database(tmp_path / "t.db"), sizes).states[0]
    assert resumed.default_seconds == 1e-5
