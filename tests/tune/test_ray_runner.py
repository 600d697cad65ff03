"""Tuning on a Ray cluster (a local one, started here): the records are those a local tune
writes and apply the same way, and an actor killed in the middle of a tune loses no
finished record. Skipped where Ray is not installed (`pip install 'tcc[ray]'`)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tcc.lower.schedule.trace import Trace
from tcc.tune.database import Database
from tcc.tune.search import point_key
from tcc.tune.space import decisions_of
from tcc.tune.tuner import Tuner
from tests.tune.test_tuner import _setup, assert_tuned_pack_computes_what_the_untuned_does

ray = pytest.importorskip("ray")

from tcc.tune.ray_runner import RayRunner  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def _trials(db: Database) -> list:
    return [r for r in db.records if not r.confirmed]


def test_a_tune_on_a_ray_cluster_writes_records_that_apply_like_local_ones(tmp_path, cluster):
    lowered, target, sizes = _setup(tmp_path)
    db = Database(tmp_path / "ray.db")
    Tuner(lowered, target, db, sizes, batch=4, runner=RayRunner(target, actors=2)).run(12)
    trials = _trials(db)
    assert len(trials) == 12 and all(r.status == "ok" for r in db.records), \
        [r.error for r in db.records]
    assert sum(r.default for r in trials) == 2
    assert all(r.baseline for r in trials if not r.default)
    again = Database(tmp_path / "ray.db")  # they load as local records do
    assert again.records == db.records and again.problems == []

    assert_tuned_pack_computes_what_the_untuned_does(tmp_path, target, tmp_path / "ray.db")


def test_an_actor_killed_in_the_middle_of_a_tune_loses_no_finished_record(tmp_path, cluster):
    lowered, target, sizes = _setup(tmp_path)
    path = tmp_path / "ray.db"
    db = Database(path)
    runner = RayRunner(target, actors=2)
    killed: dict = {}

    def kill_one_actor():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (
                not path.exists() or path.read_bytes().count(b"\n") < 5 or not runner.actors):
            time.sleep(0.02)
        killed["before"] = path.read_bytes()
        pid = ray.get(runner.actors[0].pid.remote())
        os.kill(pid, signal.SIGKILL)
        killed["pid"] = pid

    killer = threading.Thread(target=kill_one_actor)
    killer.start()
    Tuner(lowered, target, db, sizes, batch=4, runner=runner).run(16)
    killer.join()
    assert "pid" in killed
    assert path.read_bytes().startswith(killed["before"])  # nothing finished was lost
    trials = _trials(Database(path))
    keys = [(r.workload, point_key(decisions_of(Trace.from_json(r.trace))[0])) for r in trials]
    assert len(trials) == 16 and len(set(keys)) == 16  # nothing repeated
    for r in trials:  # each candidate of the dead actor was tried again or recorded as failed
        assert r.status == "ok" or "died" in r.error, r.error
