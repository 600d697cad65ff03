"""lower-recurrent: rnn, gru and lstm become a loop over time around their cell, as graph ops.

May change: in every graph function, a binding `out = lstm(X, W, R, ...)` (or rnn, gru)
becomes graph ops computing the same tuple (Y, Y_h[, Y_c]): per direction, the input
projection of the whole sequence as one matmul, then, for an LSTM in float32 with the
default gate functions and no clip, peepholes, coupled gates or sequence lengths, one
`lstm_recurrence` call, whose loop program runs every step in one kernel; for the others,
a `Scan` over time whose body (a new graph function `<function>_<binding>_<op><direction>`)
runs one cell step: the recurrent matmul, the gates, their activations and clip, and, with
sequence lengths, keeping each batch entry's state past its length and writing zeros there.
The reverse direction reads the sequence backwards from each entry's last valid step
(`reverse_sequence`, which also puts the outputs back in place), layout 1 is transposed in
and out, and half precision is computed in float32, as the numpy references do. The cell's ops then legalize and fuse like
any others, so the compiled loop calls a few fused kernels per step, and the VM's work
around them costs more than they do (a two-layer LSTM export at sequence 128: 0.70 ms
through the Scan, 0.105 ms through `lstm_recurrence`, C runtime, 2 threads).

Preserves every function's parameters, returned values and numerics up to the rounding of
the activations' loop programs against numpy's (the references' sigmoid, tanh and matmul
are computed the same way in float32 but not bit for bit). The input module is not changed.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tcc.ir import graph as G
from tcc.ir.builder import FunctionBuilder
from tcc.ir.dtype import to_numpy
from tcc.ir.module import IRModule
from tcc.ir.ops.rnn import (
    ACTIVATION_PARAMS,
    DEFAULT_ACTIVATIONS,
    GATES,
    num_directions,
)
from tcc.lower.passes import register_pass

RECURRENT = ("rnn", "gru", "lstm")
_OPERANDS = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")


def _span(emit, v, start, stop, axis: int):
    """v[start:stop] along `axis`, emitted with `emit`."""
    return emit("strided_slice", v, begin=[start], end=[stop], axes=[axis], strides=[1])


class _Lowering:
    """Emits the replacement of one recurrent call into `bb` (the rewritten function)."""

    def __init__(self, mod: IRModule, fn_name: str, bb: FunctionBuilder, binding: G.Binding):
        self.mod, self.bb, self.b = mod, bb, binding
        call = binding.value
        self.op, self.attrs = call.op, call.attrs
        self.args = dict(zip(_OPERANDS, list(call.args) + [None] * 8))
        self.prefix = f"{fn_name}_{binding.var.name}"
        out = binding.var.type
        assert isinstance(out, G.TupleType)
        self.dtype = out.fields[0].dtype
        self.work = "float32" if self.dtype in ("float16", "bfloat16") else self.dtype

    # -- helpers on the builder ------------------------------------------------------------

    def emit(self, op, *args, **attrs):
        return self.bb.emit(op, *args, name=f"{self.b.var.name}_{op}", **attrs)

    def const(self, value, dtype=None):
        dtype = dtype or self.work
        name = self.mod.unique_constant_name(f"{self.b.var.name}_{self.op}_const")
        return self.mod.add_constant(name, np.array(value, to_numpy(dtype)))

    def in_work(self, v):
        t = G.type_of(v)
        return v if t.dtype == self.work else self.emit("cast", v, dtype=self.work)

    def pick(self, v, d: int):
        """Direction d's slice of a tensor stacked along axis 0."""
        s = _span(self.emit, v, d, d + 1, 0)
        return self.emit("squeeze", s, axes=[0])

    # -- the op ----------------------------------------------------------------------------

    def lower(self) -> G.Expr:
        a, layout = self.args, self.attrs["layout"]
        x = self.in_work(a["X"])
        states = [a["initial_h"]] + ([a["initial_c"]] if self.op == "lstm" else [])
        states = [None if s is None else self.in_work(s) for s in states]
        if layout:
            x = self.emit("transpose", x, axes=[1, 0, 2])
            states = [None if s is None else self.emit("transpose", s, axes=[1, 0, 2])
                      for s in states]
        xt = G.type_of(x)
        seq, batch = xt.shape[0], xt.shape[1]
        hidden = G.type_of(a["R"]).shape[2]
        lens = a["sequence_lens"]
        if lens is not None and G.type_of(lens).dtype != "int64":
            lens = self.emit("cast", lens, dtype="int64")
        steps = self.emit("arange", stop=seq, dtype="int64")
        ys, finals = [], [[] for _ in states]
        for d in range(num_directions(self.attrs["direction"])):
            reverse = self.attrs["direction"] == "reverse" or d == 1
            y, fin = self.direction(d, x, seq, batch, hidden, lens, steps, states, reverse)
            ys.append(self.emit("expand_dims", y, axes=[1]))
            for k, f in enumerate(fin):
                finals[k].append(self.emit("expand_dims", f, axes=[0]))
        y = ys[0] if len(ys) == 1 else self.emit("concat", *ys, axis=1)
        outs = [f[0] if len(f) == 1 else self.emit("concat", *f, axis=0) for f in finals]
        if layout:
            y = self.emit("transpose", y, axes=[2, 0, 1, 3])
            outs = [self.emit("transpose", s, axes=[1, 0, 2]) for s in outs]
        if self.work != self.dtype:
            y = self.emit("cast", y, dtype=self.dtype)
            outs = [self.emit("cast", s, dtype=self.dtype) for s in outs]
        return G.Tuple((y, *outs))

    def direction(self, d, x, seq, batch, hidden, lens, steps, states, reverse):
        """Direction d over the whole sequence: (Y [seq, batch, hidden], final states)."""
        a, gates = self.args, GATES[self.op]
        w = self.in_work(self.pick(a["W"], d))
        r = self.in_work(self.pick(a["R"], d))
        xw = self.emit("matmul", x, self.emit("transpose", w, axes=[1, 0]))
        rb = None
        if a["B"] is not None:
            b = self.in_work(self.pick(a["B"], d))
            wb = _span(self.emit, b, 0, gates * hidden, 0)
            rb = _span(self.emit, b, gates * hidden, 2 * gates * hidden, 0)
            if self.op == "gru":  # its recurrent bias is applied inside the cell
                xw = self.emit("add", xw, wb)
            else:
                xw = self.emit("add", xw, self.emit("add", wb, rb))
                rb = None
        full = None
        if reverse:
            full = lens if lens is not None else self.emit(
                "broadcast_to", self.emit("shape_to_tensor", dims=[seq], scalar=True), shape=[batch])
            xw = self.emit("reverse_sequence", xw, full, time_axis=0, batch_axis=1)
        zero = self.const(0.0)
        init = [s if s is None else self.pick(s, d) for s in states]
        init = [self.emit("broadcast_to", zero, shape=[batch, hidden]) if s is None else s
                for s in init]
        if self._plain_lstm(d, lens):
            rt = self.emit("transpose", r, axes=[1, 0])
            result = self.emit("lstm_recurrence", xw, rt, *init)
            n = len(init)
            fields = [self.bb.get_item(result, k, name=f"{self.b.var.name}_out")
                      for k in range(n + 1)]
            finals, y = fields[:n], fields[n]
            if reverse:
                y = self.emit("reverse_sequence", y, full, time_axis=0, batch_axis=1)
            return y, finals
        captured = [self.emit("transpose", r, axes=[1, 0])]
        captured += [rb] if rb is not None else []
        if self.op == "lstm" and a["P"] is not None:
            captured.append(self.in_work(self.pick(a["P"], d)))
        captured += [lens] if lens is not None else []
        body = self.body(d, init, G.type_of(xw), captured, rb is not None,
                         self.op == "lstm" and a["P"] is not None, lens is not None)
        scan = G.Scan(body, 2, (*init, xw, steps), tuple(captured), (0, 0), (0, 0), (0,), (0,))
        rtype = G.infer_control_flow(scan, self.mod.functions)
        result = self.bb.bind(scan, rtype, f"{self.b.var.name}_scan{d}")
        n = len(init)
        fields = [self.bb.get_item(result, k, name=f"{self.b.var.name}_out") for k in range(n + 1)]
        finals, y = fields[:n], fields[n]
        if reverse:
            y = self.emit("reverse_sequence", y, full, time_axis=0, batch_axis=1)
        if lens is not None:  # an empty sequence leaves zeros, as onnxruntime does
            started = self.emit("expand_dims", self.emit("greater", lens, self.const(0, "int64")),
                                axes=[1])
            finals = [self.emit("where", started, s, self.const(0.0)) for s in finals]
        return y, finals

    def _plain_lstm(self, d: int, lens) -> bool:
        """Whether direction d is an LSTM `lstm_recurrence` runs: float32, the default gate
        functions, no clip, peepholes, coupled gates or sequence lengths, and a static
        hidden size."""
        a = self.args
        if self.op != "lstm" or self.work != "float32" or lens is not None:
            return False
        if a["P"] is not None or self.attrs["input_forget"] or self.attrs["clip"] is not None:
            return False
        if not isinstance(G.type_of(a["R"]).shape[2], int):
            return False
        names = self.attrs["activations"]
        if names is not None and tuple(names[3 * d : 3 * d + 3]) != DEFAULT_ACTIVATIONS["lstm"]:
            return False
        return True

    def body(self, d, init, xw_t, captured, has_rb, has_p, has_lens) -> str:
        """The graph function of one cell step of direction d; returns its name."""
        bb = FunctionBuilder()
        states = [bb.param(f"state{k}", G.type_of(s)) for k, s in enumerate(init)]
        step = bb.param("xw", G.TensorType(xw_t.shape[1:], xw_t.dtype))
        t = bb.param("t", G.TensorType((), "int64"))
        cap = [bb.param(f"captured{k}", G.type_of(c)) for k, c in enumerate(captured)]
        rt, rest = cap[0], cap[1:]
        rb = rest.pop(0) if has_rb else None
        p = rest.pop(0) if has_p else None
        lens = rest.pop(0) if has_lens else None
        cell = _Cell(self, bb, d)
        new = cell.step(states, step, rt, rb, p)
        if lens is not None:
            active = bb.emit("expand_dims", bb.emit("less", t, lens), axes=[1])
            zero = self.const(0.0)
            y = bb.emit("where", active, new[0], zero)
            new = [bb.emit("where", active, n, s) for n, s in zip(new, states)]
        else:
            y = bb.emit("identity", new[0])
        name = self._fresh(f"{self.prefix}_{self.op}{d}")
        self.mod.functions[name] = bb.finish([*new, y], [f"state{k}" for k in range(len(new))] + ["y"])
        return name

    def _fresh(self, hint: str) -> str:
        name, k = hint, 1
        while name in self.mod.functions:
            name, k = f"{hint}_{k}", k + 1
        return name


