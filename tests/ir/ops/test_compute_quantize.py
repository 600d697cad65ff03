"""Loop programs of quantize_linear, dequantize_linear and dynamic_quantize_linear: bit for
bit what the numpy references compute, ties that round half to even and saturation
included, per tensor, per axis and per block."""

import numpy as np
import pytest

from tests.helpers import ref, run_compute


def _exact(op, *arrays, **attrs):
    want = ref(op, *arrays, **attrs)
    want = list(want) if isinstance(want, (list, tuple)) else [want]
    got = run_compute(op, *arrays, **attrs)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        bits = np.dtype(f"uint{8 * g.dtype.itemsize}")  # bit for bit, NaNs included
        np.testing.assert_array_equal(g.view(bits), w.view(bits))


@pytest.mark.parametrize("out_dtype", ["uint8", "int8", "int16", "uint16", "int32"])
def test_quantize_per_tensor_rounds_ties_to_even_and_saturates(out_dtype):
    x = np.array([[-1e6, -2.5, -0.5, 0.5, 1.5, 2.5], [3.49, 127.5, 128.5, 1e6, 0, -0.0]], np.float32)
    scale = np.array(1.0, np.float32)
    zp = np.array(3, out_dtype)
    _exact("quantize_linear", x, scale, zp, out_dtype=out_dtype)
    _exact("quantize_linear", x, np.array(0.37, np.float32), None, out_dtype=out_dtype)


def test_quantize_per_axis_and_per_block():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32) * 50
    scale = np.array([0.5, 0.25, 2.0], np.float32)
    zp = np.array([0, 10, 250], np.uint8)
    _exact("quantize_linear", x, scale, zp, axis=1, out_dtype="uint8")
    blocked = np.abs(rng.standard_normal((2, 3, 2))).astype(np.float32) + 0.1
    _exact("quantize_linear", x, blocked, None, axis=2, block_size=2, out_dtype="int8")


def test_quantize_in_float16_and_with_a_precision():
    x = (np.arange(12, dtype=np.float16) - 6) * np.float16(0.7)
    _exact("quantize_linear", x, np.array(0.3, np.float16), None, out_dtype="int8")
    _exact("quantize_linear", x, np.array(0.3, np.float32), None, out_dtype="int8",
           precision="float32")


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32"])
def test_dequantize_matches_the_reference(dtype):
    info = np.iinfo(dtype)
    x = np.array([info.min, -1 if info.min else 0, 0, 1, info.max], dtype)
    _exact("dequantize_linear", x, np.array(0.125, np.float32), np.array(1, dtype))
    if info.bits <= 16:  # int32's extremes overflow float16
        _exact("dequantize_linear", x, np.array(0.3, np.float16), None)


def test_dequantize_per_axis():
    x = np.arange(24, dtype=np.int8).reshape(2, 3, 4)
    _exact("dequantize_linear", x, np.array([0.5, 0.25, 2.0], np.float32),
           np.array([1, -2, 3], np.int8), axis=1)


@pytest.mark.parametrize("x", [
    np.array([0.0, 2.0, -3.0, 1000.0, -4.0], np.float32),
    np.array([[1.5, 2.5], [3.5, 4.5]], np.float32),  # all positive: the range starts at 0
    np.array([-1.0, -2.0], np.float32),  # all negative: it ends at 0
    np.zeros((0, 3), np.float32),
])
def test_dynamic_quantize(x):
    _exact("dynamic_quantize_linear", x)


@pytest.mark.parametrize("out_dtype", ["int4", "uint4", "int2", "uint2", "float8_e4m3fn",
                                       "float8_e5m2fnuz", "float4_e2m1fn"])
def test_quantize_to_and_dequantize_from_the_low_precision_types(out_dtype):
    from tcc.ir.dtype import to_low_precision

    x = np.array([[-1e6, -2.5, -0.5, 0.5, 1.5, 2.5], [3.49, 7.5, 8.5, 1e6, 0, -0.0]], np.float32)
    zp = to_low_precision(np.array(1.0), out_dtype)
    for saturate in (True, False):
        _exact("quantize_linear", x, np.array(0.5, np.float32), zp, out_dtype=out_dtype,
               saturate=saturate)
    q = ref("quantize_linear", x, np.array(0.5, np.float32), zp, out_dtype=out_dtype)
    _exact("dequantize_linear", q, np.array(0.5, np.float32), zp)
    with np.errstate(over="ignore"):  # float16 results past its range are inf in both
        _exact("dequantize_linear", q, np.array([0.5, 2.0], np.float16), None, axis=0)
