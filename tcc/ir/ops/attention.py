"""Attention ops: attention, the two stages of flex attention (attention_scores,
attention_values), rotary_embedding and linear_attention.

attention and linear_attention are OPAQUE: one record each, so a backend can lower them to
one fused kernel instead of a chain of small ones. The flex-attention stages are
contractions (OUT_FUSABLE); rotary_embedding is INJECTIVE.
"""

from __future__ import annotations

import numpy as np

from tcc.ir import te
from tcc.ir.dtype import from_numpy, is_float, round_to_bfloat16, to_numpy
from tcc.ir.errors import NoLoopProgram, ShapeError
from tcc.ir.expr import Dim, prove_equal
from tcc.ir.graph import TensorType
from tcc.ir.ops._util import accumulate_dtype, match_dim, te_type
from tcc.ir.ops.reduce import accumulator
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


def _no_loop(op: str, what: str) -> NoLoopProgram:
    return NoLoopProgram(f"op {op}: {what} has no loop program")


def _float_operands(op: str, *tensors) -> str:
    """The common float dtype of the operands (None ones skipped), or NoLoopProgram."""
    dtypes = {t.dtype for t in tensors if t is not None}
    if len(dtypes) != 1 or not is_float(next(iter(dtypes))):
        raise _no_loop(op, f"operand dtypes {', '.join(sorted(dtypes))} (not one float dtype)")
    dt = dtypes.pop()
    if dt == "bfloat16":
        raise _no_loop(op, "bfloat16")
    return dt


def _head_view(t: te.Tensor, heads):
    """(batch, head, seq, d) -> the element of a 4-D input, or of a 3-D (batch, seq, heads *
    head_size) one."""
    if t.ndim == 4:
        return lambda n, h, s, d: t[n, h, s, d]
    size = _heads(te_type(t), heads, "attention", t.name)[3]
    return lambda n, h, s, d: t[n, s, h * size + d]


def _group(hq: Dim, hk: Dim):
    """The K/V head a query head reads (np.repeat of the K/V heads)."""
    if isinstance(hq, int) and isinstance(hk, int) and hq == hk:
        return lambda h: h
    reps = hq // hk
    return lambda h: h // reps


