"""`tcc compile` / `tcc emit` / `tcc run` on packs: results, determinism, and one clear line
with exit code 2 for every bad pack or input."""

import subprocess
import sys

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto as TP
from onnx import helper

import tcc
from tcc.cli.main import cli


def _model():
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["sum"]),
        helper.make_node("Relu", ["sum"], ["y"]),
    ]
    rng = np.random.default_rng(0)
    inits = [
        helper.make_tensor("w", TP.FLOAT, [8, 4], rng.standard_normal(32).astype(np.float32)),
        helper.make_tensor("b", TP.FLOAT, [4], rng.standard_normal(4).astype(np.float32)),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, ["batch", 8])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, ["batch", 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _expected(model, x):
    w = onnx.numpy_helper.to_array(model.graph.initializer[0])
    b = onnx.numpy_helper.to_array(model.graph.initializer[1])
    return np.maximum(x @ w + b, 0)


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    d = tmp_path_factory.mktemp("pack")
    onnx.save(_model(), d / "m.onnx")
    r = CliRunner().invoke(cli, ["compile", str(d / "m.onnx"), "-o", str(d / "m.tvmpack")])
    assert r.exit_code == 0, r.output
    return d / "m.tvmpack"


@pytest.mark.parametrize("batch", [1, 3])
def test_one_pack_serves_every_batch(pack, tmp_path, batch):
    x = np.random.default_rng(batch).standard_normal((batch, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = CliRunner().invoke(cli, ["run", str(pack), "--input", f"x={tmp_path / 'x.npy'}",
                                 "--output-dir", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"), _expected(_model(), x),
                               rtol=1e-5, atol=1e-6)


def test_python_api_matches(tmp_path):
    fn = tcc.compile_onnx(_model())
    x = np.ones((2, 8), np.float32)
    (y,) = fn(x)
    np.testing.assert_allclose(y, _expected(_model(), x), rtol=1e-5, atol=1e-6)
    assert hasattr(y, "__dlpack__")


def test_compiling_twice_gives_identical_bytes():
    assert tcc.compile(_model()) == tcc.compile(_model())


def test_random_inputs_bench_and_check(pack, tmp_path):
    onnx.save(_model(), tmp_path / "m.onnx")
    r = CliRunner().invoke(cli, ["run", str(pack), "--random-inputs", "--shape", "x=5,8",
                                 "--bench", "3", "--check", "--onnx", str(tmp_path / "m.onnx")])
    assert r.exit_code == 0, r.output
    assert "median" in r.output and "ok" in r.output


def test_cross_compiled_pack(tmp_path):
    onnx.save(_model(), tmp_path / "m.onnx")
    r = CliRunner().invoke(cli, ["compile", str(tmp_path / "m.onnx"), "--target",
                                 "llvm -mtriple=aarch64-linux-gnu", "-o", str(tmp_path / "a.tvmpack")])
    assert r.exit_code == 0, r.output
    import tarfile

    with tarfile.open(tmp_path / "a.tvmpack") as tar:
        objects = [m for m in tar.getnames() if m.endswith(".o")]
        assert objects
        header = tar.extractfile(objects[0]).read(20)
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64


def _bad(pack, tmp_path):
    np.save(tmp_path / "x64.npy", np.zeros((2, 8), np.float64))
    np.save(tmp_path / "x3.npy", np.zeros((2, 8, 1), np.float32))
    np.save(tmp_path / "x9.npy", np.zeros((2, 9), np.float32))
    np.save(tmp_path / "ok.npy", np.zeros((2, 8), np.float32))
    data = pack.read_bytes()
    damaged = {
        "truncated": data[: len(data) // 2],
        "flipped": data[:600] + bytes([data[600] ^ 0xFF]) + data[601:],
        "empty": b"",
    }
    cases = []
    for name, content in damaged.items():
        p = tmp_path / f"{name}.tvmpack"
        p.write_bytes(content)
        cases.append(([str(p), "--input", f"x={tmp_path / 'ok.npy'}"], str(p)))
    cases += [
        ([str(pack), "--input", f"y={tmp_path / 'ok.npy'}"], "'y'"),
        ([str(pack)], "'x'"),
        ([str(pack), "--input", f"x={tmp_path / 'x64.npy'}"], "float64"),
        ([str(pack), "--input", f"x={tmp_path / 'x3.npy'}"], "rank"),
        ([str(pack), "--input", f"x={tmp_path / 'x9.npy'}"], "dimension 1"),
    ]
    return cases


def test_bad_packs_and_inputs_exit_2_in_a_real_process(pack, tmp_path):
    for args, fragment in _bad(pack, tmp_path):
        p = subprocess.run([sys.executable, "-m", "tcc", "run", *args], capture_output=True, text=True)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert fragment in p.stderr and "Traceback" not in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_api_raises_tcc_errors(pack):
    from tcc.rt import load

    with load(pack) as m:
        with pytest.raises(tcc.TccError, match="dtype"):
            m["main"](np.zeros((2, 8), np.float64))
        with pytest.raises(tcc.TccError):
            m["main"](np.zeros((2, 9), np.float32))


def test_show_pack(pack):
    r = CliRunner().invoke(cli, ["show", str(pack)])
    # tcc compile fuses matmul + add + relu into one kernel
    assert r.exit_code == 0 and "kernel fused_matmul_add_relu_kernel" in r.output
    assert "function main" in r.output
    import json

    s = json.loads(CliRunner().invoke(cli, ["show", str(pack), "--json"]).output)
    assert s["kernels"] == 1 and s["constants"] == 2 and s["functions"]["main"]["inputs"][0]["name"] == "x"
    r = CliRunner().invoke(cli, ["show", str(pack), "--stats"])
    assert r.exit_code == 0 and "batch" in r.output


@pytest.mark.parametrize("out_type", [TP.STRING, TP.INT64])
def test_string_inputs_are_refused_at_compile_time(tmp_path, out_type):
    """No runtime can read a pack whose signature holds a string: compiling one is the error."""
    node = helper.make_node("Identity" if out_type == TP.STRING else "Shape", ["s"], ["t"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("s", TP.STRING, [2])],
                          [helper.make_tensor_value_info("t", out_type, [2 if out_type == TP.STRING else 1])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "s.onnx")
    r = CliRunner().invoke(cli, ["compile", str(tmp_path / "s.onnx"), "-o", str(tmp_path / "s.tvmpack")])
    assert r.exit_code == 2, r.output
    assert r.output.strip() == ("error: input 's' of 'main' has dtype string, which a pack cannot carry "
                                "(packs hold numbers and booleans); run the model with the reference "
                                "interpreter (`tcc run FILE.tcir`) instead")
    assert not (tmp_path / "s.tvmpack").exists()


def test_compile_v_names_the_stages_and_what_the_caches_gave(tmp_path, monkeypatch):
    monkeypatch.setenv("TCC_CACHE_DIR", str(tmp_path / "cache"))
    onnx.save(_model(), tmp_path / "m.onnx")

    def compile_(*options, env=None):
        r = CliRunner().invoke(cli, ["compile", str(tmp_path / "m.onnx"), "-o",
                                     str(tmp_path / "m.tvmpack"), "-v", *options], env=env)
        assert r.exit_code == 0, r.output
        stages = [line.split()[0] for line in r.output.splitlines() if line.endswith(" ms")]
        return r.output, stages, (tmp_path / "m.tvmpack").read_bytes()

    cold, stages, cold_pack = compile_()
    assert stages == ["cache", "import", "optimize", "legalize", "vm", "kernels", "pack", "write"]
    assert f"0 of 1 kernel(s) from the compile cache ({tmp_path / 'cache'})" in cold
    again, stages, again_pack = compile_()
    assert stages == ["cache"]
    assert f"the pack from the pack cache ({tmp_path / 'cache' / 'packs'})" in again
    warm, stages, warm_pack = compile_(env={"TCC_PACK_CACHE_MB": "0"})
    assert stages == ["import", "optimize", "legalize", "vm", "kernels", "pack", "write"]
    assert "1 of 1 kernel(s) from the compile cache" in warm
    bypassed, stages, bypassed_pack = compile_("--no-cache")
    assert "cache" not in bypassed and stages[0] == "import"
    assert cold_pack == again_pack == warm_pack == bypassed_pack
