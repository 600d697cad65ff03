"""Recurrent ops: rnn, gru, lstm (ONNX layouts, all directions).

`lstm_recurrence` is the time loop of one direction of a plain LSTM (default activations,
no clip, peepholes or sequence lengths), its input projection done: lower-recurrent gives
it such LSTMs, and its loop program runs every step in one kernel call.

Each of rnn, gru and lstm runs a whole sequence and returns the tuple of all its outputs,
(Y, Y_h) for rnn and gru and (Y, Y_h, Y_c) for lstm; a frontend picks the ones a model
uses. Operands follow
ONNX: X is [seq, batch, input] (layout 0) or [batch, seq, input] (layout 1); W, R and B
hold the gate weights and biases of each direction stacked along their first axis; the
optional operands are passed as None when absent.

Attributes:
- `direction`: forward, reverse or bidirectional (the reverse pass of a bidirectional op
  uses the second direction's weights and activations).
- `activations`: the gate functions of every direction in order (f for rnn; f, g for gru;
  f, g, h for lstm), None for the ONNX defaults. `activation_alpha` / `activation_beta`
  give one value per entry of `activations` (None: each function's default); functions
  that take no parameter ignore theirs.
- `clip`: when set, every gate pre-activation is clamped to [-clip, clip].

A batch entry whose `sequence_lens` is shorter than the sequence stops early: Y is zero
past its length, Y_h / Y_c hold its last valid step (zero for an empty sequence, as
onnxruntime does), and the reverse direction runs backwards from its last valid step.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.dtype import is_float, is_int
from tcc.ir.errors import ShapeError
from tcc.ir.graph import TensorType, TupleType
from tcc.ir.ops.elementwise import sigmoid_te
from tcc.ir.ops.registry import OpDef, Pattern, register, same_dtype, tensor

DIRECTIONS = ("forward", "reverse", "bidirectional")


def _sigmoid(x):
    e = np.exp(-np.abs(x))  # never overflows
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


# name -> fn(x, alpha, beta). Names are those of the ONNX spec; ScaledTanh and Affine are
# the retired experimental ONNX ops of that name.
ACTIVATIONS: dict[str, Callable] = {
    "Relu": lambda x, a, b: np.maximum(x, 0),
    "Tanh": lambda x, a, b: np.tanh(x),
    "Sigmoid": lambda x, a, b: _sigmoid(x),
    "LeakyRelu": lambda x, a, b: np.where(x >= 0, x, a * x),
    "ThresholdedRelu": lambda x, a, b: np.where(x > a, x, 0),
    "ScaledTanh": lambda x, a, b: a * np.tanh(b * x),
    "HardSigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1),
    "Elu": lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0))),
    "Softsign": lambda x, a, b: x / (1 + np.abs(x)),
    "Softplus": lambda x, a, b: np.logaddexp(0, x),
    "Affine": lambda x, a, b: a * x + b,
}

# Default (alpha, beta) of the functions that take them, None where a function has no such
# parameter: those of the ONNX ops of the same name. ONNX gives ScaledTanh none; tcc takes
# onnxruntime's 0. (onnxruntime also departs from ONNX for ThresholdedRelu and Affine, whose
# alpha it defaults to 0.01 and 0.)
ACTIVATION_PARAMS: dict[str, tuple[float | None, float | None]] = {
    "LeakyRelu": (0.01, None),
    "ThresholdedRelu": (1.0, None),
    "ScaledTanh": (0.0, 0.0),
    "HardSigmoid": (0.2, 0.5),
    "Elu": (1.0, None),
    "Affine": (1.0, 0.0),
}

# Gate-function defaults per op, one direction's worth.
DEFAULT_ACTIVATIONS = {
    "rnn": ("Tanh",),
    "gru": ("Sigmoid", "Tanh"),
    "lstm": ("Sigmoid", "Tanh", "Tanh"),
}

# Gates per op: the row blocks of W and R (ONNX order: zrh for gru, iofc for lstm).
GATES = {"rnn": 1, "gru": 3, "lstm": 4}


def num_directions(direction: str) -> int:
    return 2 if direction == "bidirectional" else 1


# ---------------------------------------------------------------------------------------------
# inference


def _check_attrs(op: str, attrs: dict) -> None:
    if attrs["direction"] not in DIRECTIONS:
        raise ShapeError(
            f"op {op}: direction {attrs['direction']!r} is not one of {', '.join(DIRECTIONS)}"
        )
    if attrs["layout"] not in (0, 1):
        raise ShapeError(f"op {op}: layout must be 0 or 1, got {attrs['layout']}")
    acts = attrs["activations"]
    if acts is None:
        return
    want = len(DEFAULT_ACTIVATIONS[op]) * num_directions(attrs["direction"])
    if len(acts) != want:
        raise ShapeError(f"op {op}: expected {want} activations, got {len(acts)}")
    unknown = [a for a in acts if a not in ACTIVATIONS]
    if unknown:
        raise ShapeError(
            f"op {op}: unknown activation(s) {', '.join(map(str, unknown))}; "
            f"expected one of {', '.join(ACTIVATIONS)}"
        )
    for key in ("activation_alpha", "activation_beta"):
        if attrs[key] is not None and len(attrs[key]) != len(acts):
            raise ShapeError(
                f"op {op}: {key} needs one value per activation ({len(acts)}), "
                f"got {len(attrs[key])}"
            )


def _expect(t: TensorType, shape: tuple, op: str, what: str) -> None:
    """Reject `t` when its rank or a static dimension contradicts `shape`; symbolic
    dimensions are taken on trust (the interpreter checks them at run time)."""
    bad = t.ndim != len(shape) or any(
        isinstance(g, int) and isinstance(w, int) and g != w for g, w in zip(t.shape, shape)
    )
    if bad:
        want = "[" + ", ".join(str(d) for d in shape) + "]"
        raise ShapeError(f"op {op}: {what} must have shape {want}, got {t}")


def _infer(op: str, args, attrs, n_states: int) -> TupleType:
    """Types of (Y, Y_h[, Y_c]) from X's sequence and batch dims and R's hidden size."""
    _check_attrs(op, attrs)
    x, w, r = (tensor(args[i], op, n) for i, n in enumerate(("X", "W", "R")))
    if x.ndim != 3 or r.ndim != 3:
        raise ShapeError(f"op {op}: X and R must have rank 3, got {x} and {r}")
    if not is_float(x.dtype):
        raise ShapeError(f"op {op}: X must have a floating-point dtype, got {x.dtype}")
    dirs, gates = num_directions(attrs["direction"]), GATES[op]
    layout = attrs["layout"]
    seq, batch = (x.shape[1], x.shape[0]) if layout else x.shape[:2]
    hidden = r.shape[2]
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    expected = {
        "W": (dirs, gates * hidden, x.shape[2]),
        "R": (dirs, gates * hidden, hidden),
        "B": (dirs, 2 * gates * hidden),
        "sequence_lens": (batch,),
        "initial_h": state,
        "initial_c": state,
        "P": (dirs, 3 * hidden),
    }
    names = ["X", "W", "R", "B", "sequence_lens", "initial_h"]
    names += ["initial_c", "P"] if op == "lstm" else []
    floats = [x]
    for i, name in enumerate(names[1:], 1):
        if i >= len(args) or args[i] is None:
            continue
        t = tensor(args[i], op, name)
        _expect(t, expected[name], op, name)
        if name == "sequence_lens":
            if not is_int(t.dtype):
                raise ShapeError(f"op {op}: sequence_lens must be integers, got {t.dtype}")
        else:
            floats.append(t)
    dtype = same_dtype(floats, op)
    y = (batch, seq, dirs, hidden) if layout else (seq, dirs, batch, hidden)
    return TupleType((TensorType(y, dtype),) + (TensorType(state, dtype),) * n_states)


# ---------------------------------------------------------------------------------------------
# numpy references


def _gate_fns(op: str, attrs: dict) -> list[Callable]:
    """One function per gate function per direction, with alpha/beta bound."""
    names = attrs["activations"]
    if names is None:
        names = list(DEFAULT_ACTIVATIONS[op]) * num_directions(attrs["direction"])
    fns = []
    for i, name in enumerate(names):
        alpha, beta = ACTIVATION_PARAMS.get(name, (None, None))
        if attrs["activation_alpha"] is not None:
            alpha = attrs["activation_alpha"][i]
        if attrs["activation_beta"] is not None:
            beta = attrs["activation_beta"][i]
        fns.append(lambda x, f=ACTIVATIONS[name], a=alpha, b=beta: f(x, a, b))
    return fns


def _clipper(clip: float | None) -> Callable:
    if clip is None:
        return lambda v: v
    return lambda v: np.clip(v, -clip, clip)


def _scan(step: Callable, xw, lens, states: tuple, reverse: bool):
    """Run `step(xw_t, states) -> states` over time, vectorized over the batch.

    Returns (Y of this direction, final states). Each batch entry advances only while
    t < its length; the reverse direction reads every sequence backwards from its own
    last valid step, which the index map `order` (an involution) expresses for both
    reading the inputs and placing the outputs."""
    seq, batch = xw.shape[:2]
    t = np.arange(seq)[:, None]
    active = t < lens
    order = np.where(active, lens - 1 - t, t) if reverse else np.broadcast_to(t, active.shape)
    cols = np.arange(batch)
    xw = xw[order, cols]
    ys = np.zeros((seq,) + states[0].shape, states[0].dtype)
    for i in range(seq):
        new = step(xw[i], states)
        keep = active[i][:, None]
        states = tuple(np.where(keep, n, s) for n, s in zip(new, states))
        ys[i] = np.where(keep, new[0], 0)
    started = (lens > 0)[:, None]
    return ys[order, cols], tuple(np.where(started, s, 0) for s in states)


def _run(cell, x, hidden: int, lens, states: list, attrs: dict):
    """Shared driver: layout, absent operands, directions. `cell(d, xs)` returns direction
    d's input projection of the whole sequence xs [seq, batch, input] and its step."""
    dtype = x.dtype
    work = np.promote_types(dtype, np.float32)  # half precision accumulates in float32
    if attrs["layout"]:
        x = x.swapaxes(0, 1)
        states = [s if s is None else s.swapaxes(0, 1) for s in states]
    seq, batch = x.shape[:2]
    dirs = num_directions(attrs["direction"])
    lens = np.full(batch, seq, np.int64) if lens is None else np.asarray(lens, np.int64)
    if lens.size and (lens.min() < 0 or lens.max() > seq):
        raise ShapeError(
            f"sequence_lens must lie in [0, {seq}] (the sequence length), got {lens.tolist()}"
        )
    zero = np.zeros((dirs, batch, hidden), work)
    states = [zero if s is None else s.astype(work) for s in states]
    ys, finals = [], []
    for d in range(dirs):
        xw, step = cell(d, x.astype(work))
        reverse = attrs["direction"] == "reverse" or d == 1
        y, fin = _scan(step, xw, lens, tuple(s[d] for s in states), reverse)
        ys.append(y)
        finals.append(fin)
    y = np.stack(ys, axis=1)
    outs = [np.stack([f[k] for f in finals]) for k in range(len(states))]
    if attrs["layout"]:
        y = y.transpose(2, 0, 1, 3)
        outs = [s.swapaxes(0, 1) for s in outs]
    return tuple(np.ascontiguousarray(a, dtype=dtype) for a in [y, *outs])


