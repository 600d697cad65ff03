"""A full disk is bad luck, not a tcc bug: every command says so in one line with exit 2,
and leaves no partial file or temporary behind."""

import os
import shutil
import subprocess
import sys

import onnx
import pytest
from click.testing import CliRunner

import tcc.emit.support
from tcc.cli.main import cli
from tests.cli.test_cli_output_paths import _model


@pytest.fixture
def model(tmp_path):
    onnx.save(_model(), tmp_path / "m.onnx")
    assert CliRunner().invoke(cli, ["import", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.tcir")]).exit_code == 0
    return tmp_path


@pytest.mark.parametrize("command", ["compile", "emit"])
def test_no_space_while_linking(model, monkeypatch, command):
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tcc.emit.support, "_link_in", full)
    source = model / ("m.onnx" if command == "compile" else "m.tcir")
    # --no-cache: the kernels must be linked here, not come whole from an earlier test's pack
    r = CliRunner().invoke(cli, [command, str(source), "-o", str(model / "m.tvmpack"), "--no-cache"])
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: cannot link the kernels in the temporary folder ")
    assert "No space left on device; free space there or set TMPDIR" in r.output
    assert not (model / "m.tvmpack").exists()


def test_no_space_anywhere_else_is_a_user_error(model, monkeypatch):
    import tcc.cli.compile_cmd

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device", "/somewhere/file")

    monkeypatch.setattr(tcc.cli.compile_cmd, "compile_to_file", full)
    r = CliRunner().invoke(cli, ["compile", str(model / "m.onnx"), "-o", str(model / "m.tvmpack")])
    assert r.exit_code == 2 and r.output.strip() == (
        "error: /somewhere/file: no space left on device; free some space (temporary files go to "
        "TMPDIR, else /tmp)"), r.output


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="mounting a tmpfs needs root")
def test_a_real_full_filesystem(model, tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        (full / "fill").write_bytes(b"\0" * 60 * 1024)  # about one page is left
        env = {**os.environ, "TMPDIR": str(full)}
        for args in (["compile", "m.onnx", "-o", "m.tvmpack"], ["emit", "m.tcir", "-o", "m.tvmpack"],
                     ["compile", "m.onnx", "-o", str(full / "out.tvmpack")]):
            r = subprocess.run([sys.executable, "-m", "tcc", *args, "--no-cache"], cwd=model, capture_output=True, text=True, env=env)
            assert r.returncode == 2, r.stderr
            assert r.stderr.startswith("error: ") and len(r.stderr.splitlines()) == 1, r.stderr
            assert "No space left on device" in r.stderr
        assert sorted(os.listdir(full)) == ["fill"]
    finally:
        subprocess.run(["umount", str(full)])
