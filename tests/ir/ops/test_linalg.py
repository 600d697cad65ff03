"""Linear-algebra ops: symbolic shape inference and numpy references (matmul, gemm, einsum,
det, quantization, attention, rotary embedding, linear attention)."""

import numpy as np
import pytest

from tcc.ir.errors import ShapeError
from tcc.ir.expr import Var
from tcc.ir.graph import TensorType
from tcc.ir.ops.matmul import parse_einsum
from tests.helpers import infer, run_op, same_shape

N = Var("n")
S = Var("s")
RNG = np.random.default_rng(0)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# --- matmul / gemm ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "a, b, want",
    [
        ((3,), (3,), ()),
        ((3,), (2, 3, 4), (2, 4)),
        ((2, 5, 3), (3,), (2, 5)),
        ((N, 1, 5, 3), (4, 3, 2), (N, 4, 5, 2)),
        ((N, S, 8), (8, 16), (N, S, 16)),
    ],
)
def test_matmul_shapes_follow_numpy(a, b, want):
    t = infer("matmul", TensorType(a, "float32"), TensorType(b, "float32"))
    assert same_shape(t.shape, want)


def test_matmul_rejects_mismatched_contraction():
    with pytest.raises(ShapeError, match="contracted dimensions must match, got 3 and 4"):
        infer("matmul", TensorType((2, 3), "float32"), TensorType((4, 5), "float32"))


@pytest.mark.parametrize("sa, sb", [((4,), (2, 4, 3)), ((3, 1, 2, 4), (2, 4, 5)), ((5, 4), (4,))])
def test_matmul_numerics(sa, sb):
    a, b = _f32(*sa), _f32(*sb)
    np.testing.assert_allclose(run_op("matmul", a, b), np.matmul(a, b), rtol=1e-6)


@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_numerics(trans_a, trans_b):
    a, b, c = _f32(3, 4), _f32(4, 5), _f32(1, 5)
    a_in, b_in = (a.T.copy() if trans_a else a), (b.T.copy() if trans_b else b)
    y = run_op("gemm", a_in, b_in, c, alpha=0.5, beta=2.0, trans_a=trans_a, trans_b=trans_b)
    np.testing.assert_allclose(y, 0.5 * a @ b + 2.0 * c, rtol=1e-5)


def test_gemm_symbolic_rows_and_bias_check():
    t = infer("gemm", TensorType((N, 8), "float32"), TensorType((4, 8), "float32"), TensorType((4,), "float32"), trans_b=True)
    assert same_shape(t.shape, (N, 4))
    with pytest.raises(ShapeError, match="C dimensions must match"):
        infer("gemm", TensorType((2, 8), "float32"), TensorType((8, 4), "float32"), TensorType((3,), "float32"))


# --- einsum / det ----------------------------------------------------------------------------


def test_parse_einsum_expands_ellipsis_and_implicit_output():
    terms, out, ell = parse_einsum("...ii ->...i", [3])
    assert len(ell) == 1 and terms == [ell + "ii"] and out == ell + "i"
    terms, out, _ = parse_einsum("ij,jk", [2, 2])
    assert terms == ["ij", "jk"] and out == "ik"


@pytest.mark.parametrize(
    "eq, shapes",
    [
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("...ii->...i", [(3, 4, 4)]),
        ("i,i", [(5,), (5,)]),
        ("ij->", [(3, 4)]),
        ("...j,j->...", [(2, 3, 4), (4,)]),
        ("Bi,iJ->BJ", [(2, 3), (3, 4)]),
    ],
)
def test_einsum_matches_numpy(eq, shapes):
    xs = [_f32(*s) for s in shapes]
    np.testing.assert_allclose(run_op("einsum", *xs, equation=eq), np.einsum(eq, *xs), rtol=1e-5, atol=1e-6)


def test_einsum_symbolic_batch():
    t = infer("einsum", TensorType((N, 3, 4), "float32"), TensorType((N, 4, 5), "float32"), equation="bij,bjk->bik")
    assert same_shape(t.shape, (N, 3, 5))
    with pytest.raises(ShapeError, match="labelled 'j' must match"):
        infer("einsum", TensorType((3, 4), "float32"), TensorType((5, 2), "float32"), equation="ij,jk->ik")


