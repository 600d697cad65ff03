"""alter-conv-layout: golden before/after modules (AVX2 target: blocks of 8 float32 lanes),
each also run on the reference interpreter before and after (float32 summation order
differs: rtol 1e-5, atol 1e-5; Winograd's transforms: rtol 1e-3, atol 1e-3), the block chosen from the target, and three CNNs compiled
with the pass against onnxruntime."""

import numpy as np
import pytest

from tcc.frontend.onnx import from_onnx
from tcc.ir import graph as G
from tcc.ir.interp import run
from tcc.ir.ops.winograd import G as WINOGRAD_G
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_module
from tcc.ir.structural import structural_equal
from tcc.lower.passes import PASSES, PIPELINE, TARGETED, run_pipeline
from tcc.lower.passes.alter_conv_layout import alter_conv_layout
from tcc.target import LLVMTarget
from tests.e2e.test_models import onnxruntime_outputs
from tests.helpers import call_ops
from tests.lower.test_fold_batch_norm import random_inputs, with_values
from tests.models import builders
from tests.packs import compiled_fn

AVX2 = LLVMTarget("x86_64-unknown-linux-gnu", "haswell", "+avx,+avx2")
CONV = "strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1]"


def verify(before: str, expected: str, target=AVX2, rtol=1e-5, atol=1e-5):
    mod = with_values(parse_module(before))
    text = print_module(mod)
    values = {k: v.copy() for k, v in mod.const_values.items()}
    got = alter_conv_layout(mod, target)
    assert structural_equal(got, parse_module(expected)), print_module(got)
    # the input module is left alone
    assert print_module(mod) == text
    assert all(np.array_equal(mod.const_values[k], v) for k, v in values.items())
    assert got.const_values.keys() == got.const_types.keys()
    feeds = random_inputs(mod["main"])
    for want, have in zip(run(mod, feeds), run(got, feeds)):
        np.testing.assert_allclose(have, want, rtol=rtol, atol=atol)
    return mod, got


def unchanged(text: str):
    verify(text, text)


def test_registered_before_fusion_with_the_target():
    assert PASSES["alter-conv-layout"] is alter_conv_layout
    assert "alter-conv-layout" in TARGETED
    assert PIPELINE.index("alter-conv-layout") < PIPELINE.index("fuse-ops")


def test_single_conv_is_packed_between_two_transforms():
    mod, got = verify(
        f'''
constants = {{"w": Tensor((16, 8, 3, 3), "float32"), "b": Tensor((16,), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 8, 5, 5), "float32")) -> Tensor((1, 16, 5, 5), "float32"):
    y: Tensor((1, 16, 5, 5), "float32") = op.conv2d(x, const("w"), const("b"), {CONV}, groups=1)
    return y
''',
        f'''
constants = {{"w_OIHW8i8o": Tensor((2, 1, 3, 3, 8, 8), "float32"), "b_8o": Tensor((2, 8), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 8, 5, 5), "float32")) -> Tensor((1, 16, 5, 5), "float32"):
    x_NCHW8c: Tensor((1, 1, 5, 5, 8), "float32") = op.layout_transform(x, src="NCHW", dst="NCHW8c")
    y_c: Tensor((1, 2, 5, 5, 8), "float32") = op.conv2d_nchwc(x_NCHW8c, const("w_OIHW8i8o"), const("b_8o"), {CONV}, groups=1)
    y: Tensor((1, 16, 5, 5), "float32") = op.layout_transform(y_c, src="NCHW8c", dst="NCHW")
    return y
''',
    )
    # weight element (o, i, kh, kw) sits at [o // 8, i // 8, kh, kw, i % 8, o % 8]
    w, packed = mod.const_values["w"], got.const_values["w_OIHW8i8o"]
    assert packed[1, 0, 2, 1, 5, 3] == w[8 + 3, 5, 2, 1]
    np.testing.assert_array_equal(got.const_values["b_8o"].reshape(-1), mod.const_values["b"])


