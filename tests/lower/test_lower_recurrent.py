"""lower-recurrent: rnn, gru and lstm as a Scan over time around their cell. The lowered
module, run by the reference interpreter, computes what the ops' numpy references compute,
over directions, sequence lengths, initial states, layouts, activations, clip, peepholes and
half precision; and a compiled pack does too, in both runtimes."""

import numpy as np
import pytest

from tcc.ir import graph as G
from tcc.ir.builder import FunctionBuilder
from tcc.ir.interp import run
from tcc.ir.module import IRModule
from tcc.ir.ops.registry import get_op, normalize_attrs
from tcc.lower.passes.lower_recurrent import lower_recurrent

SEQ, BATCH, INPUT, HIDDEN = 5, 3, 4, 6


def _operands(op, rng, dirs, dtype="float32", lens=False, init=False, peep=False, layout=0):
    gates = {"rnn": 1, "gru": 3, "lstm": 4}[op]
    x_shape = (BATCH, SEQ, INPUT) if layout else (SEQ, BATCH, INPUT)
    state = (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN)

    def r(*shape):
        return (rng.standard_normal(shape) * 0.5).astype(dtype)

    ops = [r(*x_shape), r(dirs, gates * HIDDEN, INPUT), r(dirs, gates * HIDDEN, HIDDEN),
           r(dirs, 2 * gates * HIDDEN)]
    ops.append(np.array([5, 0, 3], np.int32) if lens else None)
    ops.append(r(*state) if init else None)
    if op == "lstm":
        ops.append(r(*state) if init else None)
        ops.append(r(dirs, 3 * HIDDEN) if peep else None)
    while ops[-1] is None:
        ops.pop()
    return ops


def _module(op, arrays, attrs):
    mod = IRModule()
    bb = FunctionBuilder()
    args = []
    for k, a in enumerate(arrays):
        if a is None:
            args.append(None)
            continue
        name = f"in{k}"
        args.append(bb.param(name, G.TensorType(a.shape, str(a.dtype))))
    out = bb.emit(op, *args, **attrs)
    n = len(G.type_of(out).fields)
    fields = [bb.get_item(out, i, name=f"out{i}") for i in range(n)]
    mod.functions["main"] = bb.finish(fields, [f"out{i}" for i in range(n)])
    return mod, [a for a in arrays if a is not None]


CASES = [
    ("rnn", {}, {}),
    ("rnn", {"direction": "bidirectional", "activations": ["Relu", "LeakyRelu"],
             "activation_alpha": [0.0, 0.1]}, {"lens": True, "init": True}),
    ("gru", {"direction": "reverse"}, {"lens": True}),
    ("gru", {"linear_before_reset": True, "clip": 0.5}, {"init": True}),
    ("gru", {"direction": "bidirectional", "layout": 1}, {"init": True, "layout": 1}),
    ("lstm", {}, {}),
    ("lstm", {"direction": "bidirectional"}, {"lens": True, "init": True, "peep": True}),
    ("lstm", {"input_forget": True, "activations": ["HardSigmoid", "ScaledTanh", "Affine"],
              "activation_alpha": [0.3, 1.5, 0.5], "activation_beta": [0.4, 0.7, 0.1]}, {}),
    ("lstm", {"layout": 1, "direction": "reverse"}, {"layout": 1, "lens": True, "init": True}),
    ("lstm", {}, {"dtype": "float16"}),
]


