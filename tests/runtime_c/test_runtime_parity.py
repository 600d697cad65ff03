"""The three ways to run a pack (`tcc run`, `tcc run --runtime c`, `tccrt run`) treat the same
input files the same way: big-endian data is read as the numbers it holds, a 0-d array is
reported as rank 0, and bytes after the data are refused, with one message; and they compute
the same sizes."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from click.testing import CliRunner

import tcc
import tcc.rt
from tcc.cli.main import cli
from tests.cli.test_cli_output_paths import _model
from tests.helpers import node_model
from tests.runtime_c.test_reader import _make

pytestmark = pytest.mark.skipif(shutil.which("cc") is None or shutil.which("make") is None,
                                reason="needs cc and make")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("parity")
    tcc.compile(_model(), output=d / "m.tvmpack")
    x = np.arange(-4, 4, dtype=np.float32).reshape(2, 4)
    np.save(d / "native.npy", x)
    np.save(d / "big.npy", x.astype(">f4"))
    np.save(d / "scalar.npy", np.float32(3))
    (d / "trailing.npy").write_bytes((d / "native.npy").read_bytes() + b"junk")
    return d, _make(d / "build")


def _three(d, build, npy: str) -> list[str]:
    """stdout or the error line of each runtime, for input x = `npy`."""
    out = []
    for runtime in ("python", "c"):
        r = CliRunner().invoke(cli, ["run", str(d / "m.tvmpack"), "--input", f"x={d / npy}",
                                     "--runtime", runtime, "--output-dir", str(d / f"out-{runtime}")],
                               env={"TCCRT": str(build / "tccrt")})
        out.append(r.output.strip() if r.exit_code else "ok")
    r = subprocess.run([str(build / "tccrt"), "run", str(d / "m.tvmpack"), "--input", f"x={d / npy}",
                        "--output-dir", str(d / "out-tccrt")], capture_output=True, text=True)
    out.append(r.stderr.strip() if r.returncode else "ok")
    return out


def test_big_endian_data_is_read_as_its_numbers(setup):
    d, build = setup
    assert _three(d, build, "big.npy") == ["ok"] * 3
    want = np.maximum(np.load(d / "native.npy"), 0)
    for runtime in ("python", "c", "tccrt"):
        np.testing.assert_array_equal(np.load(d / f"out-{runtime}" / "y.npy"), want)
    with tcc.rt.load(d / "m.tvmpack") as m:  # and through the API
        (y,) = m["main"](np.load(d / "big.npy"))
        np.testing.assert_array_equal(y, want)


def test_a_0d_input_is_rank_0_everywhere(setup):
    d, build = setup
    assert _three(d, build, "scalar.npy") == ["error: input 'x' of 'main': expected rank 2, got rank 0 (shape [])"] * 3


def test_trailing_bytes_are_refused_everywhere(setup):
    d, build = setup
    want = (f"error: input 'x': {d / 'trailing.npy'}: the data is 36 bytes but float32(2, 4) needs 32 "
            "(trailing bytes); save it with numpy.save")
    assert _three(d, build, "trailing.npy") == [want] * 3


def test_a_slice_to_int64_max_runs_everywhere(setup, tmp_path):
    """A Slice whose end arrives at run time as INT64_MAX ("to the end", as MPT's legacy
    export slices its ALiBi table): its size program adds to the end only where the end is
    negative, and that untaken branch overflows. Every runtime gives the slice."""
    model = node_model("Slice", {"x": (np.float32, (3, "n")), "starts": (np.int64, (1,)),
                               "ends": (np.int64, (1,))}, ["y"],
                       initializers=[("axes", np.array([1], np.int64))])
    tcc.compile(model, output=tmp_path / "m.tvmpack")
    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "starts.npy", np.array([-2], np.int64))
    np.save(tmp_path / "ends.npy", np.array([np.iinfo(np.int64).max], np.int64))
    inputs = [f"--input={n}={tmp_path / n}.npy" for n in ("x", "starts", "ends")]
    _, build = setup
    for runtime in ("python", "c"):
        r = CliRunner().invoke(cli, ["run", str(tmp_path / "m.tvmpack"), *inputs, "--runtime", runtime,
                                     "--output-dir", str(tmp_path / runtime)],
                               env={"TCCRT": str(build / "tccrt")})
        assert r.exit_code == 0, r.output
        np.testing.assert_array_equal(np.load(tmp_path / runtime / "y.npy"), x[:, -2:])
    flags = [word for a in inputs for word in ("--input", a.removeprefix("--input="))]
    r = subprocess.run([str(build / "tccrt"), "run", str(tmp_path / "m.tvmpack"), *flags,
                        "--output-dir", str(tmp_path / "tccrt")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "tccrt" / "y.npy"), x[:, -2:])