def _biases(b, d: int, gates: int, hidden: int, work):
    """(Wb, Rb) of direction d, zeros when B is absent."""
    if b is None:
        return np.zeros(gates * hidden, work), np.zeros(gates * hidden, work)
    bd = b[d].astype(work)
    return bd[: gates * hidden], bd[gates * hidden :]


def _rnn_ref(x, w, r, b=None, sequence_lens=None, initial_h=None, **attrs):
    fns, clip = _gate_fns("rnn", attrs), _clipper(attrs["clip"])
    hidden = r.shape[2]

    def cell(d, xs):
        wb, rb = _biases(b, d, 1, hidden, xs.dtype)
        rt = r[d].astype(xs.dtype).T

        def step(xw, s):
            return (fns[d](clip(xw + s[0] @ rt)),)

        return xs @ w[d].astype(xs.dtype).T + wb + rb, step

    return _run(cell, x, hidden, sequence_lens, [initial_h], attrs)


def _gru_ref(x, w, r, b=None, sequence_lens=None, initial_h=None, **attrs):
    fns, clip = _gate_fns("gru", attrs), _clipper(attrs["clip"])
    hidden = r.shape[2]

    def cell(d, xs):
        wb, rb = _biases(b, d, 3, hidden, xs.dtype)
        rd = r[d].astype(xs.dtype)
        r_zr, r_h = rd[: 2 * hidden].T, rd[2 * hidden :].T
        f, g = fns[2 * d], fns[2 * d + 1]

        def step(xw, s):
            h = s[0]
            zr = f(clip(xw[:, : 2 * hidden] + h @ r_zr + rb[: 2 * hidden]))
            z, reset = zr[:, :hidden], zr[:, hidden:]
            if attrs["linear_before_reset"]:
                recurrent = reset * (h @ r_h + rb[2 * hidden :])
            else:
                recurrent = (reset * h) @ r_h + rb[2 * hidden :]
            candidate = g(clip(xw[:, 2 * hidden :] + recurrent))
            return ((1 - z) * candidate + z * h,)

        return xs @ w[d].astype(xs.dtype).T + wb, step

    return _run(cell, x, hidden, sequence_lens, [initial_h], attrs)


