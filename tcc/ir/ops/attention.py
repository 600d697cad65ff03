"""The ONNX `attention` op (scaled dot-product attention, opset 23-25): record, inference,
numpy reference and loop program.

attention is OPAQUE: one record, so a backend can lower it to one fused kernel instead of a
chain of small ones. Its loop program computes exactly what the reference does (dtypes,
rounding steps, masking order). What has none: bfloat16 operands, and the `bfloat16`
attribute (the reference rounds every step, the softmax sum included, to bfloat16, which a
te reduction cannot state).
"""

from __future__ import annotations

import numpy as np

from tcc.ir import te
from tcc.ir.dtype import from_numpy, is_float, round_to_bfloat16, to_numpy
from tcc.ir.errors import ShapeError
from tcc.ir.expr import prove_equal
from tcc.ir.graph import TensorType
from tcc.ir.ops._util import (
    accumulate_dtype,
    attention_heads,
    broadcast_axis_index,
    check_gqa_heads,
    float_operands,
    kv_group,
    match_dim,
    no_loop,
    sqrt_scale,
    te_type,
)
from tcc.ir.ops.reduce import accumulator
from tcc.ir.ops.registry import OpDef, Pattern, register, tensor, tuple_type


def _attention_infer(args, attrs):
    op = "attention"
    q, k, v = (tensor(args[i], op, n) for i, n in enumerate(("Q", "K", "V")))
    if not q.ndim == k.ndim == v.ndim:
        raise ShapeError(
            f"op {op}: Q, K and V must have the same rank, got {q.ndim}, {k.ndim}, {v.ndim}"
        )
    b, hq, sq, dh = attention_heads(q, attrs["q_num_heads"], op, "Q")
    _, hk, skv, dk = attention_heads(k, attrs["kv_num_heads"], op, "K")
    _, hv, _, dv = attention_heads(v, attrs["kv_num_heads"], op, "V")
    match_dim(dh, dk, op, "Q and K head sizes")
    match_dim(hk, hv, op, "K and V head counts")
    check_gqa_heads(hq, hk, op)
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


# ---------------------------------------------------------------------------------------------
# attention's loop program
#
# Stages, all over (batch, q_heads, q_seq, kv_seq) unless said: the scaled Q.K^T reduction
# (half floats accumulate in float32, as numpy's matmul does), the logits (rounded to the input
# dtype, soft-capped), the scores (logits + the additive bias of mask, causal frontier, window
# and key padding, each added as the reference adds it), the row max and exp-sum reductions
# over the keys, the probabilities (zero on rows the bias masks entirely), then probs.V.
# Grouped-query heads read K/V head h // (q_heads / kv_heads); past keys and values are read
# in place of a concatenation, which only the present_key/present_value outputs materialize.


def _head_view(t: te.Tensor, heads):
    """(batch, head, seq, d) -> the element of a 4-D input, or of a 3-D (batch, seq, heads *
    head_size) one."""
    if t.ndim == 4:
        return lambda n, h, s, d: t[n, h, s, d]
    size = attention_heads(te_type(t), heads, "attention", t.name)[3]
    return lambda n, h, s, d: t[n, s, h * size + d]


def _with_past(cur, past: te.Tensor | None):
    """Element (n, h, t, d) of concat([past, cur], axis=2), read without concatenating."""
    if past is None:
        return cur
    plen = past.shape[2]
    return lambda n, h, t, d: te.if_then_else(
        te.less(t, plen), past[n, h, t, d], cur(n, h, t - plen, d)
    )


def _broadcast_load(mask: te.Tensor, idx) -> tuple:
    """The index of `mask` (right-aligned against (batch, heads, q, kv)) at `idx`: 0 where a
    leading dimension is 1, a select where a symbolic one may be 1 or the full size. The key
    axis is never broadcast: a shorter mask is padded (the caller tests the bound)."""
    full = idx[4 - mask.ndim :]
    out = []
    for axis, (d, i) in enumerate(zip(mask.shape, full)):
        if axis == mask.ndim - 1:
            out.append(i)
        elif isinstance(d, int) and d == 1:
            out.append(0)
        else:
            out.append(broadcast_axis_index(d, i) if not isinstance(d, int) else i)
    return tuple(out)


