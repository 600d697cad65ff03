"""Attention ops: attention, the two stages of flex attention (attention_scores,
attention_values), rotary_embedding and linear_attention.

attention and linear_attention are OPAQUE: one record each, so a backend can lower them to
one fused kernel instead of a chain of small ones. The flex-attention stages are
contractions (OUT_FUSABLE); rotary_embedding is INJECTIVE.
"""

from __future__ import annotations

import numpy as np

from tcc.ir.dtype import round_to_bfloat16, to_numpy
from tcc.ir.errors import ShapeError
from tcc.ir.expr import Dim
from tcc.ir.graph import TensorType
from tcc.ir.ops._util import match_dim
from tcc.ir.ops.registry import REQUIRED, OpDef, Pattern, register, same_dtype, tensor, tuple_type


def _heads(t: TensorType, heads, op: str, what: str) -> tuple[Dim, Dim, Dim, Dim]:
    """(batch, heads, seq, head_size) of a 4-D input, or of a 3-D (batch, seq, heads *
    head_size) input split into `heads` heads."""
    if t.ndim == 4:
        return t.shape  # type: ignore[return-value]
    if t.ndim != 3:
        raise ShapeError(f"op {op}: {what} must be 3-D or 4-D, got rank {t.ndim}")
    if not heads:
        raise ShapeError(f"op {op}: 3-D inputs need the number of heads for {what}")
    hidden = t.shape[2]
    if isinstance(hidden, int) and hidden % heads:
        raise ShapeError(f"op {op}: {what} hidden size {hidden} is not divisible by {heads} heads")
    return t.shape[0], heads, t.shape[1], hidden // heads


def _attention_infer(args, attrs):
    op = "attention"
    q, k, v = (tensor(args[i], op, n) for i, n in enumerate(("Q", "K", "V")))
    if not q.ndim == k.ndim == v.ndim:
        raise ShapeError(
            f"op {op}: Q, K and V must have the same rank, got {q.ndim}, {k.ndim}, {v.ndim}"
        )
    b, hq, sq, dh = _heads(q, attrs["q_num_heads"], op, "Q")
    _, hk, skv, dk = _heads(k, attrs["kv_num_heads"], op, "K")
    _, hv, _, dv = _heads(v, attrs["kv_num_heads"], op, "V")
    match_dim(dh, dk, op, "Q and K head sizes")
    match_dim(hk, hv, op, "K and V head counts")
    _gqa_heads(hq, hk, op)
    past = args[4] if len(args) > 4 else None
    total = skv
    if past is not None:
        pk = tensor(past, op, "past_key")
        if pk.ndim != 4:
            raise ShapeError(f"op {op}: past_key must be 4-D, got rank {pk.ndim}")
        total = pk.shape[2] + skv
    if len(args) > 3 and args[3] is not None and tensor(args[3], op, "attn_mask").ndim > 4:
        raise ShapeError(f"op {op}: attn_mask must have rank <= 4, got {args[3].ndim}")
    y = (b, hq, sq, dv) if q.ndim == 4 else (b, sq, hq * dv)
    outs = [
        TensorType(y, q.dtype),
        TensorType((b, hk, total, dh), k.dtype),
        TensorType((b, hk, total, dv), v.dtype),
        TensorType((b, hq, sq, total), q.dtype),
    ]
    return tuple_type(*outs[: attrs["num_outputs"]])


def _split_heads(x: np.ndarray, heads) -> np.ndarray:
    if x.ndim == 4:
        return x
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def _position_bias(allowed: np.ndarray, dtype) -> np.ndarray:
    """Additive bias: 0 where attending is allowed, -inf elsewhere."""
    return np.where(allowed, dtype.type(0), dtype.type(-np.inf))


def _frontier(sq: int, skv: int, offset) -> np.ndarray:
    """(absolute query position) - (key position) for each (query, key), shape (q, kv) or
    (batch, 1, q, kv) for a per-batch offset."""
    rel = np.arange(sq).reshape(-1, 1) - np.arange(skv).reshape(1, -1)
    if np.ndim(offset) == 0:
        return rel + int(offset)
    return rel + np.reshape(offset, (-1, 1, 1, 1))


def _attention_bias(mask, dtype, sq, skv, offset, nonpad, is_causal, windows):
    """The additive bias (broadcastable to (batch, heads, q, kv)) combining the mask, the
    causal frontier, the sliding window and the key padding, in the order ONNX specifies
    (so -inf and the float mask combine exactly as the reference does)."""
    if mask is not None and mask.shape[-1] < skv:
        pad = [(0, 0)] * (mask.ndim - 1) + [(0, skv - mask.shape[-1])]
        mask = np.pad(mask, pad, constant_values=False if mask.dtype == np.bool_ else -np.inf)
    if mask is not None and mask.dtype == np.bool_:
        mask = _position_bias(mask, dtype)
    bias = np.zeros((sq, skv), dtype) if mask is None else mask
    left, right = windows
    if is_causal:
        if left >= 0 or right >= 0:
            bias = np.zeros((sq, skv), dtype) + bias
        bias = bias + _position_bias(_frontier(sq, skv, offset) >= 0, dtype)
    elif mask is not None:
        bias = np.zeros((sq, skv), dtype) + bias
    if left >= 0 or right >= 0:
        diff = _frontier(sq, skv, offset)
        allowed = np.ones(diff.shape, bool)
        if left >= 0:
            allowed &= diff <= left
        if right >= 0:
            allowed &= -diff <= right
        bias = np.zeros((sq, skv), dtype) + bias + _position_bias(allowed, dtype)
    if nonpad is not None:
        keep = np.arange(skv).reshape(1, -1) < np.reshape(nonpad, (-1, 1))
        bias = bias + _position_bias(keep, dtype).astype(bias.dtype).reshape(-1, 1, 1, skv)
    return bias


