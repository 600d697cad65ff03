"""Layout ops: layout_transform's inference, errors and element placement, and for both
ops the loop program against the numpy reference (fixed and symbolic batch); conv2d_nchwc
against conv2d on the unpacked operands."""

import numpy as np
import pytest

from tcc.ir.errors import ShapeError
from tcc.ir.expr import Var
from tcc.ir.graph import TensorType
from tcc.ir.tir_eval import run_prim_func
from tcc.lower.legalize import op_prim_func
from tests.helpers import assert_compute_matches_ref, infer, ref, run_op

rng = np.random.default_rng(0)
n = Var("n")
CONV = {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1]}


def f32(*shape):
    return TensorType(shape, "float32")


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(
    "shape, src, dst, out",
    [
        ((n, 32, 7, 9), "NCHW", "NCHW16c", (n, 2, 7, 9, 16)),
        ((n, 2, 7, 9, 16), "NCHW16c", "NCHW", (n, 32, 7, 9)),
        ((2, 4, 7, 9, 8), "NCHW8c", "NCHW4c", (2, 8, 7, 9, 4)),
        ((64, 32, 3, 3), "OIHW", "OIHW8i16o", (4, 4, 3, 3, 8, 16)),
        ((32, 1, 3, 3), "OIHW", "OIHW1i8o", (4, 1, 3, 3, 1, 8)),
    ],
)
def test_transform_infer(shape, src, dst, out):
    assert infer("layout_transform", f32(*shape), src=src, dst=dst) == f32(*out)


@pytest.mark.parametrize(
    "shape, src, dst, message",
    [
        ((1, 12, 4, 4), "NCHW", "NCHW8c", "does not split into blocks of 8"),
        ((1, n, 4, 4), "NCHW", "NCHW8c", "needs a static multiple"),
        ((1, 8, 4, 4), "NCHW", "NCHW8C", "a primal axis is one uppercase letter"),
        ((1, 8, 4, 4), "NCHW", "NCHW8d", "blocks an axis it does not have"),
        ((1, 8, 4, 4), "NCHW", "NHWC8c", None),
        ((1, 8, 4, 4), "NCHW", "NCDW", "different primal axes"),
        ((1, 8, 4), "NCHW", "NCHW8c", "rank 4"),
    ],
)
def test_transform_errors(shape, src, dst, message):
    if message is None:  # another order of the same axes is fine
        infer("layout_transform", f32(*shape), src=src, dst=dst)
        return
    with pytest.raises(ShapeError, match=message):
        infer("layout_transform", f32(*shape), src=src, dst=dst)


