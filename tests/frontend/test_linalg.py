"""ONNX linear-algebra converters checked against onnxruntime: MatMul, Gemm, Einsum, the
quantization ops, Attention, RotaryEmbedding; FlexAttention's inlined mod graphs."""

from functools import partial

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from tcc.frontend.onnx import from_onnx
from tcc.ir.errors import FrontendError
from tcc.ir.interp import run
from tests.helpers import assert_matches_ort, onnx_model, value_info

pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(0)

_model = partial(onnx_model, ir_version=10)
_check = partial(assert_matches_ort, rtol=1e-5, atol=1e-6)
_vi = value_info  # short: the models below are written densely


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_matmul_symbolic_batch_against_ort():
    m = _model(helper.make_node("MatMul", ["a", "b"], ["c"]),
               [_vi("a", TP.FLOAT, ["n", 1, 3, 4]), _vi("b", TP.FLOAT, [2, 4, 5])],
               [_vi("c", TP.FLOAT, None)], opset=13)  # fmt: skip
    out = from_onnx(m)["main"].bindings[-1].var.type
    assert str(out.shape[0]) == "n" and out.shape[1:] == (2, 3, 5)
    for n in (1, 3):
        _check(m, {"a": _f32(n, 1, 3, 4), "b": _f32(2, 4, 5)})


@pytest.mark.parametrize("opset", [7, 13])
def test_gemm_all_attributes_against_ort(opset):
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=0.25, beta=0.5, transA=1, transB=1)
    m = _model(node, [_vi("a", TP.FLOAT, [4, 3]), _vi("b", TP.FLOAT, [5, 4]), _vi("c", TP.FLOAT, [5])],
               [_vi("y", TP.FLOAT, None)], opset=opset)  # fmt: skip
    _check(m, {"a": _f32(4, 3), "b": _f32(5, 4), "c": _f32(5)})


def test_einsum_with_ellipsis_against_ort():
    node = helper.make_node("Einsum", ["x", "y"], ["z"], equation="...ij, ...jk -> ...ik")
    m = _model(node, [_vi("x", TP.FLOAT, ["n", 2, 3]), _vi("y", TP.FLOAT, ["n", 3, 4])],
               [_vi("z", TP.FLOAT, None)], opset=12)  # fmt: skip
    _check(m, {"x": _f32(5, 2, 3), "y": _f32(5, 3, 4)})


def test_quantize_dequantize_per_axis_against_ort():
    x, scale, zp = _f32(2, 3, 4) * 20, np.array([0.1, 0.2, 0.3], np.float32), np.array([1, -2, 3], np.int8)
    q = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1)
    m = _model(q, [_vi("x", TP.FLOAT, [2, 3, 4]), _vi("s", TP.FLOAT, [3]), _vi("z", TP.INT8, [3])],
               [_vi("y", TP.INT8, None)], opset=13)  # fmt: skip
    _check(m, {"x": x, "s": scale, "z": zp})
    d = helper.make_node("DequantizeLinear", ["y", "s", "z"], ["x"], axis=1)
    m = _model(d, [_vi("y", TP.INT8, [2, 3, 4]), _vi("s", TP.FLOAT, [3]), _vi("z", TP.INT8, [3])],
               [_vi("x", TP.FLOAT, None)], opset=13)  # fmt: skip
    _check(m, {"y": RNG.integers(-128, 127, (2, 3, 4), dtype=np.int8), "s": scale, "z": zp})


def test_dynamic_quantize_and_qlinear_matmul_against_ort():
    m = _model(helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"]),
               [_vi("x", TP.FLOAT, [3, 4])],
               [_vi("y", TP.UINT8, None), _vi("s", TP.FLOAT, None), _vi("z", TP.UINT8, None)], opset=11)  # fmt: skip
    _check(m, {"x": _f32(3, 4)})
    names = ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
    types = [TP.UINT8, TP.FLOAT, TP.UINT8] * 2 + [TP.FLOAT, TP.UINT8]
    shapes = [[2, 2, 4], [], [], [4, 3], [], [], [], []]
    m = _model(helper.make_node("QLinearMatMul", names, ["y"]),
               [_vi(n, t, s) for n, t, s in zip(names, types, shapes)], [_vi("y", TP.UINT8, None)], opset=10)  # fmt: skip
    u8 = lambda *s: RNG.integers(0, 255, s, dtype=np.uint8)  # noqa: E731
    feeds = {"a": u8(2, 2, 4), "as": np.float32(0.05), "az": np.uint8(120), "b": u8(4, 3),
             "bs": np.float32(0.02), "bz": np.uint8(130), "ys": np.float32(0.3), "yz": np.uint8(128)}  # fmt: skip
    _check(m, {k: np.asarray(v) for k, v in feeds.items()})


def test_matmul_integer_against_ort():
    m = _model(helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"]),
               [_vi("a", TP.UINT8, [3, 4]), _vi("b", TP.UINT8, [4, 2]), _vi("az", TP.UINT8, []),
                _vi("bz", TP.UINT8, [2])], [_vi("y", TP.INT32, None)], opset=10)  # fmt: skip
    u8 = lambda *s: RNG.integers(0, 255, s, dtype=np.uint8)  # noqa: E731
    _check(m, {"a": u8(3, 4), "b": u8(4, 2), "az": np.asarray(u8(1)[0]), "bz": u8(2)})


