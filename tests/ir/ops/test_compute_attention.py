"""Loop programs (te computes) of the attention ops: attention over its options (heads and
grouped-query heads, 3-D inputs, masks of every rank and dtype, padded masks, causal and
sliding windows, key padding, past keys, softcap, softmax precision, every output), the
flex-attention stages, rotary_embedding and linear_attention, each run by the reference
PrimFunc evaluator against the op's numpy reference; shapes stay symbolic; uncovered cases
have no loop program; the PrimFuncs round-trip through the IR text."""

import numpy as np
import pytest

from tcc.ir.expr import Var
from tcc.ir.graph import TensorType
from tcc.ir.module import IRModule
from tcc.ir.ops import OPS
from tcc.ir.ops.registry import normalize_attrs
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_module
from tcc.ir.structural import structural_equal
from tcc.ir.tir_eval import run_prim_func
from tcc.lower.legalize import op_prim_func
from tests.helpers import assert_close, assert_compute_matches_ref, infer, ref

rng = np.random.default_rng(0)

# Sums run in another order than numpy's (BLAS, pairwise); exp/tanh may differ by an ulp.
TOL = {"float32": 2e-5, "float16": 4e-3, "float64": 1e-12}


def rand(*shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


def check(op, *arrays, **attrs):
    dtype = arrays[0].dtype.name
    assert_compute_matches_ref(op, *arrays, rtol=TOL[dtype], atol=TOL[dtype], **attrs)


def prim_func(op, *types, **attrs):
    return op_prim_func(op, list(types), normalize_attrs(OPS[op], attrs))


def qkv(b=1, hq=2, hk=2, sq=3, skv=4, dh=4, dv=3, dtype="float32"):
    return (
        rand(b, hq, sq, dh, dtype=dtype),
        rand(b, hk, skv, dh, dtype=dtype),
        rand(b, hk, skv, dv, dtype=dtype),
    )


# ---------------------------------------------------------------------------------------------
# attention


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_attention_plain(dtype):
    check("attention", *qkv(dtype=dtype))


@pytest.mark.parametrize("hq, hk", [(4, 2), (3, 1)])
def test_attention_grouped_query_heads(hq, hk):
    check("attention", *qkv(hq=hq, hk=hk), is_causal=True)


def test_attention_3d_inputs_with_past():
    q, k, v = rand(2, 3, 8), rand(2, 2, 8), rand(2, 2, 6)
    past_k, past_v = rand(2, 2, 3, 4), rand(2, 2, 3, 3)
    check(
        "attention", q, k, v, None, past_k, past_v,
        q_num_heads=2, kv_num_heads=2, is_causal=True, num_outputs=3,
    )  # fmt: skip


@pytest.mark.parametrize(
    "mask",
    [
        rand(3, 4),  # float, broadcast over batch and heads
        rand(1, 2, 3, 4),  # float, per head
        rng.random((2, 1, 3, 4)) > 0.4,  # bool, per batch
        rng.random((4,)) > 0.3,  # bool, rank 1
        rng.random((2, 3, 2)) > 0.3,  # bool, shorter than the keys: padded with False
        rand(3, 3),  # float, shorter than the keys: padded with -inf
        rand(3, 4).astype("float16"),  # float16 mask on float32 scores
    ],
)
def test_attention_masks(mask):
    check("attention", *qkv(b=2), mask)


def test_attention_fully_masked_rows_give_zero():
    mask = np.array([[True, False, True, False], [False] * 4, [True] * 4])
    check("attention", *qkv(), mask, num_outputs=4, qk_matmul_output_mode=3)


def test_attention_neg_inf_mask_with_softcap():
    mask = np.where(rng.random((3, 4)) > 0.5, -np.inf, 0).astype("float32")
    mask[1] = -np.inf
    check("attention", *qkv(), mask, softcap=0.5)


@pytest.mark.parametrize(
    "left, right, causal", [(1, -1, True), (-1, 1, False), (1, 2, False), (0, 0, True)]
)
def test_attention_windows(left, right, causal):
    check(
        "attention", *qkv(sq=4, skv=5), rand(4, 5),
        left_window_size=left, right_window_size=right, is_causal=causal,
    )  # fmt: skip


@pytest.mark.parametrize("with_mask", [False, True])
def test_attention_key_padding(with_mask):
    # batch 1 has 1 valid key for 3 queries: its causal offset is negative, rows go dead.
    nonpad = np.array([4, 1], "int64")
    mask = (rng.random((2, 1, 3, 4)) > 0.3) if with_mask else None
    check("attention", *qkv(b=2), mask, None, None, nonpad, is_causal=True)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_attention_all_outputs(mode):
    past_k, past_v = rand(1, 2, 2, 4), rand(1, 2, 2, 3)
    check(
        "attention", *qkv(), rand(3, 6), past_k, past_v,
        softcap=2.0, is_causal=True, num_outputs=4, qk_matmul_output_mode=mode,
    )  # fmt: skip


@pytest.mark.parametrize("dtype, softmax_dtype", [("float32", "float64"), ("float16", "float32")])
def test_attention_softmax_precision(dtype, softmax_dtype):
    mask = rng.random((3, 4)) > 0.3
    check(
        "attention", *qkv(dtype=dtype), mask,
        softmax_dtype=softmax_dtype, num_outputs=4, qk_matmul_output_mode=3,
    )  # fmt: skip


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_attention_scaled_with_float_mask(dtype):
    check("attention", *qkv(dtype=dtype), rand(3, 4, dtype=dtype), scale=0.1, softcap=3.0)


def test_attention_symbolic_sequence_lengths():
    s, t = Var("s"), Var("t")
    types = [TensorType((1, 2, s, 4), "float32"), TensorType((1, 2, t, 4), "float32")] * 1
    types += [TensorType((1, 2, t, 3), "float32"), TensorType((s, t), "bool")]
    func = prim_func("attention", *types, is_causal=True)
    assert func.params[-1].shape == (1, 2, s, 3)
    arrays = [*qkv(sq=2, skv=5), rng.random((2, 5)) > 0.2]
    y = np.zeros((1, 2, 2, 3), "float32")
    run_prim_func(func, [*arrays, y])
    want = ref("attention", *arrays, is_causal=True)[0]
    assert_close(y, want, rtol=TOL["float32"], atol=TOL["float32"])


def test_attention_bfloat16_rounding_has_no_loop_program():
    t = TensorType((1, 2, 3, 4), "float32")
    assert prim_func("attention", t, t, t, bfloat16=True) is None


# ---------------------------------------------------------------------------------------------
# flex attention stages


@pytest.mark.parametrize(
    "dtype, out_dtype, scale, hk",
    [
        ("float32", None, None, 2),
        ("float32", None, 0.2, 1),
        ("float16", "float32", None, 2),
        ("float64", None, None, 2),
    ],
)
def test_attention_scores(dtype, out_dtype, scale, hk):
    q, k = rand(1, 2, 3, 4, dtype=dtype), rand(1, hk, 5, 4, dtype=dtype)
    check("attention_scores", q, k, scale=scale, out_dtype=out_dtype)


@pytest.mark.parametrize(
    "p_dtype, v_dtype, hk", [("float32", "float32", 2), ("float32", "float16", 1)]
)
def test_attention_values(p_dtype, v_dtype, hk):
    p, v = rand(1, 2, 3, 5, dtype=p_dtype), rand(1, hk, 5, 4, dtype=v_dtype)
    assert_compute_matches_ref("attention_values", p, v, rtol=4e-3, atol=4e-3)


# ---------------------------------------------------------------------------------------------
# rotary embedding


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rot", [0, 4])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_rotary_4d_with_position_ids(interleaved, rot, dtype):
    half = rot // 2 or 3
    x = rand(2, 2, 3, 6, dtype=dtype)
    cos, sin = rand(5, half, dtype=dtype), rand(5, half, dtype=dtype)
    pos = rng.integers(-5, 5, (2, 3))  # negative ids wrap, as numpy indexing does
    check("rotary_embedding", x, cos, sin, pos, interleaved=interleaved, rotary_embedding_dim=rot)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rot", [0, 2])
def test_rotary_3d_per_position_caches(interleaved, rot):
    half = rot // 2 or 2
    x, cos, sin = rand(2, 3, 8), rand(2, 3, half), rand(2, 3, half)
    check(
        "rotary_embedding", x, cos, sin,
        interleaved=interleaved, rotary_embedding_dim=rot, num_heads=2,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# linear attention


@pytest.mark.parametrize(
    "rule, hq, hk, past, decay_per_head, beta_heads, dtype",
    [
        ("linear", 2, 2, False, False, 0, "float32"),
        ("gated", 2, 2, True, False, 0, "float32"),
        ("gated", 2, 1, False, True, 0, "float32"),
        ("delta", 2, 2, False, False, 2, "float32"),
        ("gated_delta", 4, 2, True, False, 1, "float32"),
        ("gated_delta", 2, 2, False, False, 2, "float16"),
    ],
)
def test_linear_attention(rule, hq, hk, past, decay_per_head, beta_heads, dtype):
    b, t, dk, dv = 1, 3, 2, 3
    q, k = rand(b, t, hq * dk, dtype=dtype), rand(b, t, hk * dk, dtype=dtype)
    v = rand(b, t, hk * dv, dtype=dtype)
    state = rand(b, hk, dk, dv, dtype=dtype) if past else None
    decay = None
    if "gated" in rule:
        decay = -0.2 * np.abs(rand(b, t, hk if decay_per_head else hk * dk)).astype(dtype)
    beta = rand(b, t, beta_heads, dtype=dtype) if beta_heads else None
    scale = 0.0 if past else 0.5
    check(
        "linear_attention", q, k, v, state, decay, beta,
        q_num_heads=hq, kv_num_heads=hk, update_rule=rule, scale=scale,
    )  # fmt: skip


def test_linear_attention_symbolic_length_has_no_loop_program():
    t = Var("t")
    x = TensorType((1, t, 4), "float32")
    func = prim_func(
        "linear_attention", x, x, x, q_num_heads=2, kv_num_heads=2, update_rule="linear"
    )
    assert func is None


# ---------------------------------------------------------------------------------------------
# every op has a loop program; the PrimFuncs print and parse back


def test_every_attention_op_has_a_loop_program():
    names = ["attention", "attention_scores", "attention_values", "rotary_embedding"]
    assert all(OPS[n].compute is not None for n in names + ["linear_attention"])


F32 = "float32"


@pytest.mark.parametrize(
    "op, types, attrs",
    [
        (
            "attention",
            [TensorType((1, 2, Var("s"), 4), F32), TensorType((1, 2, 5, 4), F32),
             TensorType((1, 2, 5, 3), F32), TensorType((1, 7), "bool"),
             TensorType((1, 2, 2, 4), F32), TensorType((1, 2, 2, 3), F32)],
            {"is_causal": True, "num_outputs": 4, "softcap": 1.0, "left_window_size": 2},
        ),
        (
            "attention_scores",
            [TensorType((1, 4, 3, 8), "float16"), TensorType((1, 2, 5, 8), "float16")],
            {"out_dtype": "float32"},
        ),
        (
            "rotary_embedding",
            [TensorType((1, 3, 8), F32), TensorType((4, 2), F32), TensorType((4, 2), F32),
             TensorType((1, 3), "int64")],
            {"num_heads": 2, "interleaved": True},
        ),
        (
            "linear_attention",
            [TensorType((1, 2, 4), F32)] * 3 + [None, TensorType((1, 2, 2), F32),
                                               TensorType((1, 2, 2), F32)],
            {"q_num_heads": 2, "kv_num_heads": 2},
        ),
    ],
)  # fmt: skip
def test_prim_func_text_round_trip(op, types, attrs):
    mod = IRModule({"f": prim_func(op, *types, **attrs)})
    assert structural_equal(parse_module(print_module(mod)), mod)


def test_outputs_shaped_as_inferred():
    s = Var("s")
    types = [TensorType((2, s, 8), F32), TensorType((2, 5, 4), F32), TensorType((2, 5, 6), F32)]
    attrs = {"q_num_heads": 2, "kv_num_heads": 1, "num_outputs": 3}
    func = prim_func("attention", *types, **attrs)
    want = infer("attention", *types, **attrs).fields
    assert [p.shape for p in func.params[3:]] == [(2, s, 12), (2, 1, 5, 4), (2, 1, 5, 6)]
    assert [(p.shape, p.dtype) for p in func.params[3:]] == [(t.shape, t.dtype) for t in want]
