"""Attention built from smaller ops: the two contraction stages of flex attention
(attention_scores: scaled Q.K^T; attention_values: probs.V), and recurrent linear attention
(ONNX LinearAttention).

The flex-attention stages are contractions (OUT_FUSABLE), with grouped-query heads (K/V
heads repeated to Q's). linear_attention is OPAQUE: one record, so a backend can lower it
to one fused kernel. Every op has a loop program that computes exactly what its reference
does; what has none: bfloat16 operands, and linear_attention over a symbolic or long
sequence (its recurrence is unrolled token by token).
"""

from __future__ import annotations

import numpy as np

from tcc.ir import te
from tcc.ir.dtype import is_float, to_numpy
from tcc.ir.errors import ShapeError
from tcc.ir.expr import Dim
from tcc.ir.graph import TensorType
from tcc.ir.ops._util import (
    accumulate_dtype,
    attention_heads,
    check_gqa_heads,
    float_operands,
    kv_group,
    match_dim,
    no_loop,
    sqrt_scale,
)
from tcc.ir.ops.registry import REQUIRED, OpDef, Pattern, register, same_dtype, tensor, tuple_type


def _scores_infer(args, attrs):
    op = "attention_scores"
    q, k = tensor(args[0], op, "Q"), tensor(args[1], op, "K")
    if q.ndim != 4 or k.ndim != 4:
        raise ShapeError(f"op {op}: Q and K must be 4-D, got ranks {q.ndim} and {k.ndim}")
    same_dtype([q, k], op)
    match_dim(q.shape[3], k.shape[3], op, "Q and K head sizes")
    check_gqa_heads(q.shape[1], k.shape[1], op)
    return TensorType(q.shape[:3] + (k.shape[2],), attrs["out_dtype"] or q.dtype)


def _scores_ref(q, k, scale, out_dtype):
    s = np.asarray(
        np.sqrt(np.float32(scale if scale is not None else 1 / np.sqrt(q.shape[3]))), q.dtype
    )
    k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)
    scores = np.matmul(q * s, np.swapaxes(k * s, -1, -2))
    return scores.astype(to_numpy(out_dtype) if out_dtype else q.dtype)


def _scores_compute(q, k, *, scale, out_dtype):
    """The scaled Q.K^T reduction (half floats accumulate in float32), rounded to Q's dtype,
    then cast to `out_dtype`."""
    dt = float_operands("attention_scores", q, k)
    s = sqrt_scale(scale, q.shape[3], dt, "float32")
    acc, out = accumulate_dtype(dt), out_dtype or dt
    kv_head = kv_group(q.shape[1], k.shape[1])
    r = te.reduce_axis(q.shape[3], "d")
    name = "attention_scores" if acc == dt == out else "attention_scores_acc"
    scores = te.compute(
        q.shape[:3] + (k.shape[2],),
        lambda n, h, i, j: te.sum(
            te.cast(q[n, h, i, r] * s, acc) * te.cast(k[n, kv_head(h), j, r] * s, acc), axis=[r]
        ),
        name,
    )
    if acc == dt == out:
        return scores
    return te.compute(
        scores.shape, lambda *i: te.cast(te.cast(scores[i], dt), out), "attention_scores"
    )


register(
    OpDef(
        "attention_scores",
        _scores_infer,
        _scores_ref,
        attrs={"scale": None, "out_dtype": None},
        pattern=Pattern.OUT_FUSABLE,
        num_args=(2, 2),
        compute=_scores_compute,
        doc="Q @ K^T * scale (default 1/sqrt(head_size)) for (batch, heads, seq, head) "
        "operands, each scaled by sqrt(scale) in Q's dtype; K's heads are repeated to Q's "
        "(grouped-query attention). The result is cast to `out_dtype` (default Q's).",
    )
)


def _values_infer(args, attrs):
    op = "attention_values"
    p, v = tensor(args[0], op, "probs"), tensor(args[1], op, "V")
    if p.ndim != 4 or v.ndim != 4:
        raise ShapeError(f"op {op}: probs and V must be 4-D, got ranks {p.ndim} and {v.ndim}")
    match_dim(p.shape[3], v.shape[2], op, "probs keys and V sequence length")
    check_gqa_heads(p.shape[1], v.shape[1], op)
    return TensorType(p.shape[:3] + (v.shape[3],), v.dtype)


