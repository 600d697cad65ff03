"""Winograd F(4x4, 3x3): the matrices compute a 3-tap correlation; the input transform, the
batched product with the transformed weights and the output transform together are conv2d
(against conv2d's own reference on the unpacked operands, within rtol 1e-3 of its largest
value); each transform's loop program against its numpy reference; shape errors."""

import numpy as np
import pytest

from tcc.ir.errors import ShapeError
from tcc.ir.expr import Var
from tcc.ir.graph import TensorType
from tcc.ir.ops.winograd import AT, BT, G, winograd_weight
from tests.helpers import assert_compute_matches_ref, infer, ref

rng = np.random.default_rng(0)


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_matrices_compute_a_three_tap_correlation():
    """A^T [(G g) * (B^T d)] is the 4 outputs of correlating 6 inputs with 3 taps."""
    d, g = rng.standard_normal(6), rng.standard_normal(3)
    at, bt, gm = (np.array(m, dtype=np.float64) for m in (AT, BT, G))
    want = [d[i:i + 3] @ g for i in range(4)]
    np.testing.assert_allclose(at @ ((gm @ g) * (bt @ d)), want, rtol=1e-12)


def winograd_conv(x, w, b, padding, ci, co):
    """x (NCHW) conv w (OIHW), through the three Winograd steps on blocked operands."""
    xc = ref("layout_transform", x, src="NCHW", dst=f"NCHW{ci}c")
    v = ref("winograd_input_nchwc", xc, padding=padding)
    _, _, n, th, tw, _, _ = v.shape
    m = v.reshape(6, 6, 1, n * th * tw, -1) @ winograd_weight(w, co)
    height = x.shape[2] + padding[0] + padding[2] - 2
    width = x.shape[3] + padding[1] + padding[3] - 2
    y = ref("winograd_output_nchwc", m.reshape(6, 6, -1, n, th, tw, co), b.reshape(-1, co),
            height=height, width=width)
    return ref("layout_transform", y, src=f"NCHW{co}c", dst="NCHW")


@pytest.mark.parametrize(
    "n, cin, cout, h, w, padding, ci, co",
    [
        (1, 16, 32, 14, 14, [1, 1, 1, 1], 16, 16),  # 14 = 3 tiles of 4 and a cropped one
        (2, 32, 16, 9, 7, [1, 1, 1, 1], 8, 16),
        (1, 64, 64, 10, 10, [0, 0, 0, 0], 16, 16),  # 8 x 8: whole tiles, no padding
        (1, 8, 8, 5, 6, [2, 0, 1, 2], 8, 4),  # uneven padding
    ],
)
def test_three_steps_are_conv2d(n, cin, cout, h, w, padding, ci, co):
    x, wt, b = rand(n, cin, h, w), rand(cout, cin, 3, 3), rand(cout)
    want = ref("conv2d", x, wt, b, strides=[1, 1], padding=padding, dilation=[1, 1], groups=1)
    got = winograd_conv(x, wt, b, padding, ci, co)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-3 * np.abs(want).max())


def test_error_against_direct_convolution_at_512_channels():
    """The bound the docs state: rtol 1e-3 of the largest output, with float32 throughout."""
    x, wt, b = rand(1, 512, 8, 8), rand(512, 512, 3, 3) / 24, rand(512)
    want = ref("conv2d", x, wt, b, strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1],
               groups=1)
    got = winograd_conv(x, wt, b, [1, 1, 1, 1], 16, 16)
    assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max()