def _bias_expr(mask, nonpad, offset, shape, attrs):
    """bias(n, h, i, j) as the reference's `_attention_bias` builds it (None when there is
    none), and its dtype."""
    dt, total, is_causal = attrs["dtype"], shape[3], attrs["is_causal"]
    left, right = attrs["left_window_size"], attrs["right_window_size"]
    bt = dt
    if mask is not None:
        if mask.dtype != "bool":
            if not is_float(mask.dtype) or mask.dtype == "bfloat16":
                raise no_loop("attention", f"an attn_mask of dtype {mask.dtype}")
            bt = from_numpy(np.result_type(to_numpy(dt), to_numpy(mask.dtype)))
    if mask is None and nonpad is None and not is_causal and left < 0 and right < 0:
        return None, bt
    zero, ninf = te.const(0, bt), te.const(-np.inf, bt)

    def gate(allowed):
        return te.if_then_else(allowed, zero, ninf)

    def bias(n, h, i, j):
        val = None
        if mask is not None:
            m = mask[_broadcast_load(mask, (n, h, i, j))]
            val = gate(m) if mask.dtype == "bool" else te.cast(m, bt)
            if not prove_equal(mask.shape[-1], total):  # padded with False / -inf
                val = te.if_then_else(te.less(j, mask.shape[-1]), val, ninf)
        diff = i - j + offset(n)
        terms = []
        if is_causal:
            terms.append(te.greater_equal(diff, 0))
        if left >= 0 or right >= 0:
            conds = [te.less_equal(diff, left)] if left >= 0 else []
            conds += [te.less_equal(0 - diff, right)] if right >= 0 else []
            terms.append(conds[0] if len(conds) == 1 else te.logical_and(*conds))
        if nonpad is not None:
            terms.append(te.less(j, te.cast(nonpad[n], "int64")))
        for allowed in terms:
            val = gate(allowed) if val is None else val + gate(allowed)
        return val

    return bias, bt


