"""Graph-level control flow (If, Loop, Scan): result-type inference, the interpreter, the
text syntax and its errors, and op counts."""

import re
from pathlib import Path

import numpy as np
import pytest

from tcc.ir.builder import FunctionBuilder
from tcc.ir.errors import ParseError, ShapeError
from tcc.ir.expr import Var, prove_equal
from tcc.ir.graph import If, Loop, Scan, TensorType, TupleType, infer_control_flow
from tcc.ir.interp import run
from tcc.ir.module import IRModule
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_module
from tcc.ir.structural import structural_equal
from tcc.ir.summary import module_summary

F32 = "float32"
FLAGS = [TensorType((), "int64"), TensorType((), "bool")]


def _function(mod: IRModule, name: str, params, body) -> None:
    """Add `name(params) -> body(builder, *params)` to `mod`."""
    bb = FunctionBuilder()
    args = [bb.param(f"p{i}", t) for i, t in enumerate(params)]
    outs = body(bb, *args)
    mod.functions[name] = bb.finish(outs, [f"o{i}" for i in range(len(outs))])


def _main(mod: IRModule, params, make_node) -> None:
    """`main(params)` binding the node `make_node(*params)` and returning its results."""
    bb = FunctionBuilder()
    args = [bb.param(f"x{i}", t) for i, t in enumerate(params)]
    node = make_node(*args)
    rtype = infer_control_flow(node, mod.functions)
    out = bb.bind(node, rtype, "r")
    fields = rtype.fields if isinstance(rtype, TupleType) else None
    outs = [bb.get_item(out, i) for i in range(len(fields))] if fields else [out]
    mod.functions["main"] = bb.finish(outs, [f"y{i}" for i in range(len(outs))])


def _roundtrip(mod: IRModule) -> None:
    text = print_module(mod)
    parsed = parse_module(text)
    assert structural_equal(parsed, mod), text
    assert print_module(parsed) == text


# -- If ---------------------------------------------------------------------------------------


def _if_module(n):
    """then: x (n, 4) -> relu(x); else: the first two rows of x, a different shape."""
    mod = IRModule()
    x_t = TensorType((n, 4), F32)
    _function(mod, "then", [x_t], lambda b, x: [b.emit("relu", x)])
    _function(mod, "else", [x_t], lambda b, x: [
        b.emit("strided_slice", x, begin=[0], end=[2], axes=[0], strides=[1])])
    _main(mod, [TensorType((), "bool"), x_t], lambda c, x: If(c, "then", "else", (x,)))
    return mod


def test_if_result_dims_differing_between_branches_are_fresh():
    n = Var("n")
    t = _if_module(n)["main"].bindings[0].var.type
    assert isinstance(t.shape[0], Var) and t.shape[0] is not n
    assert t.shape[1] == 4 and t.dtype == F32


def test_if_runs_the_branch_its_condition_selects():
    mod = _if_module(Var("n"))
    x = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(run(mod, [np.array(True), x])[0], np.maximum(x, 0))
    np.testing.assert_array_equal(run(mod, [np.array(False), x])[0], x[:2])
    _roundtrip(mod)


def test_if_branches_must_agree_on_dtype_and_rank():
    mod = IRModule()
    x_t = TensorType((4,), F32)
    _function(mod, "then", [x_t], lambda b, x: [x])
    _function(mod, "else", [x_t], lambda b, x: [b.emit("cast", x, dtype="int64")])
    bb = FunctionBuilder()
    c, x = bb.param("c", TensorType((), "bool")), bb.param("x", x_t)
    with pytest.raises(ShapeError, match="if_ result 0 is .* on one path"):
        infer_control_flow(If(c, "then", "else", (x,)), mod.functions)
    with pytest.raises(ShapeError, match="no graph function named 'nope'"):
        infer_control_flow(If(c, "then", "nope", (x,)), mod.functions)
    with pytest.raises(ShapeError, match="condition must be a one-element bool"):
        infer_control_flow(If(x, "then", "then", (x,)), mod.functions)


# -- Loop -------------------------------------------------------------------------------------


