"""nn op records: shape inference over symbolic shapes, shape errors, and the numpy
references checked against onnxruntime on small random inputs."""

import numpy as np
import pytest

from tcc.ir.errors import ShapeError
from tcc.ir.expr import Var, evaluate
from tcc.ir.graph import TensorType, TupleType
from tests.helpers import assert_close, infer, node_model, ref, run_ort

rng = np.random.default_rng(0)
n, h, w = Var("n"), Var("h"), Var("w")


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def ort_run(op_type, feeds, n_outputs=1, opset=21, **attrs):
    """Run one ONNX node on onnxruntime; `feeds` maps input names (in order) to arrays."""
    got = run_ort(node_model(op_type, feeds, n_outputs, opset=opset, **attrs), feeds)
    return got[0] if n_outputs == 1 else got


def close(a, b, tol=1e-5):
    assert_close(a, b, rtol=tol, atol=tol)


# ---------------------------------------------------------------------------------------------
# shape inference


def test_conv_infer_symbolic_batch_and_spatial():
    x = TensorType((n, 3, h, w), "float32")
    wt = TensorType((8, 3, 3, 3), "float32")
    t = infer("conv2d", x, wt, None, strides=[2, 2], padding=[1, 1, 1, 1])
    assert t.shape[:2] == (n, 8)
    assert evaluate(t.shape[2], {h: 224}) == 112 and evaluate(t.shape[3], {w: 7}) == 4


def test_conv_infer_static_and_groups():
    t = infer(
        "conv1d",
        TensorType((2, 4, 10), "float32"),
        TensorType((6, 2, 3), "float32"),
        groups=2,
        dilation=[2],
    )
    assert t == TensorType((2, 6, 6), "float32")
    with pytest.raises(ShapeError, match="input channels"):
        infer("conv1d", TensorType((2, 4, 10), "float32"), TensorType((6, 3, 3), "float32"))
    with pytest.raises(ShapeError, match="rank 5"):
        infer("conv3d", TensorType((2, 4, 10), "float32"), TensorType((6, 4, 3), "float32"))
    with pytest.raises(ShapeError, match="non-positive"):
        infer("conv1d", TensorType((1, 1, 2), "float32"), TensorType((1, 1, 5), "float32"))


def test_conv_transpose_infer():
    x = TensorType((n, 4, h, w), "float32")
    wt = TensorType((4, 3, 3, 3), "float32")
    t = infer(
        "conv2d_transpose",
        x,
        wt,
        strides=[2, 2],
        padding=[1, 1, 1, 1],
        output_padding=[1, 1],
        groups=2,
    )
    assert t.shape == (n, 6, h * 2, w * 2)


def test_pool_infer_ceil_mode_symbolic_matches_static():
    x = TensorType((n, 3, h, w), "float32")
    t = infer("max_pool2d", x, kernel=[3, 3], strides=[2, 2], ceil_mode=True, padding=[1, 1, 1, 1])
    for size in range(2, 12):
        static = infer(
            "max_pool2d",
            TensorType((1, 3, size, size), "float32"),
            kernel=[3, 3],
            strides=[2, 2],
            ceil_mode=True,
            padding=[1, 1, 1, 1],
        )
        assert evaluate(t.shape[2], {h: size}) == static.shape[2]


def test_pool_with_indices_and_global_infer():
    x = TensorType((n, 3, h, w), "float32")
    t = infer("max_pool_with_indices", x, kernel=[2, 2], strides=[2, 2])
    assert isinstance(t, TupleType) and t.fields[1].dtype == "int64"
    assert infer("global_avg_pool", x).shape == (n, 3, 1, 1)


def test_norm_and_rearrange_infer():
    x = TensorType((n, 8, h, w), "float32")
    c = TensorType((8,), "float32")
    assert infer("batch_norm", x, c, c, c, c) == x
    ln = infer("layer_norm_with_stats", x, TensorType((w,), "float32"), axis=-1)
    assert ln.fields[1].shape == (n, 8, h, 1)
    assert infer("depth_to_space", x, block_size=2).shape == (n, 2, h * 2, w * 2)
    assert infer("space_to_depth", x, block_size=2).shape == (n, 32, h // 2, w // 2)
    with pytest.raises(ShapeError, match="scale length"):
        infer("group_norm", x, TensorType((4,), "float32"), c, num_groups=4)
    g = TensorType((4,), "float32")
    assert infer("group_norm", x, g, g, num_groups=4, group_affine=True) == x


# ---------------------------------------------------------------------------------------------
# numerics against onnxruntime


@pytest.mark.parametrize(
    "xshape, wshape, attrs",
    [
        (
            (2, 4, 9, 8),
            (6, 2, 3, 3),
            dict(group=2, strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2]),
        ),
        ((1, 6, 7, 7), (6, 1, 3, 3), dict(group=6, pads=[1, 1, 1, 1])),
        ((2, 3, 11), (5, 3, 4), dict(strides=[3], pads=[2, 1])),
        ((1, 2, 5, 4, 6), (3, 2, 2, 3, 2), dict(strides=[1, 2, 1])),
    ],
)
def test_conv_matches_ort(xshape, wshape, attrs):
    x, wt, b = f32(*xshape), f32(*wshape), f32(wshape[0])
    nd = len(xshape) - 2
    got = ref(
        f"conv{nd}d", x, wt, b,
        strides=attrs.get("strides"), padding=attrs.get("pads"), dilation=attrs.get("dilations"),
        groups=attrs.get("group", 1),
    )  # fmt: skip
    close(got, ort_run("Conv", {"x": x, "w": wt, "b": b}, **attrs))