def test_a_conv1d_runs_as_a_blocked_conv2d_over_a_height_of_one():
    """A strided, padded conv1d (a speech model's stem) is a conv2d over (N, C, 1, L): its
    weight reshaped to (O, I, 1, K) at compile time, then packed as any conv2d's."""
    mod, got = verify(
        '''
constants = {"w": Tensor((16, 8, 3), "float32"), "b": Tensor((16,), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 8, 10), "float32")) -> Tensor((1, 16, 5), "float32"):
    y: Tensor((1, 16, 5), "float32") = op.conv1d(x, const("w"), const("b"), strides=[2], padding=[1, 1], dilation=[1], groups=1)
    return y
''',
        '''
constants = {"w_OI1W_OIHW8i8o": Tensor((2, 1, 1, 3, 8, 8), "float32"), "b_8o": Tensor((2, 8), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 8, 10), "float32")) -> Tensor((1, 16, 5), "float32"):
    y_rows: Tensor((1, 8, 1, 10), "float32") = op.expand_dims(x, axes=[2])
    y_rows_NCHW8c: Tensor((1, 1, 1, 10, 8), "float32") = op.layout_transform(y_rows, src="NCHW", dst="NCHW8c")
    y_2d_c: Tensor((1, 2, 1, 5, 8), "float32") = op.conv2d_nchwc(y_rows_NCHW8c, const("w_OI1W_OIHW8i8o"), const("b_8o"), strides=[1, 2], padding=[0, 1, 0, 1], dilation=[1, 1], groups=1)
    y_2d: Tensor((1, 16, 1, 5), "float32") = op.layout_transform(y_2d_c, src="NCHW8c", dst="NCHW")
    y: Tensor((1, 16, 5), "float32") = op.squeeze(y_2d, axes=[2])
    return y
''',
    )
    w, packed = mod.const_values["w"], got.const_values["w_OI1W_OIHW8i8o"]
    assert packed[1, 0, 0, 2, 5, 3] == w[8 + 3, 5, 2]


def test_a_conv1d_whose_channels_do_not_block_stays():
    unchanged('''
constants = {"w": Tensor((6, 5, 3), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 5, 10), "float32")) -> Tensor((1, 6, 8), "float32"):
    y: Tensor((1, 6, 8), "float32") = op.conv1d(x, const("w"), strides=[1], padding=[0, 0], dilation=[1], groups=1)
    return y
''')


