"""Loop and Scan compiled to bytecode, on hand-built legalized modules whose kernels are
numpy functions (as in test_vm_compile), checked against numpy loops."""

from __future__ import annotations

import numpy as np
import pytest

from tcc.emit.vm import compile_module
from tcc.ir import graph as G
from tcc.ir.builder import FunctionBuilder
from tcc.ir.expr import Var as SizeVar
from tcc.ir.module import IRModule
from tcc.rt.errors import RunInputError
from tcc.rt.format import Op, decode
from tcc.rt.pack import verify_executable
from tcc.rt.vm import VirtualMachine
from tests.emit.test_vm_compile import Contents, FakeLibrary, T

I64, BOOL = "int64", "bool"


class LoopLibrary(FakeLibrary):
    KERNELS = {
        **FakeLibrary.KERNELS,
        "add2": lambda x, y, out: np.add(x, y, out=out),
        "mul2": lambda x, y, out: np.multiply(x, y, out=out),
        "add_i": lambda x, i, out: np.add(x, i.astype(x.dtype), out=out),
        "less3": lambda i, out: np.copyto(out, i < 3),
        "append_i": lambda x, i, out: np.copyto(out, np.append(x, np.float32(i))),
        "twice": lambda x, out: np.multiply(x, 2, out=out),
    }


def machine(mod):
    exe = compile_module(mod)
    verify_executable(exe, set(LoopLibrary.KERNELS), set(mod.const_values), exe.signatures)
    lib = LoopLibrary()
    return VirtualMachine(Contents(exe, mod.const_values), lib), lib, exe


def kernel(bb, name, args, t, var="r"):
    return bb.bind(G.CallTIR(name, tuple(args), t), t, var)


def finish_main(mod, bb, value, names):
    """Bind `value` (a Loop or Scan) in `bb`, typed by inference, and return every result."""
    rtype = G.infer_control_flow(value, mod.functions)
    r = bb.bind(value, rtype, "r")
    if isinstance(rtype, G.TupleType):
        outs = [bb.get_item(r, j, f"o{j}") for j in range(len(rtype.fields))]
    else:
        outs = [r]
    mod.functions["main"] = bb.finish(outs, names)


# -- Loop ---------------------------------------------------------------------------------------


def loop_module(trip: bool, cond: bool, cond_from_body: bool = True) -> IRModule:
    """main(x[4], [m: int64], [c: bool]) loops body(i, c, x) -> (i < 3, x + i, scan: x * 2):
    carried x + i, and each iteration's x * 2 stacked."""
    mod = IRModule()
    bb = FunctionBuilder()
    i, c = bb.param("i", T(dtype=I64)), bb.param("c", T(dtype=BOOL))
    x = bb.param("x", T(4))
    nc = kernel(bb, "less3", [i], T(dtype=BOOL), "nc") if cond_from_body else c
    y = kernel(bb, "add_i", [x, i], T(4), "y")
    s = kernel(bb, "twice", [x], T(4), "s")
    mod.functions["body"] = bb.finish([nc, y, s], ["c", "y", "s"])
    bb = FunctionBuilder()
    x = bb.param("x", T(4))
    m = bb.param("m", T(dtype=I64)) if trip else None
    c = bb.param("c", T(1, dtype=BOOL)) if cond else None
    finish_main(mod, bb, G.Loop("body", m, c, (x,), ()), ["y", "s"])
    return mod


def loop_reference(x, limit, cond, cond_from_body=True):
    i, scans = 0, []
    while cond and (limit is None or i < limit):
        scans.append(x * 2)
        x = x + i
        if cond_from_body:
            cond = i < 3
        i += 1
    return x, np.stack(scans) if scans else np.zeros((0, 4), np.float32)


X = np.arange(4, dtype=np.float32)


@pytest.mark.parametrize("limit", [0, 1, 2, 5])
def test_loop_with_a_trip_count(limit):
    vm, _, _ = machine(loop_module(trip=True, cond=False))
    got = vm.run("main", [X, np.array(limit, np.int64)])
    # without a cond operand the body's condition is not consulted
    want = loop_reference(X, limit, True, cond_from_body=False)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    assert got[1].shape == (limit, 4)