def _sqrt_scale(scale, head: Dim, dt: str, root_dtype: str):
    """sqrt(scale) (default scale 1/sqrt(head)) rounded to `dt`: the factor both Q and K are
    multiplied by. The root is taken in `root_dtype` (float64 for attention, float32 for the
    flex-attention scores), as the references take it."""
    np_root = to_numpy(root_dtype).type
    if scale is not None or isinstance(head, int):
        value = scale if scale is not None else 1 / np.sqrt(head)
        return te.const(float(to_numpy(dt).type(np.sqrt(np_root(value)))), dt)
    inv = te.const(1.0, "float64") / te.sqrt(te.cast(head, "float64"))
    return te.cast(te.sqrt(te.cast(inv, root_dtype)), dt)


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
    leading dimension is 1, `i % d` where a symbolic one may be 1 or the full size. The key
    axis is never broadcast: a shorter mask is padded (the caller tests the bound)."""
    full = idx[4 - mask.ndim :]
    out = []
    for axis, (d, i) in enumerate(zip(mask.shape, full)):
        if axis == mask.ndim - 1:
            out.append(i)
        elif isinstance(d, int) and d == 1:
            out.append(0)
        else:
            out.append(i % d if not isinstance(d, int) else i)
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
                raise _no_loop("attention", f"an attn_mask of dtype {mask.dtype}")
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
            allowed = None
            for ok in ((te.less_equal(diff, left),) if left >= 0 else ()) + (
                (te.less_equal(0 - diff, right),) if right >= 0 else ()
            ):
                allowed = ok if allowed is None else te.logical_and(allowed, ok)
            terms.append(allowed)
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
        raise _no_loop(op, "the bfloat16 rounding of every step (attribute bfloat16)")
    dt = _float_operands(op, q, k, v, past_key, past_value)
    if (past_key is None) != (past_value is None):
        raise _no_loop(op, "past_key without past_value (or the reverse)")
    if q.ndim not in (3, 4) or not q.ndim == k.ndim == v.ndim:
        raise _no_loop(op, f"Q, K, V of ranks {q.ndim}, {k.ndim}, {v.ndim}")
    nb, hq, sq, dh = _heads(te_type(q), q_num_heads, op, "Q")
    _, hk, _, _ = _heads(te_type(k), kv_num_heads, op, "K")
    dv = _heads(te_type(v), kv_num_heads, op, "V")[3]
    if softmax_dtype is not None and (not is_float(softmax_dtype) or softmax_dtype == "bfloat16"):
        raise _no_loop(op, f"softmax_dtype {softmax_dtype}")
    key = _with_past(_head_view(k, kv_num_heads), past_key)
    value = _with_past(_head_view(v, kv_num_heads), past_value)
    qv = _head_view(q, q_num_heads)
    kv_head = _group(hq, hk)
    total = k.shape[2] if k.ndim == 4 else k.shape[1]
    plen = 0 if past_key is None else past_key.shape[2]
    total = total if past_key is None else plen + total
    shape = (nb, hq, sq, total)

    if past_key is not None:
        offset = lambda n: plen  # noqa: E731
    elif nonpad is not None:
        offset = lambda n: te.cast(nonpad[n], "int64") - sq  # noqa: E731
    else:
        offset = lambda n: 0  # noqa: E731
    attrs = {
        "dtype": dt, "is_causal": is_causal,
        "left_window_size": left_window_size, "right_window_size": right_window_size,
    }  # fmt: skip
    bias, bt = _bias_expr(mask, nonpad, offset, shape, attrs)

    # Q.K^T, both operands scaled by sqrt(scale) in the input dtype first.
    s = _sqrt_scale(scale, dh, dt, "float64")
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
    pv = te.compute(
        (nb, hq, sq, dv),
        lambda n, h, i, d: te.sum(
            te.cast(te.cast(probs[n, h, i, rv], dt), acc)
            * te.cast(value(n, kv_head(h), rv, d), acc),
            axis=[rv],
        ),
        "attention_pv",
    )
    if q.ndim == 4:
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


def _scores_compute(q, k, *, scale, out_dtype):
    """The scaled Q.K^T reduction (half floats accumulate in float32), rounded to Q's dtype,
    then cast to `out_dtype`."""
    dt = _float_operands("attention_scores", q, k)
    s = _sqrt_scale(scale, q.shape[3], dt, "float32")
    acc, out = accumulate_dtype(dt), out_dtype or dt
    kv_head = _group(q.shape[1], k.shape[1])
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
    _gqa_heads(p.shape[1], v.shape[1], op)
    return TensorType(p.shape[:3] + (v.shape[3],), v.dtype)


def _values_ref(p, v):
    aligned = np.repeat(v, p.shape[1] // v.shape[1], axis=1).astype(p.dtype)
    return np.matmul(p, aligned).astype(v.dtype)


def _values_compute(p, v):
    """probs.V reduction in probs' dtype (half floats accumulate in float32), rounded to
    probs' dtype, then cast to V's."""
    if not is_float(p.dtype) or not is_float(v.dtype) or "bfloat16" in (p.dtype, v.dtype):
        raise _no_loop("attention_values", f"operands of dtypes {p.dtype} and {v.dtype}")
    pd, acc = p.dtype, accumulate_dtype(p.dtype)
    kv_head = _group(p.shape[1], v.shape[1])
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


def _rotary_compute(
    x, cos, sin, position_ids=None, *, interleaved, rotary_embedding_dim, num_heads
):
    """One elementwise stage in x's layout: each element of the rotated head prefix combines
    its pair (c, c + rot/2), or (2k, 2k + 1) when interleaved, with the cos/sin entry of its
    position; the rest of the head is copied. A position id outside the cache (where the
    reference fails) reads NaN instead of out of bounds."""
    dt = _float_operands("rotary_embedding", x, cos, sin)
    head = _heads(te_type(x), num_heads, "rotary_embedding", "input")[3]
    rot = rotary_embedding_dim or head
    half = rot // 2
    rows = cos.shape[0]

    def cache(tab, n, s, k):
        if position_ids is None:
            return tab[n, s, k]
        pos = te.cast(position_ids[n, s], "int64")
        pos = te.if_then_else(te.less(pos, 0), pos + rows, pos)  # numpy indices wrap once
        ok = te.logical_and(te.greater_equal(pos, 0), te.less(pos, rows))
        return te.if_then_else(ok, tab[pos, k], te.const(np.nan, dt))

    def rotate(load, n, s, c):
        """The output at head offset c; load(c') reads offset c' of the same head."""
        if interleaved:
            k = c // 2
            a, b = load(2 * k), load(2 * k + 1)
            co, si = cache(cos, n, s, k), cache(sin, n, s, k)
            even = te.equal(c % 2, 0)
            val = te.if_then_else(even, co * a - si * b, si * a + co * b)
        else:
            low = te.less(c, half)
            val = te.if_then_else(
                low,
                cache(cos, n, s, c) * load(c) - cache(sin, n, s, c) * load(c + half),
                cache(sin, n, s, c - half) * load(c - half) + cache(cos, n, s, c - half) * load(c),
            )
        if prove_equal(rot, head):
            return val
        return te.if_then_else(te.less(c, rot), val, load(c))

    if x.ndim == 4:
        return te.compute(
            x.shape,
            lambda n, h, s, c: rotate(lambda c2: x[n, h, s, c2], n, s, c),
            "rotary_embedding",
        )
    return te.compute(
        x.shape,
        lambda n, s, j: rotate(lambda c2: x[n, s, (j // head) * head + c2], n, s, j % head),
        "rotary_embedding",
    )


register(
    OpDef(
        "rotary_embedding",
        _rotary_infer,
        _rotary_ref,
        attrs={"interleaved": False, "rotary_embedding_dim": 0, "num_heads": 0},
        pattern=Pattern.INJECTIVE,
        num_args=(3, 4),
        compute=_rotary_compute,
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
    _float_operands(op, q, k, v, decay, beta)
    if past is not None and (not is_float(past.dtype) or past.dtype == "bfloat16"):
        raise _no_loop(op, f"a past_state of dtype {past.dtype}")
    steps = q.shape[1]
    if not isinstance(steps, int) or not 0 < steps <= MAX_UNROLLED_STEPS:
        raise _no_loop(op, f"a sequence length of {steps} (unrolled: at most {MAX_UNROLLED_STEPS})")
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
