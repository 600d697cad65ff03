"""Sequence values on the command line: `tcc run` of an IR file prints a sequence output
element by element, writes it as NAME.0.npy, NAME.1.npy, ..., reads a sequence input from an
.npz, and `tcc compile` says in one line that sequences run in the reference interpreter."""

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto as TP
from onnx import helper

from tcc.cli.main import cli


def _model():
    """s = x split into its columns; n = how many; y = the columns concatenated again."""
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s"], axis=1),
             helper.make_node("SequenceLength", ["s"], ["n"]),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, ["b", 3])],
                          [helper.make_tensor_sequence_value_info("s", TP.FLOAT, None),
                           helper.make_tensor_value_info("n", TP.INT64, []),
                           helper.make_tensor_value_info("y", TP.FLOAT, ["b", 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _length_model():
    g = helper.make_graph([helper.make_node("SequenceLength", ["s"], ["n"])], "g",
                          [helper.make_tensor_sequence_value_info("s", TP.FLOAT, ["k"])],
                          [helper.make_tensor_value_info("n", TP.INT64, [])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("sequences")
    onnx.save(_model(), d / "m.onnx")
    onnx.save(_length_model(), d / "len.onnx")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.save(d / "x.npy", x)
    np.savez(d / "seq.npz", np.zeros(2, np.float32), np.ones(5, np.float32), np.ones(1, np.float32))
    for name in ("m", "len"):
        r = CliRunner().invoke(cli, ["import", str(d / f"{name}.onnx"), "-o", str(d / f"{name}.tcir")])
        assert r.exit_code == 0, r.output
    return d


def _tcc(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_a_sequence_output_is_printed_and_written_element_by_element(files, tmp_path):
    r = _tcc("run", files / "m.tcir", "--input", f"x={files / 'x.npy'}")
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[:4] == [
        "s: sequence of 3 tensors", "  [0] float32[2, 1] [0., 3.]", "  [1] float32[2, 1] [1., 4.]",
        "  [2] float32[2, 1] [2., 5.]"]
    r = _tcc("run", files / "m.tcir", "--input", f"x={files / 'x.npy'}", "--output-dir", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "n.npy", "s.0.npy", "s.1.npy", "s.2.npy", "y.npy"]
    x = np.load(files / "x.npy")
    for k in range(3):
        np.testing.assert_array_equal(np.load(tmp_path / "out" / f"s.{k}.npy"), x[:, k:k + 1])
    r = _tcc("run", files / "m.tcir", "--input", f"x={files / 'x.npy'}", "--output", tmp_path / "o.npz")
    assert r.exit_code == 0, r.output
    with np.load(tmp_path / "o.npz") as z:
        assert sorted(z.files) == ["n", "s.0", "s.1", "s.2", "y"]


def test_a_sequence_input_is_read_from_an_npz(files):
    r = _tcc("run", files / "len.tcir", "--input", f"s={files / 'seq.npz'}")
    assert r.exit_code == 0, r.output
    assert r.output.strip() == "n: int64[] [3]"


@pytest.mark.parametrize("args, message", [
    (("m.tcir", "--input", "x=seq.npz"),
     "error: input 'x': an .npz given with --input is a sequence, but this input is "
     "float32(b, 3); pass an .npy file (or every input in one archive with --inputs)"),
    (("len.tcir", "--input", "s=x.npy"),
     "error: input 's': expected a sequence, got ndarray; give a list of float32 arrays (from "
     "the command line, an .npz of them in order: --input NAME=FILE.npz)"),
    (("len.tcir", "--random-inputs"),
     "error: --random-inputs: input 's' is sequence of float32(?,), which tcc does not make up; "
     "give it with --input s=FILE.npz"),
])
def test_sequence_inputs_given_the_wrong_way_are_one_line_errors(files, args, message):
    args = [files / a if a.endswith(".tcir") else a for a in args]
    args = [a.replace("=", f"={files}/") if isinstance(a, str) and "=" in a else a for a in args]
    r = _tcc("run", *args)
    assert r.exit_code == 2
    assert r.output == message + "\n"


def test_compile_names_the_sequence_ops_and_the_way_around(files, tmp_path):
    r = _tcc("compile", files / "m.onnx", "-o", tmp_path / "m.tvmpack")
    assert r.exit_code == 2
    assert r.output.startswith(
        "error: no loop program yet for ops concat_from_sequence (x1), sequence_length (x1), "
        "split_to_sequence (x1); the first is 's' (op split_to_sequence works on sequences or "
        "optionals, which only the reference interpreter runs); run the model with the "
        "reference interpreter instead")
    assert not (tmp_path / "m.tvmpack").exists()
    r = _tcc("check", files / "m.onnx")
    assert r.exit_code == 0, r.output
    assert "sequence of float32(?, 1)" in r.output