def _no_rounding(x):
    return x


def _softmax_rows(x: np.ndarray, rnd=_no_rounding) -> np.ndarray:
    """Softmax over the last axis; a row that is all -inf gives zeros, not NaN. `rnd`
    rounds each intermediate (the row sum accumulates left to right, rounding each step)."""
    m = x.max(axis=-1, keepdims=True)
    e = rnd(np.exp(rnd(x - np.where(np.isneginf(m), x.dtype.type(0), m))))
    if rnd is _no_rounding:
        s = e.sum(axis=-1, keepdims=True)
    else:
        s = np.zeros_like(e[..., :1])
        for j in range(e.shape[-1]):
            s = rnd(s + e[..., j : j + 1])
    return rnd(e / np.where(s == 0, x.dtype.type(1), s))


def _attention_ref(
    q, k, v, mask=None, past_key=None, past_value=None, nonpad=None, *, scale, is_causal,
    q_num_heads, kv_num_heads, softcap, qk_matmul_output_mode, softmax_dtype,
    left_window_size, right_window_size, num_outputs, bfloat16,
):  # fmt: skip
    rank3, dt = q.ndim == 3, q.dtype
    # bfloat16 values are held as float32; ONNX computes each step in bfloat16.
    rnd = round_to_bfloat16 if bfloat16 else _no_rounding
    q, k, v = (
        _split_heads(q, q_num_heads),
        _split_heads(k, kv_num_heads),
        _split_heads(v, kv_num_heads),
    )
    if past_key is not None:
        k = np.concatenate([past_key, k], axis=2)
        v = np.concatenate([past_value, v], axis=2)
    present_k, present_v = k, v
    sq, skv = q.shape[2], k.shape[2]
    if past_key is not None:
        offset = past_key.shape[2]
    elif nonpad is not None:
        offset = np.reshape(nonpad, (-1,)) - sq
    else:
        offset = 0
    windows = (left_window_size, right_window_size)
    bias = _attention_bias(mask, dt, sq, skv, offset, nonpad, is_causal, windows)
    # Scale both operands by sqrt(scale), in the input dtype, to keep the product in range.
    s = rnd(dt.type(np.sqrt(scale if scale is not None else 1 / np.sqrt(q.shape[3]))))
    reps = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, reps, axis=1), np.repeat(v, reps, axis=1)
    logits = rnd(np.matmul(rnd(q * s), rnd(np.swapaxes(k, -1, -2) * s)).astype(dt, copy=False))
    if softcap > 0:
        logits = rnd(rnd(np.tanh(rnd(logits / softcap))) * softcap)
    scores = rnd(logits + bias)
    qk = scores if qk_matmul_output_mode == 2 else logits
    if softmax_dtype is not None:
        scores = scores.astype(to_numpy(softmax_dtype))
    probs = _softmax_rows(scores, rnd if softmax_dtype is None else _no_rounding)
    # A query with no attendable key (decided on the bias, not on possibly-NaN logits)
    # gives a zero row.
    probs = np.where(np.isneginf(bias.max(axis=-1, keepdims=True)), probs.dtype.type(0), probs)
    if qk_matmul_output_mode == 3:
        qk = probs
    y = rnd(np.matmul(probs.astype(dt), v).astype(dt, copy=False))
    if rank3:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    outs = (y, present_k, present_v, np.broadcast_to(qk, q.shape[:3] + (skv,)).astype(dt))
    return outs[:num_outputs]


register(
    OpDef(
        "attention",
        _attention_infer,
        _attention_ref,
        attrs={
            "scale": None,
            "is_causal": False,
            "q_num_heads": None,
            "kv_num_heads": None,
            "softcap": 0.0,
            "qk_matmul_output_mode": 0,
            "softmax_dtype": None,
            "left_window_size": -1,
            "right_window_size": -1,
            "num_outputs": 1,
            "bfloat16": False,
        },
        pattern=Pattern.OPAQUE,
        num_args=(3, 7),
        doc="Scaled dot-product attention as ONNX Attention (opset 23-25). Operands: Q, K, "
        "V, attn_mask, past_key, past_value, nonpad_kv_seqlen (the last four optional). "
        "Returns a tuple of the first `num_outputs` of (Y, present_key, present_value, "
        "qk_matmul_output). `bfloat16` marks bfloat16 operands (held as float32): every "
        "step is then rounded to bfloat16, as ONNX specifies.",
    )
)