def test_attention_3d_gqa_causal_with_past_against_ort():
    node = helper.make_node("Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "ok", "ov"],
                            q_num_heads=4, kv_num_heads=2, is_causal=1)  # fmt: skip
    ins = [_vi("q", TP.FLOAT, ["b", 3, 32]), _vi("k", TP.FLOAT, ["b", 3, 16]),
           _vi("v", TP.FLOAT, ["b", 3, 16]), _vi("pk", TP.FLOAT, ["b", 2, 2, 8]),
           _vi("pv", TP.FLOAT, ["b", 2, 2, 8])]  # fmt: skip
    m = _model(node, ins, [_vi(n, TP.FLOAT, None) for n in ("y", "ok", "ov")], opset=23)
    feeds = {"q": _f32(2, 3, 32), "k": _f32(2, 3, 16), "v": _f32(2, 3, 16), "pk": _f32(2, 2, 2, 8),
             "pv": _f32(2, 2, 2, 8)}  # fmt: skip
    _check(m, feeds, rtol=1e-4, atol=1e-5)


def test_attention_float_mask_and_qk_output_against_ort():
    node = helper.make_node("Attention", ["q", "k", "v", "m"], ["y", "", "", "qk"], qk_matmul_output_mode=2)
    ins = [_vi("q", TP.FLOAT, [1, 2, 3, 4]), _vi("k", TP.FLOAT, [1, 2, 5, 4]), _vi("v", TP.FLOAT, [1, 2, 5, 4]),
           _vi("m", TP.FLOAT, [3, 5])]  # fmt: skip
    m = _model(node, ins, [_vi("y", TP.FLOAT, None), _vi("qk", TP.FLOAT, None)], opset=23)
    feeds = {"q": _f32(1, 2, 3, 4), "k": _f32(1, 2, 5, 4), "v": _f32(1, 2, 5, 4), "m": _f32(3, 5)}
    _check(m, feeds, rtol=1e-4, atol=1e-5)


def test_rotary_embedding_3d_against_ort():
    node = helper.make_node("RotaryEmbedding", ["x", "c", "s", "p"], ["y"], num_heads=2, interleaved=1)
    ins = [_vi("x", TP.FLOAT, [2, 3, 16]), _vi("c", TP.FLOAT, [10, 4]), _vi("s", TP.FLOAT, [10, 4]),
           _vi("p", TP.INT64, [2, 3])]  # fmt: skip
    m = _model(node, ins, [_vi("y", TP.FLOAT, None)], opset=23)
    theta = RNG.uniform(0, 3, (10, 4)).astype(np.float32)
    feeds = {"x": _f32(2, 3, 16), "c": np.cos(theta), "s": np.sin(theta), "p": RNG.integers(0, 10, (2, 3))}
    _check(m, feeds)


def _flex(score_mod):
    node = helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview",
                            score_mod=score_mod)  # fmt: skip
    ins = [_vi(n, TP.FLOAT, [1, 2, 3, 4]) for n in ("q", "k", "v")]
    return _model(node, ins, [_vi("y", TP.FLOAT, None)], opset=26,
                  extra_opsets=[("ai.onnx.preview", 1)])  # fmt: skip


def _mod_graph(op_type, init):
    return helper.make_graph([helper.make_node(op_type, ["scores", "c"], ["out"])], "mod",
                             [_vi("scores", TP.FLOAT, None)], [_vi("out", TP.FLOAT, None)], [init])  # fmt: skip


def test_flex_attention_inlines_score_mod():
    m = _flex(_mod_graph("Mul", helper.make_tensor("c", TP.FLOAT, [], [2.0])))
    q, k, v = _f32(1, 2, 3, 4), _f32(1, 2, 3, 4), _f32(1, 2, 3, 4)
    (y,) = run(from_onnx(m), {"q": q, "k": k, "v": v})
    s = q @ k.transpose(0, 1, 3, 2) / 2 * 2.0
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(y, (p / p.sum(-1, keepdims=True)) @ v, rtol=1e-5, atol=1e-6)


def test_flex_attention_rejects_unsupported_mod_op():
    m = _flex(_mod_graph("NoSuchOp", helper.make_tensor("c", TP.FLOAT, [], [2.0])))
    with pytest.raises(FrontendError, match="score_mod uses NoSuchOp, which tcc does not support"):
        from_onnx(m)


def test_quantization_to_a_type_tcc_lacks_is_reported_unsupported():
    node = helper.make_node("QuantizeLinear", ["x", "s"], ["y"], output_dtype=TP.FLOAT6E2M3)
    m = _model(node, [_vi("x", TP.FLOAT, [4]), _vi("s", TP.FLOAT, [])], [_vi("y", TP.FLOAT, None)], opset=21)
    with pytest.raises(FrontendError, match=f"output_dtype={TP.FLOAT6E2M3} names an element type tcc does not support"):
        from_onnx(m)
