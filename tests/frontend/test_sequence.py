"""Sequences and optionals: imported models compute what onnxruntime does (onnx's reference
evaluator where onnxruntime takes no optional inputs), and their text round-trips."""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx.reference import ReferenceEvaluator

from tcc.frontend.onnx import from_onnx
from tcc.ir.errors import FrontendError, InputError
from tcc.ir.graph import OptionalType, SequenceType, TensorType
from tcc.ir.interp import run
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_module
from tcc.ir.structural import structural_equal
from tests.helpers import onnx_model, run_ort

F = TP.FLOAT
seq_info = helper.make_tensor_sequence_value_info


def _out(name):
    return helper.make_empty_tensor_value_info(name)


def _assert_same(got, want):
    """Outputs equal in kind (array, sequence, empty optional), dtype, shape and value."""
    assert type(got) is type(want) or (isinstance(got, np.ndarray) and isinstance(want, np.ndarray))
    if isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same(g, w)
    elif want is not None:
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def _check(model, feeds, want=None):
    mod = from_onnx(model)
    got = run(mod, feeds)
    want = run_ort(model, feeds) if want is None else want
    assert len(got) == len(want)
    for g, w in zip(got, want):
        _assert_same(g, w)
    assert structural_equal(parse_module(print_module(mod)), mod)
    return mod


def _x(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("split, keepdims", [(None, 0), (None, 1), (2, 1), ([1, 4], 1)])
def test_split_to_sequence_then_concat_matches_onnxruntime(rows, split, keepdims):
    inits = [] if split is None else [helper.make_tensor("split", TP.INT64,
                                                        [] if np.ndim(split) == 0 else [len(split)],
                                                        np.atleast_1d(split).tolist())]
    nodes = [
        helper.make_node("SplitToSequence", ["x"] + ([] if split is None else ["split"]), ["s"],
                         axis=1, keepdims=keepdims),
        helper.make_node("SequenceLength", ["s"], ["n"]),
        helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=-1),
    ]
    outs = [seq_info("s", F, None), _out("n"), _out("y")]
    if split is None:  # equal parts also stack
        nodes.append(helper.make_node("ConcatFromSequence", ["s"], ["z"], axis=-1, new_axis=1))
        outs.append(_out("z"))
    model = onnx_model(nodes, [("x", F, ["b", 5])], outs, inits, opset=18)
    _check(model, {"x": _x(rows, 5)})


def test_construct_insert_erase_at_match_onnxruntime():
    pos = [helper.make_tensor(n, TP.INT64, [], [v]) for n, v in
           [("front", 0), ("neg", -2), ("last", -1)]]
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b"], ["s0"]),
        helper.make_node("SequenceInsert", ["s0", "c", "front"], ["s1"]),
        helper.make_node("SequenceInsert", ["s1", "a"], ["s2"]),  # at the end
        helper.make_node("SequenceErase", ["s2", "neg"], ["s3"]),
        helper.make_node("SequenceErase", ["s3"], ["s4"]),  # the last
        helper.make_node("SequenceAt", ["s4", "last"], ["y"]),
        helper.make_node("SequenceLength", ["s4"], ["n"]),
    ]
    model = onnx_model(nodes, [("a", F, ["n", 2]), ("b", F, [3, 2]), ("c", F, [1, 2])],
                       [seq_info("s4", F, None), _out("y"), _out("n")], pos, opset=18)
    mod = _check(model, {"a": _x(4, 2), "b": _x(3, 2), "c": _x(1, 2)})
    # the elements' rows differ (n, 3, 1): only the column count is shared
    assert mod["main"].outputs[0].type == SequenceType("float32", (None, 2))


def test_a_list_appended_in_a_loop_then_stacked_matches_onnxruntime():
    """What exporters write for a Python list built in a loop: SequenceEmpty, SequenceInsert
    in the body, ConcatFromSequence after."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Mul", ["x", "fi"], ["row"]),
         helper.make_node("SequenceInsert", ["acc_in", "row"], ["acc_out"])],
        "body",
        [helper.make_tensor_value_info("i", TP.INT64, []),
         helper.make_tensor_value_info("cond_in", TP.BOOL, []),
         seq_info("acc_in", F, None)],
        [helper.make_tensor_value_info("cond_out", TP.BOOL, []), seq_info("acc_out", F, None)])
    nodes = [
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
        helper.make_node("Loop", ["trips", "", "empty"], ["acc"], body=body),
        helper.make_node("ConcatFromSequence", ["acc"], ["y"], axis=0, new_axis=1),
    ]
    model = onnx_model(nodes, [("trips", TP.INT64, []), ("x", F, ["n"])], [_out("y")], opset=18)
    for trips, n in [(3, 4), (1, 2)]:
        _check(model, {"trips": np.array(trips, np.int64), "x": _x(n)})


def test_sequence_map_imports_through_its_function_body():
    body = helper.make_graph([helper.make_node("Shape", ["t"], ["shape"])], "map_body",
                             [helper.make_tensor_value_info("t", F, ["h", "w"])],
                             [helper.make_tensor_value_info("shape", TP.INT64, [2])])
    node = helper.make_node("SequenceMap", ["s"], ["shapes"], body=body)
    model = onnx_model([node], [seq_info("s", F, ["h", "w"])], [seq_info("shapes", TP.INT64, [2])],
                       opset=18)
    feeds = {"s": [_x(2, 3), _x(4, 1), _x(1, 5)]}
    _check(model, feeds, want=ReferenceEvaluator(model).run(None, feeds))


def _optional_model():
    """y = the optional's tensor + 1 when it holds one, else zeros like x; and whether it did."""
    then = helper.make_graph(
        [helper.make_node("OptionalGetElement", ["opt"], ["v"]),
         helper.make_node("Add", ["v", "one"], ["t"])], "then", [], [_out("t")])
    other = helper.make_graph([helper.make_node("Sub", ["x", "x"], ["e"])], "else", [], [_out("e")])
    nodes = [
        helper.make_node("OptionalHasElement", ["opt"], ["has"]),
        helper.make_node("If", ["has"], ["y"], then_branch=then, else_branch=other),
    ]
    opt = helper.make_value_info(
        "opt", helper.make_optional_type_proto(helper.make_tensor_type_proto(F, ["n"])))
    return onnx_model(nodes, [opt, ("x", F, ["n"])], [_out("y"), _out("has")],
                      [helper.make_tensor("one", F, [], [1.0])], opset=18)


