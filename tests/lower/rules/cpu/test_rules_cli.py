"""`tcc show --stage scheduled` and `tcc compile/emit --no-schedule`."""

from __future__ import annotations

import numpy as np
from click.testing import CliRunner

from tcc.cli.main import cli
from tcc.rt import load

from .rules_cases import CASES


def _invoke(*args):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def _matmul_file(tmp_path):
    path = tmp_path / "mm.onnx"
    path.write_bytes(CASES["matmul"][0].SerializeToString())
    return path


def test_show_scheduled_prints_the_scheduled_loop_programs(tmp_path):
    src = _matmul_file(tmp_path)
    plain = _invoke("show", src)
    scheduled = _invoke("show", src, "--stage", "scheduled")
    assert "vectorized(" in scheduled and "unrolled(" in scheduled
    assert "vectorized(" not in plain
    assert "def main" not in scheduled  # only the PrimFuncs


def test_compile_with_and_without_rules_gives_the_same_results(tmp_path):
    src = _matmul_file(tmp_path)
    _invoke("compile", src, "-o", tmp_path / "on.tvmpack")
    _invoke("compile", src, "-o", tmp_path / "off.tvmpack", "--no-schedule")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 96), dtype=np.float32)
    b = rng.standard_normal((96, 80), dtype=np.float32)
    (on,) = load(tmp_path / "on.tvmpack")["main"](a, b)
    (off,) = load(tmp_path / "off.tvmpack")["main"](a, b)
    np.testing.assert_allclose(on, a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(on, off)  # the rules keep each sum's order