@pytest.mark.parametrize("op, attrs, operands", CASES)
def test_lowered_matches_the_reference(op, attrs, operands):
    rng = np.random.default_rng(0)
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    arrays = _operands(op, rng, dirs, **operands)
    mod, inputs = _module(op, arrays, attrs)
    lowered = lower_recurrent(mod)
    assert not any(isinstance(b.value, G.Call) and b.value.op == op
                   for b in lowered.functions["main"].bindings)
    got = run(lowered, inputs)
    want = get_op(op).ref(*arrays, **normalize_attrs(get_op(op), attrs))
    tol = 2e-3 if operands.get("dtype") == "float16" else 1e-5
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def test_compiled_lstm_in_both_runtimes(tmp_path):
    import tcc.api
    import tcc.rt
    from tests.runtime_c.capi import CRuntime, build_runtime

    rng = np.random.default_rng(1)
    arrays = _operands("lstm", rng, 2, lens=True, init=True, peep=True)
    mod, inputs = _module("lstm", arrays, {"direction": "bidirectional"})
    want = run(mod, inputs)
    path = tmp_path / "m.tvmpack"
    path.write_bytes(tcc.api.compile_to_bytes(mod))
    with tcc.rt.load(path) as m:
        got = m["main"](*inputs)
    c_got = CRuntime(build_runtime(tmp_path / "crt") / "libtccrt.so").load(path).run("main", inputs)
    for g, c, w in zip(got, c_got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        assert np.array_equal(g, c)


PLAIN = [
    ({}, {}),
    ({"direction": "reverse"}, {"init": True}),
    ({"direction": "bidirectional", "layout": 1}, {"init": True, "layout": 1}),
    ({"activations": ["Sigmoid", "Tanh", "Tanh"]}, {}),  # the defaults, spelled out
    ({}, {"dtype": "float16"}),  # computed in float32
]


def _recurrence_calls(mod) -> int:
    return sum(isinstance(b.value, G.Call) and b.value.op == "lstm_recurrence"
               for b in mod.functions["main"].bindings)


@pytest.mark.parametrize("attrs, operands", PLAIN)
def test_a_plain_lstm_runs_each_direction_as_one_recurrence_call(attrs, operands):
    rng = np.random.default_rng(2)
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    mod, _ = _module("lstm", _operands("lstm", rng, dirs, **operands), attrs)
    lowered = lower_recurrent(mod)
    assert _recurrence_calls(lowered) == dirs
    assert not any(isinstance(b.value, G.Scan) for b in lowered.functions["main"].bindings)


@pytest.mark.parametrize("attrs, operands", [
    ({"clip": 0.5}, {}),
    ({"input_forget": True}, {}),
    ({}, {"peep": True}),
    ({}, {"lens": True}),
    ({"activations": ["Sigmoid", "Tanh", "Relu"]}, {}),
])
def test_other_lstms_keep_the_scan(attrs, operands):
    mod, _ = _module("lstm", _operands("lstm", np.random.default_rng(3), 1, **operands), attrs)
    assert _recurrence_calls(lower_recurrent(mod)) == 0


def test_compiled_plain_lstm_matches_the_reference_in_both_runtimes(tmp_path):
    """The recurrence kernel, at two sequence lengths and batches of one pack (symbolic
    dims), in both directions of a bidirectional LSTM with initial states."""
    import tcc.api
    import tcc.rt
    from tcc.ir.expr import Var
    from tests.runtime_c.capi import CRuntime, build_runtime

    seq, batch = Var("seq"), Var("batch")
    mod = IRModule()
    bb = FunctionBuilder()
    x = bb.param("x", G.TensorType((seq, batch, INPUT), "float32"))
    rng = np.random.default_rng(4)
    weights = [(rng.standard_normal(s) * 0.5).astype("float32")
               for s in ((2, 4 * HIDDEN, INPUT), (2, 4 * HIDDEN, HIDDEN), (2, 8 * HIDDEN))]
    consts = [mod.add_constant(f"w{k}", w) for k, w in enumerate(weights)]
    h0 = bb.param("h0", G.TensorType((2, batch, HIDDEN), "float32"))
    c0 = bb.param("c0", G.TensorType((2, batch, HIDDEN), "float32"))
    out = bb.emit("lstm", x, *consts, None, h0, c0, direction="bidirectional")
    fields = [bb.get_item(out, i, name=f"out{i}") for i in range(3)]
    mod.functions["main"] = bb.finish(fields, ["y", "y_h", "y_c"])
    path = tmp_path / "m.tvmpack"
    path.write_bytes(tcc.api.compile_to_bytes(mod))
    crt = CRuntime(build_runtime(tmp_path / "crt") / "libtccrt.so").load(path)
    with tcc.rt.load(path) as m:
        for s, b in ((7, 3), (1, 1)):
            inputs = [(rng.standard_normal(shape) * 0.5).astype("float32")
                      for shape in ((s, b, INPUT), (2, b, HIDDEN), (2, b, HIDDEN))]
            want = get_op("lstm").ref(inputs[0], *weights, None, inputs[1], inputs[2],
                                      **normalize_attrs(get_op("lstm"),
                                                        {"direction": "bidirectional"}))
            got = m["main"](*inputs)
            c_got = crt.run("main", inputs)
            for g, c, w in zip(got, c_got, want):
                assert g.shape == w.shape
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
                assert np.array_equal(g, c)
