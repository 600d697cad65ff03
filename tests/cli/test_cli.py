"""The `tcc` command line: happy paths, and one clear line + exit code 2 for bad input."""

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto as TP
from onnx import helper

from tcc.cli.main import cli


def _model(path):
    nodes = [
        helper.make_node("Add", ["x", "w"], ["sum"]),
        helper.make_node("Relu", ["sum"], ["out/relu:0"]),
    ]
    w = helper.make_tensor("w", TP.FLOAT, [3], [1.0, -2.0, 0.5])
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("out/relu:0", TP.FLOAT, ["batch", 3]),
         helper.make_tensor_value_info("sum", TP.FLOAT, ["batch", 3])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture
def workdir(tmp_path):
    _model(tmp_path / "m.onnx")
    x = np.array([[1.0, 1.0, -1.0], [0.0, 3.0, 2.0]], np.float32)
    np.save(tmp_path / "x.npy", x)
    return tmp_path


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _imported(d):
    r = invoke("import", d / "m.onnx", "-o", d / "m.tcir")
    assert r.exit_code == 0, r.output
    return d / "m.tcir"


def test_import_show_run_round_trip(workdir):
    tcir = _imported(workdir)
    shown = invoke("show", tcir)
    assert shown.exit_code == 0 and "op.relu" in shown.output
    r = invoke("run", tcir, "--input", f"x={workdir / 'x.npy'}",
               "--output-dir", workdir / "out", "--output", workdir / "all.npz")
    assert r.exit_code == 0, r.output
    x = np.load(workdir / "x.npy")
    want = x + np.array([1.0, -2.0, 0.5], np.float32)
    np.testing.assert_array_equal(np.load(workdir / "out" / "out_relu_0.npy"), np.maximum(want, 0))
    np.testing.assert_array_equal(np.load(workdir / "out" / "sum.npy"), want)
    with np.load(workdir / "all.npz") as z:
        assert sorted(z.files) == ["out/relu:0", "sum"]
        np.testing.assert_array_equal(z["out/relu:0"], np.maximum(want, 0))


def test_show_stats_and_json(workdir):
    tcir = _imported(workdir)
    r = invoke("show", tcir, "--json")
    s = json.loads(r.output)
    main = s["functions"]["main"]
    assert main["op_counts"] == {"add": 1, "relu": 1}
    assert main["inputs"] == [{"name": "x", "shape": ["batch", 3], "dtype": "float32"}]
    assert s["constant_bytes"] == 12
    r = invoke("show", tcir, "--stats")
    assert r.exit_code == 0 and "relu" in r.output and "batch" in r.output


def test_inputs_npz(workdir):
    tcir = _imported(workdir)
    np.savez(workdir / "in.npz", x=np.ones((4, 3), np.float32))
    r = invoke("run", tcir, "--inputs", workdir / "in.npz", "--output", workdir / "o.npz")
    assert r.exit_code == 0, r.output
    with np.load(workdir / "o.npz") as z:
        assert z["sum"].shape == (4, 3)


def test_check_reports_unsupported_ops(workdir):
    r = invoke("check", workdir / "m.onnx", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["ok"] is True
    g = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"], name="n1")], "g",
                          [helper.make_tensor_value_info("x", TP.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [1])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), workdir / "bad.onnx")
    r = invoke("check", workdir / "bad.onnx", "--json")
    assert r.exit_code == 1
    assert json.loads(r.output)["unsupported"] == [
        {"op_type": "NoSuchOp", "domain": "", "opset": 17, "nodes": ["n1"]}
    ]


def _bad_input_cases(d):
    tcir = d / "m.tcir"
    np.save(d / "x64.npy", np.zeros((2, 3), np.float64))
    np.save(d / "x4.npy", np.zeros((2, 4), np.float32))
    (d / "junk.npy").write_bytes(b"junk")
    return [
        (["run", tcir], "missing input 'x'"),
        (["run", tcir, "--input", f"y={d / 'x.npy'}"], "unknown input 'y'"),
        (["run", tcir, "--input", f"x={d / 'x64.npy'}"], "input 'x': expected dtype float32, got float64"),
        (["run", tcir, "--input", f"x={d / 'x4.npy'}"], "input 'x': dimension 1 is 4"),
        (["run", tcir, "--input", f"x={d / 'nope.npy'}"], "no such file"),
        (["run", tcir, "--input", f"x={d / 'junk.npy'}"], "not a readable .npy file"),
        (["run", tcir, "--input", "x"], "expected NAME=PATH.npy"),
        (["run", d / "missing.tcir", "--input", f"x={d / 'x.npy'}"], "no such file"),
        (["show", d / "x.npy"], "bad magic"),
        (["import", d / "junk.npy", "-o", d / "j.tcir"], "not a valid ONNX model"),
    ]


def test_bad_inputs_exit_2_with_one_line(workdir):
    _imported(workdir)
    for args, message in _bad_input_cases(workdir):
        r = CliRunner().invoke(cli, [str(a) for a in args])
        assert r.exit_code == 2, (args, r.output)
        assert message in r.output, (args, r.output)
        assert "Traceback" not in r.output
        assert len(r.output.strip().splitlines()) == 1, r.output


def test_failed_run_writes_nothing(workdir):
    tcir = _imported(workdir)
    np.save(workdir / "x64.npy", np.zeros((2, 3), np.float64))
    r = CliRunner().invoke(cli, ["run", str(tcir), "--input", f"x={workdir / 'x64.npy'}",
                                 "--output-dir", str(workdir / "out"), "--output", str(workdir / "o.npz")])
    assert r.exit_code == 2
    assert not (workdir / "o.npz").exists()
    assert not (workdir / "out").exists() or not os.listdir(workdir / "out")


