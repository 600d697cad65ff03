"""Reductions, softmax family, scans, top-k, losses, normalizations and signal ops:
symbolic shape inference and numpy references (run through the interpreter)."""

import numpy as np
import pytest

from tcc.ir.errors import ShapeError
from tcc.ir.expr import Var
from tcc.ir.graph import TensorType
from tcc.ir.ops import OPS, Pattern
from tcc.ir.ops.reduce import REDUCTIONS
from tests.helpers import infer, run_op

N = Var("n")
RNG = np.random.default_rng(0)


def _randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------------------------------------
# reductions


def test_reductions_are_comm_reduce():
    assert len(REDUCTIONS) == 10
    assert all(OPS[name].pattern == Pattern.COMM_REDUCE for name in REDUCTIONS)


@pytest.mark.parametrize(
    "axes, keepdims, shape",
    [
        ([1], True, (N, 1, 5)),
        ([1], False, (N, 5)),
        ([0, -1], False, (4,)),
        ([0], True, (1, 4, 5)),
        (None, True, (1, 1, 1)),
        (None, False, ()),
    ],
)
def test_reduce_shape_with_symbolic_dims(axes, keepdims, shape):
    t = infer("reduce_sum", TensorType((N, 4, 5), "float32"), axes=axes, keepdims=keepdims)
    assert t == TensorType(shape, "float32")


def test_reduce_rejects_out_of_range_axis():
    with pytest.raises(ShapeError, match="axis 3 out of range for rank 3"):
        infer("reduce_max", TensorType((N, 4, 5), "float32"), axes=[3])


@pytest.mark.parametrize(
    "op, fn",
    [
        ("reduce_sum", lambda x, a, k: np.sum(x, axis=a, keepdims=k)),
        ("reduce_prod", lambda x, a, k: np.prod(x, axis=a, keepdims=k)),
        ("reduce_max", lambda x, a, k: np.max(x, axis=a, keepdims=k)),
        ("reduce_min", lambda x, a, k: np.min(x, axis=a, keepdims=k)),
        ("reduce_mean", lambda x, a, k: np.mean(x, axis=a, keepdims=k)),
        ("reduce_l1", lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k)),
        ("reduce_l2", lambda x, a, k: np.sqrt(np.sum(x * x, axis=a, keepdims=k))),
        ("reduce_sum_square", lambda x, a, k: np.sum(x * x, axis=a, keepdims=k)),
        ("reduce_log_sum", lambda x, a, k: np.log(np.sum(x, axis=a, keepdims=k))),
        ("reduce_log_sum_exp", lambda x, a, k: np.log(np.sum(np.exp(x), axis=a, keepdims=k))),
    ],
)
@pytest.mark.parametrize("keepdims", [True, False])
def test_reduce_numerics(op, fn, keepdims):
    x = np.abs(_randn(2, 3, 4)) + 0.5
    got = run_op(op, x, axes=[0, 2], keepdims=keepdims)
    np.testing.assert_allclose(got, fn(x, (0, 2), keepdims), rtol=1e-5)
    assert got.dtype == np.float32


def test_reduce_log_sum_exp_is_stable_for_large_inputs():
    x = np.array([[1000.0, 1000.0], [-1000.0, -1000.0]], np.float32)
    np.testing.assert_allclose(
        run_op("reduce_log_sum_exp", x, axes=[1], keepdims=False),
        [1000 + np.log(2), -1000 + np.log(2)],
    )


def test_empty_reductions_give_the_identity():
    x = np.zeros((2, 0, 3), np.float32)
    got = {op: run_op(op, x, axes=[1], keepdims=False) for op in sorted(REDUCTIONS)}
    assert got["reduce_sum"].shape == (2, 3)
    assert (got["reduce_sum"] == 0).all() and (got["reduce_prod"] == 1).all()
    assert (got["reduce_max"] == -np.inf).all() and (got["reduce_min"] == np.inf).all()
    assert (got["reduce_log_sum"] == -np.inf).all() and (got["reduce_log_sum_exp"] == -np.inf).all()
    assert np.isnan(got["reduce_mean"]).all()
    ints = np.zeros((0, 2), np.int32)
    assert (run_op("reduce_max", ints, axes=[0]) == np.iinfo(np.int32).min).all()
    assert (run_op("reduce_min", np.zeros((0,), bool), keepdims=False) == np.True_).all()