def _lstm_ref(x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, **attrs):
    fns, clip = _gate_fns("lstm", attrs), _clipper(attrs["clip"])
    hidden = r.shape[2]

    def cell(d, xs):
        wb, rb = _biases(b, d, 4, hidden, xs.dtype)
        rt = r[d].astype(xs.dtype).T
        pd = np.zeros(3 * hidden, xs.dtype) if p is None else p[d].astype(xs.dtype)
        p_i, p_o, p_f = pd[:hidden], pd[hidden : 2 * hidden], pd[2 * hidden :]
        f, g, h = fns[3 * d], fns[3 * d + 1], fns[3 * d + 2]

        def step(xw, s):
            h_prev, c_prev = s
            gates = xw + h_prev @ rt
            gi, go, gf, gc = (gates[:, k * hidden : (k + 1) * hidden] for k in range(4))
            i = f(clip(gi + p_i * c_prev))
            forget = 1 - i if attrs["input_forget"] else f(clip(gf + p_f * c_prev))
            c = forget * c_prev + i * g(clip(gc))
            o = f(clip(go + p_o * c))
            return o * h(c), c

        return xs @ w[d].astype(xs.dtype).T + wb + rb, step

    return _run(cell, x, hidden, sequence_lens, [initial_h, initial_c], attrs)