@pytest.mark.parametrize("damage", ["truncate", "flip", "magic", "version"])
def test_damaged_ir_file_is_a_clean_error_in_a_real_process(workdir, damage):
    tcir = _imported(workdir)
    data = bytearray(tcir.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[80] ^= 0xFF
    elif damage == "magic":
        data[0:4] = b"XXXX"
    else:
        data[8] = 99
    tcir.write_bytes(bytes(data))
    p = subprocess.run([sys.executable, "-m", "tcc", "show", str(tcir)], capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert str(tcir) in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_version():
    r = invoke("--version")
    assert r.exit_code == 0 and "tcc, version" in r.output


@pytest.mark.parametrize("args", [["run", "x.tcir", "--bench", "0"], ["nosuch"], ["run"]])
def test_usage_errors_are_one_line_exit_2(args):
    p = subprocess.run([sys.executable, "-m", "tcc", *args], capture_output=True, text=True)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert p.stderr.startswith("error:")


def test_output_files_and_folders(workdir):
    tcir = _imported(workdir)
    x = f"x={workdir / 'x.npy'}"
    r = invoke("run", tcir, "--input", x, "--output", workdir / "missing" / "o.npz")
    assert r.exit_code == 2 and not (workdir / "missing").exists()
    r = invoke("run", tcir, "--input", x, "--output", workdir / "o.npz", "--output-dir", workdir / "new")
    assert r.exit_code == 0
    for f in [workdir / "o.npz", workdir / "new" / "sum.npy"]:
        assert f.stat().st_mode & 0o044, oct(f.stat().st_mode)  # readable by others, like any file


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--random-inputs", "--shape", "nope=2,3"], "--shape nope: no such input"),
        (["--shape", "x=2,3"], "add --random-inputs"),
        (["--random-inputs", "--onnx", "m.onnx"], "--onnx is only used by --check"),
        (["--random-inputs", "--check", "--onnx", "m.onnx", "--rtol", "-1"], "must not be negative"),
    ],
)
def test_run_option_misuse(workdir, extra, message):
    tcir = _imported(workdir)
    r = CliRunner().invoke(cli, ["run", str(tcir), *[str(workdir / a) if a == "m.onnx" else a for a in extra]])
    assert r.exit_code == 2 and message in r.output, r.output


def test_check_compile_lists_ops_without_loop_programs(tmp_path):
    g = helper.make_graph([helper.make_node("NonMaxSuppression", ["b", "s"], ["y"])], "g",
                          [helper.make_tensor_value_info("b", TP.FLOAT, [1, 4, 4]),
                           helper.make_tensor_value_info("s", TP.FLOAT, [1, 1, 4])],
                          [helper.make_tensor_value_info("y", TP.INT64, None)])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "u.onnx")
    r = invoke("check", tmp_path / "u.onnx", "--json")
    report = json.loads(r.output)
    assert r.exit_code == 0 and report["no_loop_program"] == {"non_max_suppression": 1}
    assert report["no_loop_program_calls"] == [{
        "op": "non_max_suppression", "node": "y",
        "reason": "op non_max_suppression has no loop program"}]
    r = invoke("check", tmp_path / "u.onnx", "--json", "--compile")
    assert r.exit_code == 1
    r = invoke("check", tmp_path / "u.onnx", "--compile")  # the node, and the way around it
    assert r.exit_code == 1 and "│ y " in r.output and "reference interpreter" in r.output
    r = invoke("compile", tmp_path / "u.onnx", "-o", tmp_path / "u.tvmpack")
    assert r.exit_code == 2 and "the first is 'y' (op non_max_suppression has no loop program)" \
        in r.output
    assert "tcc import MODEL -o m.tcir" in r.output and not (tmp_path / "u.tvmpack").exists()


def test_check_says_why_an_op_has_no_loop_program(tmp_path):
    """An op whose loop program covers some calls: the reason is what this call lacks."""
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear", antialias=1)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TP.FLOAT, [1, 1, 8, 8]),
                                        helper.make_tensor_value_info("scales", TP.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "r.onnx")
    calls = json.loads(invoke("check", tmp_path / "r.onnx", "--json").output)["no_loop_program_calls"]
    assert [(c["node"], c["op"]) for c in calls] == [("y", "resize")]
    assert "antialias with a scale known only at run time" in calls[0]["reason"]


def test_a_command_imports_only_its_own_module():
    """The group imports a command's module when that command is looked up: `tcc compile`
    does not pay for the runtime, the tuner or the other commands (0.4 s together), and
    the group alone imports no part of the compiler (nor numpy)."""
    code = ("import sys; from tcc.cli.main import main\n"
            "alone = sorted(m for m in ('numpy', 'tcc.ir') if m in sys.modules)\n"
            "try:\n    main(['compile', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(alone, sorted(m for m in sys.modules if m.startswith('tcc.cli.')\n"
            "                    and m.endswith('_cmd')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Usage: tcc compile" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "[] ['tcc.cli.compile_cmd']"


def test_help_does_not_import_onnx():
    """onnx (with the ml_dtypes it loads) takes about a second to import: `tcc --help`, like
    `tcc run PACK` and `tcc db`, reads no model and does not pay for it; nor for ml_dtypes
    (0.4-0.6 s), which tcc itself imports only where a low-precision type is used."""
    code = ("import sys; from tcc.cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('onnx', 'ml_dtypes') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Commands:" in out.stdout
    assert out.stdout.strip().endswith("[]")
