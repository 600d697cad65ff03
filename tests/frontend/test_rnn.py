"""ONNX RNN/GRU/LSTM converters: output selection, attribute normalization (activation
names, packed alpha/beta), opset forms, symbolic batch/sequence sizes, checked against
onnxruntime."""

from functools import partial

import numpy as np
import pytest
from onnx import TensorProto as TP

from tcc.frontend.onnx import from_onnx
from tcc.ir.errors import FrontendError
from tcc.ir.expr import Var
from tcc.ir.graph import Call
from tcc.ir.interp import run
from tests.helpers import assert_matches_ort, call_ops, node_model

rng = np.random.default_rng(2)
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _model(op_type, shapes, outputs, opset=14, **attrs):
    """A one-node model; `shapes` maps input names to shapes of graph inputs (None: absent),
    all float but sequence_lens ("lens"), which is int32."""
    inputs = {
        k: None if s is None else (TP.INT32 if k == "lens" else TP.FLOAT, s)
        for k, s in shapes.items()
    }
    return node_model(op_type, inputs, outputs, opset=opset, **attrs)


_check = partial(assert_matches_ort, rtol=1e-5, atol=1e-5)


def _weights(op_type, dirs, inp, hidden):
    g = GATES[op_type]
    return {"W": f32(dirs, g * hidden, inp), "R": f32(dirs, g * hidden, hidden)}


@pytest.mark.parametrize("op_type", ["RNN", "GRU", "LSTM"])
def test_only_the_used_outputs_are_returned(op_type):
    feeds = {"X": f32(3, 2, 4), **_weights(op_type, 1, 4, 5)}
    outputs = ["", "yh", "yc"] if op_type == "LSTM" else ["", "yh"]
    model = _model(op_type, {k: v.shape for k, v in feeds.items()}, outputs, hidden_size=5)
    mod = _check(model, feeds)
    assert call_ops(mod) == [op_type.lower()]
    assert len(mod["main"].outputs) == len(outputs) - 1


@pytest.mark.parametrize("op_type", ["RNN", "GRU", "LSTM"])
def test_all_optional_inputs_bidirectional_with_sequence_lens(op_type):
    dirs, batch, hidden = 2, 3, 4
    feeds = {
        "X": f32(5, batch, 2),
        **_weights(op_type, dirs, 2, hidden),
        "B": f32(dirs, 2 * GATES[op_type] * hidden),
        "lens": np.array([5, 0, 3], np.int32),
        "h0": f32(dirs, batch, hidden),
    }
    outputs = ["y", "yh"]
    if op_type == "LSTM":
        feeds.update(c0=f32(dirs, batch, hidden), P=f32(dirs, 3 * hidden))
        outputs.append("yc")
    model = _model(
        op_type,
        {k: v.shape for k, v in feeds.items()},
        outputs,
        hidden_size=hidden,
        direction="bidirectional",
    )
    _check(model, feeds)


def test_absent_inputs_in_the_middle():
    # B and sequence_lens absent, initial_h present.
    feeds = {"X": f32(3, 2, 4), **_weights("GRU", 1, 4, 3), "h0": f32(1, 2, 3)}
    shapes = {"X": [3, 2, 4], "W": [1, 9, 4], "R": [1, 9, 3], "B": None, "lens": None}
    model = _model("GRU", {**shapes, "h0": [1, 2, 3]}, ["y", "yh"], hidden_size=3)
    _check(model, feeds)


@pytest.mark.parametrize("op_type", ["RNN", "GRU", "LSTM"])
def test_symbolic_batch_and_sequence_run_at_two_sizes(op_type):
    weights = _weights(op_type, 2, 3, 4)
    outputs = ["y", "yh", "yc"] if op_type == "LSTM" else ["y", "yh"]
    shapes = {"X": ["seq", "batch", 3], "W": weights["W"].shape, "R": weights["R"].shape}
    model = _model(op_type, shapes, outputs, hidden_size=4, direction="bidirectional")
    mod = from_onnx(model)
    y_shape = mod["main"].outputs[0].type.shape
    assert [str(d) for d in y_shape] == ["seq", "2", "batch", "4"]
    assert isinstance(y_shape[0], Var) and isinstance(y_shape[2], Var)
    for seq, batch in [(2, 1), (5, 3)]:
        _check(model, {"X": f32(seq, batch, 3), **weights})