@pytest.mark.parametrize(
    "xshape, wshape, attrs",
    [
        (
            (1, 2, 3, 4),
            (2, 3, 3, 3),
            dict(strides=[2, 3], pads=[1, 0, 0, 2], output_padding=[1, 1]),
        ),
        ((2, 4, 3, 3), (4, 1, 2, 2), dict(group=2, dilations=[2, 1])),
        ((1, 2, 5), (2, 2, 3), dict(strides=[2])),
    ],
)
def test_conv_transpose_matches_ort(xshape, wshape, attrs):
    x, wt = f32(*xshape), f32(*wshape)
    nd = len(xshape) - 2
    got = ref(
        f"conv{nd}d_transpose", x, wt,
        strides=attrs.get("strides"), padding=attrs.get("pads"), dilation=attrs.get("dilations"),
        groups=attrs.get("group", 1), output_padding=attrs.get("output_padding"),
    )  # fmt: skip
    close(got, ort_run("ConvTranspose", {"x": x, "w": wt}, **attrs))


POOL_CASES = [
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
    dict(kernel_shape=[2, 3], strides=[1, 2], dilations=[2, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 2], ceil_mode=1),
]


def _pool_attrs(a):
    return dict(
        kernel=a["kernel_shape"], strides=a.get("strides"), padding=a.get("pads"),
        dilation=a.get("dilations"), ceil_mode=bool(a.get("ceil_mode", 0)),
    )  # fmt: skip


@pytest.mark.parametrize("attrs", POOL_CASES)
def test_pools_match_ort(attrs):
    x = f32(2, 3, 7, 8)
    close(ref("max_pool2d", x, **_pool_attrs(attrs)), ort_run("MaxPool", {"x": x}, **attrs))
    for cip in (0, 1):
        want = ort_run("AveragePool", {"x": x}, count_include_pad=cip, **attrs)
        close(ref("avg_pool2d", x, count_include_pad=bool(cip), **_pool_attrs(attrs)), want)
    plain = {k: v for k, v in attrs.items() if k != "ceil_mode"}
    close(
        ref("lp_pool2d", x, p=3, **_pool_attrs(plain)),
        ort_run("LpPool", {"x": x}, p=3, **plain),
        1e-4,
    )


@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_indices_match_ort(storage_order):
    x = f32(2, 3, 6, 5)
    attrs = dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1])
    y, idx = ref("max_pool_with_indices", x, storage_order=storage_order, **_pool_attrs(attrs))
    want = ort_run("MaxPool", {"x": x}, n_outputs=2, storage_order=storage_order, **attrs)
    close(y, want[0])
    np.testing.assert_array_equal(idx, want[1])


def test_max_unpool_inverts_max_pool():
    """Where the pooling windows tile the input exactly, unpooling restores the maxima in
    place (onnxruntime agrees); the output shape may come as attribute or operand."""
    x = f32(2, 3, 6, 4)
    pool = dict(kernel=[2, 2], strides=[2, 2], padding=None)
    y, idx = ref(
        "max_pool_with_indices", x, storage_order=0, ceil_mode=False, dilation=None, **pool
    )
    shape = np.array(x.shape, np.int64)
    want = ort_run("MaxUnpool", {"x": y, "i": idx, "s": shape}, kernel_shape=[2, 2], strides=[2, 2])
    close(ref("max_unpool", y, idx, **pool), want)
    close(ref("max_unpool", y, idx, shape, **pool), want)
    padded = ref("max_unpool", y, idx, output_shape=[2, 3, 7, 5], **pool)
    close(padded[:, :, :6, :4], want)
    assert not padded[:, :, 6:].any() and not padded[:, :, :, 4:].any()


def test_global_pools_and_lrn_match_ort():
    x = f32(2, 5, 3, 4)
    close(ref("global_avg_pool", x), ort_run("GlobalAveragePool", {"x": x}))
    close(ref("global_max_pool", x), ort_run("GlobalMaxPool", {"x": x}))
    close(ref("global_lp_pool", x, p=3), ort_run("GlobalLpPool", {"x": x}, p=3), 1e-4)
    close(
        ref("lrn", x, size=3, alpha=0.1, beta=0.6, bias=1.5),
        ort_run("LRN", {"x": x}, size=3, alpha=0.1, beta=0.6, bias=1.5),
    )


