"""`tcc tune`: a tune killed with SIGKILL and started again loses no finished record and
measures nothing twice; bad options are one-line errors with exit code 2."""

from __future__ import annotations

import platform
import signal
import subprocess
import sys
import time

import onnx
import pytest
from click.testing import CliRunner

from tcc.cli.main import cli
from tcc.lower.schedule.trace import Trace
from tcc.tune.database import Database
from tcc.tune.search import point_key
from tcc.tune.space import decisions_of
from tests.tune.test_tuner import _model


def _tune(model, db, *extra):
    return [sys.executable, "-m", "tcc", "tune", str(model), "--db", str(db), "--batch", "4",
            "--jobs", "1", "--shape", "batch=16", *extra]


def test_a_tune_killed_with_sigkill_resumes_losing_and_repeating_nothing(tmp_path):
    model, db = tmp_path / "m.onnx", tmp_path / "t.db"
    onnx.save(_model(), model)
    proc = subprocess.Popen(_tune(model, db, "--trials", "200"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (
                not db.exists() or db.read_bytes().count(b"\n") < 8):
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    before = db.read_bytes()
    finished = before[: before.rfind(b"\n") + 1]  # a line a kill cut short was not finished
    assert finished.count(b"\n") >= 8
    r = subprocess.run(_tune(model, db, "--trials", "24", "--no-model-check"),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert db.read_bytes().startswith(finished)
    everything = Database(db).records
    records = [x for x in everything if not x.confirmed]  # the trials; not the re-measurements
    keys = [(x.workload, point_key(decisions_of(Trace.from_json(x.trace))[0])) for x in records]
    assert len(keys) == len(set(keys))
    trials_before = sum(not x.confirmed for x in everything[: finished.count(b"\n")])
    assert len(records) == max(24, trials_before)
    assert sum(x.default for x in records) == 2  # one default measurement per kernel


@pytest.mark.parametrize("args, message", [
    (["--budget", "soon"], "--budget 'soon': expected a positive time such as 90s, 10m or 1h"),
    (["--shape", "batch"], "--shape 'batch': expected NAME=DIMS"),
    (["--target", "cuda"], "tcc tune does not measure CUDA kernels yet"),
    (["--target", "cuda -arch=sm_4"], "bad CUDA arch 'sm_4'"),
    (["--target", "llvm -mtriple=OTHER-unknown-linux-gnu -mcpu=generic"],
     "tcc tune measures kernels on this machine"),
    (["--cluster", ""], "--cluster '': expected 'auto' or a Ray address"),
    (["--shape", "seq=8"], "--shape seq: the model has no input or symbolic dimension of this "
                           "name (inputs: x; dimensions: batch)"),
])
def test_bad_options_are_one_line_errors(tmp_path, args, message):
    other = "aarch64" if platform.machine() in ("x86_64", "AMD64") else "x86_64"
    args = [a.replace("OTHER", other) for a in args]
    model = tmp_path / "m.onnx"
    onnx.save(_model(), model)
    r = CliRunner().invoke(cli, ["tune", str(model), "--db", str(tmp_path / "t.db"), *args])
    assert r.exit_code == 2, r.output
    assert message in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_a_missing_model_is_an_error(tmp_path):
    r = CliRunner().invoke(cli, ["tune", str(tmp_path / "no.onnx"), "--db", str(tmp_path / "t.db")])
    assert r.exit_code == 2 and "no such file" in r.output
    assert not (tmp_path / "t.db").exists()


def test_a_cluster_without_ray_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets where it is missing
    model = tmp_path / "m.onnx"
    onnx.save(_model(), model)
    r = CliRunner().invoke(cli, ["tune", str(model), "--db", str(tmp_path / "t.db"),
                                 "--cluster", "auto"])
    assert r.exit_code == 2, r.output
    assert "--cluster needs Ray: pip install 'tcc[distributed]'" in r.output
    assert len(r.output.strip().splitlines()) == 1, r.output


def test_a_busy_machine_is_named_before_tuning(monkeypatch):
    from tcc.cli import tune_cmd

    monkeypatch.setattr(tune_cmd.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(tune_cmd.os, "getloadavg", lambda: (3.5, 1.0, 1.0))
    assert tune_cmd._busy().startswith("this machine is busy (load average 3.5 on 2 cores)")
    monkeypatch.setattr(tune_cmd.os, "getloadavg", lambda: (0.2, 1.0, 1.0))
    assert tune_cmd._busy() == ""


def _tune_here(tmp_path, *extra):
    model = tmp_path / "m.onnx"
    onnx.save(_model(), model)
    r = CliRunner().invoke(cli, ["tune", str(model), "--db", str(tmp_path / "t.db"), "--batch",
                                 "4", "--jobs", "1", "--shape", "batch=16", "--trials", "8",
                                 *extra])
    assert r.exit_code == 0, r.output
    return r.output, Database(tmp_path / "t.db")


def test_a_tune_ends_with_the_in_model_check_and_its_verdict_in_the_db(tmp_path):
    output, db = _tune_here(tmp_path)
    if "no kernel has a schedule faster than its default" in output:
        assert db.checks == []
    else:
        assert "in-model check (C runtime, median of 7 rounds" in output, output
        assert "x untuned; " in output and len(db.checks) == 1


def test_no_model_check_leaves_it_out(tmp_path):
    output, db = _tune_here(tmp_path, "--no-model-check")
    assert "in-model check" not in output and db.checks == []


def test_a_tune_without_the_c_runtime_skips_the_check_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("TCCRT", str(tmp_path / "missing"))
    output, db = _tune_here(tmp_path)
    assert f"warning: in-model check skipped: TCCRT={tmp_path / 'missing'} is not an " in output
    assert db.checks == [] and len(db.records) >= 8