def _attention_compute(
    q, k, v, mask=None, past_key=None, past_value=None, nonpad=None, *, scale, is_causal,
    q_num_heads, kv_num_heads, softcap, qk_matmul_output_mode, softmax_dtype,
    left_window_size, right_window_size, num_outputs, bfloat16,
):  # fmt: skip
    op = "attention"
    if bfloat16:
        raise no_loop(op, "the bfloat16 rounding of every step (attribute bfloat16)")
    dt = float_operands(op, q, k, v, past_key, past_value)
    if (past_key is None) != (past_value is None):
        raise no_loop(op, "past_key without past_value (or the reverse)")
    if q.ndim not in (3, 4) or not q.ndim == k.ndim == v.ndim:
        raise no_loop(op, f"Q, K, V of ranks {q.ndim}, {k.ndim}, {v.ndim}")
    nb, hq, sq, dh = attention_heads(te_type(q), q_num_heads, op, "Q")
    _, hk, _, _ = attention_heads(te_type(k), kv_num_heads, op, "K")
    dv = attention_heads(te_type(v), kv_num_heads, op, "V")[3]
    if softmax_dtype is not None and (not is_float(softmax_dtype) or softmax_dtype == "bfloat16"):
        raise no_loop(op, f"softmax_dtype {softmax_dtype}")
    key = _with_past(_head_view(k, kv_num_heads), past_key)
    value = _with_past(_head_view(v, kv_num_heads), past_value)
    qv = _head_view(q, q_num_heads)
    kv_head = kv_group(hq, hk)
    total = k.shape[2] if k.ndim == 4 else k.shape[1]
    plen = 0 if past_key is None else past_key.shape[2]
    total = total if past_key is None else plen + total
    shape = (nb, hq, sq, total)

    def offset(n):
        """The absolute position of query 0 in batch n (keys are at 0, 1, ...)."""
        if past_key is not None:
            return plen
        if nonpad is not None:
            return te.cast(nonpad[n], "int64") - sq
        return 0

    attrs = {
        "dtype": dt, "is_causal": is_causal,
        "left_window_size": left_window_size, "right_window_size": right_window_size,
    }  # fmt: skip
    bias, bt = _bias_expr(mask, nonpad, offset, shape, attrs)

    # Q.K^T, both operands scaled by sqrt(scale) in the input dtype first.
    s = sqrt_scale(scale, dh, dt, "float64")
    acc = accumulate_dtype(dt)
    r = te.reduce_axis(dh, "d")
    qk = te.compute(
        shape,
        lambda n, h, i, j: te.sum(
            te.cast(qv(n, h, i, r) * s, acc) * te.cast(key(n, kv_head(h), j, r) * s, acc),
            axis=[r],
        ),
        "attention_qk",
    )
    logits = qk
    if acc != dt or softcap > 0:
        cap = te.const(float(to_numpy(dt).type(softcap)), dt)

        def logit(n, h, i, j):
            x = te.cast(qk[n, h, i, j], dt)
            return te.tanh(x / cap) * cap if softcap > 0 else x

        logits = te.compute(shape, logit, "attention_logits")
    scores = logits
    if bias is not None:
        scores = te.compute(
            shape,
            lambda n, h, i, j: te.cast(logits[n, h, i, j], bt) + bias(n, h, i, j),
            "attention_scores",
        )

    # Softmax over the keys in softmax_dtype (default the scores' dtype).
    sdt = softmax_dtype or bt
    sacc = accumulator(sdt)

    def x(n, h, i, j):
        return te.cast(scores[n, h, i, j], sdt)

    rm = te.reduce_axis(total, "j")
    row_max = te.compute(
        shape[:3], lambda n, h, i: te.max(x(n, h, i, rm), axis=[rm]), "attention_max"
    )

    def shifted_exp(n, h, i, j):
        m = row_max[n, h, i]
        return te.exp(
            x(n, h, i, j)
            - te.if_then_else(te.equal(m, te.const(-np.inf, sdt)), te.const(0, sdt), m)
        )

    rs = te.reduce_axis(total, "j")
    row_sum = te.compute(
        shape[:3],
        lambda n, h, i: te.sum(te.cast(shifted_exp(n, h, i, rs), sacc), axis=[rs]),
        "attention_sum",
    )
    live = None
    if bias is not None:
        # A row is dead when its bias is -inf everywhere (a NaN keeps it alive, as in numpy).
        rl = te.reduce_axis(total, "j")
        ninf = te.const(-np.inf, bt)
        live = te.compute(
            shape[:3],
            lambda n, h, i: te.max(
                te.if_then_else(
                    te.equal(bias(n, h, i, rl), ninf), te.const(0, "int32"), te.const(1, "int32")
                ),
                axis=[rl],
            ),
            "attention_live",
        )

    def prob(n, h, i, j):
        total_ = te.cast(row_sum[n, h, i], sdt)
        p = shifted_exp(n, h, i, j) / te.if_then_else(
            te.equal(total_, te.const(0, sdt)), te.const(1, sdt), total_
        )
        if live is None:
            return p
        return te.if_then_else(te.equal(live[n, h, i], te.const(0, "int32")), te.const(0, sdt), p)

    probs = te.compute(shape, prob, "attention_probs")

    rv = te.reduce_axis(total, "j")
    direct = q.ndim == 4 and acc == dt  # the reduction is the output itself
    pv = te.compute(
        (nb, hq, sq, dv),
        lambda n, h, i, d: te.sum(
            te.cast(te.cast(probs[n, h, i, rv], dt), acc)
            * te.cast(value(n, kv_head(h), rv, d), acc),
            axis=[rv],
        ),
        "attention" if direct else "attention_pv",
    )
    if direct:
        y = pv
    elif q.ndim == 4:
        y = te.compute(pv.shape, lambda n, h, i, d: te.cast(pv[n, h, i, d], dt), "attention")
    else:
        y = te.compute(
            (nb, sq, hq * dv),
            lambda n, i, c: te.cast(pv[n, c // dv, i, c % dv], dt),
            "attention",
        )
    outs = [y]
    if num_outputs > 1:
        outs.append(te.compute((nb, hk, total, dh), key, "present_key"))
    if num_outputs > 2:
        outs.append(te.compute((nb, hk, total, dv), value, "present_value"))
    if num_outputs > 3:
        src = {3: probs, 2: scores}.get(qk_matmul_output_mode, logits)
        outs.append(te.compute(shape, lambda *i: te.cast(src[i], dt), "qk_matmul_output"))
    return outs


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
        compute=_attention_compute,
        doc="Scaled dot-product attention as ONNX Attention (opset 23-25). Operands: Q, K, "
        "V, attn_mask, past_key, past_value, nonpad_kv_seqlen (the last four optional). "
        "Returns a tuple of the first `num_outputs` of (Y, present_key, present_value, "
        "qk_matmul_output). `bfloat16` marks bfloat16 operands (held as float32): every "
        "step is then rounded to bfloat16, as ONNX specifies.",
    )
)