def test_weights_are_g_g_gt_in_panels_of_a_block_of_output_channels():
    """U = G g G^T of each (output, input) channel pair, at (a, b, o // block, i, o % block)."""
    w = rand(12, 5, 3, 3)
    u = winograd_weight(w, 4)
    assert u.shape == (6, 6, 3, 5, 4) and u.flags.c_contiguous
    gm = np.array(G, dtype=np.float64)
    for o, i in ((0, 0), (5, 2), (11, 4)):
        np.testing.assert_allclose(u[:, :, o // 4, i, o % 4], gm @ w[o, i] @ gm.T, rtol=1e-6,
                                   atol=1e-6)
    with pytest.raises(ValueError, match="blocks of 8"):
        winograd_weight(w, 8)


@pytest.mark.parametrize("shape, padding", [((1, 2, 7, 6, 8), [1, 1, 1, 1]),
                                            ((2, 1, 5, 9, 4), [0, 2, 1, 0])])
def test_input_transform_loop_program(shape, padding):
    assert_compute_matches_ref("winograd_input_nchwc", rand(*shape), rtol=1e-5, atol=1e-4,
                               padding=padding)


@pytest.mark.parametrize("height, width, bias", [(7, 6, True), (8, 4, False)])
def test_output_transform_loop_program(height, width, bias):
    m = rand(6, 6, 3, 2, (height + 3) // 4, (width + 3) // 4, 8)  # 3 channel blocks, batch 2
    b = (rand(3, 8),) if bias else ()
    assert_compute_matches_ref("winograd_output_nchwc", m, *b, rtol=1e-5, atol=1e-4,
                               height=height, width=width)


@pytest.mark.parametrize("op, shape, attrs", [
    ("winograd_input_nchwc", (1, 2, 8, 8, 8), {"padding": [1, 1, 1, 1]}),
    ("winograd_output_nchwc", (6, 6, 1, 2, 2, 2, 8), {"height": 8, "width": 8}),
])
def test_transforms_test_a_position_only_where_a_coefficient_is_zero(op, shape, attrs):
    """Every unrolled copy walks the transform's expression (scheduling and code generation
    both), so it holds no select that always takes one branch: a column whose rows are a run
    is tested by one or two comparisons, not an `or` per row, and a column nonzero at every
    position by none."""
    from tcc.ir import expr as E
    from tcc.ir.tir import BufferStore
    from tcc.lower.legalize import op_prim_func
    from tcc.lower.rules.analysis import subexprs
    from tcc.lower.schedule.state import walk

    func = op_prim_func(op, [f32(*shape)], attrs)
    stores = [loc.stmt for loc in walk(func.body) if isinstance(loc.stmt, BufferStore)]
    found = [x for s in stores for x in subexprs(s.value)]
    assert not [x for x in found if isinstance(x, E.Logic) and x.op == "or"]
    assert not [x for x in found if isinstance(x, E.BinOp) and x.op == "mul"
                and isinstance(x.b, E.FloatImm) and x.b.value == 1.0]


def f32(*shape):
    return TensorType(shape, "float32")


@pytest.mark.parametrize(
    "op, args, attrs, message",
    [
        ("winograd_input_nchwc", [f32(1, 2, 7, 6)], {"padding": [1, 1, 1, 1]}, "rank 5"),
        ("winograd_input_nchwc", [f32(1, 2, 2, 2, 8)], {"padding": [0, 0, 0, 0]},
         "does not fit"),
        ("winograd_input_nchwc", [f32(1, 2, 7, 6, 8)], {"padding": [1, 1]}, "4 non-negative"),
        ("winograd_input_nchwc", [f32(1, 2, Var("h"), 6, 8)], {"padding": [1, 1, 1, 1]},
         "must be static"),
        ("winograd_output_nchwc", [f32(6, 6, 1, 2, 2, 2, 8)], {"height": None, "width": 8},
         "positive ints"),
        ("winograd_output_nchwc", [f32(6, 6, 1, 2, 2, 2, 8)], {"height": 12, "width": 8},
         "does not hold the 4 x 4 tiles"),
        ("winograd_output_nchwc", [f32(4, 4, 1, 2, 2, 2, 8)], {"height": 8, "width": 8},
         "lead with"),
        ("winograd_output_nchwc", [f32(6, 6, 1, 2, 2, 2, 8), f32(16)],
         {"height": 8, "width": 8}, "bias must be"),
    ],
)
def test_shape_errors(op, args, attrs, message):
    with pytest.raises(ShapeError, match=message):
        infer(op, *args, **attrs)