def test_layout_1_batch_first():
    feeds = {"X": f32(2, 4, 3), **_weights("LSTM", 1, 3, 5), "B": f32(1, 40)}
    model = _model(
        "LSTM", {k: v.shape for k, v in feeds.items()}, ["y", "yh", "yc"], hidden_size=5, layout=1
    )
    mod = from_onnx(model)
    assert [o.type.shape for o in mod["main"].outputs] == [(2, 4, 1, 5), (2, 1, 5), (2, 1, 5)]
    # onnxruntime has no batch-first kernel: compare with its sequence-first result.
    y, yh, yc = run(mod, feeds)
    first = _model(
        "LSTM",
        {"X": (4, 2, 3), "W": (1, 20, 3), "R": (1, 20, 5), "B": (1, 40)},
        ["y", "yh", "yc"],
        hidden_size=5,
    )
    want = run(from_onnx(first), {**feeds, "X": np.ascontiguousarray(feeds["X"].swapaxes(0, 1))})
    np.testing.assert_allclose(y, want[0].transpose(2, 0, 1, 3), rtol=1e-6)
    np.testing.assert_allclose(yh, want[1].swapaxes(0, 1), rtol=1e-6)
    np.testing.assert_allclose(yc, want[2].swapaxes(0, 1), rtol=1e-6)


def test_packed_activation_alpha_goes_to_the_functions_that_take_it():
    # Sigmoid takes no alpha, so 0.3 is LeakyRelu's (forward) and 0.6, 0.7 HardSigmoid's.
    feeds = {"X": f32(3, 2, 4), **_weights("GRU", 2, 4, 3)}
    model = _model(
        "GRU",
        {k: v.shape for k, v in feeds.items()},
        ["y", "yh"],
        hidden_size=3,
        direction="bidirectional",
        activations=["sigmoid", "LeakyRelu", "HardSigmoid", "tanh"],
        activation_alpha=[0.3, 0.6],
        activation_beta=[0.7],
    )
    mod = _check(model, feeds)
    call = next(b.value for b in mod["main"].bindings if isinstance(b.value, Call))
    assert call.attrs["activations"] == ["Sigmoid", "LeakyRelu", "HardSigmoid", "Tanh"]
    assert call.attrs["activation_alpha"] == pytest.approx([0.0, 0.3, 0.6, 0.0])
    assert call.attrs["activation_beta"] == pytest.approx([0.0, 0.0, 0.7, 0.0])


def test_clip_and_input_forget():
    feeds = {"X": f32(4, 2, 3), **_weights("LSTM", 1, 3, 2), "B": f32(1, 16)}
    model = _model(
        "LSTM",
        {k: v.shape for k, v in feeds.items()},
        ["y", "yh", "yc"],
        hidden_size=2,
        clip=0.4,
        input_forget=1,
    )
    _check(model, feeds)


@pytest.mark.parametrize("op_type", ["RNN", "GRU", "LSTM"])
def test_opset_7(op_type):
    feeds = {"X": f32(3, 2, 4), **_weights(op_type, 1, 4, 3)}
    model = _model(op_type, {k: v.shape for k, v in feeds.items()}, ["y"], 7, hidden_size=3)
    _check(model, feeds)


def test_opset_1_output_sequence_computes_the_same():
    # onnxruntime has no kernel before opset 7: compare with the opset 7 model.
    feeds = {"X": f32(3, 2, 4), **_weights("RNN", 1, 4, 3)}
    shapes = {k: v.shape for k, v in feeds.items()}
    old = _model("RNN", shapes, ["y", "yh"], 1, hidden_size=3, output_sequence=1)
    new = _model("RNN", shapes, ["y", "yh"], 7, hidden_size=3)
    for a, b in zip(run(from_onnx(old), feeds), run(from_onnx(new), feeds)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "attrs, message",
    [
        ({"direction": "sideways"}, "unsupported direction 'sideways'"),
        ({"activations": ["Gelu"]}, "unsupported activation.*Gelu"),
        ({"activations": ["Tanh"], "direction": "bidirectional"}, "expected 2 activations"),
        ({"hidden_size": 7}, "hidden_size is 7 but R has hidden size 3"),
    ],
)
def test_unsupported_attributes_name_the_problem(attrs, message):
    attrs = {"hidden_size": 3, **attrs}
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    model = _model("RNN", {"X": [2, 1, 4], "W": [dirs, 3, 4], "R": [dirs, 3, 3]}, ["y"], **attrs)
    with pytest.raises(FrontendError, match=message):
        from_onnx(model)