def _loop_module(use_cond: bool):
    """Carried (k,) grows by one element per iteration; the condition turns false once the
    running sum passes 10; scan output: the sum at each iteration."""
    mod = IRModule()
    k = Var("k")
    one = mod.add_constant("one", np.ones((1,), np.float32))
    ten = mod.add_constant("ten", np.array(10, np.float32))

    def body(b, i, cond, acc):
        grown = b.emit("concat", acc, one, axis=0)
        total = b.emit("reduce_sum", grown, None, axes=[0], keepdims=False)
        return [b.emit("less", total, ten), grown, total]

    _function(mod, "body", FLAGS + [TensorType((k,), F32)], body)
    params = [TensorType((), "int64"), TensorType((), "bool"), TensorType((2,), F32)]
    _main(mod, params, lambda m, c, x: Loop("body", m, c if use_cond else None, (x,), ()))
    return mod


def test_loop_results_are_the_final_carried_values_and_stacked_scans():
    t = _loop_module(True)["main"].bindings[0].var.type
    carried, scan = t.fields
    assert isinstance(carried.shape[0], Var)  # the body changes the carried length
    assert scan.ndim == 1 and isinstance(scan.shape[0], Var)  # stacked over the trip count


@pytest.mark.parametrize("use_cond,trips,want", [
    (True, 100, [3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]),  # stops on the condition
    (False, 3, [3.0, 4.0, 5.0]),  # without a cond operand the body's condition is ignored
    (True, 0, []),  # no iteration: the initial values and an empty scan output
])
def test_loop_runs_with_onnx_semantics(use_cond, trips, want):
    mod = _loop_module(use_cond)
    x = np.ones(2, np.float32)
    final, scan = run(mod, [np.array(trips), np.array(True), x])
    np.testing.assert_array_equal(scan, np.array(want, np.float32))
    assert final.shape == (2 + len(want),)
    _roundtrip(mod)


def test_loop_body_must_return_the_condition_and_carried_values():
    mod = IRModule()
    _function(mod, "body", FLAGS + [TensorType((3,), F32)], lambda b, i, c, x: [x])
    bb = FunctionBuilder()
    x = bb.param("x", TensorType((3,), F32))
    with pytest.raises(ShapeError, match="returns 1 values"):
        infer_control_flow(Loop("body", None, None, (x,), ()), mod.functions)
    with pytest.raises(ShapeError, match="argument 2 of 'body'"):
        y = bb.param("y", TensorType((3,), "int64"))
        infer_control_flow(Loop("body", None, None, (y,), ()), mod.functions)


# -- Scan -------------------------------------------------------------------------------------


def _scan_module(n, in_dir=0, out_dir=0, out_axis=0):
    """Running sum of the rows of x (n, 3) plus a captured bias, scanned along axis 0."""
    mod = IRModule()
    row = TensorType((3,), F32)

    def body(b, acc, item, bias):
        total = b.emit("add", b.emit("add", acc, item), bias)
        return [total, total]

    _function(mod, "body", [row, row, row], body)
    params = [row, TensorType((n, 3), F32), row]
    _main(mod, params, lambda s, x, bias: Scan("body", 1, (s, x), (bias,), (0,), (in_dir,),
                                                (out_axis,), (out_dir,)))
    return mod


def test_scan_output_is_stacked_along_the_sequence_length():
    n = Var("n")
    state, out = _scan_module(n, out_axis=-1)["main"].bindings[0].var.type.fields
    assert state.shape == (3,) and out.shape[0] == 3 and prove_equal(out.shape[1], n)


@pytest.mark.parametrize("in_dir,out_dir,out_axis", [(0, 0, 0), (1, 0, 0), (0, 1, 1), (1, 1, -1)])
def test_scan_runs_with_onnx_semantics(in_dir, out_dir, out_axis):
    mod = _scan_module(Var("n"), in_dir, out_dir, out_axis)
    rng = np.random.default_rng(0)
    s, x, bias = (rng.standard_normal(shape).astype(np.float32) for shape in [3, (4, 3), 3])
    rows = x[::-1] if in_dir else x
    sums = s + np.cumsum(rows + bias, axis=0)
    want = sums[::-1] if out_dir else sums
    final, scanned = run(mod, [s, x, bias])
    np.testing.assert_allclose(final, sums[-1], rtol=1e-5)
    np.testing.assert_allclose(np.moveaxis(scanned, out_axis, 0), want, rtol=1e-5)
    _roundtrip(mod)


