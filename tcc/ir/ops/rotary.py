"""rotary_embedding: rotary position embedding (RoPE, ONNX RotaryEmbedding) of a 4-D
(batch, heads, seq, head) or 3-D (batch, seq, hidden) input.

It is INJECTIVE: each output element combines one pair of input elements of its head with
the cos/sin cache entry of its position. Its loop program computes exactly what the
reference does; what has none: bfloat16 operands.
"""

from __future__ import annotations

import numpy as np

from tcc.ir import te
from tcc.ir.errors import ShapeError
from tcc.ir.expr import prove_equal
from tcc.ir.ops._util import attention_heads, float_operands, match_dim, te_type
from tcc.ir.ops.registry import OpDef, Pattern, register, same_dtype, tensor


def _rotary_infer(args, attrs):
    op = "rotary_embedding"
    x, cos, sin = (
        tensor(args[i], op, n) for i, n in enumerate(("input", "cos_cache", "sin_cache"))
    )
    same_dtype([x, cos, sin], op)
    head = attention_heads(x, attrs["num_heads"], op, "input")[3]
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
    dt = float_operands("rotary_embedding", x, cos, sin)
    head = attention_heads(te_type(x), num_heads, "rotary_embedding", "input")[3]
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