def _gqa_heads(hq: Dim, hk: Dim, op: str) -> None:
    if isinstance(hq, int) and isinstance(hk, int) and hq % hk:
        raise ShapeError(f"op {op}: {hq} query heads are not a multiple of {hk} key/value heads")


def _scores_infer(args, attrs):
    op = "attention_scores"
    q, k = tensor(args[0], op, "Q"), tensor(args[1], op, "K")
    if q.ndim != 4 or k.ndim != 4:
        raise ShapeError(f"op {op}: Q and K must be 4-D, got ranks {q.ndim} and {k.ndim}")
    same_dtype([q, k], op)
    match_dim(q.shape[3], k.shape[3], op, "Q and K head sizes")
    _gqa_heads(q.shape[1], k.shape[1], op)
    return TensorType(q.shape[:3] + (k.shape[2],), attrs["out_dtype"] or q.dtype)


def _scores_ref(q, k, scale, out_dtype):
    s = np.asarray(
        np.sqrt(np.float32(scale if scale is not None else 1 / np.sqrt(q.shape[3]))), q.dtype
    )
    k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)
    scores = np.matmul(q * s, np.swapaxes(k * s, -1, -2))
    return scores.astype(to_numpy(out_dtype) if out_dtype else q.dtype)


register(
    OpDef(
        "attention_scores",
        _scores_infer,
        _scores_ref,
        attrs={"scale": None, "out_dtype": None},
        pattern=Pattern.OUT_FUSABLE,
        num_args=(2, 2),
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
    _gqa_heads(p.shape[1], v.shape[1], op)
    return TensorType(p.shape[:3] + (v.shape[3],), v.dtype)


def _values_ref(p, v):
    aligned = np.repeat(v, p.shape[1] // v.shape[1], axis=1).astype(p.dtype)
    return np.matmul(p, aligned).astype(v.dtype)


register(
    OpDef(
        "attention_values",
        _values_infer,
        _values_ref,
        pattern=Pattern.OUT_FUSABLE,
        num_args=(2, 2),
        doc="probs @ V in probs' dtype, V's heads repeated to probs' (grouped-query "
        "attention); the result has V's dtype.",
    )
)


def _rotary_infer(args, attrs):
    op = "rotary_embedding"
    x, cos, sin = (
        tensor(args[i], op, n) for i, n in enumerate(("input", "cos_cache", "sin_cache"))
    )
    same_dtype([x, cos, sin], op)
    head = _heads(x, attrs["num_heads"], op, "input")[3]
    rot = attrs["rotary_embedding_dim"] or head
    want_cache = 2 if len(args) > 3 and args[3] is not None else 3
    if cos.ndim != want_cache or sin.ndim != want_cache:
        raise ShapeError(
            f"op {op}: cos/sin caches must be {want_cache}-D, got {cos.ndim}-D and {sin.ndim}-D"
        )
    match_dim(cos.shape[-1], rot // 2, op, "cos_cache last dimension and rotary_embedding_dim / 2")
    return x


def _rotary_ref(x, cos, sin, position_ids=None, *, interleaved, rotary_embedding_dim, num_heads):
    shape = x.shape
    # Work in (batch, seq, heads, head_size).
    x = x.transpose(0, 2, 1, 3) if x.ndim == 4 else x.reshape(shape[0], shape[1], num_heads, -1)
    rot = rotary_embedding_dim or x.shape[3]
    if position_ids is not None:
        cos, sin = cos[position_ids], sin[position_ids]
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    xr = x[..., :rot]
    x1, x2 = (
        (xr[..., 0::2], xr[..., 1::2])
        if interleaved
        else (xr[..., : rot // 2], xr[..., rot // 2 :])
    )
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    rotated = (
        np.stack([real, imag], -1).reshape(xr.shape)
        if interleaved
        else np.concatenate([real, imag], -1)
    )
    out = np.concatenate([rotated, x[..., rot:]], axis=-1)
    return out.reshape(shape) if len(shape) == 3 else out.transpose(0, 2, 1, 3)


register(
    OpDef(
        "rotary_embedding",
        _rotary_infer,
        _rotary_ref,
        attrs={"interleaved": False, "rotary_embedding_dim": 0, "num_heads": 0},
        pattern=Pattern.INJECTIVE,
        num_args=(3, 4),
        doc="Rotary position embedding (RoPE) of a (batch, heads, seq, head) or (batch, seq, "
        "hidden) input; cos/sin caches indexed by position_ids (or already per position).",
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
    b, _, _, dk = _heads(q, hq, op, "query")
    dv = _heads(v, hk, op, "value")[3]
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
        doc="Recurrent linear attention (ONNX LinearAttention): operands query, key, value, "
        "past_state, decay, beta; returns (output, present_state). The state is updated "
        "token by token with the `linear`, `gated`, `delta` or `gated_delta` rule, in float32.",
    )
)