def test_integer_mean_keeps_the_dtype():
    x = np.array([[1, 2], [3, 5]], np.int64)
    got = run_op("reduce_mean", x, axes=[1], keepdims=False)
    assert got.dtype == np.int64 and got.tolist() == [1, 4]


def test_run_time_axes_operand():
    t = infer(
        "reduce_sum", TensorType((N, 4, 5), "float32"), TensorType((2,), "int64"), keepdims=False
    )
    assert t.ndim == 1 and isinstance(t.shape[0], Var)
    x = _randn(3, 4, 5)
    got = run_op("reduce_sum", x, np.array([0, -1], np.int64), keepdims=False)
    np.testing.assert_allclose(got, x.sum(axis=(0, 2)), rtol=1e-5)
    # an empty axes operand reduces everything, with a static result shape
    t = infer("reduce_sum", TensorType((N, 4), "float32"), TensorType((0,), "int64"), keepdims=True)
    assert t.shape == (1, 1)


def test_run_time_axes_need_a_static_length():
    with pytest.raises(ShapeError, match="static length"):
        infer("reduce_sum", TensorType((N, 4), "float32"), TensorType((N,), "int64"))
    with pytest.raises(ShapeError, match="not both"):
        infer("reduce_sum", TensorType((4,), "float32"), TensorType((1,), "int64"), axes=[0])


# ---------------------------------------------------------------------------------------------
# arg max / min


def test_argmax_shape_and_ties():
    t = infer("argmax", TensorType((N, 4), "float32"), axis=-1, keepdims=False)
    assert t == TensorType((N,), "int64")
    x = np.array([[1, 3, 3], [2, 2, 0]], np.float32)
    assert run_op("argmax", x, axis=1, keepdims=False).tolist() == [1, 0]
    assert run_op("argmax", x, axis=1, keepdims=False, select_last_index=True).tolist() == [2, 1]
    assert run_op("argmin", x, axis=0, keepdims=True).tolist() == [[0, 1, 1]]
    assert run_op("argmin", x, axis=0, select_last_index=True).tolist() == [[0, 1, 1]]


# ---------------------------------------------------------------------------------------------
# softmax family


def _np_softmax(x, axes):
    e = np.exp(x - x.max(axis=axes, keepdims=True))
    return e / e.sum(axis=axes, keepdims=True)


def test_softmax_family_single_axis():
    x = _randn(2, 3, 4)
    assert infer("softmax", TensorType((N, 3), "float32"), axes=[-1]) == TensorType(
        (N, 3), "float32"
    )
    np.testing.assert_allclose(run_op("softmax", x, axes=[1]), _np_softmax(x, 1), rtol=1e-5)
    np.testing.assert_allclose(
        run_op("log_softmax", x, axes=[-1]), np.log(_np_softmax(x, -1)), rtol=1e-5, atol=1e-6
    )


def test_softmax_over_a_block_of_axes_matches_the_flattened_2d_form():
    x = _randn(2, 3, 4)
    want = _np_softmax(x.reshape(2, 12), 1).reshape(2, 3, 4)
    np.testing.assert_allclose(run_op("softmax", x, axes=[1, 2]), want, rtol=1e-5)


def test_softmax_over_no_axes_normalizes_each_element_alone():
    """An empty block holds one element: softmax is 1, as for a size-1 axis."""
    x = _randn(2, 3)
    assert (run_op("softmax", x, axes=[]) == 1).all() and (run_op("hardmax", x, axes=[]) == 1).all()


def test_hardmax_marks_the_first_maximum():
    x = np.array([[3, 1, 3], [0, 2, 2]], np.float32)
    assert run_op("hardmax", x, axes=[1]).tolist() == [[1, 0, 0], [0, 1, 0]]
    assert run_op("hardmax", x, axes=[0, 1]).tolist() == [[1, 0, 0], [0, 0, 0]]