class _Cell:
    """One step of a direction's cell, emitted into the body's builder."""

    def __init__(self, low: _Lowering, bb: FunctionBuilder, d: int):
        self.low, self.bb, self.op, self.attrs = low, bb, low.op, low.attrs
        names = self.attrs["activations"] or list(DEFAULT_ACTIVATIONS[self.op]) * num_directions(
            self.attrs["direction"])
        per_dir = len(DEFAULT_ACTIVATIONS[self.op])
        self.fns = []
        for i in range(d * per_dir, (d + 1) * per_dir):
            alpha, beta = ACTIVATION_PARAMS.get(names[i], (None, None))
            if self.attrs["activation_alpha"] is not None:
                alpha = self.attrs["activation_alpha"][i]
            if self.attrs["activation_beta"] is not None:
                beta = self.attrs["activation_beta"][i]
            self.fns.append((names[i], alpha, beta))

    def emit(self, op, *args, **attrs):
        return self.bb.emit(op, *args, name=op, **attrs)

    def act(self, k: int, v):
        name, alpha, beta = self.fns[k]
        c = self.low.const
        if name in ("Relu", "Tanh", "Sigmoid", "Softsign", "Softplus"):
            return self.emit(name.lower(), v)
        if name == "LeakyRelu":
            return self.emit("leaky_relu", v, alpha=float(alpha))
        if name == "ThresholdedRelu":
            return self.emit("thresholded_relu", v, alpha=float(alpha))
        if name == "HardSigmoid":
            return self.emit("hard_sigmoid", v, alpha=float(alpha), beta=float(beta))
        if name == "Elu":
            return self.emit("elu", v, alpha=float(alpha))
        if name == "ScaledTanh":
            return self.emit("mul", c(alpha), self.emit("tanh", self.emit("mul", c(beta), v)))
        # Affine
        return self.emit("add", self.emit("mul", c(alpha), v), c(beta))

    def clip(self, v):
        limit = self.attrs["clip"]
        if limit is None:
            return v
        return self.emit("clip", v, self.low.const(-limit), self.low.const(limit))

    def cols(self, v, start, stop):
        return _span(self.emit, v, start, stop, 1)

    def gate(self, v, k: int, hidden):
        return self.cols(v, k * hidden, (k + 1) * hidden)

    def step(self, states, xw, rt, rb, p):
        hidden = G.type_of(states[0]).shape[1]
        h = states[0]
        if self.op == "rnn":
            pre = self.emit("add", xw, self.emit("matmul", h, rt))
            return [self.act(0, self.clip(pre))]
        if self.op == "gru":
            return [self.gru(h, xw, rt, rb, hidden)]
        c_prev = states[1]
        g = self.emit("add", xw, self.emit("matmul", h, rt))
        gi, go, gf, gc = (self.gate(g, k, hidden) for k in range(4))
        pi = po = pf = None
        if p is not None:
            pi, po, pf = (_span(self.emit, p, k * hidden, (k + 1) * hidden, 0) for k in range(3))
        i = self.act(0, self.clip(gi if pi is None else self.emit("add", gi, self.emit("mul", pi, c_prev))))
        if self.attrs["input_forget"]:
            forget = self.emit("sub", self.low.const(1.0), i)
        else:
            pre = gf if pf is None else self.emit("add", gf, self.emit("mul", pf, c_prev))
            forget = self.act(0, self.clip(pre))
        c = self.emit("add", self.emit("mul", forget, c_prev),
                      self.emit("mul", i, self.act(1, self.clip(gc))))
        o = self.act(0, self.clip(go if po is None else self.emit("add", go, self.emit("mul", po, c))))
        return [self.emit("mul", o, self.act(2, c)), c]

    def gru(self, h, xw, rt, rb, hidden):
        r_zr, r_h = self.cols(rt, 0, 2 * hidden), self.cols(rt, 2 * hidden, 3 * hidden)
        zr = self.emit("add", self.cols(xw, 0, 2 * hidden), self.emit("matmul", h, r_zr))
        rb_zr = rb_h = None
        if rb is not None:
            rb_zr = _span(self.emit, rb, 0, 2 * hidden, 0)
            rb_h = _span(self.emit, rb, 2 * hidden, 3 * hidden, 0)
            zr = self.emit("add", zr, rb_zr)
        zr = self.act(0, self.clip(zr))
        z, reset = self.gate(zr, 0, hidden), self.gate(zr, 1, hidden)
        if self.attrs["linear_before_reset"]:
            rec = self.emit("matmul", h, r_h)
            rec = rec if rb_h is None else self.emit("add", rec, rb_h)
            recurrent = self.emit("mul", reset, rec)
        else:
            recurrent = self.emit("matmul", self.emit("mul", reset, h), r_h)
            recurrent = recurrent if rb_h is None else self.emit("add", recurrent, rb_h)
        cand = self.act(1, self.clip(self.emit("add", self.cols(xw, 2 * hidden, 3 * hidden),
                                               recurrent)))
        keep = self.emit("sub", self.low.const(1.0), z)
        return self.emit("add", self.emit("mul", keep, cand), self.emit("mul", z, h))



def lower_function(mod: IRModule, name: str, fn: G.Function) -> G.Function:
    if not any(isinstance(b.value, G.Call) and b.value.op in RECURRENT for b in fn.bindings):
        return fn
    bb = FunctionBuilder()
    bb.params, bb.input_names = list(fn.params), list(fn.input_names)
    for b in fn.bindings:
        if isinstance(b.value, G.Call) and b.value.op in RECURRENT:
            value = _Lowering(mod, name, bb, b).lower()
            bb.bindings.append(G.Binding(b.var, value))
        else:
            bb.bindings.append(b)
    return dataclasses.replace(fn, bindings=tuple(bb.bindings))


@register_pass("lower-recurrent")
def lower_recurrent(mod: IRModule) -> IRModule:
    out = IRModule(dict(mod.functions), dict(mod.const_types), dict(mod.const_values))
    for name, f in mod.graph_functions.items():
        out.functions[name] = lower_function(out, name, f)
    return out
