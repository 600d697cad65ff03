"""Tuning on a Ray cluster (a local one, started here on the loopback address): the records
are those a local tune writes and apply the same way, an actor killed in the middle of a
tune loses no finished record, and actors go only to the nodes of the target's machine.
Skipped where Ray is not installed (`pip install 'tcc[distributed]'`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import onnx
import pytest

from tcc.errors import TccError
from tcc.lower.schedule.trace import Trace
from tcc.target import parse_target
from tcc.tune.database import Database
from tcc.tune.search import point_key
from tcc.tune.space import decisions_of
from tcc.tune.tuner import Tuner
from tests.tune.test_tuner import (
    _model,
    _setup,
    assert_tuned_pack_computes_what_the_untuned_does,
)

ray = pytest.importorskip("ray")

from tcc.tune.ray_runner import RayRunner, matching_nodes  # noqa: E402

OTHER_MACHINE = "llvm -mtriple=aarch64-unknown-linux-gnu -mcpu=neoverse-v2"


@pytest.fixture(scope="module")
def cluster():
    ray.init(address="local", num_cpus=2, _node_ip_address="127.0.0.1", include_dashboard=False,
             log_to_driver=False, configure_logging=False)
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


def test_actors_go_only_to_the_nodes_of_the_targets_machine():
    here = str(parse_target("llvm"))
    machines = {"a": OTHER_MACHINE, "b": here, "c": None, "d": here}
    assert matching_nodes(machines, here) == ["b", "d"]
    with pytest.raises(TccError) as e:
        matching_nodes({"a": here, "c": None}, OTHER_MACHINE)
    assert str(e.value).startswith("--cluster: none of the Ray cluster's 2 node(s) is the target "
                                   "machine aarch64-unknown-linux-gnu -mcpu=neoverse-v2 (it has: ")
    assert "1 node(s) did not answer" in str(e.value) and "\n" not in str(e.value)


def test_each_node_is_asked_which_machine_it_is(cluster):
    target = parse_target("llvm")
    runner = RayRunner(target)
    assert runner.nodes == [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    assert runner.count == 1
    with pytest.raises(TccError, match="none of the Ray cluster's 1 node"):
        RayRunner(parse_target(OTHER_MACHINE))


def test_tcc_tune_with_cluster_auto_tunes_on_the_cluster(tmp_path, cluster):
    model, db = tmp_path / "m.onnx", tmp_path / "t.db"
    onnx.save(_model(), model)
    r = subprocess.run([sys.executable, "-m", "tcc", "tune", str(model), "--db", str(db),
                        "--trials", "6", "--batch", "4", "--shape", "batch=16",
                        "--cluster", "auto"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "measuring on the 1 Ray node(s) of the target's machine" in r.stdout
    records = Database(db).records
    assert len(records) >= 6 and all(x.status == "ok" for x in records)