def test_softmax_needs_float_input():
    with pytest.raises(ShapeError, match="float"):
        infer("softmax", TensorType((3,), "int32"))


# ---------------------------------------------------------------------------------------------
# scans


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_flags(exclusive, reverse):
    x = np.array([1, 2, 3, 4], np.int32)
    want = {
        (False, False): [1, 3, 6, 10],
        (True, False): [0, 1, 3, 6],
        (False, True): [10, 9, 7, 4],
        (True, True): [9, 7, 4, 0],
    }[(exclusive, reverse)]
    got = run_op("cumsum", x, axis=0, exclusive=exclusive, reverse=reverse)
    assert got.dtype == np.int32 and got.tolist() == want


def test_cumprod_with_run_time_axis():
    x = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    got = run_op("cumprod", x, np.array(-1, np.int64), exclusive=True)
    assert got.tolist() == [[1, 1, 2], [1, 4, 20]]


# ---------------------------------------------------------------------------------------------
# top-k


def test_topk_shapes():
    t = infer("topk", TensorType((N, 6), "float32"), k=2, axis=-1)
    assert t.fields[0] == TensorType((N, 2), "float32") and t.fields[1] == TensorType(
        (N, 2), "int64"
    )
    t = infer("topk", TensorType((N, 6), "float32"), TensorType((1,), "int64"), axis=0)
    assert isinstance(t.fields[0].shape[0], Var) and t.fields[0].shape[1] == 6
    with pytest.raises(ShapeError, match="out of range"):
        infer("topk", TensorType((3,), "float32"), k=4)


def test_topk_ties_go_to_the_lower_index():
    x = np.array([[0, 1, 1, 0, 2]], np.float32)
    values, idx = run_op("topk", x, k=3, axis=1)
    assert values.tolist() == [[2, 1, 1]] and idx.tolist() == [[4, 1, 2]]
    values, idx = run_op("topk", x, np.array([2], np.int64), axis=1, largest=False)
    assert values.tolist() == [[0, 0]] and idx.tolist() == [[0, 3]]


def test_topk_unsigned():
    x = np.array([3, 2**63, 7], np.uint64)
    values, idx = run_op("topk", x, k=2)
    assert values.tolist() == [2**63, 7] and idx.tolist() == [1, 2]


# ---------------------------------------------------------------------------------------------
# losses


def _np_nll(x, t, w, reduction, ignore):
    n, c = x.shape[:2]
    xs = np.moveaxis(x, 1, -1).reshape(-1, c)
    ts = t.reshape(-1)
    keep = ts != ignore
    ws = np.where(keep, w[np.where(keep, ts, 0)], 0)
    loss = -xs[np.arange(ts.size), np.where(keep, ts, 0)] * ws
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / ws.sum()
    return loss.reshape(t.shape)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_nll_loss(reduction):
    x = _randn(3, 5, 2)
    t = np.array([[0, 4], [-1, 2], [1, -1]], np.int64)
    w = np.abs(_randn(5)) + 0.1
    got = run_op("nll_loss", x, t, w, reduction=reduction, ignore_index=-1)
    np.testing.assert_allclose(got, _np_nll(x, t, w, reduction, -1), rtol=1e-5)
    no_weight = run_op("nll_loss", x, t, reduction=reduction, ignore_index=-1)
    np.testing.assert_allclose(
        no_weight, _np_nll(x, t, np.ones(5, np.float32), reduction, -1), rtol=1e-5
    )


def test_nll_loss_shapes():
    x, t = TensorType((N, 5, 7), "float32"), TensorType((N, 7), "int64")
    assert infer("nll_loss", x, t, reduction="none") == TensorType((N, 7), "float32")
    assert infer("nll_loss", x, t) == TensorType((), "float32")
    with pytest.raises(ShapeError, match="target"):
        infer("nll_loss", x, TensorType((N,), "int64"))
    with pytest.raises(ShapeError, match="reduction"):
        infer("nll_loss", x, t, reduction="max")


# ---------------------------------------------------------------------------------------------
# normalizations