# ---------------------------------------------------------------------------------------------
# records

_COMMON = {
    "direction": "forward",
    "activations": None,
    "activation_alpha": None,
    "activation_beta": None,
    "clip": None,
    "layout": 0,
}

register(
    OpDef(
        "rnn",
        lambda args, attrs: _infer("rnn", args, attrs, 1),
        _rnn_ref,
        attrs=_COMMON,
        pattern=Pattern.OPAQUE,
        num_args=(3, 6),
        doc="Elman RNN over a sequence: (X, W, R, B?, sequence_lens?, initial_h?) -> (Y, Y_h).",
    )
)

register(
    OpDef(
        "gru",
        lambda args, attrs: _infer("gru", args, attrs, 1),
        _gru_ref,
        attrs={**_COMMON, "linear_before_reset": False},
        pattern=Pattern.OPAQUE,
        num_args=(3, 6),
        doc="GRU over a sequence: (X, W, R, B?, sequence_lens?, initial_h?) -> (Y, Y_h); "
        "`linear_before_reset` applies the reset gate after the recurrent projection.",
    )
)

register(
    OpDef(
        "lstm",
        lambda args, attrs: _infer("lstm", args, attrs, 2),
        _lstm_ref,
        attrs={**_COMMON, "input_forget": False},
        pattern=Pattern.OPAQUE,
        num_args=(3, 8),
        doc="LSTM over a sequence: (X, W, R, B?, sequence_lens?, initial_h?, initial_c?, P?) "
        "-> (Y, Y_h, Y_c); P holds the peephole weights, `input_forget` couples the forget "
        "gate to the input gate (f = 1 - i).",
    )
)


# ---------------------------------------------------------------------------------------------
# lstm_recurrence: the time loop of one plain LSTM direction, one kernel


def _recurrence_infer(args, attrs) -> TupleType:
    xw, rt, h0, c0 = (tensor(a, "lstm_recurrence", f"operand {k}") for k, a in enumerate(args))
    dtype = same_dtype([xw, rt, h0, c0], "lstm_recurrence")
    if dtype != "float32":
        raise ShapeError(f"lstm_recurrence computes in float32, got {dtype}")
    if xw.ndim != 3 or rt.ndim != 2 or h0.ndim != 2 or c0.ndim != 2:
        raise ShapeError("lstm_recurrence takes xw [seq, batch, 4*hidden], rt [hidden, "
                         "4*hidden], h0 and c0 [batch, hidden]")
    hidden = rt.shape[0]
    for t, shape, what in ((rt, (hidden, 4 * hidden) if isinstance(hidden, int) else None, "rt"),
                           (h0, (xw.shape[1], hidden), "h0"), (c0, (xw.shape[1], hidden), "c0")):
        if shape is not None:
            _expect(t, shape, "lstm_recurrence", what)
    state = TensorType((xw.shape[1], hidden), dtype)
    return TupleType((state, state, TensorType((xw.shape[0], xw.shape[1], hidden), dtype)))


