"""Recurrent op records (rnn, gru, lstm): shape inference over symbolic shapes, shape errors,
and the numpy references checked against onnxruntime on small random inputs."""

import numpy as np
import pytest

from tcc.ir.errors import ShapeError
from tcc.ir.expr import Var
from tcc.ir.graph import TensorType, TupleType
from tests.helpers import assert_close, infer, node_model, ref, run_ort

rng = np.random.default_rng(0)
s, n = Var("s"), Var("n")
GATES = {"rnn": 1, "gru": 3, "lstm": 4}
ONNX_NAME = {"rnn": "RNN", "gru": "GRU", "lstm": "LSTM"}


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def t(*shape, dtype="float32"):
    return TensorType(shape, dtype)


def operands(op, dirs, seq=4, batch=3, inp=2, hidden=3, lens=None, state=True):
    """Random operands of `op` in ONNX order (X, W, R, B, sequence_lens, initial_h[, ...])."""
    g = GATES[op]
    feeds = {
        "X": f32(seq, batch, inp),
        "W": f32(dirs, g * hidden, inp),
        "R": f32(dirs, g * hidden, hidden),
        "B": f32(dirs, 2 * g * hidden),
        "sequence_lens": None if lens is None else np.array(lens, np.int32),
        "initial_h": f32(dirs, batch, hidden) if state else None,
    }
    if op == "lstm":
        feeds["initial_c"] = f32(dirs, batch, hidden) if state else None
        feeds["P"] = f32(dirs, 3 * hidden)
    return feeds


def check(op, feeds, onnx_attrs=None, tol=1e-5, **attrs):
    """Compare the reference with onnxruntime running the ONNX op with `onnx_attrs`."""
    got = ref(op, *feeds.values(), **attrs)
    hidden = feeds["R"].shape[2]
    onnx_attrs = onnx_attrs or attrs
    model = node_model(ONNX_NAME[op], feeds, len(got), opset=14, hidden_size=hidden, **onnx_attrs)
    assert_close(got, run_ort(model, feeds), rtol=tol, atol=tol)


# -- inference ----------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["rnn", "gru", "lstm"])
def test_infer_symbolic_seq_and_batch(op):
    g = GATES[op]
    args = [t(s, n, 7), t(2, g * 5, 7), t(2, g * 5, 5)]
    out = infer(op, *args, direction="bidirectional")
    states = 2 if op == "lstm" else 1
    assert out == TupleType((t(s, 2, n, 5),) + (t(2, n, 5),) * states)


def test_infer_layout_1_puts_batch_first():
    args = [t(n, s, 7), t(1, 12, 7), t(1, 12, 3), None, t(n, dtype="int32"), t(n, 1, 3)]
    out = infer("lstm", *args, layout=1)
    assert out == TupleType((t(n, s, 1, 3), t(n, 1, 3), t(n, 1, 3)))


def test_infer_passes_dtype_through():
    f64 = [t(2, 3, 4, dtype="float64"), t(1, 9, 4, dtype="float64"), t(1, 9, 3, dtype="float64")]
    out = infer("gru", *f64)
    assert out.fields[0] == t(2, 1, 3, 3, dtype="float64")


@pytest.mark.parametrize(
    "args, attrs, message",
    [
        ([t(2, 3, 4), t(1, 8, 4), t(1, 9, 3)], {}, "W must have shape"),
        ([t(2, 3, 4), t(1, 9, 4), t(1, 9, 3)], {"direction": "bidirectional"}, "W must"),
        ([t(2, 3, 4), t(1, 9, 4), t(1, 9, 3), t(1, 17)], {}, "B must have shape"),
        ([t(2, 3, 4), t(1, 9, 4), t(1, 9, 3), None, t(3)], {}, "sequence_lens must be int"),
        ([t(2, 3, 4), t(1, 9, 4), t(1, 9, 3), None, None, t(1, 2, 3)], {}, "initial_h"),
        ([t(2, 3, 4, dtype="int32"), t(1, 9, 4), t(1, 9, 3)], {}, "floating-point"),
        ([t(2, 3, 4), t(1, 9, 4, dtype="float64"), t(1, 9, 3)], {}, "same dtype"),
        ([t(2, 3, 4), t(1, 9, 4), t(1, 9, 3)], {"direction": "up"}, "direction 'up'"),
        ([t(2, 3, 4), t(1, 9, 4), t(1, 9, 3)], {"activations": ["Tanh"]}, "2 activations"),
        ([t(2, 3, 4), t(1, 9, 4), t(1, 9, 3)], {"activations": ["Tanh", "Gelu"]}, "Gelu"),
    ],
)
def test_infer_rejects_bad_operands(args, attrs, message):
    with pytest.raises(ShapeError, match=message):
        infer("gru", *args, **attrs)