def test_norms_match_ort():
    x = f32(2, 4, 3, 5)
    c = {k: f32(4) for k in ("s", "b", "m")}
    var = np.abs(f32(4)) + 0.5
    bn = ref("batch_norm", x, c["s"], c["b"], c["m"], var, epsilon=1e-3)
    close(
        bn,
        ort_run(
            "BatchNormalization",
            {"x": x, "s": c["s"], "b": c["b"], "m": c["m"], "v": var},
            epsilon=1e-3,
        ),
    )
    close(
        ref("instance_norm", x, c["s"], c["b"]),
        ort_run("InstanceNormalization", {"x": x, "s": c["s"], "b": c["b"]}),
    )
    scale, bias = f32(3, 5), f32(3, 5)
    got = ref("layer_norm_with_stats", x, scale, bias, axis=2)
    want = ort_run("LayerNormalization", {"x": x, "s": scale, "b": bias}, n_outputs=3, axis=2)
    for g, wnt in zip(got, want):
        close(g, wnt)
    gn = ref("group_norm", x, c["s"], c["b"], num_groups=2)
    close(gn, ort_run("GroupNormalization", {"x": x, "s": c["s"], "b": c["b"]}, num_groups=2))


def test_batch_norm_train_running_stats():
    x = f32(3, 2, 4)
    s, b, m, v = f32(2), f32(2), f32(2), np.ones(2, np.float32)
    y, rm, rv = ref("batch_norm_train", x, s, b, m, v, momentum=0.8)
    mean = x.mean(axis=(0, 2))
    close(rm, (m * 0.8 + mean * 0.2).astype(np.float32))
    close(y, ref("batch_norm", x, s, b, mean, x.var(axis=(0, 2)).astype(np.float32)))


def test_rearrangements_round_trip_and_match_ort():
    x = f32(2, 8, 3, 2)
    for mode in ("DCR", "CRD"):
        d2s = ref("depth_to_space", x, block_size=2, mode=mode)
        close(d2s, ort_run("DepthToSpace", {"x": x}, blocksize=2, mode=mode, opset=13))
        close(ref("space_to_depth", d2s, block_size=2, mode=mode), x)


def test_grid_sample_and_roi_align_match_ort():
    x = f32(1, 2, 5, 6)
    grid = rng.uniform(-1.2, 1.2, (1, 3, 4, 2)).astype(np.float32)
    for mode, pad in (("linear", "zeros"), ("nearest", "border"), ("cubic", "reflection")):
        got = ref("grid_sample", x, grid, mode=mode, padding_mode=pad, align_corners=False)
        close(
            got,
            ort_run("GridSample", {"x": x, "g": grid}, mode=mode, padding_mode=pad, opset=20),
            1e-4,
        )
    rois = np.array([[0, 0, 4, 3], [1.5, 0.5, 5.5, 4]], np.float32)
    bi = np.array([0, 0], np.int64)
    for mode in ("avg", "max"):
        got = ref(
            "roi_align", x, rois, bi, mode=mode, output_height=2, output_width=3, sampling_ratio=2
        )
        want = ort_run(
            "RoiAlign",
            {"x": x, "r": rois, "i": bi},
            mode=mode,
            output_height=2,
            output_width=3,
            sampling_ratio=2,
            opset=16,
        )
        close(got, want, 1e-4)


def test_conv_integer_and_col2im():
    x = rng.integers(0, 255, (1, 2, 5, 5)).astype(np.uint8)
    wt = rng.integers(0, 255, (3, 2, 2, 2)).astype(np.uint8)
    xz, wz = np.array(7, np.uint8), np.array(3, np.uint8)
    got = ref("conv_integer", x, wt, xz, wz, padding=[1, 1, 0, 0])
    close(
        got,
        ort_run("ConvInteger", {"x": x, "w": wt, "xz": xz, "wz": wz}, pads=[1, 1, 0, 0], opset=10),
    )
    # col2im inverts the window extraction of conv's im2col when windows do not overlap.
    img = f32(1, 2, 4, 6)
    cols = img.reshape(1, 2, 2, 2, 3, 2).transpose(0, 1, 3, 5, 2, 4).reshape(1, 8, 6)
    close(ref("col2im", cols, image_shape=[4, 6], block_shape=[2, 2], strides=[2, 2]), img)


def test_half_precision_conv_keeps_dtype():
    x, wt = f32(1, 2, 5, 5).astype(np.float16), f32(3, 2, 3, 3).astype(np.float16)
    got = ref("conv2d", x, wt)
    assert got.dtype == np.float16
    want = ref("conv2d", x.astype(np.float32), wt.astype(np.float32))
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2, atol=1e-2)