def test_det_numerics_and_shape():
    x = _f32(3, 4, 4)
    np.testing.assert_allclose(run_op("det", x), np.linalg.det(x), rtol=1e-4)
    assert same_shape(infer("det", TensorType((N, 2, 2), "float32")).shape, (N,))


# --- quantization ----------------------------------------------------------------------------


def test_quantize_rounds_half_to_even_and_saturates():
    x = np.array([0.5, 1.5, 2.5, -300.0, 300.0], np.float32)
    y = run_op("quantize_linear", x, np.array(1.0, np.float32), np.array(0, np.int8), out_dtype="int8")
    np.testing.assert_array_equal(y, np.array([0, 2, 2, -128, 127], np.int8))


def test_quantize_per_axis_and_blocked():
    x = _f32(2, 3, 4)
    scale = np.array([0.1, 0.2, 0.3], np.float32)
    y = run_op("quantize_linear", x, scale, None, axis=1)
    want = np.clip(np.rint(x / scale.reshape(1, 3, 1)), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(y, want)
    bscale = np.abs(_f32(2, 3, 2)) + 0.1  # blocks of 3 along the last axis (4 -> 2 blocks)
    zp = np.full((2, 3, 2), 7, np.int16)
    y = run_op("quantize_linear", x, bscale, zp, axis=2, block_size=3, out_dtype="int16")
    full = np.repeat(bscale, 3, axis=2)[..., :4]
    np.testing.assert_array_equal(y, (np.rint(x / full) + 7).astype(np.int16))


def test_quantize_checks_scale_layout():
    with pytest.raises(ShapeError, match="scale length and the input's axis 1 must match"):
        infer("quantize_linear", TensorType((2, 3), "float32"), TensorType((4,), "float32"), None)


def test_dequantize_per_axis_output_dtype():
    x = np.arange(12, dtype=np.uint8).reshape(3, 4)
    scale = np.array([0.5, 1.0, 2.0], np.float32)
    zp = np.array([1, 2, 3], np.uint8)
    y = run_op("dequantize_linear", x, scale, zp, axis=0, out_dtype="float16")
    want = ((x.astype(np.float32) - zp[:, None]) * scale[:, None]).astype(np.float16)
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, want)


def test_dynamic_quantize_linear():
    x = np.array([0.0, 2.0, -3.0, -2.5, 1.34, 0.5], np.float32)
    y, scale, zp = run_op("dynamic_quantize_linear", x)
    assert scale.shape == () and zp.dtype == np.uint8
    np.testing.assert_allclose(scale, 5.0 / 255, rtol=1e-6)
    assert zp == 153
    np.testing.assert_array_equal(y, np.clip(np.rint(x / scale) + 153, 0, 255).astype(np.uint8))


def test_matmul_integer_per_row_zero_point():
    a = RNG.integers(0, 255, (3, 4), dtype=np.uint8)
    b = RNG.integers(0, 255, (4, 2), dtype=np.uint8)
    a_zp = np.array([1, 2, 3], np.uint8)
    y = run_op("matmul_integer", a, b, a_zp, np.array(5, np.uint8))
    want = (a.astype(np.int32) - a_zp[:, None]) @ (b.astype(np.int32) - 5)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, want)


def test_qlinear_matmul_requantizes():
    a = RNG.integers(-128, 127, (2, 3), dtype=np.int8)
    b = RNG.integers(-128, 127, (3, 4), dtype=np.int8)
    f = lambda v: np.array([v], np.float32)  # noqa: E731
    z = lambda v: np.array([v], np.int8)  # noqa: E731
    y = run_op("qlinear_matmul", a, f(0.05), z(1), b, f(0.02), z(-2), f(0.5), z(3))
    acc = (a.astype(np.int32) - 1) @ (b.astype(np.int32) + 2)
    want = np.clip(np.rint(acc * (np.float32(0.05) * np.float32(0.02) / np.float32(0.5)) + 3), -128, 127)
    np.testing.assert_array_equal(y, want.astype(np.int8))