@pytest.mark.parametrize("start", [True, False])
def test_loop_with_a_condition(start):
    vm, lib, _ = machine(loop_module(trip=False, cond=True))
    got = vm.run("main", [X, np.array([start])])
    want = loop_reference(X, None, start)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    assert lib.calls.count("less3") == (4 if start else 0)


@pytest.mark.parametrize("limit", [0, 2, 9])
def test_loop_with_a_trip_count_and_a_condition(limit):
    vm, _, _ = machine(loop_module(trip=True, cond=True))
    got = vm.run("main", [X, np.array(limit, np.int64), np.array([True])])
    want = loop_reference(X, limit, True)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_loop_that_passes_its_condition_through():
    vm, _, _ = machine(loop_module(trip=True, cond=True, cond_from_body=False))
    got = vm.run("main", [X, np.array(3, np.int64), np.array([True])])
    want = loop_reference(X, 3, True, cond_from_body=False)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_loop_keeps_its_operands_readable_after_it():
    """The carried registers are copies of the operands' registers: x is still x after."""
    mod = IRModule()
    bb = FunctionBuilder()
    i, c, x = bb.param("i", T(dtype=I64)), bb.param("c", T(dtype=BOOL)), bb.param("x", T(4))
    mod.functions["body"] = bb.finish([c, kernel(bb, "add_one", [x], T(4))], ["c", "x"])
    bb = FunctionBuilder()
    x, m = bb.param("x", T(4)), bb.param("m", T(dtype=I64))
    e = G.Loop("body", m, None, (x,), ())
    r = bb.bind(e, G.infer_control_flow(e, mod.functions), "r")
    both = kernel(bb, "add2", [r, x], T(4), "both")
    mod.functions["main"] = bb.finish([both], ["both"])
    vm, _, _ = machine(mod)
    (got,) = vm.run("main", [X, np.array(3, np.int64)])
    np.testing.assert_array_equal(got, (X + 3) + X)
    del i


def test_loop_carried_value_that_grows_binds_its_size_per_run():
    """body(i, c, x[d]) -> (c, append(x, i)[d + 1]): the carried shape changes every
    iteration, so the body is typed with its own size variable and the result with a fresh
    one that the VM binds from the value; a kernel after the loop allocates by it."""
    mod = IRModule()
    d = SizeVar("d")
    bb = FunctionBuilder()
    i, c, x = bb.param("i", T(dtype=I64)), bb.param("c", T(dtype=BOOL)), bb.param("x", T(d))
    y = kernel(bb, "append_i", [x, i], T(d + 1), "y")
    mod.functions["body"] = bb.finish([c, y], ["c", "y"])
    n = SizeVar("n")
    bb = FunctionBuilder()
    x, m = bb.param("x", T(n)), bb.param("m", T(dtype=I64))
    e = G.Loop("body", m, None, (x,), ())
    rtype = G.infer_control_flow(e, mod.functions)
    assert isinstance(rtype, G.TensorType) and rtype.shape[0] is not n
    r = bb.bind(e, rtype, "r")
    z = kernel(bb, "twice", [r], rtype, "z")
    mod.functions["main"] = bb.finish([z], ["z"])
    vm, _, _ = machine(mod)
    for trips in (0, 1, 4):
        (got,) = vm.run("main", [np.ones(2, np.float32), np.array(trips, np.int64)])
        want = np.concatenate([np.ones(2), np.arange(trips)]).astype(np.float32) * 2
        np.testing.assert_array_equal(got, want)


