"""ONNX If, Loop and Scan: subgraphs become module functions taking what they capture, and
the imported module computes what onnxruntime does."""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from tcc.frontend.onnx import find_unsupported, from_onnx
from tcc.ir.errors import FrontendError
from tcc.ir.expr import Var
from tcc.ir.graph import If, Loop, Scan
from tcc.ir.interp import run
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_module
from tcc.ir.structural import structural_equal
from tcc.ir.summary import module_summary
from tests.helpers import assert_close, onnx_model, run_ort, value_info

F = TP.FLOAT


def _graph(name, nodes, inputs, outputs, inits=()):
    return helper.make_graph(nodes, name, inputs, outputs, list(inits))


def _out(name):
    return helper.make_empty_tensor_value_info(name)


def _check(model, feeds, rtol=1e-5, atol=1e-6):
    """Import, match onnxruntime, and round-trip the text; returns the module."""
    mod = from_onnx(model)
    assert_close(run(mod, feeds), run_ort(model, feeds), rtol=rtol, atol=atol)
    text = print_module(mod)
    assert structural_equal(parse_module(text), mod)
    return mod


def _nodes(mod, fn="main"):
    return [b.value for b in mod[fn].bindings]


# -- If ---------------------------------------------------------------------------------------


def _if_model():
    """then: x + bias (bias captured from the outer graph); else: the first row of x."""
    then = _graph("then", [helper.make_node("Add", ["x", "bias"], ["t"])], [], [_out("t")])
    other = _graph("else", [
        helper.make_node("Slice", ["x", "zero", "one"], ["e"]),
    ], [], [_out("e")], [helper.make_tensor("zero", TP.INT64, [1], [0]),
                        helper.make_tensor("one", TP.INT64, [1], [1])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    return onnx_model([node], [("c", TP.BOOL, []), ("x", F, ["n", 3]), ("bias", F, [3])],
                      [_out("y")])


@pytest.mark.parametrize("cond", [True, False])
def test_if_matches_onnxruntime(cond):
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    feeds = {"c": np.array(cond), "x": x, "bias": np.ones(3, np.float32)}
    mod = _check(_if_model(), feeds)
    (node,) = [v for v in _nodes(mod) if isinstance(v, If)]
    assert (node.then_branch, node.else_branch) == ("main_if0_then", "main_if0_else")
    # Both branches take what either reads: x (both) and bias (then only).
    assert mod["main_if0_then"].input_names == mod["main_if0_else"].input_names == ("x", "bias")
    y = mod["main"].bindings[-1].var.type
    assert isinstance(y.shape[0], Var) and y.shape[1] == 3  # n rows or 1 row


def test_if_with_a_known_condition_imports_the_branch_taken():
    cond = helper.make_node("Constant", [], ["c"],
                            value=helper.make_tensor("c", TP.BOOL, [], [False]))
    then = _graph("then", [helper.make_node("Relu", ["x"], ["t"])], [], [_out("t")])
    other = _graph("else", [helper.make_node("Neg", ["x"], ["e"])], [], [_out("e")])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    model = onnx_model([cond, node], [("x", F, [2])], [_out("y")])
    mod = _check(model, {"x": np.array([1.0, -2.0], np.float32)})
    assert list(mod.functions) == ["main"]
    assert [c.op for c in _nodes(mod)] == ["neg"]


def test_if_branches_of_different_dtypes_are_an_error():
    then = _graph("then", [helper.make_node("Identity", ["x"], ["t"])], [], [_out("t")])
    other = _graph("else", [helper.make_node("Cast", ["x"], ["e"], to=TP.INT64)], [],
                   [_out("e")])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    model = onnx_model([node], [("c", TP.BOOL, []), ("x", F, [2])], [_out("y")])
    with pytest.raises(FrontendError, match="If.*if_ result 0 is .* dtype and rank must agree"):
        from_onnx(model)


# -- Loop -------------------------------------------------------------------------------------


def _loop_model(with_trips=True, with_cond=True):
    """Carried `acc` grows by `step` (captured) each iteration; the condition is
    sum(acc) < limit; scan output: the iteration number times 2."""
    body = _graph("body", [
        helper.make_node("Concat", ["acc_in", "step"], ["acc_out"], axis=0),
        helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
        helper.make_node("Less", ["total", "limit"], ["cond_out"]),
        helper.make_node("Add", ["i", "i"], ["twice"]),
    ], [value_info("i", TP.INT64, []), value_info("cond_in", TP.BOOL, []),
        value_info("acc_in", F, None)],
        [_out("cond_out"), _out("acc_out"), _out("twice")])
    node = helper.make_node("Loop", ["m" if with_trips else "", "c" if with_cond else "",
                                     "acc"], ["final", "scan"], body=body)
    inputs = [("m", TP.INT64, []), ("c", TP.BOOL, []), ("acc", F, [1]), ("step", F, [1]),
              ("limit", F, [])]
    keep = [with_trips, with_cond, True, True, True]
    return onnx_model([node], [i for i, k in zip(inputs, keep) if k],
                      [_out("final"), _out("scan")])


@pytest.mark.parametrize("with_trips,with_cond,trips", [
    (True, True, 100), (True, True, 2), (True, True, 0), (True, False, 4), (False, True, 0),
])
def test_loop_matches_onnxruntime(with_trips, with_cond, trips):
    feeds = {"m": np.array(trips), "c": np.array(True), "acc": np.ones(1, np.float32),
             "step": np.full(1, 2.0, np.float32), "limit": np.array(9.0, np.float32)}
    if not with_trips:
        del feeds["m"]
    if not with_cond:
        del feeds["c"]
    mod = _check(_loop_model(with_trips, with_cond), feeds)
    (loop,) = [v for v in _nodes(mod) if isinstance(v, Loop)]
    assert loop.body == "main_loop0_body" and len(loop.captured) == 2
    # The body changes the carried length, so the body takes it as a size variable.
    acc = mod["main_loop0_body"].params[2]
    assert isinstance(acc.type.shape[0], Var)


def test_loop_without_trip_count_or_condition_is_rejected():
    body = _graph("body", [helper.make_node("Identity", ["cond_in"], ["cond_out"])],
                  [value_info("i", TP.INT64, []), value_info("cond_in", TP.BOOL, [])],
                  [_out("cond_out")])
    node = helper.make_node("Loop", ["", ""], [], body=body)
    model = onnx_model([node, helper.make_node("Identity", ["x"], ["y"])], [("x", F, [1])],
                       [_out("y")])
    with pytest.raises(FrontendError, match="neither a trip count nor a condition never ends"):
        from_onnx(model)


def test_nested_subgraphs_capture_through_every_level():
    """A Loop body holding an If whose branch reads `w` from the outermost graph."""
    then = _graph("then", [helper.make_node("Mul", ["x_in", "w"], ["t"])], [], [_out("t")])
    other = _graph("else", [helper.make_node("Sub", ["x_in", "w"], ["e"])], [], [_out("e")])
    body = _graph("body", [
        helper.make_node("Cast", ["i"], ["i_f"], to=F),
        helper.make_node("Greater", ["i_f", "half"], ["late"]),
        helper.make_node("If", ["late"], ["x_out"], then_branch=then, else_branch=other),
    ], [value_info("i", TP.INT64, []), value_info("cond_in", TP.BOOL, []),
        value_info("x_in", F, [2])], [_out("cond_in"), _out("x_out")],
        [helper.make_tensor("half", F, [], [0.5])])
    loop = helper.make_node("Loop", ["m", "", "x"], ["y"], body=body)
    model = onnx_model([loop], [("m", TP.INT64, []), ("x", F, [2]), ("w", F, [2])], [_out("y")])
    feeds = {"m": np.array(4), "x": np.array([1.0, 2.0], np.float32),
             "w": np.array([3.0, 0.5], np.float32)}
    mod = _check(model, feeds)
    assert set(mod.functions) == {"main", "main_loop0_body", "main_loop0_body_if0_then",
                                  "main_loop0_body_if0_else"}
    assert mod["main_loop0_body"].input_names[-1] == "w"  # captured for the inner If


# -- Scan -------------------------------------------------------------------------------------


def _scan_body():
    """state + item * scale (scale captured); outputs the new state and state * 2."""
    return _graph("body", [
        helper.make_node("Mul", ["item", "scale"], ["scaled"]),
        helper.make_node("Add", ["state", "scaled"], ["state_out"]),
        helper.make_node("Add", ["state_out", "state_out"], ["doubled"]),
    ], [value_info("state", F, None), value_info("item", F, None)],
        [_out("state_out"), _out("doubled")])


@pytest.mark.parametrize("attrs", [
    {},
    {"scan_input_axes": [1], "scan_output_axes": [-1]},
    {"scan_input_directions": [1], "scan_output_directions": [1]},
    {"scan_input_axes": [-1], "scan_input_directions": [1], "scan_output_axes": [1]},
])
def test_scan_matches_onnxruntime(attrs):
    node = helper.make_node("Scan", ["s", "x"], ["final", "out"], num_scan_inputs=1,
                            body=_scan_body(), **attrs)
    model = onnx_model([node], [("s", F, [3]), ("x", F, [3, 3]), ("scale", F, [])],
                       [_out("final"), _out("out")], opset=16)
    rng = np.random.default_rng(1)
    feeds = {"s": rng.standard_normal(3).astype(np.float32),
             "x": rng.standard_normal((3, 3)).astype(np.float32),
             "scale": np.array(0.5, np.float32)}
    mod = _check(model, feeds)
    (scan,) = [v for v in _nodes(mod) if isinstance(v, Scan)]
    assert scan.body == "main_scan0_body" and len(scan.captured) == 1


def test_scan_opset8_runs_each_batch_element():
    node = helper.make_node("Scan", ["", "s", "x"], ["final", "out"], num_scan_inputs=1,
                            body=_scan_body())
    model = onnx_model([node], [("s", F, [2, 3]), ("x", F, [2, 4, 3]), ("scale", F, [])],
                       [_out("final"), _out("out")], opset=8)
    rng = np.random.default_rng(2)
    feeds = {"s": rng.standard_normal((2, 3)).astype(np.float32),
             "x": rng.standard_normal((2, 4, 3)).astype(np.float32),
             "scale": np.array(2.0, np.float32)}
    mod = _check(model, feeds)
    scans = [v for v in _nodes(mod) if isinstance(v, Scan)]
    assert len(scans) == 2 and len({s.body for s in scans}) == 1  # one body function


def test_scan_opset8_sequence_lens_are_rejected():
    node = helper.make_node("Scan", ["lens", "s", "x"], ["final", "out"], num_scan_inputs=1,
                            body=_scan_body())
    model = onnx_model([node], [("lens", TP.INT64, [1]), ("s", F, [1, 3]),
                                ("x", F, [1, 4, 3]), ("scale", F, [])],
                       [_out("final"), _out("out")], opset=8)
    with pytest.raises(FrontendError, match="sequence_lens is not supported"):
        from_onnx(model)


# -- reports ----------------------------------------------------------------------------------


def test_map_values_in_a_subgraph_are_named_in_the_error():
    map_type = helper.make_map_type_proto(TP.INT64, helper.make_tensor_type_proto(F, [1]))
    body = _graph("body", [helper.make_node("Identity", ["cond_in"], ["cond_out"])],
                  [value_info("i", TP.INT64, []), value_info("cond_in", TP.BOOL, []),
                   helper.make_value_info("map_in", map_type)],
                  [_out("cond_out"), helper.make_value_info("map_in", map_type)])
    node = helper.make_node("Loop", ["m", "", "x"], ["y"], body=body)
    model = onnx_model([node], [("m", TP.INT64, []), ("x", F, [1])], [_out("y")])
    with pytest.raises(FrontendError, match="value 'map_in' has type map; tcc supports "
                                            "tensors, sequences and optionals"):
        from_onnx(model)


def test_unsupported_ops_inside_subgraphs_are_reported():
    then = _graph("then", [helper.make_node("StringNormalizer", ["s"], ["t"])], [], [_out("t")])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=then)
    model = onnx_model([node], [("c", TP.BOOL, []), ("s", TP.STRING, [1])], [_out("y")])
    assert [op for _, op, _, _ in find_unsupported(model)] == ["StringNormalizer"]


def test_stats_count_control_flow_nodes():
    counts = module_summary(from_onnx(_if_model()))["functions"]
    assert counts["main"]["op_counts"] == {"if": 1}
    assert counts["main_if0_then"]["op_counts"] == {"add": 1}