# --- attention -------------------------------------------------------------------------------


def _naive_attention(q, k, v, bias, scale):
    """(b, h, s, d) attention with an additive bias, head by head and row by row."""
    out = np.zeros(q.shape[:3] + (v.shape[3],), np.float64)
    reps = q.shape[1] // k.shape[1]
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            for i in range(q.shape[2]):
                logits = q[b, h, i].astype(np.float64) @ k[b, h // reps].T.astype(np.float64) * scale
                logits = logits + bias[i]
                p = np.exp(logits - logits.max())
                out[b, h, i] = (p / p.sum()) @ v[b, h // reps]
    return out


def test_attention_gqa_causal_with_past_matches_naive():
    q, k, v = _f32(2, 4, 3, 8), _f32(2, 2, 3, 8), _f32(2, 2, 3, 6)
    pk, pv = _f32(2, 2, 2, 8), _f32(2, 2, 2, 6)
    y, present_k, present_v = run_op("attention", q, k, v, None, pk, pv, is_causal=True, num_outputs=3)
    kk, vv = np.concatenate([pk, k], 2), np.concatenate([pv, v], 2)
    np.testing.assert_array_equal(present_k, kk)
    allowed = np.arange(5)[None, :] <= np.arange(3)[:, None] + 2  # bottom-right aligned
    bias = np.where(allowed, 0.0, -np.inf)
    np.testing.assert_allclose(y, _naive_attention(q, kk, vv, bias, 1 / np.sqrt(8)), rtol=1e-4, atol=1e-5)


def test_attention_3d_inputs_and_shapes():
    types = [TensorType((N, S, 24), "float32"), TensorType((N, 5, 8), "float32"), TensorType((N, 5, 4), "float32")]
    t = infer("attention", *types, q_num_heads=6, kv_num_heads=2, num_outputs=4)
    y, pk, pv, qk = (f.shape for f in t.fields)
    assert same_shape(y, (N, S, 12)) and same_shape(pk, (N, 2, 5, 4)) and same_shape(pv, (N, 2, 5, 2))
    assert same_shape(qk, (N, 6, S, 5))
    with pytest.raises(ShapeError, match="3-D inputs need the number of heads"):
        infer("attention", *types)
    q, k, v = _f32(2, 3, 24), _f32(2, 5, 8), _f32(2, 5, 4)
    y = run_op("attention", q, k, v, q_num_heads=6, kv_num_heads=2, scale=0.3)[0]
    split = lambda x, h: x.reshape(2, x.shape[1], h, -1).transpose(0, 2, 1, 3)  # noqa: E731
    want = _naive_attention(split(q, 6), split(k, 2), split(v, 2), np.zeros((3, 5)), 0.3)
    np.testing.assert_allclose(y, want.transpose(0, 2, 1, 3).reshape(2, 3, 12), rtol=1e-4, atol=1e-5)


def test_attention_fully_masked_row_is_zero_and_bool_mask_pads():
    q, k, v = _f32(1, 1, 2, 4), _f32(1, 1, 3, 4), _f32(1, 1, 3, 4)
    mask = np.array([[False, False], [True, False]])  # padded with False to 3 keys
    y, _, _, probs = run_op("attention", q, k, v, mask, qk_matmul_output_mode=3, num_outputs=4)
    assert not np.isnan(y).any()
    np.testing.assert_array_equal(y[0, 0, 0], 0)
    np.testing.assert_allclose(probs[0, 0, 1], [1, 0, 0])
    np.testing.assert_allclose(y[0, 0, 1], v[0, 0, 0], rtol=1e-6)


def test_attention_softcap_window_and_nonpad():
    q, k, v = _f32(2, 1, 3, 4), _f32(2, 1, 5, 4), _f32(2, 1, 5, 4)
    nonpad = np.array([5, 4], np.int64)
    y, qk = run_op("attention", q, k, v, None, None, None, nonpad, is_causal=True, softcap=2.0,
                 left_window_size=1, num_outputs=4)[::3]  # fmt: skip
    for b, n in enumerate(nonpad):
        pos = np.arange(3)[:, None] + (n - 3)  # absolute query positions
        j = np.arange(5)[None, :]
        allowed = (j <= pos) & (j >= pos - 1) & (j < n)
        logits = np.tanh(q[b, 0] @ k[b, 0].T / 2 / 2.0) * 2.0
        np.testing.assert_allclose(qk[b, 0], logits, rtol=1e-5, atol=1e-6)
        p = np.exp(logits - logits.max(-1, keepdims=True)) * allowed
        np.testing.assert_allclose(y[b, 0], (p / p.sum(-1, keepdims=True)) @ v[b, 0], rtol=1e-4, atol=1e-6)


def test_attention_scores_and_values_gqa():
    q, k, v = _f32(1, 4, 3, 8), _f32(1, 2, 5, 8), _f32(1, 2, 5, 6)
    s = run_op("attention_scores", q, k, scale=0.25, out_dtype="float64")
    assert s.dtype == np.float64 and s.shape == (1, 4, 3, 5)
    np.testing.assert_allclose(s[0, 3], q[0, 3] @ k[0, 1].T * 0.25, rtol=1e-5)
    y = run_op("attention_values", s, v)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y[0, 1], s[0, 1] @ v[0, 0], rtol=1e-5)


# --- rotary embedding / linear attention -----------------------------------------------------


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_embedding_rotates_pairs(interleaved):
    x, pos = _f32(1, 2, 3, 6), np.array([[0, 2, 5]], np.int64)
    theta = RNG.uniform(0, 3, (8, 2)).astype(np.float32)  # rotary dim 4 of head size 6
    y = run_op("rotary_embedding", x, np.cos(theta), np.sin(theta), pos, interleaved=interleaved,
             rotary_embedding_dim=4)  # fmt: skip
    idx = ([0, 2], [1, 3]) if interleaved else ([0, 1], [2, 3])
    z = (x[..., idx[0]] + 1j * x[..., idx[1]]) * np.exp(1j * theta[pos])[:, None]
    np.testing.assert_allclose(y[..., idx[0]], z.real, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y[..., idx[1]], z.imag, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(y[..., 4:], x[..., 4:])


def test_rotary_embedding_3d_symbolic():
    t = infer("rotary_embedding", TensorType((N, S, 16), "float32"), TensorType((N, S, 2), "float32"),
               TensorType((N, S, 2), "float32"), num_heads=4)  # fmt: skip
    assert same_shape(t.shape, (N, S, 16))


def test_linear_attention_linear_rule_is_causal_linear_attention():
    q, k, v = _f32(1, 4, 6), _f32(1, 4, 6), _f32(1, 4, 6)
    y, state = run_op("linear_attention", q, k, v, q_num_heads=2, kv_num_heads=2, update_rule="linear")
    split = lambda x: x.reshape(1, 4, 2, 3).transpose(0, 2, 1, 3)[0]  # noqa: E731
    qh, kh, vh = split(q), split(k), split(v)
    for h in range(2):
        kv = np.cumsum(kh[h][:, :, None] * vh[h][:, None, :], axis=0)  # (t, dk, dv)
        want = np.einsum("td,tdm->tm", qh[h], kv) / np.sqrt(3)
        np.testing.assert_allclose(y[0, :, h * 3 : h * 3 + 3], want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(state[0, h], kv[-1], rtol=1e-5, atol=1e-6)
    with pytest.raises(ShapeError, match="needs decay"):
        infer("linear_attention", *[TensorType((1, 4, 6), "float32")] * 3, q_num_heads=2, kv_num_heads=2)


def test_attention_bfloat16_rounds_every_step():
    q, k, v = _f32(1, 1, 3, 4), _f32(1, 1, 3, 4), _f32(1, 1, 3, 4)
    exact = run_op("attention", q, k, v)[0]
    y = run_op("attention", q, k, v, bfloat16=True)[0]
    assert np.array_equal(y.view(np.uint32) & 0xFFFF, np.zeros(y.shape, np.uint32))
    np.testing.assert_allclose(y, exact, rtol=3e-2, atol=1e-2)
