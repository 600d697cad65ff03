"""The tuning database: records append durably, bad lines are named and skipped, the best
record is chosen per workload and target, and databases merge."""

import json

import pytest

from tcc.tune.database import (
    Database,
    DatabaseError,
    ModelCheck,
    Record,
    merge,
    read_records,
)

TRACE = {"format": "tcc-trace", "version": 1, "instructions": []}


def _record(workload="w1", target="llvm -mcpu=a", seconds=(1e-3,), status="ok", default=False,
            baseline=(), confirmed=False, trace=TRACE):
    return Record(workload, target, trace, tuple(seconds), status, {"n": 4}, tcc="0.1.0",
                  default=default, baseline=tuple(baseline), confirmed=confirmed)


def _check(model="m1", target="llvm -mcpu=a", chosen=1, reverted=None):
    return ModelCheck(model, target, {"x": [1, 8]},
                      ({"tuned": 2, "ms": [0.07, 0.069]}, {"tuned": 1, "ms": [0.06, 0.061]},
                       {"tuned": 0, "ms": [0.068, 0.067]}),
                      chosen, {"w2": "trace"} if reverted is None else reverted, "0.1.0")


def _traced(n: int) -> dict:
    """A distinct trace per n (records of different points)."""
    return {**TRACE, "instructions": [{"kind": "mark", "n": n}]}


def test_records_round_trip_and_append_one_durable_line_each(tmp_path):
    db = Database(tmp_path / "t.db")
    records = [_record(seconds=(3e-3, 1e-3, 2e-3)), _record("w2", status="failed", seconds=()),
               _record("w3", seconds=(1e-3,), baseline=(2e-3, 4e-3, 3e-3), confirmed=True)]
    for r in records:
        db.append(r)
    lines = (tmp_path / "t.db").read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["workload"] == "w1"
    again = Database(tmp_path / "t.db")
    assert again.records == records and again.problems == []
    assert again.records[0].latency == 2e-3  # the median of the repeats
    assert again.records[1].latency is None
    assert again.records[2].ratio() == 1e-3 / 2e-3 and again.records[2].confirmed  # fastest over fastest


def test_a_line_cut_short_by_a_kill_is_named_and_the_next_append_starts_a_new_line(tmp_path):
    path = tmp_path / "t.db"
    Database(path).append(_record())
    with open(path, "a") as f:  # what kill -9 in the middle of a write leaves
        f.write(_record("w2").line()[:40])
    db = Database(path)
    assert [r.workload for r in db.records] == ["w1"]
    (problem,) = db.problems
    assert problem.startswith(f"{path}:2: not a JSON record (")
    assert problem.endswith("(cut short: a tune stopped while writing it?); line skipped")
    db.append(_record("w3"))
    assert [r.workload for r in Database(path).records] == ["w1", "w3"]


@pytest.mark.parametrize("line, message", [
    ("{not json", "not a JSON record"),
    ('{"format": "other"}', "format is 'other', expected 'tcc-tuning-record'"),
    (json.dumps({**_record().as_json(), "version": 9}), "version 9 is not one this tcc reads"),
    (json.dumps({**_record().as_json(), "status": "great"}), "status 'great' is not one of ok, failed"),
    (json.dumps({**_record().as_json(), "seconds": [-1]}), "seconds [-1] are not all non-negative"),
    (json.dumps({**_record().as_json(), "baseline": [0]}), "baseline [0] is not a list of positive"),
    (json.dumps({**_record().as_json(), "confirmed": 1}), "'confirmed' is 1, expected true or"),
    (json.dumps({**_check().as_json(), "chosen": 3}), "'chosen' is 3, but there are 3 variants"),
    (json.dumps({**_check().as_json(), "chosen": True}), "'chosen' is True, expected an integer"),
    (json.dumps({**_check().as_json(), "variants": [{"tuned": 1}]}), "is not {\"tuned\": N"),
    (json.dumps({**_check().as_json(), "reverted": {"w": 1}}), "'reverted' maps workloads to trace"),
])
def test_a_corrupted_line_is_named_and_the_other_records_still_load(tmp_path, line, message):
    path = tmp_path / "t.db"
    path.write_text(_record("a").line() + "\n" + line + "\n" + _record("b").line() + "\n")
    records, _, problems = read_records(path)
    assert [r.workload for r in records] == ["a", "b"]
    assert len(problems) == 1 and problems[0].startswith(f"{path}:2: ") and message in problems[0]
    assert problems[0].endswith("; line skipped") and "\n" not in problems[0]


def test_best_is_the_fastest_successful_record_of_the_workload_on_the_target(tmp_path):
    db = Database(tmp_path / "t.db")
    for r in (_record(seconds=(5e-3,), default=True), _record(seconds=(2e-3, 9e-3, 2e-3)),
              _record(status="failed", seconds=()), _record(target="llvm -mcpu=b", seconds=(1e-4,)),
              _record("w2", seconds=(1e-5,))):
        db.append(r)
    best = db.best("w1", "llvm -mcpu=a")
    assert best.latency == 2e-3
    assert db.best("w1", "llvm -mcpu=c") is None  # a record from another target is never used
    assert db.best("w3", "llvm -mcpu=a") is None