def test_lp_normalize():
    x = np.array([[3, 4], [0, 0]], np.float32)
    np.testing.assert_allclose(run_op("lp_normalize", x, axis=1, p=2), [[0.6, 0.8], [0, 0]])
    np.testing.assert_allclose(run_op("lp_normalize", x, axis=1, p=1), [[3 / 7, 4 / 7], [0, 0]])
    with pytest.raises(ShapeError, match="p must be"):
        infer("lp_normalize", TensorType((2,), "float32"), p=3)


def test_mean_variance_normalize():
    x = _randn(2, 3, 4, 4)
    got = run_op("mean_variance_normalize", x, axes=[0, 2, 3])
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    std = x.std(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(got, (x - mean) / (std + 1e-9), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# signal


def _as_pairs(z):
    return np.stack([z.real, z.imag], axis=-1).astype(np.float32)


def test_dft_shapes():
    x = TensorType((N, 10, 1), "float32")
    assert infer("dft", x, axis=1) == TensorType((N, 10, 2), "float32")
    assert infer("dft", x, axis=-2, onesided=True) == TensorType((N, 6, 2), "float32")
    assert infer("dft", x, axis=1, length=16) == TensorType((N, 16, 2), "float32")
    irfft = infer("dft", TensorType((N, 6, 2), "float32"), axis=1, inverse=True, onesided=True)
    assert irfft == TensorType((N, 10, 1), "float32")
    with pytest.raises(ShapeError, match="last axis"):
        infer("dft", x, axis=2)


def test_dft_numerics():
    x = _randn(2, 8, 1)
    np.testing.assert_allclose(
        run_op("dft", x, axis=1), _as_pairs(np.fft.fft(x[..., 0], axis=1)), atol=1e-5
    )
    half = run_op("dft", x, axis=1, onesided=True)
    np.testing.assert_allclose(half, _as_pairs(np.fft.rfft(x[..., 0], axis=1)), atol=1e-5)
    back = run_op("dft", half, axis=1, inverse=True, onesided=True)
    np.testing.assert_allclose(back, x, atol=1e-5)
    z = _randn(2, 8, 2)
    got = run_op("dft", z, np.array(5, np.int64), np.array(1, np.int64), inverse=True)
    np.testing.assert_allclose(
        got, _as_pairs(np.fft.ifft(z[..., 0] + 1j * z[..., 1], n=5, axis=1)), atol=1e-5
    )


def test_stft_matches_framed_fft():
    x = _randn(1, 16, 1)
    w = np.hanning(8).astype(np.float32)
    t = infer("stft", TensorType((1, 16, 1), "float32"), TensorType((8,), "float32"), frame_step=4)
    assert t == TensorType((1, 3, 5, 2), "float32")
    got = run_op("stft", x, w, frame_step=4)
    frames = np.stack([x[0, s : s + 8, 0] * w for s in (0, 4, 8)])
    np.testing.assert_allclose(got[0], _as_pairs(np.fft.rfft(frames, axis=-1)), atol=1e-5)


@pytest.mark.parametrize(
    "kind, periodic, want",
    [
        ("hann", False, np.hanning(5)),
        ("hamming", False, 25 / 46 - 21 / 46 * np.cos(2 * np.pi * np.arange(5) / 4)),
        ("blackman", False, np.blackman(5)),
        ("hann", True, np.hanning(6)[:5]),
    ],
)
def test_windows(kind, periodic, want):
    got = run_op("window", size=5, kind=kind, periodic=periodic)
    np.testing.assert_allclose(got, want, atol=1e-6)
    dynamic = run_op("window", np.array(5, np.int64), kind=kind, periodic=periodic, dtype="float64")
    assert dynamic.dtype == np.float64 and dynamic.shape == (5,)


def test_mel_weight_matrix():
    attrs = dict(num_mel_bins=8, dft_length=16, sample_rate=8192, lower_hz=0.0, upper_hz=4096.0)
    got = run_op("mel_weight_matrix", **attrs)
    assert got.shape == (9, 8) and got.dtype == np.float32
    assert got.max() == 1 and (got >= 0).all()
    operands = [np.array(v) for v in (8, 16, 8192, 0.0, 4096.0)]
    np.testing.assert_array_equal(run_op("mel_weight_matrix", *operands), got)