def test_loop_captures_outer_values():
    """body(i, c, acc, w) -> (c, acc + w): w is read from main, not carried."""
    mod = IRModule()
    bb = FunctionBuilder()
    bb.param("i", T(dtype=I64))
    c, acc, w = bb.param("c", T(dtype=BOOL)), bb.param("acc", T(4)), bb.param("w", T(4))
    mod.functions["body"] = bb.finish([c, kernel(bb, "add2", [acc, w], T(4))], ["c", "acc"])
    bb = FunctionBuilder()
    acc, w, m = bb.param("acc", T(4)), bb.param("w", T(4)), bb.param("m", T(dtype=I64))
    finish_main(mod, bb, G.Loop("body", m, None, (acc,), (w,)), ["acc"])
    vm, _, _ = machine(mod)
    (got,) = vm.run("main", [X, np.full(4, 0.5, np.float32), np.array(4, np.int64)])
    np.testing.assert_array_equal(got, X + 2)


def test_loop_body_with_only_a_condition_and_a_scan_output():
    """No carried value: body(i, c) -> (i < 3, i as a scan output)."""
    mod = IRModule()
    bb = FunctionBuilder()
    i, bb_c = bb.param("i", T(dtype=I64)), bb.param("c", T(dtype=BOOL))
    nc = kernel(bb, "less3", [i], T(dtype=BOOL), "nc")
    mod.functions["body"] = bb.finish([nc, i], ["c", "i"])
    bb = FunctionBuilder()
    c = bb.param("c", T(dtype=BOOL))
    finish_main(mod, bb, G.Loop("body", None, c, (), ()), ["iters"])
    vm, _, _ = machine(mod)
    (got,) = vm.run("main", [np.array(True)])
    np.testing.assert_array_equal(got, [0, 1, 2, 3])
    assert got.dtype == np.int64
    del bb_c


def test_loop_bytecode_has_one_backward_jump_onto_its_head():
    exe = compile_module(loop_module(trip=True, cond=True))
    main = exe.function("main")
    back = [(pc, ins) for pc, ins in enumerate(main.code) if ins.op == Op.GOTO and ins.a < 0]
    assert len(back) == 1
    pc, ins = back[0]
    head = main.code[pc + ins.a]
    assert head.op == Op.IF and pc + ins.a + head.b == pc + 1
    assert decode(exe.encode()).as_text() == exe.as_text()


# -- Scan ---------------------------------------------------------------------------------------


def scan_module(in_axes, in_dirs, out_axes, out_dirs, length_var=True) -> IRModule:
    """main(s[4], a, b) scans body(s, a_t, b_t) -> (s + a_t, s * b_t, a_t + b_t) with a and b
    holding their sequence on in_axes (length n, or 3)."""
    mod = IRModule()
    bb = FunctionBuilder()
    s, a, b = bb.param("s", T(4)), bb.param("a", T(4)), bb.param("b", T(4))
    s2 = kernel(bb, "add2", [s, a], T(4), "s2")
    p = kernel(bb, "mul2", [s, b], T(4), "p")
    q = kernel(bb, "add2", [a, b], T(4), "q")
    mod.functions["body"] = bb.finish([s2, p, q], ["s", "p", "q"])
    n = SizeVar("n") if length_var else 3
    bb = FunctionBuilder()
    s = bb.param("s", T(4))
    a = bb.param("a", T(*_seq_shape(n, in_axes[0])))
    b = bb.param("b", T(*_seq_shape(n, in_axes[1])))
    e = G.Scan("body", 2, (s, a, b), (), tuple(in_axes), tuple(in_dirs), tuple(out_axes),
               tuple(out_dirs))
    finish_main(mod, bb, e, ["s", "p", "q"])
    return mod


def _seq_shape(n, axis):
    return (n, 4) if axis in (0, -2) else (4, n)


def scan_reference(s, a, b, in_axes, in_dirs, out_axes, out_dirs):
    a = np.moveaxis(a, in_axes[0], 0)
    b = np.moveaxis(b, in_axes[1], 0)
    a = a[::-1] if in_dirs[0] else a
    b = b[::-1] if in_dirs[1] else b
    ps, qs = [], []
    for at, bt in zip(a, b):
        ps.append(s * bt)
        qs.append(at + bt)
        s = s + at
    outs = []
    for items, axis, rev in zip((ps, qs), out_axes, out_dirs):
        items = items[::-1] if rev else items
        outs.append(np.stack(items, axis=axis) if items else
                    np.zeros((0, 4) if axis in (0, -2) else (4, 0), np.float32))
    return [s, *outs]