def test_transform_places_channel_c_at_block_c_div_b_lane_c_mod_b():
    x = rand(2, 24, 3, 5)
    y = run_op("layout_transform", x, src="NCHW", dst="NCHW8c")
    for c in range(24):
        np.testing.assert_array_equal(y[:, c // 8, :, :, c % 8], x[:, c])
    np.testing.assert_array_equal(run_op("layout_transform", y, src="NCHW8c", dst="NCHW"), x)


def test_weight_transform_places_o_i_in_their_blocks():
    w = rand(16, 8, 3, 1)
    p = ref("layout_transform", w, src="OIHW", dst="OIHW4i8o")
    for o, i in [(0, 0), (9, 5), (15, 7), (3, 6)]:
        np.testing.assert_array_equal(p[o // 8, i // 4, :, :, i % 4, o % 8], w[o, i])


@pytest.mark.parametrize(
    "shape, src, dst",
    [
        ((2, 16, 3, 4), "NCHW", "NCHW8c"),
        ((2, 2, 3, 4, 8), "NCHW8c", "NCHW"),
        ((2, 2, 3, 4, 8), "NCHW8c", "NCHW4c"),
        ((2, 2, 3, 4, 8), "NCHW8c", "NCHW16c"),
        ((8, 12, 3, 3), "OIHW", "OIHW4i8o"),
        ((1, 3, 2, 2), "NCHW", "NHWC3c"),
    ],
)
def test_transform_compute_matches_ref(shape, src, dst):
    assert_compute_matches_ref("layout_transform", rand(*shape), src=src, dst=dst)


# ---------------------------------------------------------------------------------------------
# conv2d_nchwc


def test_conv_infer_dense_depthwise_and_symbolic_batch():
    got = infer("conv2d_nchwc", f32(n, 2, 7, 7, 8), f32(4, 2, 3, 3, 8, 16), f32(4, 16),
                **CONV, groups=1)
    assert got == f32(n, 4, 7, 7, 16)
    got = infer("conv2d_nchwc", f32(1, 2, 8, 8, 8), f32(2, 1, 3, 3, 1, 8), groups=16,
                strides=[2, 2], padding=[1, 1, 1, 1], dilation=[1, 1])
    assert got == f32(1, 2, 4, 4, 8)


@pytest.mark.parametrize(
    "x, w, b, groups, message",
    [
        ((1, 2, 4, 4, 8), (4, 3, 3, 3, 8, 8), None, 1, "input channel chunks must match"),
        ((1, 2, 4, 4, 8), (4, 2, 3, 3, 4, 8), None, 1, "input channel blocks must match"),
        ((1, 2, 4, 4, 8), (4, 1, 3, 3, 8, 8), None, 3, "groups must divide the channel count"),
        ((1, 2, 4, 4, 8), (3, 1, 3, 3, 8, 8), None, 2, "whole output channel blocks"),
        ((1, 2, 4, 4, 8), (4, 2, 3, 3, 8, 8), None, 2, "input channel chunks of all groups"),
        ((1, 2, 4, 4, 8), (2, 1, 3, 3, 1, 4), None, 16, "depthwise channel blocks must match"),
        ((1, 2, 4, 4, 8), (4, 2, 3, 3, 8, 8), (32,), 1, "bias must be"),
    ],
)
def test_conv_errors(x, w, b, groups, message):
    with pytest.raises(ShapeError, match=message):
        infer("conv2d_nchwc", f32(*x), f32(*w), None if b is None else f32(*b), **CONV,
              groups=groups)


def pack_conv(x, w, b, ci, co, depthwise=False):
    """The packed operands of conv2d(x, w, b) with input block ci and output block co."""
    w_layout = f"OIHW1i{co}o" if depthwise else f"OIHW{ci}i{co}o"
    return (
        ref("layout_transform", x, src="NCHW", dst=f"NCHW{ci}c"),
        ref("layout_transform", w, src="OIHW", dst=w_layout),
        None if b is None else b.reshape(-1, co),
    )


@pytest.mark.parametrize(
    "cin, cout, ci, co, attrs",
    [
        (16, 16, 8, 8, CONV),
        (3, 8, 3, 4, {"strides": [2, 2], "padding": [0, 1, 1, 0], "dilation": [1, 1]}),
        (8, 16, 4, 16, {"strides": [1, 2], "padding": [2, 2, 2, 2], "dilation": [2, 1]}),
    ],
)
def test_conv_is_conv2d_on_the_unpacked_operands(cin, cout, ci, co, attrs):
    x, w, b = rand(1, cin, 5, 4), rand(cout, cin, 3, 3), rand(cout)
    xc, wc, bc = pack_conv(x, w, b, ci, co)
    want = ref("conv2d", x, w, b, **attrs, groups=1)
    got = run_op("conv2d_nchwc", xc, wc, bc, **attrs, groups=1)
    np.testing.assert_allclose(
        ref("layout_transform", got, src=f"NCHW{co}c", dst="NCHW"), want, rtol=1e-5, atol=1e-4
    )
    assert_compute_matches_ref("conv2d_nchwc", xc, wc, bc, rtol=1e-5, atol=1e-4, **attrs, groups=1)
    assert_compute_matches_ref("conv2d_nchwc", xc, wc, rtol=1e-5, atol=1e-4, **attrs, groups=1)


def test_depthwise_conv_is_conv2d_on_the_unpacked_operands():
    x, w = rand(1, 16, 6, 6), rand(16, 1, 3, 3)
    xc, wc, _ = pack_conv(x, w, None, 8, 8, depthwise=True)
    attrs = {"strides": [2, 2], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 16}
    got = run_op("conv2d_nchwc", xc, wc, **attrs)
    np.testing.assert_allclose(
        ref("layout_transform", got, src="NCHW8c", dst="NCHW"), ref("conv2d", x, w, **attrs),
        rtol=1e-5, atol=1e-5,
    )
    assert_compute_matches_ref("conv2d_nchwc", xc, wc, rtol=1e-5, atol=1e-5, **attrs)


@pytest.mark.parametrize(
    "cin, cout, groups, ci, co, attrs",
    [
        (32, 64, 2, 8, 16, CONV),
        (16, 32, 4, 4, 8, {"strides": [2, 1], "padding": [2, 1, 0, 2], "dilation": [1, 2]}),
    ],
)
def test_grouped_conv_is_conv2d_on_the_unpacked_operands(cin, cout, groups, ci, co, attrs):
    """Each output chunk reads only its own group's input chunks: the result is each
    group's dense conv2d of its own channels, side by side."""
    x, w, b = rand(1, cin, 7, 6), rand(cout, cin // groups, 3, 3), rand(cout)
    xc, wc, bc = pack_conv(x, w, b, ci, co)
    gi, go = cin // groups, cout // groups
    want = np.concatenate([
        ref("conv2d", x[:, g * gi:(g + 1) * gi], w[g * go:(g + 1) * go], b[g * go:(g + 1) * go],
            **attrs, groups=1)
        for g in range(groups)], axis=1)
    assert infer("conv2d_nchwc", f32(*xc.shape), f32(*wc.shape), f32(*bc.shape), **attrs,
                 groups=groups).shape[1:] == (cout // co, *want.shape[2:], co)
    got = run_op("conv2d_nchwc", xc, wc, bc, **attrs, groups=groups)
    np.testing.assert_allclose(ref("layout_transform", got, src=f"NCHW{co}c", dst="NCHW"), want,
                               rtol=1e-5, atol=1e-4)
    assert_compute_matches_ref("conv2d_nchwc", xc, wc, bc, rtol=1e-5, atol=1e-4, **attrs,
                               groups=groups)


def test_conv_loop_program_for_a_symbolic_batch():
    attrs = {**CONV, "groups": 1}
    func = op_prim_func("conv2d_nchwc", [f32(n, 1, 4, 4, 8), f32(2, 1, 3, 3, 8, 8)], attrs)
    x, w = rand(3, 1, 4, 4, 8), rand(2, 1, 3, 3, 8, 8)
    y = np.zeros((3, 2, 4, 4, 8), np.float32)
    run_prim_func(func, [x, w, y])
    np.testing.assert_allclose(y, ref("conv2d_nchwc", x, w, **attrs), rtol=1e-5, atol=1e-4)
