"""Bad inputs that used to escape as internal errors or hangs: a model or input path that is
a FIFO or a device, shapes too big for memory or against a fixed dimension. Each gets one
line and exit 2, in both runtimes."""

import os
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto as TP
from onnx import helper

import tcc
from tcc.cli.main import cli
from tests.cli.test_cli_output_paths import _model
from tests.runtime_c.test_reader import _make

HAVE_TOOLS = shutil.which("cc") is not None and shutil.which("make") is not None


def _fixed_model():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TP.FLOAT, [1, 3])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [1, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad-inputs")
    onnx.save(_model(), d / "m.onnx")
    tcc.compile(_model(), output=d / "m.tvmpack")
    tcc.compile(_fixed_model(), output=d / "fixed.tvmpack")
    os.mkfifo(d / "fifo")
    os.mkfifo(d / "fifo.tvmpack")
    os.mkfifo(d / "fifo.tcir")
    return d


def _tcc(files, *args, runtime=None):
    env = {}
    if runtime == "c":
        args = (*args, "--runtime", "c")
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


@pytest.mark.parametrize("args", [
    ["import", "{fifo}", "-o", "{d}/x.tcir"], ["compile", "{fifo}", "-o", "{d}/x.tvmpack"],
    ["show", "{fifo}"], ["show", "{fifo_pack}"], ["run", "{fifo_pack}", "--random-inputs"],
    ["run", "{fifo_tcir}", "--random-inputs"], ["check", "{fifo}"], ["emit", "{fifo_tcir}", "-o", "{d}/x.tvmpack"],
    ["import", "/dev/zero", "-o", "{d}/x.tcir"], ["show", "/dev/zero"],
    ["run", "{d}/m.tvmpack", "--input", "x={fifo}"],
    ["run", "{d}/m.tvmpack", "--input", "x={fifo}", "--runtime", "c"],
])
def test_a_fifo_or_device_is_named_not_opened(files, args):
    """Opening a FIFO would block until someone writes to it: it must be refused unopened."""
    values = {"fifo": files / "fifo", "fifo_pack": files / "fifo.tvmpack", "fifo_tcir": files / "fifo.tcir", "d": files}
    r = CliRunner().invoke(cli, [a.format(**values) for a in args])
    assert r.exit_code == 2, r.output
    assert r.output.strip().endswith(("is a FIFO, not a regular file; give the path of a file",
                                      "is a character device, not a regular file; give the path of a file")), r.output


@pytest.mark.skipif(not HAVE_TOOLS, reason="needs cc and make")
def test_tccrt_refuses_a_fifo_without_blocking(files, tmp_path):
    build = _make(tmp_path / "build")
    np.save(tmp_path / "x.npy", np.ones((1, 4), np.float32))
    for args, want in ((["info", files / "fifo.tvmpack"], f"{files / 'fifo.tvmpack'}: cannot read: not a regular file"),
                       (["run", files / "m.tvmpack", "--input", f"x={files / 'fifo'}"],
                        f"input 'x': {files / 'fifo'}: is a FIFO, not a regular file; give the path of a file")):
        r = subprocess.run([str(build / "tccrt"), *map(str, args)], capture_output=True, text=True, timeout=20)
        assert r.returncode == 2 and r.stderr.strip() == f"error: {want}", r.stderr


@pytest.mark.parametrize("runtime", ["python", "c"])
def test_a_shape_too_big_for_memory(files, runtime):
    r = _tcc(files, "run", files / "m.tvmpack", "--random-inputs", "--shape", "x=4000000000000000000,4",
             runtime=runtime)
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: --shape x: shape [4000000000000000000, 4] needs "
                               "64,000,000,000,000,000,000 bytes of float32, more than this machine's ")


def test_a_model_dimension_too_big_for_memory(files, tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TP.FLOAT, [2**62, 4])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [2**62, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "big.onnx")
    for path in (tmp_path / "big.onnx",):
        r = _tcc(files, "run", path, "--random-inputs")
        assert r.exit_code == 2 and r.output.startswith(
            f"error: input 'x': shape [{2**62}, 4] needs {2**62 * 16:,} bytes of float32, more than"), r.output


@pytest.mark.parametrize("runtime", ["python", "c"])
def test_a_shape_against_a_fixed_dimension(files, runtime):
    r = _tcc(files, "run", files / "fixed.tvmpack", "--random-inputs", "--shape", "x=100000000,3",
             runtime=runtime)
    assert r.exit_code == 2 and r.output.strip() == (
        "error: --shape x: dim 0 is 100000000, but the input's dim 0 is fixed at 1 (its shape is [1, 3])"), r.output


@pytest.mark.parametrize("target, words", [
    ("cuda -arch=sm_3", "bad CUDA arch 'sm_3'"),
    ("cuda -max-threads-per-block=4096", "-max-threads-per-block must be a whole number from 1 to 1024"),
    ("cuda -arch=sm_90 -arch=sm_80", "target option -arch is given twice"),
    ("rocm", "unknown target kind 'rocm'"),
])
def test_a_bad_cuda_target_is_one_line_and_writes_nothing(files, tmp_path, target, words):
    out = tmp_path / "m.tvmpack"
    r = CliRunner().invoke(cli, ["compile", str(files / "m.onnx"), "--target", target, "-o", str(out)])
    assert r.exit_code == 2 and words in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not out.exists()


def test_compiling_for_cuda_without_nvrtc_says_how_to_install_it(files, tmp_path, monkeypatch):
    from tcc.emit import nvrtc

    monkeypatch.setenv(nvrtc.ENV, str(tmp_path / "libnvrtc.so.12"))
    nvrtc._library.cache_clear()
    try:
        out = tmp_path / "m.tvmpack"
        r = CliRunner().invoke(cli, ["compile", str(files / "m.onnx"), "--target", "cuda", "-o", str(out)])
    finally:
        monkeypatch.undo()
        nvrtc._library.cache_clear()
    assert r.exit_code == 2 and nvrtc.INSTALL_HINT in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and not out.exists()
