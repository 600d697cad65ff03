"""Every command that writes a file (`import -o`, `optimize -o`, `compile -o`, `emit -o`,
`run --output`, `run --output-dir`) writes into a device node instead of replacing it, and
leaves nothing behind when the write fails."""

import os
import stat

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto as TP
from onnx import helper

from tcc.cli.main import cli


def _model():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TP.FLOAT, ["n", 4])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, ["n", 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _tcc(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture
def files(tmp_path):
    onnx.save(_model(), tmp_path / "m.onnx")
    assert _tcc("import", tmp_path / "m.onnx", "-o", tmp_path / "m.tcir").exit_code == 0
    assert _tcc("compile", tmp_path / "m.onnx", "-o", tmp_path / "m.tvmpack").exit_code == 0
    return tmp_path


def _commands(d, out):
    return {
        "import": ["import", d / "m.onnx", "-o", out],
        "optimize": ["optimize", d / "m.tcir", "-o", out],
        "compile": ["compile", d / "m.onnx", "-o", out],
        "emit": ["emit", d / "m.tcir", "-o", out],
        "run": ["run", d / "m.tvmpack", "--random-inputs", "--shape", "x=2,4", "--output", out],
    }


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
@pytest.mark.parametrize("command", ["import", "optimize", "compile", "emit", "run"])
def test_output_to_a_device_node_keeps_the_node(files, command):
    dev = files / "null"
    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    r = _tcc(*_commands(files, dev)[command])
    assert r.exit_code == 0, r.output
    assert stat.S_ISCHR(os.stat(dev).st_mode)
    assert not [n for n in os.listdir(files) if n.endswith(".tmp")]


@pytest.mark.parametrize("command", ["import", "optimize", "compile", "emit", "run"])
def test_output_to_a_directory_is_refused(files, command):
    (files / "adir").mkdir()
    r = _tcc(*_commands(files, files / "adir")[command])
    assert r.exit_code == 2 and "is a directory" in r.output, r.output
    assert "Traceback" not in r.output


def test_output_dir_write_failure_leaves_no_temporaries(files, monkeypatch):
    real_save = np.save

    def save_then_fill_disk(f, arr, **kw):  # the first bytes land, then the disk is full
        f.write(b"\x93NUMPY")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "save", save_then_fill_disk)
    r = _tcc("run", files / "m.tvmpack", "--random-inputs", "--shape", "x=2,4", "--output-dir", files / "out")
    monkeypatch.setattr(np, "save", real_save)
    assert r.exit_code == 2 and "cannot write outputs: No space left" in r.output, r.output
    assert os.listdir(files / "out") == []