def _recurrence_ref(xw, rt, h0, c0):
    hidden = rt.shape[0]
    h, c = h0.astype(np.float32), c0.astype(np.float32)
    ys = np.zeros((xw.shape[0],) + h.shape, np.float32)
    for t in range(xw.shape[0]):
        g = xw[t] + h @ rt
        i, o, f = (_sigmoid(g[:, k * hidden : (k + 1) * hidden]) for k in range(3))
        c = f * c + i * np.tanh(g[:, 3 * hidden :])
        h = o * np.tanh(c)
        ys[t] = h
    return h, c, ys


def _loop(var: E.Var, extent, body: T.Stmt, kind=T.ForKind.SERIAL) -> T.For:
    return T.For(var, E.const(0), E.const(extent) if isinstance(extent, int) else extent,
                 kind, body)


def _recurrence_loops(arg_types, attrs) -> T.PrimFunc | None:
    """The whole time loop as one loop program, written scheduled, since the rules schedule
    the stages of a kernel and this is a loop around several: per step and batch entry, the
    recurrent projection `h @ rt` accumulated over k into a local row of 4*hidden gates (the
    gates in vector lanes, k in order, as the matmul it replaces sums), then, in vector lanes
    over the hidden units, the gates' activations and the new cell and hidden states, which
    overwrite the state outputs the next step reads."""
    xw_t, rt_t, h0_t, c0_t = arg_types
    hidden = rt_t.shape[0]
    if not isinstance(hidden, int):
        return None
    seq, batch = xw_t.shape[0], xw_t.shape[1]
    f32 = "float32"
    xw = T.Buffer("xw", xw_t.shape, f32)
    rt = T.Buffer("rt", rt_t.shape, f32)
    h0 = T.Buffer("h0", h0_t.shape, f32)
    c0 = T.Buffer("c0", c0_t.shape, f32)
    h = T.Buffer("h", h0_t.shape, f32)
    c = T.Buffer("c", c0_t.shape, f32)
    y = T.Buffer("y", (seq, batch, hidden), f32)
    gates = T.Buffer("gates", (4 * hidden,), f32, "local")
    t, b, k, g, g0, j, j0, bi, ji = (E.Var(n) for n in ("t", "b", "k", "g", "g0", "j", "j0",
                                                        "bi", "ji"))
    vec = T.ForKind.VECTORIZED
    copy_in = _loop(bi, batch, _loop(ji, hidden, T.seq(
        T.BufferStore(h, h0[bi, ji], (bi, ji)), T.BufferStore(c, c0[bi, ji], (bi, ji))), vec))
    zero = _loop(g0, 4 * hidden, T.BufferStore(gates, E.const(0.0), (g0,)), vec)
    project = _loop(k, hidden, _loop(g, 4 * hidden, T.BufferStore(
        gates, gates[g] + h[b, k] * rt[k, g], (g,)), vec))

    def gate(n: int) -> E.PrimExpr:
        return xw[t, b, j + n * hidden] + gates[j + n * hidden]

    cell = E.binop("add", E.binop("mul", sigmoid_te(gate(2)), c[b, j]),
                   E.binop("mul", sigmoid_te(gate(0)), E.Call("tanh", (gate(3),), f32)))
    new_h = E.binop("mul", sigmoid_te(gate(1)), E.Call("tanh", (c[b, j],), f32))
    update = _loop(j, hidden, T.seq(
        T.BufferStore(c, cell, (b, j)),
        T.BufferStore(h, new_h, (b, j)),
        T.BufferStore(y, h[b, j], (t, b, j)),
    ), vec)
    steps = _loop(t, seq, _loop(b, batch, T.seq(zero, project, update)))
    root = T.Block("root", (), (), (), T.seq(copy_in, steps), alloc_buffers=(gates,))
    return T.PrimFunc((xw, rt, h0, c0, h, c, y), root)


register(
    OpDef(
        "lstm_recurrence",
        _recurrence_infer,
        _recurrence_ref,
        pattern=Pattern.OPAQUE,
        num_args=(4, 4),
        loop_program=_recurrence_loops,
        doc="The time loop of one direction of a plain LSTM (sigmoid, tanh, tanh; no clip, "
        "peepholes or sequence lengths): (xw [seq, batch, 4*hidden], the input projection "
        "with both biases, rt [hidden, 4*hidden], the recurrent weights transposed, h0, c0 "
        "[batch, hidden]) -> (h, c, Y): the final states and every step's hidden state.",
    )
)