def test_infer_rejects_misaligned_activation_alpha():
    with pytest.raises(ShapeError, match="one value per activation"):
        infer(
            "rnn",
            t(2, 3, 4),
            t(1, 3, 4),
            t(1, 3, 3),
            activations=["LeakyRelu"],
            activation_alpha=[0.1, 0.2],
        )


# -- references against onnxruntime ----------------------------------------------------------


@pytest.mark.parametrize("op", ["rnn", "gru", "lstm"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_reference_matches_onnxruntime(op, direction):
    dirs = 2 if direction == "bidirectional" else 1
    check(op, operands(op, dirs), direction=direction)


@pytest.mark.parametrize("op", ["rnn", "gru", "lstm"])
def test_sequence_lens_stop_each_batch_entry_early(op):
    # A zero-length entry, a short one and a full one, in both directions.
    check(op, operands(op, 2, lens=[0, 2, 4]), direction="bidirectional")


@pytest.mark.parametrize("op", ["rnn", "gru", "lstm"])
def test_absent_optional_operands_default_to_zero(op):
    feeds = operands(op, 1, state=False)
    feeds["B"] = None
    if op == "lstm":
        feeds["P"] = None
    check(op, feeds)


def test_sequence_lens_past_the_sequence_are_rejected():
    feeds = operands("rnn", 1, lens=[1, 5, 2])
    with pytest.raises(ShapeError, match=r"sequence_lens must lie in \[0, 4\]"):
        ref("rnn", *feeds.values())


def test_gru_linear_before_reset_and_clip():
    check("gru", operands("gru", 2), direction="bidirectional", linear_before_reset=True, clip=0.7)


def test_lstm_input_forget_and_clip():
    check("lstm", operands("lstm", 2), direction="bidirectional", input_forget=True, clip=0.5)


@pytest.mark.parametrize("op", ["rnn", "gru", "lstm"])
def test_layout_1_is_the_transposed_layout_0(op):
    feeds = operands(op, 2, lens=[3, 1, 4])
    y, *states = ref(op, *feeds.values(), direction="bidirectional")
    for k in ("X", "initial_h", "initial_c"):
        if k in feeds:
            feeds[k] = np.ascontiguousarray(feeds[k].swapaxes(0, 1))
    y1, *states1 = ref(op, *feeds.values(), direction="bidirectional", layout=1)
    np.testing.assert_array_equal(y1, y.transpose(2, 0, 1, 3))
    for a, b in zip(states1, states):
        np.testing.assert_array_equal(a, b.swapaxes(0, 1))


ALL_ACTIVATIONS = [
    ("Relu", None, None),
    ("Tanh", None, None),
    ("Sigmoid", None, None),
    ("LeakyRelu", 0.2, None),
    ("ThresholdedRelu", 0.3, None),
    ("ScaledTanh", 0.9, 1.2),
    ("HardSigmoid", 0.3, 0.4),
    ("Elu", 0.8, None),
    ("Softsign", None, None),
    ("Softplus", None, None),
    ("Affine", 0.5, 0.1),
]


@pytest.mark.parametrize("name, alpha, beta", ALL_ACTIVATIONS)
def test_activation_functions_match_onnxruntime(name, alpha, beta):
    # As the cell function of a GRU (whose gates stay in range whatever the function).
    acts = ["Sigmoid", name]
    onnx_attrs = {"activations": acts}
    if alpha is not None:
        onnx_attrs["activation_alpha"] = [alpha]
    if beta is not None:
        onnx_attrs["activation_beta"] = [beta]
    check(
        "gru",
        operands("gru", 1),
        onnx_attrs,
        tol=1e-4,
        activations=acts,
        activation_alpha=[0.0, 0.0 if alpha is None else alpha],
        activation_beta=[0.0, 0.0 if beta is None else beta],
    )


def test_activation_defaults_follow_the_onnx_ops():
    x = np.linspace(-2, 2, 9, dtype=np.float32).reshape(1, 1, 9)
    w = np.ones((1, 9, 9), np.float32) * np.eye(9, dtype=np.float32)
    r = np.zeros((1, 9, 9), np.float32)
    for name, expect in [
        ("LeakyRelu", np.where(x >= 0, x, 0.01 * x)),
        ("ThresholdedRelu", np.where(x > 1, x, 0)),
        ("HardSigmoid", np.clip(0.2 * x + 0.5, 0, 1)),
        ("Affine", x),
    ]:
        y, _ = ref("rnn", x, w, r, activations=[name])
        np.testing.assert_allclose(y[:, 0], expect, rtol=1e-6, err_msg=name)


def _cast(arrays, dtype):
    return [a.astype(dtype) if a is not None and a.dtype.kind == "f" else a for a in arrays]


def test_float16_runs_in_float32_and_keeps_its_dtype():
    half = _cast(operands("lstm", 1).values(), np.float16)
    got = ref("lstm", *half)
    want = ref("lstm", *_cast(half, np.float32))
    assert all(g.dtype == np.float16 for g in got)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.astype(np.float32), w, atol=1e-3)


# -- lstm_recurrence --------------------------------------------------------------------------


def _recurrence_operands(seq=4, batch=2, hidden=3):
    return [f32(seq, batch, 4 * hidden) * 2, f32(hidden, 4 * hidden), f32(batch, hidden),
            f32(batch, hidden)]


def test_lstm_recurrence_is_the_plain_lstm_after_its_input_projection():
    x, w, r, b, h0, c0 = f32(5, 2, 3), f32(1, 16, 3), f32(1, 16, 4), f32(1, 32), f32(1, 2, 4), \
        f32(1, 2, 4)
    xw = x @ w[0].T + b[0, :16] + b[0, 16:]
    y, y_h, y_c = ref("lstm", x, w, r, b, None, h0, c0)
    h, c, ys = ref("lstm_recurrence", xw, r[0].T.copy(), h0[0], c0[0])
    assert_close([ys, h, c], [y[:, 0], y_h[0], y_c[0]], rtol=1e-5, atol=1e-6)


def test_lstm_recurrence_infers_states_and_steps_over_symbolic_dims():
    got = infer("lstm_recurrence", t(s, n, 12), t(3, 12), t(n, 3), t(n, 3))
    assert got == TupleType((t(n, 3), t(n, 3), t(s, n, 3)))


@pytest.mark.parametrize("args, message", [
    ((t(4, 2, 12), t(3, 8), t(2, 3), t(2, 3)), "rt"),
    ((t(4, 2, 12), t(3, 12), t(5, 3), t(2, 3)), "h0"),
    ((t(4, 12), t(3, 12), t(2, 3), t(2, 3)), "takes xw"),
    ((t(4, 2, 12, dtype="float16"), t(3, 12, dtype="float16"), t(2, 3, dtype="float16"),
      t(2, 3, dtype="float16")), "float32"),
])
def test_lstm_recurrence_rejects_bad_operands(args, message):
    with pytest.raises(ShapeError, match=message):
        infer("lstm_recurrence", *args)


def test_lstm_recurrence_loop_program_computes_the_reference():
    """The written loop program, in the reference evaluator and compiled."""
    from tcc.emit.llvm import compile_prim_funcs
    from tcc.ir.tir_eval import run_prim_func
    from tcc.lower.legalize import op_prim_func
    from tcc.rt.kernels import load_cpu_library

    arrays = _recurrence_operands()
    func = op_prim_func("lstm_recurrence", [t(4, 2, 12), t(3, 12), t(2, 3), t(2, 3)], {})
    want = ref("lstm_recurrence", *arrays)
    outs = [np.full(a.shape, 9.0, np.float32) for a in want]  # overwritten, every element
    run_prim_func(func, [*arrays, *outs])
    assert_close(outs, want, rtol=1e-5, atol=1e-6)
    compiled = [np.full(a.shape, 9.0, np.float32) for a in want]
    with load_cpu_library(compile_prim_funcs({"k": func}).shared_object) as lib:
        lib.call("k", [*arrays, *compiled])
    assert_close(compiled, want, rtol=1e-5, atol=1e-6)