def test_a_3x3_conv_with_enough_tiles_and_channels_runs_as_winograd():
    """32 channels at 28 x 28: 7 x 7 tiles of 4 x 4 outputs, each tile's 6 x 6 input
    transformed, one batched product over the 36 tile positions and the 4 blocks of 8 output
    channels with the weights transformed at compile time (6, 6, O / 8, I, 8), and the
    output transform adding the bias."""
    mod, got = verify(
        f'''
constants = {{"w": Tensor((32, 32, 3, 3), "float32"), "b": Tensor((32,), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 32, 28, 28), "float32")) -> Tensor((1, 32, 28, 28), "float32"):
    y: Tensor((1, 32, 28, 28), "float32") = op.conv2d(x, const("w"), const("b"), {CONV}, groups=1)
    return y
''',
        '''
constants = {"w_winograd8o": Tensor((6, 6, 4, 32, 8), "float32"), "b_8o": Tensor((4, 8), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 32, 28, 28), "float32")) -> Tensor((1, 32, 28, 28), "float32"):
    x_NCHW8c: Tensor((1, 4, 28, 28, 8), "float32") = op.layout_transform(x, src="NCHW", dst="NCHW8c")
    y_wino_in: Tensor((6, 6, 1, 7, 7, 4, 8), "float32") = op.winograd_input_nchwc(x_NCHW8c, padding=[1, 1, 1, 1])
    y_wino_v: Tensor((6, 6, 1, 49, 32), "float32") = op.reshape(y_wino_in, shape=[6, 6, 1, -1, 32])
    y_wino_m: Tensor((6, 6, 4, 49, 8), "float32") = op.matmul(y_wino_v, const("w_winograd8o"))
    y_wino_mt: Tensor((6, 6, 4, 1, 7, 7, 8), "float32") = op.reshape(y_wino_m, shape=[6, 6, 4, 1, 7, 7, 8])
    y_c: Tensor((1, 4, 28, 28, 8), "float32") = op.winograd_output_nchwc(y_wino_mt, const("b_8o"), height=28, width=28)
    y: Tensor((1, 32, 28, 28), "float32") = op.layout_transform(y_c, src="NCHW8c", dst="NCHW")
    return y
''',
        rtol=1e-3, atol=1e-3,  # outputs up to about 20: Winograd's bound, 1e-4 of the largest
    )
    g = np.array(WINOGRAD_G, dtype=np.float64)  # U[a, b, o // 8, i, o % 8] = (G w[o, i] G^T)[a, b]
    w, u = mod.const_values["w"].astype(np.float64), got.const_values["w_winograd8o"]
    np.testing.assert_allclose(u[:, :, 2, 5, 3], g @ w[19, 5] @ g.T, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("cin, cout, size, winograd", [
    (32, 32, 13, True),  # 4 x 4 tiles, the last row and column of them cropped
    (32, 32, 12, False),  # 3 x 3 tiles
    (16, 32, 28, False),  # 16 input channels need 64 tiles, not 7 x 7
    (32, 16, 28, False),  # and so do 16 output channels
    (16, 64, 32, True),  # 8 x 8 tiles
    (64, 16, 29, True),
    (8, 64, 56, False),  # too few input channels at any size
])
def test_winograd_needs_32_channels_and_16_tiles_or_16_channels_and_64_tiles(cin, cout, size,
                                                                              winograd):
    mod = with_values(parse_module(f'''
constants = {{"w": Tensor(({cout}, {cin}, 3, 3), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, {cin}, {size}, {size}), "float32")) -> Tensor((1, {cout}, {size}, {size}), "float32"):
    y: Tensor((1, {cout}, {size}, {size}), "float32") = op.conv2d(x, const("w"), {CONV}, groups=1)
    return y
'''))
    ops = call_ops(run_pipeline(mod, disable=["fuse-ops"], target=AVX2))
    assert ("winograd_output_nchwc" in ops, "conv2d_nchwc" in ops) == (winograd, not winograd)


def test_conv_relu_conv_stays_blocked():
    verify(
        f'''
constants = {{"w1": Tensor((8, 8, 3, 3), "float32"), "w2": Tensor((8, 8, 3, 3), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 8, 4, 4), "float32")) -> Tensor((1, 8, 4, 4), "float32"):
    c: Tensor((1, 8, 4, 4), "float32") = op.conv2d(x, const("w1"), {CONV}, groups=1)
    r: Tensor((1, 8, 4, 4), "float32") = op.relu(c)
    y: Tensor((1, 8, 4, 4), "float32") = op.conv2d(r, const("w2"), {CONV}, groups=1)
    return y
''',
        f'''
constants = {{"w1_OIHW8i8o": Tensor((1, 1, 3, 3, 8, 8), "float32"), "w2_OIHW8i8o": Tensor((1, 1, 3, 3, 8, 8), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 8, 4, 4), "float32")) -> Tensor((1, 8, 4, 4), "float32"):
    x_NCHW8c: Tensor((1, 1, 4, 4, 8), "float32") = op.layout_transform(x, src="NCHW", dst="NCHW8c")
    c_c: Tensor((1, 1, 4, 4, 8), "float32") = op.conv2d_nchwc(x_NCHW8c, const("w1_OIHW8i8o"), {CONV}, groups=1)
    r_c: Tensor((1, 1, 4, 4, 8), "float32") = op.relu(c_c)
    y_c: Tensor((1, 1, 4, 4, 8), "float32") = op.conv2d_nchwc(r_c, const("w2_OIHW8i8o"), {CONV}, groups=1)
    y: Tensor((1, 8, 4, 4), "float32") = op.layout_transform(y_c, src="NCHW8c", dst="NCHW")
    return y
''',
    )


def test_transform_pair_in_the_input_cancels():
    verify(
        '''
@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 2, 3, 3, 8), "float32")) -> Tensor((1, 2, 3, 3, 8), "float32"):
    a: Tensor((1, 16, 3, 3), "float32") = op.layout_transform(x, src="NCHW8c", dst="NCHW")
    y: Tensor((1, 2, 3, 3, 8), "float32") = op.layout_transform(a, src="NCHW", dst="NCHW8c")
    return y
''',
        '''
@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 2, 3, 3, 8), "float32")) -> Tensor((1, 2, 3, 3, 8), "float32"):
    return x
''',
    )


def test_residual_add_and_per_channel_scale_stay_blocked():
    verify(
        f'''
constants = {{"w1": Tensor((8, 8, 3, 3), "float32"), "w2": Tensor((8, 8, 3, 3), "float32"), "s": Tensor((8, 1, 1), "float32"), "t": Tensor((), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 8, 4, 4), "float32")) -> Tensor((1, 8, 4, 4), "float32"):
    c: Tensor((1, 8, 4, 4), "float32") = op.conv2d(x, const("w1"), {CONV}, groups=1)
    d: Tensor((1, 8, 4, 4), "float32") = op.conv2d(c, const("w2"), {CONV}, groups=1)
    m: Tensor((1, 8, 4, 4), "float32") = op.mul(d, const("s"))
    a: Tensor((1, 8, 4, 4), "float32") = op.add(m, c)
    y: Tensor((1, 8, 4, 4), "float32") = op.clip(a, const("t"), None)
    return y
''',
        f'''
constants = {{"w1_OIHW8i8o": Tensor((1, 1, 3, 3, 8, 8), "float32"), "w2_OIHW8i8o": Tensor((1, 1, 3, 3, 8, 8), "float32"), "s_NCHW8c": Tensor((1, 1, 1, 8), "float32"), "t": Tensor((), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 8, 4, 4), "float32")) -> Tensor((1, 8, 4, 4), "float32"):
    x_NCHW8c: Tensor((1, 1, 4, 4, 8), "float32") = op.layout_transform(x, src="NCHW", dst="NCHW8c")
    c_c: Tensor((1, 1, 4, 4, 8), "float32") = op.conv2d_nchwc(x_NCHW8c, const("w1_OIHW8i8o"), {CONV}, groups=1)
    d_c: Tensor((1, 1, 4, 4, 8), "float32") = op.conv2d_nchwc(c_c, const("w2_OIHW8i8o"), {CONV}, groups=1)
    m_c: Tensor((1, 1, 4, 4, 8), "float32") = op.mul(d_c, const("s_NCHW8c"))
    a_c: Tensor((1, 1, 4, 4, 8), "float32") = op.add(m_c, c_c)
    y_c: Tensor((1, 1, 4, 4, 8), "float32") = op.clip(a_c, const("t"), None)
    y: Tensor((1, 8, 4, 4), "float32") = op.layout_transform(y_c, src="NCHW8c", dst="NCHW")
    return y
''',
    )


def test_depthwise_conv_and_pools():
    verify(
        f'''
constants = {{"w": Tensor((16, 1, 3, 3), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((2, 16, 6, 6), "float32")) -> Tensor((2, 16, 1, 1), "float32"):
    c: Tensor((2, 16, 6, 6), "float32") = op.conv2d(x, const("w"), {CONV}, groups=16)
    p: Tensor((2, 16, 3, 3), "float32") = op.avg_pool2d(c, kernel=[3, 3], strides=[2, 2], padding=[1, 1, 0, 0], dilation=None, ceil_mode=False, count_include_pad=False)
    y: Tensor((2, 16, 1, 1), "float32") = op.global_avg_pool(p)
    return y
''',
        f'''
constants = {{"w_OIHW1i8o": Tensor((2, 1, 3, 3, 1, 8), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((2, 16, 6, 6), "float32")) -> Tensor((2, 16, 1, 1), "float32"):
    x_NCHW8c: Tensor((2, 2, 6, 6, 8), "float32") = op.layout_transform(x, src="NCHW", dst="NCHW8c")
    c_c: Tensor((2, 2, 6, 6, 8), "float32") = op.conv2d_nchwc(x_NCHW8c, const("w_OIHW1i8o"), {CONV}, groups=16)
    p_c: Tensor((2, 2, 3, 3, 8), "float32") = op.avg_pool3d(c_c, kernel=[3, 3, 1], strides=[2, 2, 1], padding=[1, 1, 0, 0, 0, 0], dilation=[1, 1, 1], ceil_mode=False, count_include_pad=False)
    y_c: Tensor((2, 2, 1, 1, 8), "float32") = op.avg_pool3d(p_c, kernel=[3, 3, 1], strides=[1, 1, 1], padding=[0, 0, 0, 0, 0, 0], dilation=[1, 1, 1], ceil_mode=False, count_include_pad=False)
    y: Tensor((2, 16, 1, 1), "float32") = op.layout_transform(y_c, src="NCHW8c", dst="NCHW")
    return y
''',
    )


@pytest.mark.parametrize("reduction, pool", [
    ("reduce_mean", "avg_pool3d(c_c, kernel=[4, 4, 1], strides=[1, 1, 1], padding=[0, 0, 0, 0, 0, 0], dilation=[1, 1, 1], ceil_mode=False, count_include_pad=False)"),
    ("reduce_max", "max_pool3d(c_c, kernel=[4, 4, 1], strides=[1, 1, 1], padding=[0, 0, 0, 0, 0, 0], dilation=[1, 1, 1], ceil_mode=False)"),
])
def test_a_squeeze_and_excitation_block_stays_blocked(reduction, pool):
    """The SE block of EfficientNet and RegNetY: a mean (or maximum) over the plane, keeping
    its dims, is a global pool, and the per-sample per-channel scale it gives multiplies the
    blocked activation in place: no transform of the whole activation."""
    verify(
        f'''
constants = {{"w": Tensor((8, 8, 3, 3), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((2, 8, 4, 4), "float32")) -> Tensor((2, 8, 4, 4), "float32"):
    c: Tensor((2, 8, 4, 4), "float32") = op.conv2d(x, const("w"), {CONV}, groups=1)
    m: Tensor((2, 8, 1, 1), "float32") = op.{reduction}(c, axes=[-1, -2], keepdims=True, extents=None, kept=None)
    s: Tensor((2, 8, 1, 1), "float32") = op.sigmoid(m)
    y: Tensor((2, 8, 4, 4), "float32") = op.mul(c, s)
    return y
''',
        f'''
constants = {{"w_OIHW8i8o": Tensor((1, 1, 3, 3, 8, 8), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((2, 8, 4, 4), "float32")) -> Tensor((2, 8, 4, 4), "float32"):
    x_NCHW8c: Tensor((2, 1, 4, 4, 8), "float32") = op.layout_transform(x, src="NCHW", dst="NCHW8c")
    c_c: Tensor((2, 1, 4, 4, 8), "float32") = op.conv2d_nchwc(x_NCHW8c, const("w_OIHW8i8o"), {CONV}, groups=1)
    m_c: Tensor((2, 1, 1, 1, 8), "float32") = op.{pool}
    s_c: Tensor((2, 1, 1, 1, 8), "float32") = op.sigmoid(m_c)
    y_c: Tensor((2, 1, 4, 4, 8), "float32") = op.mul(c_c, s_c)
    y: Tensor((2, 8, 4, 4), "float32") = op.layout_transform(y_c, src="NCHW8c", dst="NCHW")
    return y
''',
    )


@pytest.mark.parametrize("mean, shape", [
    ("op.reduce_mean(c, axes=[1], keepdims=True, extents=None, kept=None)", "(2, 1, 4, 4)"),
    ("op.reduce_mean(c, axes=[2, 3], keepdims=False, extents=None, kept=None)", "(2, 8)"),
])
def test_a_mean_not_over_the_plane_or_not_keeping_its_dims_reads_the_nchw_value(mean, shape):
    mod = parse_module(f'''
constants = {{"w": Tensor((8, 8, 3, 3), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((2, 8, 4, 4), "float32")) -> Tensor({shape}, "float32"):
    c: Tensor((2, 8, 4, 4), "float32") = op.conv2d(x, const("w"), {CONV}, groups=1)
    y: Tensor({shape}, "float32") = {mean}
    return y
''')
    out = alter_conv_layout(mod, AVX2)
    (mean_call,) = [b.value for b in out.functions["main"].bindings
                    if isinstance(b.value, G.Call) and b.value.op == "reduce_mean"]
    assert G.type_of(mean_call.args[0]).shape == (2, 8, 4, 4)


def test_input_channels_that_do_not_divide_take_the_largest_divisor():
    verify(
        f'''
constants = {{"w": Tensor((8, 3, 3, 3), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((n, 3, 4, 4), "float32")) -> Tensor((n, 8, 4, 4), "float32"):
    y: Tensor((n, 8, 4, 4), "float32") = op.conv2d(x, const("w"), {CONV}, groups=1)
    return y
''',
        f'''
constants = {{"w_OIHW3i8o": Tensor((1, 1, 3, 3, 3, 8), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((n, 3, 4, 4), "float32")) -> Tensor((n, 8, 4, 4), "float32"):
    x_NCHW3c: Tensor((n, 1, 4, 4, 3), "float32") = op.layout_transform(x, src="NCHW", dst="NCHW3c")
    y_c: Tensor((n, 1, 4, 4, 8), "float32") = op.conv2d_nchwc(x_NCHW3c, const("w_OIHW3i8o"), {CONV}, groups=1)
    y: Tensor((n, 8, 4, 4), "float32") = op.layout_transform(y_c, src="NCHW8c", dst="NCHW")
    return y
''',
    )


def test_output_channels_half_a_vector_divides_take_half_vector_blocks():
    # 12 output channels on 8 lanes: blocks of 4, the input still in blocks of 8
    verify(
        f'''
constants = {{"w": Tensor((12, 8, 3, 3), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 8, 4, 4), "float32")) -> Tensor((1, 12, 4, 4), "float32"):
    y: Tensor((1, 12, 4, 4), "float32") = op.conv2d(x, const("w"), {CONV}, groups=1)
    return y
''',
        f'''
constants = {{"w_OIHW8i4o": Tensor((3, 1, 3, 3, 8, 4), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 8, 4, 4), "float32")) -> Tensor((1, 12, 4, 4), "float32"):
    x_NCHW8c: Tensor((1, 1, 4, 4, 8), "float32") = op.layout_transform(x, src="NCHW", dst="NCHW8c")
    y_c: Tensor((1, 3, 4, 4, 4), "float32") = op.conv2d_nchwc(x_NCHW8c, const("w_OIHW8i4o"), {CONV}, groups=1)
    y: Tensor((1, 12, 4, 4), "float32") = op.layout_transform(y_c, src="NCHW4c", dst="NCHW")
    return y
''',
    )


def test_grouped_conv_takes_blocks_of_its_groups_channels():
    # 2 groups of 4 input and 8 output channels: input blocks of 4, output blocks of 8
    verify(
        f'''
constants = {{"w": Tensor((16, 4, 3, 3), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 8, 4, 4), "float32")) -> Tensor((1, 16, 4, 4), "float32"):
    y: Tensor((1, 16, 4, 4), "float32") = op.conv2d(x, const("w"), {CONV}, groups=2)
    return y
''',
        f'''
constants = {{"w_OIHW4i8o": Tensor((2, 1, 3, 3, 4, 8), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 8, 4, 4), "float32")) -> Tensor((1, 16, 4, 4), "float32"):
    x_NCHW4c: Tensor((1, 2, 4, 4, 4), "float32") = op.layout_transform(x, src="NCHW", dst="NCHW4c")
    y_c: Tensor((1, 2, 4, 4, 8), "float32") = op.conv2d_nchwc(x_NCHW4c, const("w_OIHW4i8o"), {CONV}, groups=2)
    y: Tensor((1, 16, 4, 4), "float32") = op.layout_transform(y_c, src="NCHW8c", dst="NCHW")
    return y
''',
    )


POINTWISE = "strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1]"


def test_a_grouped_1x1_conv_whose_groups_no_vector_divides_runs_as_a_batched_matmul():
    # 4 groups of 3 input and 6 output channels (8 lanes divide neither): the weights as
    # (4, 6, 3), the input viewed as (N, 4, 3, H * W), the bias added to the product's view
    _, got = verify(
        f'''
constants = {{"w": Tensor((24, 3, 1, 1), "float32"), "b": Tensor((24,), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((2, 12, 3, 5), "float32")) -> Tensor((2, 24, 3, 5), "float32"):
    c: Tensor((2, 24, 3, 5), "float32") = op.conv2d(x, const("w"), const("b"), {POINTWISE}, groups=4)
    y: Tensor((2, 24, 3, 5), "float32") = op.relu(c)
    return y
''',
        '''
constants = {"w_groups": Tensor((4, 6, 3), "float32"), "b_C11": Tensor((24, 1, 1), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((2, 12, 3, 5), "float32")) -> Tensor((2, 24, 3, 5), "float32"):
    c_groups: Tensor((2, 4, 3, 15), "float32") = op.reshape(x, shape=[-1, 4, 3, 15])
    c_mm: Tensor((2, 4, 6, 15), "float32") = op.matmul(const("w_groups"), c_groups)
    c_mmv: Tensor((2, 24, 3, 5), "float32") = op.reshape(c_mm, shape=[-1, 24, 3, 5])
    c: Tensor((2, 24, 3, 5), "float32") = op.add(c_mmv, const("b_C11"))
    y: Tensor((2, 24, 3, 5), "float32") = op.relu(c)
    return y
''',
    )
    # a group's 8 output channels are a whole vector: a blocked conv, as before
    _, got = verify(
        f'''
constants = {{"w": Tensor((16, 3, 1, 1), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 6, 3, 5), "float32")) -> Tensor((1, 16, 3, 5), "float32"):
    y: Tensor((1, 16, 3, 5), "float32") = op.conv2d(x, const("w"), {POINTWISE}, groups=2)
    return y
''',
        f'''
constants = {{"w_OIHW3i8o": Tensor((2, 1, 1, 1, 3, 8), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 6, 3, 5), "float32")) -> Tensor((1, 16, 3, 5), "float32"):
    x_NCHW3c: Tensor((1, 2, 3, 5, 3), "float32") = op.layout_transform(x, src="NCHW", dst="NCHW3c")
    y_c: Tensor((1, 2, 3, 5, 8), "float32") = op.conv2d_nchwc(x_NCHW3c, const("w_OIHW3i8o"), {POINTWISE}, groups=2)
    y: Tensor((1, 16, 3, 5), "float32") = op.layout_transform(y_c, src="NCHW8c", dst="NCHW")
    return y
''',
    )


def test_output_channels_a_vector_nearly_divides_are_padded_and_cropped():
    # 68 output channels with 8 lanes: blocks of 4 would halve the vector, so the conv
    # computes 72 (zero weights and bias past 68) in NCHW8c and crops its NCHW result
    _, got = verify(
        f'''
constants = {{"w": Tensor((68, 8, 1, 1), "float32"), "b": Tensor((68,), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 8, 3, 5), "float32")) -> Tensor((1, 68, 3, 5), "float32"):
    c: Tensor((1, 68, 3, 5), "float32") = op.conv2d(x, const("w"), const("b"), {POINTWISE}, groups=1)
    y: Tensor((1, 68, 3, 5), "float32") = op.relu(c)
    return y
''',
        f'''
constants = {{"w_OIHW8i8o72": Tensor((9, 1, 1, 1, 8, 8), "float32"), "b_8o72": Tensor((9, 8), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 8, 3, 5), "float32")) -> Tensor((1, 68, 3, 5), "float32"):
    x_NCHW8c: Tensor((1, 1, 3, 5, 8), "float32") = op.layout_transform(x, src="NCHW", dst="NCHW8c")
    c_c: Tensor((1, 9, 3, 5, 8), "float32") = op.conv2d_nchwc(x_NCHW8c, const("w_OIHW8i8o72"), const("b_8o72"), {POINTWISE}, groups=1)
    c_padded: Tensor((1, 72, 3, 5), "float32") = op.layout_transform(c_c, src="NCHW8c", dst="NCHW")
    c: Tensor((1, 68, 3, 5), "float32") = op.strided_slice(c_padded, begin=[0], end=[68], axes=[1], strides=[1], lengths=None)
    y: Tensor((1, 68, 3, 5), "float32") = op.relu(c)
    return y
''',
    )
    assert not got.const_values["b_8o72"][8, 4:].any()  # the padding's bias is zero


@pytest.mark.parametrize(
    "weight, groups, why",
    [
        ((10, 8, 3, 3), 1, "output channels that neither a vector nor half of one divides"),
        ((12, 3, 3, 3), 2, "a grouped conv whose groups' output channels no block divides"),
    ],
)
def test_convs_that_stay_nchw(weight, groups, why):
    o, i = weight[0], weight[1] * groups
    unchanged(f'''
constants = {{"w": Tensor({weight}, "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, {i}, 4, 4), "float32")) -> Tensor((1, {o}, 4, 4), "float32"):
    c: Tensor((1, {o}, 4, 4), "float32") = op.conv2d(x, const("w"), {CONV}, groups={groups})
    y: Tensor((1, {o}, 4, 4), "float32") = op.relu(c)
    return y
''')


def test_weight_that_is_not_a_constant_stays_nchw():
    unchanged(f'''
@function(inputs=["x", "w"], outputs=["y"])
def main(x: Tensor((1, 8, 4, 4), "float32"), w: Tensor((8, 8, 3, 3), "float32")) -> Tensor((1, 8, 4, 4), "float32"):
    y: Tensor((1, 8, 4, 4), "float32") = op.conv2d(x, w, {CONV}, groups=1)
    return y
''')


CONV_16 = f'''
constants = {{"w": Tensor((16, 16, 1, 1), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 16, 2, 2), "float32")) -> Tensor((1, 16, 2, 2), "float32"):
    y: Tensor((1, 16, 2, 2), "float32") = op.conv2d(x, const("w"), {CONV.replace("1, 1, 1, 1", "0, 0, 0, 0")}, groups=1)
    return y
'''


@pytest.mark.parametrize(
    "features, block",
    [("+avx,+avx2,+avx512f", 16), ("+avx,+avx2", 8), ("+sse4.2", 4), ("", 4)],
)
def test_block_is_the_target_float32_vector_width(features, block):
    target = LLVMTarget("x86_64-unknown-linux-gnu", "generic", features)
    got = alter_conv_layout(with_values(parse_module(CONV_16)), target)
    (conv,) = [c for c in got["main"].bindings if c.value.op == "conv2d_nchwc"]
    assert conv.var.type.shape[-1] == block


def test_without_a_target_the_module_is_unchanged():
    mod = with_values(parse_module(CONV_16))
    assert structural_equal(alter_conv_layout(mod), mod)
    assert structural_equal(run_pipeline(mod, disable=["fuse-ops"]), mod)
    assert "conv2d_nchwc" in call_ops(run_pipeline(mod, disable=["fuse-ops"], target=AVX2))


# ---------------------------------------------------------------------------------------------
# whole models, compiled for this machine, against onnxruntime


# (blocked convs, Winograd convs, convs left NCHW, matmuls, layout transforms) with blocks
# of 8: the CNNs without channel shuffles transform only at their entry and exit; the 3 x 3
# stride-1 convs with 32 channels or more and at least 16 tiles of 4 x 4 (or 16 channels
# and 64 tiles) run as Winograd, each with a batched matmul (ResNet-50: the three at 56 x 56,
# the three stride-1 ones at 28 x 28 and the five at 14 x 14, not the two at 7 x 7;
# SqueezeNet: all eight expand convs, 16 channels in at 55 x 55 and 32 to 64 at 27 x 27 and
# 13 x 13); in
# ShuffleNet the grouped 1 x 1 convs with 28, 34 or 68 output channels a group run as
# matmuls in NCHW and those with 136 blocked, and each depthwise conv between converts its
# input and output.
@pytest.mark.parametrize(
    "name, counts",
    [("resnet50", (42, 11, 0, 11, 2)), ("squeezenet", (18, 8, 0, 8, 2)),
     ("shufflenet", (23, 0, 0, 26, 41))],
)
def test_compiled_model_matches_onnxruntime(name, counts):
    model = builders.light_model(name)
    ops = call_ops(run_pipeline(from_onnx(model), disable=["fuse-ops"], target=AVX2))
    assert (ops.count("conv2d_nchwc"), ops.count("winograd_output_nchwc"), ops.count("conv2d"),
            ops.count("matmul"), ops.count("layout_transform")) == counts
    (image,) = model.graph.input
    shape = [d.dim_value for d in image.type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    (want,) = onnxruntime_outputs(model, {image.name: x})
    (got,) = compiled_fn(model)(x)
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * scale)


def test_winograd_over_a_symbolic_batch_matches_onnxruntime():
    """The tiles of every image of the batch go through one batched product: one pack run at
    batch 1 and 3 against onnxruntime (rtol 1e-3 of the largest output)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((48, 32, 3, 3)) / 17).astype(np.float32)
    b = rng.standard_normal(48).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 0, 1, 2]),
         helper.make_node("Relu", ["c"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 32, 30, 29])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert "winograd_output_nchwc" in call_ops(run_pipeline(from_onnx(model), target=AVX2,
                                                            disable=["fuse-ops"]))
    fn = compiled_fn(model)
    for batch in (1, 3):
        x = rng.standard_normal((batch, 32, 30, 29)).astype(np.float32)
        (want,) = onnxruntime_outputs(model, {"x": x})
        (got,) = fn(x)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-3 * float(np.abs(want).max()))


@pytest.mark.parametrize("target, blocked", [(None, False), ("llvm", True)])
def test_tcc_optimize_packs_convs_only_for_a_target(tmp_path, target, blocked):
    from click.testing import CliRunner

    from tcc.cli.main import cli
    from tcc.ir.irfile import load_module, save_module

    save_module(tmp_path / "m.tcir", with_values(parse_module(CONV_16)))
    args = ["optimize", str(tmp_path / "m.tcir"), "-o", str(tmp_path / "o.tcir"),
            "--disable-pass", "fuse-ops"] + ([] if target is None else ["--target", target])
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    ops = call_ops(load_module(tmp_path / "o.tcir"))
    assert ("conv2d_nchwc" in ops) == blocked


@pytest.mark.parametrize("builder", [builders.bert_encoder, builders.gpt2_decoder])
def test_models_without_convs_are_left_alone(builder):
    """Transformers have no conv to convert, and calls without operands (arange, constants
    of shape) must not trip the rewrites that look at a first operand."""
    mod = from_onnx(builder())
    assert structural_equal(alter_conv_layout(mod, AVX2), mod)


@pytest.mark.parametrize("group_out, block", [(32, 16), (24, 8), (68, 4), (34, None)])
def test_grouped_conv_blocks_go_down_to_a_quarter_vector(group_out, block):
    """With 16 lanes, a grouped 3 x 3 conv's output block is the largest of 16, 8 and 4
    dividing a group's output channels; none of them dividing keeps it NCHW. Its input
    block divides a group's 8 input channels."""
    target = LLVMTarget("x86_64-unknown-linux-gnu", "generic", "+avx,+avx2,+avx512f")
    o = 4 * group_out
    mod = with_values(parse_module(f'''
constants = {{"w": Tensor(({o}, 8, 3, 3), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 32, 5, 5), "float32")) -> Tensor((1, {o}, 5, 5), "float32"):
    y: Tensor((1, {o}, 5, 5), "float32") = op.conv2d(x, const("w"), strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1], groups=4)
    return y
'''))
    got = alter_conv_layout(mod, target)
    convs = [b for b in got["main"].bindings if b.value.op == "conv2d_nchwc"]
    if block is None:
        assert structural_equal(got, mod)
        return
    (conv,) = convs
    assert conv.var.type.shape[-1] == block
    assert G.type_of(conv.value.args[0]).shape[-1] == 8
    feeds = random_inputs(mod["main"])
    np.testing.assert_allclose(run(got, feeds)[0], run(mod, feeds)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("window, strides, block", [
    (3, [2, 2], 4),     # a strided window: a quarter vector rather than NCHW
    (7, [2, 1], 4),     # strided along either axis
    (3, [1, 1], None),  # stride 1: NCHW's lanes run along the row
    (1, [2, 2], None),  # a 1 x 1 window reads no row twice
])
def test_a_dense_conv_with_a_strided_window_goes_down_to_a_quarter_vector(window, strides, block):
    """With 16 lanes, a dense conv whose 12 output channels only 4 lanes divide converts
    where its window is strided (NCHW reads those rows at a stride, which runs as scalar
    code); its input block is the 3 colour channels."""
    target = LLVMTarget("x86_64-unknown-linux-gnu", "generic", "+avx,+avx2,+avx512f")
    pad = window // 2
    out = [(9 + 2 * pad - window) // s + 1 for s in strides]
    mod = with_values(parse_module(f'''
constants = {{"w": Tensor((12, 3, {window}, {window}), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 3, 9, 9), "float32")) -> Tensor((1, 12, {out[0]}, {out[1]}), "float32"):
    y: Tensor((1, 12, {out[0]}, {out[1]}), "float32") = op.conv2d(x, const("w"), strides={strides}, padding=[{pad}, {pad}, {pad}, {pad}], dilation=[1, 1], groups=1)
    return y
'''))
    got = alter_conv_layout(mod, target)
    if block is None:
        assert structural_equal(got, mod)
        return
    (conv,) = [b for b in got["main"].bindings if b.value.op == "conv2d_nchwc"]
    assert conv.var.type.shape[-1] == block
    assert G.type_of(conv.value.args[0]).shape[-1] == 3
    feeds = random_inputs(mod["main"])
    np.testing.assert_allclose(run(got, feeds)[0], run(mod, feeds)[0], rtol=1e-5, atol=1e-5)
