"""The in-model check: tuned kernels ranked by the time they claim to save, variants keeping
the largest gains timed in alternating rounds, the fastest kept and its verdict applied by
`tcc compile --db`."""

from __future__ import annotations

import numpy as np
import pytest

from tcc.api import compile_to_bytes
from tcc.errors import TccError
from tcc.rt.c_runtime import find_tccrt
from tcc.tune.database import Database, Record, trace_digest
from tcc.tune.model_check import (
    Gain,
    check_model,
    decide,
    pick,
    ranked_gains,
    time_in_rounds,
    variant_sizes,
)
from tcc.tune.tasks import extract_tasks, model_key
from tests.tune.test_apply import _hand_record, _lowered, _model
from tests.tune.test_tuner import _setup


def test_variants_keep_all_half_a_quarter_down_to_one_and_none():
    assert variant_sizes(5) == [5, 2, 1, 0]
    assert variant_sizes(8) == [8, 4, 2, 1, 0]
    assert variant_sizes(1) == [1, 0]


def test_the_variant_of_least_median_wins_and_ties_keep_the_most_tuned():
    assert pick([[3.0, 1.0, 3.0], [2.0, 2.0, 2.0], [2.5, 2.5, 9.0]]) == 1  # not the lucky 1.0
    assert pick([[2.0, 2.0], [2.0, 2.0]]) == 0


def test_rounds_call_each_variant_once_each_starting_one_later():
    calls = []
    benches = [lambda i=i: calls.append(i) or float(i) for i in range(3)]
    times = time_in_rounds(benches, 3)
    assert calls == [0, 1, 2, 1, 2, 0, 2, 0, 1]
    assert times == [[0.0] * 3, [1.0] * 3, [2.0] * 3]


def _records(workload, default_s, ratio, target):
    """The default of `workload` timed at `default_s`, and a confirmed candidate at `ratio`."""
    trace = {"format": "tcc-trace", "version": 1, "instructions": [{"kind": "mark"}]}
    return [Record(workload, target, {"format": "tcc-trace", "version": 1, "instructions": []},
                   (default_s,), default=True),
            Record(workload, target, trace, (default_s * ratio,), baseline=(default_s,),
                   confirmed=True)]


def test_gains_are_calls_times_default_times_the_share_saved_largest_first(tmp_path):
    lowered, target, _ = _setup(tmp_path)
    tasks = extract_tasks(lowered)
    assert len(tasks) == 2
    db = Database(tmp_path / "t.db")
    slower = _records(tasks[1].workload, 100e-6, 0.9, str(target))
    for r in _records(tasks[0].workload, 10e-6, 0.5, str(target)) + slower:
        db.append(r)
    gains = ranked_gains(lowered, str(target), db)
    assert [g.workload for g in gains] == [tasks[1].workload, tasks[0].workload]
    assert gains[0].seconds == pytest.approx(tasks[1].weight * 100e-6 * 0.1)
    assert gains[1].seconds == pytest.approx(tasks[0].weight * 10e-6 * 0.5)
    # confirmed twice more at 2x: the median of its confirmations is slower than the default
    for _ in range(2):
        db.append(Record(tasks[1].workload, str(target), slower[1].trace, (200e-6,),
                         baseline=(100e-6,), confirmed=True))
    assert [g.workload for g in ranked_gains(lowered, str(target), db)] == [tasks[0].workload]


def test_the_verdict_reverts_the_gains_the_fastest_variant_left_out():
    gains = [Gain(w, s, f"trace of {w}") for w, s in (("a", 3e-6), ("b", 2e-6), ("c", 1e-6))]
    inputs = {"x": np.zeros((1, 8), np.float32)}
    times = [[0.070, 0.069], [0.060, 0.061], [0.068, 0.067]]  # all 3, the largest 1, none
    verdict = decide("m", "llvm", inputs, gains, [3, 1, 0], times)
    assert verdict.chosen == 1 and verdict.inputs == {"x": [1, 8]}
    assert verdict.reverted == {"b": "trace of b", "c": "trace of c"}
    assert [v["tuned"] for v in verdict.variants] == [3, 1, 0]
    fastest_all = [[0.050, 0.051], *times[1:]]
    assert decide("m", "llvm", inputs, gains, [3, 1, 0], fastest_all).reverted == {}


def test_a_check_times_the_model_and_compile_applies_its_verdict(tmp_path):
    try:
        find_tccrt()
    except TccError:
        pytest.skip("the C runtime is not built (make runtime)")
    lowered, target = _lowered()
    (func,) = lowered.prim_funcs.values()
    hand = _hand_record(func, target, baseline=(2e-4,), confirmed=True)
    db = Database(tmp_path / "t.db")
    db.append(Record(hand.workload, target, {"format": "tcc-trace", "version": 1,
                                             "instructions": []}, (2e-4,), default=True))
    db.append(hand)
    tuned_pack = compile_to_bytes(_model(), db=tmp_path / "t.db", cache=False)
    inputs = {"x": np.random.default_rng(0).standard_normal((64, 16)).astype(np.float32)}
    verdict = check_model(lowered, target, db, inputs, tmp_path, rounds=2)
    assert Database(tmp_path / "t.db").checks == [verdict]
    assert verdict.model == model_key(lowered) and verdict.inputs == {"x": [64, 16]}
    assert [v["tuned"] for v in verdict.variants] == [1, 0]
    assert all(len(v["ms"]) == 2 and min(v["ms"]) > 0 for v in verdict.variants)
    kept = verdict.variants[verdict.chosen]["tuned"] == 1
    assert verdict.reverted == ({} if kept else {hand.workload: trace_digest(hand.trace)})
    pack = compile_to_bytes(_model(), db=tmp_path / "t.db", cache=False)
    assert pack == (tuned_pack if kept else compile_to_bytes(_model(), cache=False))


def test_a_check_needs_the_c_runtime(tmp_path, monkeypatch):
    monkeypatch.setenv("TCCRT", str(tmp_path / "missing"))
    lowered, target = _lowered()
    with pytest.raises(TccError, match="is not an executable file; build it with `make runtime`"):
        check_model(lowered, target, Database(tmp_path / "t.db"), {}, tmp_path)