def test_scan_attributes_must_fit_the_operands():
    mod = _scan_module(Var("n"))
    scan = mod["main"].bindings[0].value
    bad = Scan(scan.body, 1, scan.args, scan.captured, (2,), (0,), (0,), (0,))
    with pytest.raises(ShapeError, match="axis 2 out of range for rank 2"):
        infer_control_flow(bad, mod.functions)
    bad = Scan(scan.body, 1, scan.args, scan.captured, (0,), (0,), (), ())
    with pytest.raises(ShapeError, match="scan_output_axes"):
        infer_control_flow(bad, mod.functions)


# -- text -------------------------------------------------------------------------------------


def test_text_syntax():
    text = print_module(_scan_module(Var("n")))
    assert ('scan(body="body", num_scan_inputs=1, args=[x0, x1], captured=[x2], '
            "scan_input_axes=[0], scan_input_directions=[0], scan_output_axes=[0], "
            "scan_output_directions=[0])") in text
    assert 'if_(x0, then_branch="then", else_branch="else", args=[x1])' in print_module(
        _if_module(Var("n")))
    assert 'loop(body="body", max_trip_count=x0, cond=None, carried=[x2], captured=[])' in (
        print_module(_loop_module(False)))


def _replace_line(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new)


def test_parse_errors_point_at_the_text():
    text = print_module(_if_module(Var("n")))
    bad = _replace_line(text, 'else_branch="else"', 'else_branch="elze"')
    line = next(i for i, s in enumerate(bad.splitlines(), 1) if '"elze"' in s)
    with pytest.raises(ParseError, match=rf"^m:{line}:\d+: if_ calls 'elze', which is not"):
        parse_module(bad, "m")
    with pytest.raises(ParseError, match=r"expected if_\(cond, then_branch=..."):
        parse_module(_replace_line(text, ", args=[x1])", ")"), "m")
    bad = _replace_line(text, ', args=[x1]', ', args=[x1, x1]')
    with pytest.raises(ParseError, match="function 'then' takes 1 arguments, got 2"):
        parse_module(bad, "m")
    scan = print_module(_scan_module(Var("n")))
    with pytest.raises(ParseError, match="scan_input_axes must be a list"):
        parse_module(_replace_line(scan, "scan_input_axes=[0]", "scan_input_axes=0"), "m")


def test_parse_checks_the_annotated_type():
    text = print_module(_scan_module(4))
    # Every (4, 3) but the scanned parameter's becomes (5, 3): only the scan contradicts it.
    bad = text.replace('Tensor((4, 3), "float32")', 'Tensor((5, 3), "float32")')
    bad = _replace_line(bad, 'x1: Tensor((5, 3)', 'x1: Tensor((4, 3)')
    with pytest.raises(ParseError, match="does not match the type scan infers"):
        parse_module(bad, "m")


def test_op_counts_include_control_flow():
    counts = module_summary(_if_module(Var("n")))["functions"]["main"]["op_counts"]
    assert counts == {"if": 1}
    assert module_summary(_loop_module(True))["functions"]["main"]["op_counts"] == {"loop": 1}
    assert module_summary(_scan_module(4))["functions"]["main"]["op_counts"] == {"scan": 1}


def test_doc_example_parses_and_runs():
    doc = (Path(__file__).parents[2] / "docs" / "ir-text.md").read_text()
    (text,) = [b for b in re.findall(r"```python\n(.*?)```", doc, re.S) if "if_(" in b]
    mod = parse_module(text, "ir-text.md")
    _roundtrip(mod)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    w = np.full(3, 2.0, np.float32)
    r, products, sums = run(mod, [np.array(False), x, np.array(2), w])
    np.testing.assert_array_equal(r, -x)
    np.testing.assert_array_equal(products, [x.sum(0) * 2, x.sum(0) * 4])
    np.testing.assert_array_equal(sums, (x.sum(0) + np.cumsum(x, 0))[::-1])