@pytest.mark.parametrize("present", [True, False])
def test_optional_inputs_match_the_onnx_reference(present):
    model = _optional_model()
    feeds = {"opt": _x(3) if present else None, "x": _x(3)}
    mod = _check(model, feeds, want=ReferenceEvaluator(model).run(None, feeds))
    assert mod["main"].params[0].type == OptionalType(TensorType((mod["main"].params[1].type.shape[0],),
                                                                 "float32"))


def test_an_empty_optional_of_a_sequence_and_an_absent_operand():
    nodes = [
        helper.make_node("Optional", [], ["none"], type=helper.make_sequence_type_proto(
            helper.make_tensor_type_proto(F, [5]))),
        helper.make_node("OptionalHasElement", ["none"], ["has"]),
        helper.make_node("OptionalHasElement", [""], ["has_absent"]),
        helper.make_node("SequenceConstruct", ["x"], ["s"]),
        helper.make_node("Optional", ["s"], ["some"]),
        helper.make_node("OptionalGetElement", ["some"], ["back"]),
    ]
    model = onnx_model(nodes, [("x", F, [5])],
                       [_out("has"), _out("has_absent"), seq_info("back", F, [5])], opset=18)
    _check(model, {"x": _x(5)})


# -- errors -----------------------------------------------------------------------------------


def test_a_position_outside_the_sequence_is_a_one_line_error():
    nodes = [helper.make_node("SequenceConstruct", ["a", "a"], ["s"]),
             helper.make_node("SequenceAt", ["s", "p"], ["y"])]
    model = onnx_model(nodes, [("a", F, [2]), ("p", TP.INT64, [])], [_out("y")], opset=18)
    mod = from_onnx(model)
    np.testing.assert_array_equal(run(mod, {"a": _x(2), "p": np.array(-2)})[0], _x(2))
    with pytest.raises(InputError, match=r"^sequence_at: position 2 is outside the sequence of 2 "
                                         r"tensors \(valid: -2 to 1\)$"):
        run(mod, {"a": _x(2), "p": np.array(2)})


def test_tensors_that_do_not_concatenate_are_a_one_line_error():
    nodes = [helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)]
    model = onnx_model(nodes, [("a", F, [1, "m"]), ("b", F, [1, "k"])], [_out("y")], opset=18)
    mod = from_onnx(model)
    assert run(mod, {"a": _x(1, 3), "b": _x(1, 3)})[0].shape == (2, 3)
    with pytest.raises(InputError, match=r"concat_from_sequence: tensors of shapes \(1, 3\), "
                                         r"\(1, 4\) do not concatenate along axis 0"):
        run(mod, {"a": _x(1, 3), "b": _x(1, 4)})


def test_a_sequence_input_given_a_tensor_says_how_to_give_a_list():
    model = onnx_model([helper.make_node("SequenceLength", ["s"], ["n"])],
                       [seq_info("s", F, [2])], [_out("n")], opset=18)
    mod = from_onnx(model)
    assert run(mod, {"s": [_x(2)] * 3})[0] == 3
    with pytest.raises(InputError, match="input 's': expected a sequence, got ndarray; give a list"):
        run(mod, {"s": _x(2)})
    with pytest.raises(InputError, match=r"input 's' element 1: dimension 0 is 3 but"):
        run(mod, {"s": [_x(2), _x(3)]})


def test_taking_an_element_of_unknown_rank_is_refused_at_import():
    nodes = [helper.make_node("SequenceEmpty", [], ["s"], dtype=F),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)]
    model = onnx_model(nodes, [], [_out("y")], opset=18)
    with pytest.raises(FrontendError, match="the rank of the sequence's elements is not known"):
        from_onnx(model)


def test_a_plain_tensor_is_its_own_element_and_always_present():
    """OptionalGetElement and OptionalHasElement of a tensor need no optional at all: the
    import leaves no optional op, so the model compiles."""
    import tcc.rt
    from tests.packs import compiled_pack

    nodes = [helper.make_node("OptionalGetElement", ["x"], ["v"]),
             helper.make_node("OptionalHasElement", ["x"], ["has"]),
             helper.make_node("Relu", ["v"], ["y"])]
    model = onnx_model(nodes, [("x", F, ["n"])], [_out("y"), _out("has")], opset=18)
    mod = _check(model, {"x": _x(4)})
    assert [b.value.op for b in mod["main"].bindings] == ["relu", "identity"]
    with tcc.rt.load(compiled_pack(model)) as m:
        y, has = m["main"]({"x": _x(4)})
    np.testing.assert_array_equal(y, np.maximum(_x(4), 0))
    assert has.dtype == np.bool_ and bool(has)