SCANS = [
    ((0, 0), (0, 0), (0, 0), (0, 0)),
    ((0, 1), (0, 1), (0, 1), (1, 0)),
    ((1, -1), (1, 0), (-1, -2), (0, 1)),
]


@pytest.mark.parametrize("in_axes, in_dirs, out_axes, out_dirs", SCANS)
@pytest.mark.parametrize("length", [0, 1, 3])
def test_scan_axes_and_directions(in_axes, in_dirs, out_axes, out_dirs, length):
    vm, lib, _ = machine(scan_module(in_axes, in_dirs, out_axes, out_dirs))
    rng = np.random.default_rng(length)
    s = rng.standard_normal(4).astype(np.float32)
    a = rng.standard_normal(_seq_shape(length, in_axes[0])).astype(np.float32)
    b = rng.standard_normal(_seq_shape(length, in_axes[1])).astype(np.float32)
    got = vm.run("main", [s, a, b])
    want = scan_reference(s, a, b, in_axes, in_dirs, out_axes, out_dirs)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)
        assert g.shape == w.shape
    assert len(lib.calls) == 3 * length


def test_scan_with_a_static_length():
    vm, _, _ = machine(scan_module((0, 0), (0, 0), (0, 0), (0, 0), length_var=False))
    s, a, b = np.ones(4, np.float32), np.ones((3, 4), np.float32), np.ones((3, 4), np.float32)
    got = vm.run("main", [s, a, b])
    np.testing.assert_array_equal(got[0], [4, 4, 4, 4])
    with pytest.raises(RunInputError, match="dimension 0 must be 3, got 2"):
        vm.run("main", [s, a[:2], b])


def test_scan_inputs_of_different_lengths_are_an_input_error():
    mod = scan_module((0, 0), (0, 0), (0, 0), (0, 0))
    # give b its own length variable, so only the run can find the mismatch
    main = mod.functions["main"]
    k = SizeVar("k")
    b = G.Var("b", T(k, 4))
    scan = main.bindings[0].value
    scan2 = G.Scan(scan.body, 2, (scan.args[0], scan.args[1], b), (), *_scan_attrs(scan))
    bb = FunctionBuilder()
    bb.params, bb.input_names = [main.params[0], main.params[1], b], ["s", "a", "b"]
    finish_main(mod, bb, scan2, ["s", "p", "q"])
    vm, _, _ = machine(mod)
    s = np.ones(4, np.float32)
    with pytest.raises(RunInputError, match="scan input has 2 elements along axis 0"):
        vm.run("main", [s, np.ones((3, 4), np.float32), np.ones((2, 4), np.float32)])


def _scan_attrs(e: G.Scan):
    return (e.scan_input_axes, e.scan_input_directions, e.scan_output_axes,
            e.scan_output_directions)


def test_scan_state_only_and_output_only_bodies():
    """A body returning one value: a lone state (a cumulative sum), or a lone scan output."""
    for states in (1, 0):
        mod = IRModule()
        bb = FunctionBuilder()
        s = bb.param("s", T(4)) if states else None
        a = bb.param("a", T(4))
        out = kernel(bb, "add2", [s, a], T(4)) if states else kernel(bb, "twice", [a], T(4))
        mod.functions["body"] = bb.finish([out], ["o"])
        n = SizeVar("n")
        bb = FunctionBuilder()
        args = ([bb.param("s", T(4))] if states else []) + [bb.param("a", T(n, 4))]
        out_attrs = () if states else (0,)
        e = G.Scan("body", 1, tuple(args), (), (0,), (0,), out_attrs, out_attrs)
        finish_main(mod, bb, e, ["o"])
        vm, _, _ = machine(mod)
        seq = np.arange(12, dtype=np.float32).reshape(3, 4)
        inputs = ([np.zeros(4, np.float32)] if states else []) + [seq]
        (got,) = vm.run("main", inputs)
        np.testing.assert_array_equal(got, seq.sum(0) if states else seq * 2)