def _values_ref(p, v):
    aligned = np.repeat(v, p.shape[1] // v.shape[1], axis=1).astype(p.dtype)
    return np.matmul(p, aligned).astype(v.dtype)


def _values_compute(p, v):
    """probs.V reduction in probs' dtype (half floats accumulate in float32), rounded to
    probs' dtype, then cast to V's."""
    if not is_float(p.dtype) or not is_float(v.dtype) or "bfloat16" in (p.dtype, v.dtype):
        raise no_loop("attention_values", f"operands of dtypes {p.dtype} and {v.dtype}")
    pd, acc = p.dtype, accumulate_dtype(p.dtype)
    kv_head = kv_group(p.shape[1], v.shape[1])
    r = te.reduce_axis(p.shape[3], "j")
    same = acc == pd == v.dtype
    out = te.compute(
        p.shape[:3] + (v.shape[3],),
        lambda n, h, i, d: te.sum(
            te.cast(p[n, h, i, r], acc) * te.cast(te.cast(v[n, kv_head(h), r, d], pd), acc),
            axis=[r],
        ),
        "attention_values" if same else "attention_values_acc",
    )
    if same:
        return out
    return te.compute(
        out.shape, lambda *i: te.cast(te.cast(out[i], pd), v.dtype), "attention_values"
    )


register(
    OpDef(
        "attention_values",
        _values_infer,
        _values_ref,
        pattern=Pattern.OUT_FUSABLE,
        num_args=(2, 2),
        compute=_values_compute,
        doc="probs @ V in probs' dtype, V's heads repeated to probs' (grouped-query "
        "attention); the result has V's dtype.",
    )
)


def _linear_attention_infer(args, attrs):
    op = "linear_attention"
    q, k, v = (tensor(args[i], op, n) for i, n in enumerate(("query", "key", "value")))
    if not q.ndim == k.ndim == v.ndim == 3:
        raise ShapeError(f"op {op}: query, key and value must be 3-D")
    hq, hk = attrs["q_num_heads"], attrs["kv_num_heads"]
    if hq <= 0 or hk <= 0 or hq % hk:
        raise ShapeError(
            f"op {op}: q_num_heads {hq} must be a positive multiple of kv_num_heads {hk}"
        )
    b, _, _, dk = attention_heads(q, hq, op, "query")
    dv = attention_heads(v, hk, op, "value")[3]
    gated, delta = attrs["update_rule"] in ("gated", "gated_delta"), "delta" in attrs["update_rule"]
    if (args[4] is not None if len(args) > 4 else False) != gated:
        raise ShapeError(
            f"op {op}: update rule {attrs['update_rule']!r} {'needs' if gated else 'forbids'} decay"
        )
    if (args[5] is not None if len(args) > 5 else False) != delta:
        raise ShapeError(
            f"op {op}: update rule {attrs['update_rule']!r} {'needs' if delta else 'forbids'} beta"
        )
    state_dtype = tensor(args[3], op).dtype if len(args) > 3 and args[3] is not None else q.dtype
    return tuple_type(
        TensorType((b, q.shape[1], hq * dv), q.dtype), TensorType((b, hk, dk, dv), state_dtype)
    )


def _per_head(x: np.ndarray, heads: int) -> np.ndarray:
    """(batch, T, heads * d) -> (batch, heads, T, d) in float32."""
    b, t, _ = x.shape
    return x.reshape(b, t, heads, -1).transpose(0, 2, 1, 3).astype(np.float32)


def _linear_attention_ref(
    q, k, v, past=None, decay=None, beta=None, *, q_num_heads, kv_num_heads, scale, update_rule
):
    b, t, _ = q.shape
    q4, k4, v4 = (
        _per_head(x, h) for x, h in ((q, q_num_heads), (k, kv_num_heads), (v, kv_num_heads))
    )
    dk, dv = q4.shape[3], v4.shape[3]
    g = None if decay is None else _per_head(decay, kv_num_heads)  # per key dim or per head
    beta4 = None if beta is None else _per_head(beta, beta.shape[2])  # per head or shared
    state = (
        np.zeros((b, kv_num_heads, dk, dv), np.float32) if past is None else past.astype(np.float32)
    )
    scale = scale or 1.0 / np.sqrt(dk)
    out = np.zeros((b, q_num_heads, t, dv), np.float32)
    group = q_num_heads // kv_num_heads
    for i in range(t):
        k_t, v_t = k4[:, :, i], v4[:, :, i]
        if g is not None:
            state = state * np.exp(g[:, :, i])[..., None]
        if beta4 is not None:
            v_t = beta4[:, :, i] * (v_t - np.einsum("bhdm,bhd->bhm", state, k_t))
        state = state + k_t[..., :, None] * v_t[..., None, :]
        out[:, :, i] = scale * np.einsum(
            "bhd,bhdm->bhm", q4[:, :, i], np.repeat(state, group, axis=1)
        )
    y = out.transpose(0, 2, 1, 3).reshape(b, t, q_num_heads * dv).astype(q.dtype)
    return y, state.astype(q.dtype if past is None else past.dtype)


# Time steps a linear_attention loop program unrolls at most: each step is two or three
# stages (the recurrence has no closed form under the delta rules).
MAX_UNROLLED_STEPS = 64


def _per_head_f32(x: te.Tensor, size: Dim):
    """(batch, head, t, d) -> element of a (batch, T, heads * size) input, in float32."""
    return lambda n, h, t, d: te.cast(x[n, t, h * size + d], "float32")


def _linear_step(t: int, prev, ops: dict):
    """One token of the recurrence: the new state (a stage) from the state before, and the
    token's unscaled output q.state (a stage)."""
    gate, beta_at = ops["gate"], ops["beta"]
    k, v, q = ops["k"], ops["v"], ops["q"]
    nb, hk, dk, dv = ops["state_shape"]

    def decayed(n, h, d, m):
        return prev(n, h, d, m) * gate(n, h, t, d) if gate is not None else prev(n, h, d, m)

    recalled = None
    if beta_at is not None:
        r = te.reduce_axis(dk, "d")
        recalled = te.compute(
            (nb, hk, dv),
            lambda n, h, m: te.sum(decayed(n, h, r, m) * k(n, h, t, r), axis=[r]),
            f"linear_attention_recall{t}",
        )

    def value(n, h, m):
        if recalled is None:
            return v(n, h, t, m)
        return beta_at(n, h, t) * (v(n, h, t, m) - recalled[n, h, m])

    new = te.compute(
        ops["state_shape"],
        lambda n, h, d, m: decayed(n, h, d, m) + k(n, h, t, d) * value(n, h, m),
        f"linear_attention_state{t}",
    )
    r = te.reduce_axis(dk, "d")
    group = ops["group"]
    out = te.compute(
        (nb, ops["q_heads"], dv),
        lambda n, h, m: te.sum(q(n, h, t, r) * new[n, h // group, r, m], axis=[r]),
        f"linear_attention_out{t}",
    )
    return new, out


def _linear_attention_compute(
    q, k, v, past=None, decay=None, beta=None, *, q_num_heads, kv_num_heads, scale, update_rule
):
    """The recurrence unrolled over the (static) sequence length, in float32 as the
    reference runs it: per token, for the delta rules, the state.k reduction that corrects
    the value; the updated state (decayed by exp(decay) for the gated rules, plus k v^T);
    the output reduction q.state. The output stage picks each token's step."""
    op = "linear_attention"
    float_operands(op, q, k, v, decay, beta)
    if past is not None and (not is_float(past.dtype) or past.dtype == "bfloat16"):
        raise no_loop(op, f"a past_state of dtype {past.dtype}")
    steps = q.shape[1]
    if not isinstance(steps, int) or not 0 < steps <= MAX_UNROLLED_STEPS:
        raise no_loop(op, f"a sequence length of {steps} (unrolled: at most {MAX_UNROLLED_STEPS})")
    nb, f32 = q.shape[0], "float32"
    dk, dv = q.shape[2] // q_num_heads, v.shape[2] // kv_num_heads
    ops = {
        "q": _per_head_f32(q, dk), "k": _per_head_f32(k, dk), "v": _per_head_f32(v, dv),
        "gate": None, "beta": None, "group": q_num_heads // kv_num_heads,
        "q_heads": q_num_heads, "state_shape": (nb, kv_num_heads, dk, dv),
    }  # fmt: skip
    if decay is not None:
        per_head = isinstance(decay.shape[2], int) and decay.shape[2] == kv_num_heads

        def gate(n, h, t, d):
            return te.exp(te.cast(decay[n, t, h if per_head else h * dk + d], f32))

        ops["gate"] = gate
    if beta is not None:
        shared = isinstance(beta.shape[2], int) and beta.shape[2] == 1

        def beta_at(n, h, t):
            return te.cast(beta[n, t, 0 if shared else h], f32)

        ops["beta"] = beta_at

    def state(n, h, d, m):
        return te.const(0, f32) if past is None else te.cast(past[n, h, d, m], f32)

    outs = []
    for t in range(steps):
        new, out = _linear_step(t, state, ops)
        outs.append(out)
        state = _reader(new)

    def scaled(x):
        if scale:  # a Python float: rounded to float32 first, as numpy does
            return x * te.const(float(np.float32(scale)), f32)
        # the default is a float64 scalar: numpy multiplies in float64
        if isinstance(dk, int):
            inv = te.const(1.0 / np.sqrt(dk), "float64")
        else:
            inv = te.const(1.0, "float64") / te.sqrt(te.cast(dk, "float64"))
        return te.cast(te.cast(x, "float64") * inv, f32)

    def token(n, t, c):
        h, m = c // dv, c % dv
        val = outs[-1][n, h, m]
        for i in range(steps - 2, -1, -1):
            val = te.if_then_else(te.equal(t, i), outs[i][n, h, m], val)
        return te.cast(scaled(val), q.dtype)

    y = te.compute((nb, steps, q_num_heads * dv), token, "linear_attention")
    state_dtype = q.dtype if past is None else past.dtype
    final = te.compute(
        ops["state_shape"], lambda *i: te.cast(state(*i), state_dtype), "linear_attention_state"
    )
    return [y, final]


def _reader(t: te.Tensor):
    return lambda *i: t[i]


register(
    OpDef(
        "linear_attention",
        _linear_attention_infer,
        _linear_attention_ref,
        attrs={
            "q_num_heads": REQUIRED,
            "kv_num_heads": REQUIRED,
            "scale": 0.0,
            "update_rule": "gated_delta",
        },
        pattern=Pattern.OPAQUE,
        num_args=(3, 6),
        compute=_linear_attention_compute,
        doc="Recurrent linear attention (ONNX LinearAttention): operands query, key, value, "
        "past_state, decay, beta; returns (output, present_state). The state is updated "
        "token by token with the `linear`, `gated`, `delta` or `gated_delta` rule, in float32.",
    )
)
