"""A .tcir file from elsewhere cannot make a pack touch memory outside its buffers: `tcc emit`
guards every access it cannot prove in bounds (and says so), or refuses it with
TCC_VERIFY=1; a file tcc wrote itself compiles to the same pack as before."""

import shutil

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from tcc.cli.main import cli
from tcc.ir.irfile import read_container, write_container
from tests.cli.test_cli_pack import _model
from tests.runtime_c.test_reader import _make

HAVE_TOOLS = shutil.which("cc") is not None and shutil.which("make") is not None


def _tcc(*args, env=None):
    # guarding is what happens without TCC_VERIFY, which the suite itself sets (tests/conftest.py)
    return CliRunner().invoke(cli, [str(a) for a in args], env={"TCC_VERIFY": None, **(env or {})})


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("untrusted")
    onnx.save(_model(), d / "m.onnx")
    assert _tcc("import", d / "m.onnx", "-o", d / "m.tcir").exit_code == 0
    assert _tcc("optimize", d / "m.tcir", "-o", d / "opt.tcir").exit_code == 0
    text, arrays, _ = read_container(d / "opt.tcir")
    assert "in1[v_k, v_i1]" in text
    crafted = text.replace("in1[v_k, v_i1]", "in1[v_k + 100000000, v_i1]")
    write_container(d / "crafted.tcir", crafted, {k: np.array(v) for k, v in arrays.items()}, "elsewhere")
    return d


def test_tcc_own_file_compiles_as_before(files):
    r = _tcc("emit", files / "opt.tcir", "-o", files / "opt.tvmpack")
    assert r.exit_code == 0 and "warning" not in r.output, r.output
    assert _tcc("compile", files / "m.onnx", "-o", files / "direct.tvmpack").exit_code == 0
    assert (files / "opt.tvmpack").read_bytes() == (files / "direct.tvmpack").read_bytes()


def test_a_crafted_access_is_guarded_and_the_pack_stays_in_bounds(files, tmp_path):
    r = _tcc("emit", files / "crafted.tcir", "-o", files / "crafted.tvmpack")
    assert r.exit_code == 0, r.output
    assert "warning: 1 buffer access(es) of" in r.output and "load in1[v_k + 100000000, v_i1]" in r.output
    runtimes = ["python"] + (["c"] if HAVE_TOOLS else [])
    env = {"TCCRT": str(_make(tmp_path / "build") / "tccrt")} if HAVE_TOOLS else None
    outs = []
    for runtime in runtimes:
        r = _tcc("run", files / "crafted.tvmpack", "--random-inputs", "--shape", "x=3,8", "--runtime", runtime,
                 "--output-dir", tmp_path / runtime, env=env)
        assert r.exit_code == 0, r.output
        outs.append(np.load(tmp_path / runtime / "y.npy"))
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    b = onnx.numpy_helper.to_array(_model().graph.initializer[1])
    np.testing.assert_allclose(outs[0], np.maximum(b, 0) + 0 * x[:, :4], rtol=1e-6)  # the guarded loads read 0
    for other in outs[1:]:
        np.testing.assert_array_equal(other, outs[0])


def test_tcc_verify_refuses_it(files):
    r = _tcc("emit", files / "crafted.tcir", "-o", files / "refused.tvmpack", env={"TCC_VERIFY": "1"})
    assert r.exit_code == 2 and "is not provably within 0..8 - 1" in r.output, r.output
    assert not (files / "refused.tvmpack").exists()
