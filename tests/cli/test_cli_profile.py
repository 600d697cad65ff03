"""`tcc run PACK --profile`: a table of time per kernel, kernels named after the ONNX nodes
they run; --profile on an IR file is one clear line and exit code 2."""

from __future__ import annotations

import io

import onnx
import pytest
from click.testing import CliRunner
from rich.console import Console

import tcc
from tcc.cli.main import cli
from tcc.cli.run_cmd import kernel_label, profile_table
from tcc.rt import ProfileRow
from tests.rt.test_profile import small_model


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    path = tmp_path_factory.mktemp("profile") / "m.tvmpack"
    tcc.compile(small_model(), output=path, optimize=False)  # one kernel per ONNX node
    return path


def test_profile_prints_the_table(pack):
    r = CliRunner().invoke(cli, ["run", str(pack), "--random-inputs", "--shape", "x=4,8",
                                 "--profile", "--bench", "3"])
    assert r.exit_code == 0, r.output
    assert "median" in r.output and "profile:" in r.output and "mean of 3 runs" in r.output
    assert "add_kernel (sum, +1 more)" in r.output
    for node in ("mm", "act", "mm2", "y"):
        assert f"({node})" in r.output
    assert "interpreter" in r.output and "share" in r.output


def test_profile_needs_a_pack(tmp_path):
    onnx.save(small_model(), tmp_path / "m.onnx")
    r = CliRunner().invoke(cli, ["import", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.tcir")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["run", str(tmp_path / "m.tcir"), "--random-inputs", "--profile"])
    assert r.exit_code == 2
    assert "--profile" in r.stderr and "needs a .tvmpack" in r.stderr and "tcc compile" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_kernel_label():
    assert kernel_label("conv2d_kernel", ["resnetv17_conv0_fwd"] + ["c"] * 52) == \
        "conv2d_kernel (resnetv17_conv0_fwd, +52 more)"
    assert kernel_label("relu_kernel", ["act"]) == "relu_kernel (act)"
    assert kernel_label("relu_kernel", ()) == "relu_kernel"


def test_table_shows_the_top_rows_and_one_line_for_the_rest():
    rows = [ProfileRow("kernel", f"k{i}", (f"node{i}",), 1, 30 - i, 30 - i, (30 - i) / 465)
            for i in range(30)]
    out = io.StringIO()
    Console(file=out, width=200).print(profile_table(rows, runs=1, top=25))
    text = out.getvalue()
    assert "k24 (node24)" in text and "k25 (node25)" not in text
    assert "5 more rows" in text
    assert "465.000 ms per run" in text
