"""Thread counts (tcc/rt/threads.py): one rule for the API, the CLI, TCC_NUM_THREADS and both
runtimes; a count far above the machine is refused with one line instead of faulting libgomp."""

import os

import numpy as np
import pytest

import tcc
import tcc.rt
from tcc.rt.format import MAX_THREADS, THREADS_PER_CORE
from tcc.rt.threads import checked_thread_count, env_thread_count, thread_limit
from tests.cli.test_cli_output_paths import _model, _tcc

LIMIT = min(MAX_THREADS, THREADS_PER_CORE * os.cpu_count())


def test_the_limit_is_cores_times_the_factor_capped():
    assert thread_limit() == LIMIT
    assert checked_thread_count(LIMIT) == LIMIT
    with pytest.raises(tcc.rt.RunInputError, match=rf"is {LIMIT + 1}, more than this machine can run: "
                                                   rf"at most {LIMIT} \({THREADS_PER_CORE} per core"):
        checked_thread_count(LIMIT + 1)
    for bad in (0, -1, 2.5, True, "4"):
        with pytest.raises(tcc.rt.RunInputError):
            checked_thread_count(bad)


@pytest.mark.parametrize("text, ok", [("", None), ("3", 3), ("007", 7), ("abc", None), ("3_0", None),
                                      (" 3", None), ("0", None), (str(10**20), None)])
def test_environment_variable(monkeypatch, text, ok):
    monkeypatch.setenv("TCC_NUM_THREADS", text)
    if ok is not None or text == "":
        assert env_thread_count() == ok
    else:
        with pytest.raises(tcc.rt.RunInputError, match="TCC_NUM_THREADS"):
            env_thread_count()


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    d = tmp_path_factory.mktemp("threads")
    tcc.compile(_model(), output=d / "m.tvmpack")
    return d / "m.tvmpack"


def test_api_refuses_too_many_threads(pack, monkeypatch):
    with tcc.rt.load(pack) as m:
        with pytest.raises(tcc.rt.RunInputError, match="more than this machine can run"):
            m.set_num_threads(1_000_000)
        m.set_num_threads(LIMIT)
        (y,) = m["main"](np.ones((2, 4), np.float32))
        assert y.shape == (2, 4)
    monkeypatch.setenv("TCC_NUM_THREADS", "65536")
    with pytest.raises(tcc.rt.RunInputError, match="TCC_NUM_THREADS is 65536"):
        tcc.rt.load(pack)


@pytest.mark.parametrize("runtime", ["python", "c"])
def test_cli_refuses_too_many_threads(pack, runtime):
    r = _tcc("run", pack, "--random-inputs", "--threads", "1000000", "--runtime", runtime)
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines() == [
        f"error: the thread count is 1000000, more than this machine can run: at most {LIMIT} "
        f"({THREADS_PER_CORE} per core on {os.cpu_count()} cores, never above {MAX_THREADS})"]


@pytest.mark.parametrize("runtime", ["python", "c"])
def test_environment_variable_is_checked_by_both_runtimes(pack, runtime):
    from click.testing import CliRunner

    from tcc.cli.main import cli

    r = CliRunner().invoke(cli, ["run", str(pack), "--random-inputs", "--runtime", runtime],
                           env={"TCC_NUM_THREADS": "65536"})
    assert r.exit_code == 2 and "error: TCC_NUM_THREADS is 65536, more than this machine" in r.output, r.output