def test_best_goes_by_latency_relative_to_the_default_timed_beside_it(tmp_path):
    db = Database(tmp_path / "t.db")
    # the machine was twice as slow while the first candidate ran: its latency is the
    # larger, but it beat the default it was timed beside
    for r in (_record(seconds=(5e-3,), default=True),
              _record(seconds=(6e-3,), baseline=(12e-3,), trace=_traced(1)),
              _record(seconds=(4e-3,), baseline=(5e-3,), trace=_traced(2))):
        db.append(r)
    assert db.best("w1", "llvm -mcpu=a").trace == _traced(1)


def test_a_pair_whose_default_ran_far_slower_than_usual_counts_against_the_usual(tmp_path):
    """Load on the other core stalled the parallel default at each fork and join (50 us
    timed at 7 ms) while a serial candidate ran undisturbed: the pair says 0.01, the
    candidate is 1.4x slower than the default as the default usually runs."""
    db = Database(tmp_path / "t.db")
    default = _record(seconds=(50e-6, 51e-6, 49e-6), default=True)
    screened = [_record(seconds=(60e-6,) * 3, baseline=(50e-6,) * 3, trace=_traced(10 + i))
                for i in range(5)]  # the default's usual latency: the median of its times
    stalled = _record(seconds=(72e-6,) * 10, baseline=(7e-3,) * 10, trace=_traced(1),
                      confirmed=True)
    faster = _record(seconds=(29e-6,) * 10, baseline=(50e-6,) * 10, trace=_traced(2),
                     confirmed=True)
    for r in (default, *screened, stalled):
        db.append(r)
    assert stalled.ratio() == pytest.approx(72 / 7000)  # the pair alone
    assert db.best("w1", "llvm -mcpu=a") == default
    db.append(faster)
    assert db.best("w1", "llvm -mcpu=a") == faster
    # a default twice as slow beside a candidate is drift that pairing cancels
    drifted = _record(seconds=(40e-6,), baseline=(100e-6,), trace=_traced(3))
    assert drifted.ratio(50e-6) == pytest.approx(0.4)


def test_once_a_candidate_is_confirmed_only_confirmations_and_the_default_count(tmp_path):
    db = Database(tmp_path / "t.db")
    default = _record(seconds=(5e-3,), default=True)
    lucky = _record(seconds=(1e-3,), baseline=(5e-3,), trace=_traced(1))
    for r in (default, lucky, _record(seconds=(4e-3,), baseline=(5e-3,), trace=_traced(2))):
        db.append(r)
    assert db.best("w1", "llvm -mcpu=a") == lucky  # nothing confirmed yet
    db.append(_record(seconds=(6e-3,), baseline=(5e-3,), trace=_traced(1), confirmed=True))
    assert db.best("w1", "llvm -mcpu=a") == default  # the lucky one was slower after all
    good = _record(seconds=(4.5e-3,), baseline=(5e-3,), trace=_traced(2), confirmed=True)
    db.append(good)
    assert db.best("w1", "llvm -mcpu=a") == good


def test_records_without_a_baseline_are_relative_to_the_default_at_their_shapes(tmp_path):
    db = Database(tmp_path / "t.db")
    other = Record("w1", "llvm -mcpu=a", _traced(3), (1e-4,), "ok", {"n": 8}, default=True)
    for r in (other, _record(seconds=(5e-3,), default=True),
              _record(seconds=(3e-3,), baseline=(4e-3,), trace=_traced(1)),
              _record(seconds=(2e-3,), trace=_traced(2))):
        db.append(r)
    assert db.best("w1", "llvm -mcpu=a").trace == _traced(2)  # 2/5 beats 3/4


def test_merge_writes_each_distinct_record_once(tmp_path):
    a, b = Database(tmp_path / "a.db"), Database(tmp_path / "b.db")
    for r in (_record("x"), _record("y")):
        a.append(r)
    for r in (_record("y"), _record("z")):
        b.append(r)
    (tmp_path / "b.db").write_text((tmp_path / "b.db").read_text() + "garbage\n")
    count, problems = merge([tmp_path / "a.db", tmp_path / "b.db"], tmp_path / "c.db")
    assert count == 3 and len(problems) == 1 and f"{tmp_path / 'b.db'}:3:" in problems[0]
    assert [r.workload for r in Database(tmp_path / "c.db").records] == ["x", "y", "z"]


def test_model_checks_round_trip_and_the_latest_for_the_model_and_target_counts(tmp_path):
    db = Database(tmp_path / "t.db")
    first, other_target, other_model = _check(), _check(target="llvm -mcpu=b"), _check("m2")
    latest = _check(chosen=0, reverted={})
    for entry in (first, _record("w1"), other_target, other_model, latest):
        db.append(entry)
    again = Database(tmp_path / "t.db")
    assert again.problems == [] and [r.workload for r in again.records] == ["w1"]
    assert again.checks == [first, other_target, other_model, latest]
    assert again.check("m1", "llvm -mcpu=a") == latest
    assert again.check("m1", "llvm -mcpu=b") == other_target
    assert again.check("m3", "llvm -mcpu=a") is None
    count, _ = merge([tmp_path / "t.db", tmp_path / "t.db"], tmp_path / "c.db")
    assert count == 5 and Database(tmp_path / "c.db").checks == again.checks


def test_a_directory_is_no_database(tmp_path):
    with pytest.raises(DatabaseError, match="is a directory, not a tuning database"):
        Database(tmp_path)
