"""`tcc optimize`: the pipeline through the CLI, its options, and one-line errors."""

import numpy as np
from click.testing import CliRunner

import tcc.rt
from tcc.cli.main import cli
from tcc.ir.graph import CallTIR
from tcc.ir.interp import run
from tcc.ir.irfile import load_module
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_module
from tcc.lower.passes import PIPELINE, run_pipeline

TEXT = '''
constants = {"w": Tensor((3,), "float32"), "u": Tensor((3,), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((n, 3), "float32")) -> Tensor((n, 3), "float32"):
    a: Tensor((n, 3), "float32") = op.add(x, const("w"))
    b: Tensor((n, 3), "float32") = op.add(x, const("w"))
    dead: Tensor((n, 3), "float32") = op.mul(x, const("u"))
    y: Tensor((n, 3), "float32") = op.mul(a, b)
    return y
'''


def _module():
    mod = parse_module(TEXT)
    mod.const_values = {"w": np.array([1.0, -2.0, 0.5], np.float32),
                        "u": np.array([3.0, 4.0, 5.0], np.float32)}
    return mod


def _saved(tmp_path):
    from tcc.ir.irfile import save_module

    path = tmp_path / "m.tcir"
    save_module(path, _module())
    return path


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _bindings(mod):
    return [b.var.name for b in mod["main"].bindings]


def test_optimize_merges_drops_and_keeps_numerics(tmp_path):
    # without fusion the result stays op calls, which the interpreter runs
    r = invoke("optimize", _saved(tmp_path), "-o", tmp_path / "o.tcir", "--disable-pass", "fuse-ops")
    assert r.exit_code == 0, r.output
    assert "4 -> 2 bindings" in r.output and "2 -> 1 constants" in r.output
    out = load_module(tmp_path / "o.tcir")
    assert _bindings(out) == ["a", "y"] and list(out.const_types) == ["w"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run(out, [x])[0], run(_module(), [x])[0])


def test_optimize_fuses_and_the_emitted_pack_keeps_numerics(tmp_path):
    r = invoke("optimize", _saved(tmp_path), "-o", tmp_path / "o.tcir")
    assert r.exit_code == 0, r.output
    assert "4 -> 1 bindings" in r.output
    out = load_module(tmp_path / "o.tcir")
    (y,) = out["main"].bindings
    assert isinstance(y.value, CallTIR) and y.var.name == "y"
    r = invoke("emit", tmp_path / "o.tcir", "-o", tmp_path / "o.tvmpack")
    assert r.exit_code == 0, r.output
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = tcc.rt.load(tmp_path / "o.tvmpack")["main"](x)[0]
    np.testing.assert_array_equal(got, run(_module(), [x])[0])


def test_disable_pass_skips_it(tmp_path):
    r = invoke("optimize", _saved(tmp_path), "-o", tmp_path / "o.tcir",
               "--disable-pass", "dead-code-elimination", "--disable-pass", "fuse-ops")
    assert r.exit_code == 0, r.output
    assert _bindings(load_module(tmp_path / "o.tcir")) == ["a", "dead", "y"]


def test_print_after_one_pass_or_all(tmp_path):
    r = invoke("optimize", _saved(tmp_path), "-o", tmp_path / "o.tcir",
               "--print-after", "common-subexpression-elimination")
    assert r.exit_code == 0, r.output
    assert r.output.count("# IR after") == 1
    assert "# IR after common-subexpression-elimination" in r.output and "dead:" in r.output
    printed = []
    run_pipeline(_module(), print_after="all", on_print=printed.append)
    assert [p.splitlines()[0] for p in printed] == [f"# IR after {n}" for n in PIPELINE]
    assert "dead:" not in printed[-1]


def test_unknown_pass_names_are_one_line_errors(tmp_path):
    path = _saved(tmp_path)
    for option in ("--disable-pass", "--print-after"):
        r = invoke("optimize", path, "-o", tmp_path / "o.tcir", option, "fold-everything")
        assert r.exit_code == 2
        line = r.output.strip()
        assert "\n" not in line and "'fold-everything'" in line
        assert "known passes: lower-recurrent, simplify-algebra, common-subexpression" in line
    assert not (tmp_path / "o.tcir").exists()


def test_the_input_module_is_not_changed():
    mod = _module()
    text = print_module(mod)
    run_pipeline(mod)
    assert print_module(mod) == text and set(mod.const_values) == {"w", "u"}