def test_scan_over_a_vector_passes_0d_slices():
    mod = IRModule()
    bb = FunctionBuilder()
    s, a = bb.param("s", T()), bb.param("a", T())
    s2 = kernel(bb, "add2", [s, a], T(), "s2")
    mod.functions["body"] = bb.finish([s2, s2], ["s", "sums"])
    n = SizeVar("n")
    bb = FunctionBuilder()
    e = G.Scan("body", 1, (bb.param("s", T()), bb.param("a", T(n))), (), (0,), (1,), (0,), (0,))
    finish_main(mod, bb, e, ["s", "sums"])
    vm, _, _ = machine(mod)
    total, sums = vm.run("main", [np.array(0, np.float32), np.array([1, 2, 3], np.float32)])
    assert total.shape == () and total == 6
    np.testing.assert_array_equal(sums, [3, 5, 6])  # read from the end


# -- end to end: ONNX -> LLVM kernels + bytecode -> pack -> onnxruntime's answer ---------------


def onnx_loop_model():
    """Loop(M, cond, y0, g0) over body(i, c, y, g) -> (i < 4, y + x[i], concat(g, x[i]),
    scan (y + x[i]) * w): a trip count and a condition, a carried value that grows, captured
    outer values (x, w) and a scan output."""
    from onnx import TensorProto as TP
    from onnx import helper as h

    def vi(name, dtype, shape):
        return h.make_tensor_value_info(name, dtype, shape)

    body = h.make_graph(
        [h.make_node("Less", ["i", "lim"], ["c_out"]),
         h.make_node("Gather", ["x", "i"], ["xi"], axis=0),
         h.make_node("Add", ["y_in", "xi"], ["y_out"]),
         h.make_node("Unsqueeze", ["xi", "zero"], ["xi1"]),
         h.make_node("Concat", ["g_in", "xi1"], ["g_out"], axis=0),
         h.make_node("Mul", ["y_out", "w"], ["scan"])],
        "body",
        [vi("i", TP.INT64, []), vi("c", TP.BOOL, []), vi("y_in", TP.FLOAT, [3]),
         vi("g_in", TP.FLOAT, ["k", 3])],
        [vi("c_out", TP.BOOL, []), vi("y_out", TP.FLOAT, [3]), vi("g_out", TP.FLOAT, ["k2", 3]),
         vi("scan", TP.FLOAT, [3])],
        [h.make_tensor("lim", TP.INT64, [], [4]), h.make_tensor("zero", TP.INT64, [1], [0])])
    graph = h.make_graph(
        [h.make_node("Loop", ["M", "cond", "y0", "g0"], ["y", "g", "scans"], body=body)],
        "main",
        [vi("M", TP.INT64, []), vi("cond", TP.BOOL, []), vi("y0", TP.FLOAT, [3]),
         vi("g0", TP.FLOAT, [1, 3]), vi("x", TP.FLOAT, [6, 3]), vi("w", TP.FLOAT, [3])],
        [vi("y", TP.FLOAT, [3]), vi("g", TP.FLOAT, ["a", 3]), vi("scans", TP.FLOAT, ["b", 3])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_compiled_onnx_loop_matches_onnxruntime():
    import onnxruntime as ort

    import tcc

    model = onnx_loop_model()
    fn = tcc.compile_onnx(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for trips, cond in [(2, True), (9, True), (0, True), (3, False)]:
        feeds = {"M": np.array(trips, np.int64), "cond": np.array(cond),
                 "y0": rng.standard_normal(3).astype(np.float32),
                 "g0": rng.standard_normal((1, 3)).astype(np.float32),
                 "x": rng.standard_normal((6, 3)).astype(np.float32),
                 "w": rng.standard_normal(3).astype(np.float32)}
        want = sess.run(None, feeds)
        got = fn(*feeds.values())
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
