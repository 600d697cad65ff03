"""Loop-program conversions of the storage types (tcc.ir.ops._storage_types), compiled with
LLVM and run, against the reference conversions (tcc.ir.low_precision, round_to_bfloat16)
on every code of each type and on the values where rounding decides: the midpoints between
neighbouring codes, just above and below them, the overflow bands, zeros, infinities, NaN."""

from __future__ import annotations

import numpy as np
import pytest

from tcc.emit.llvm import compile_prim_funcs
from tcc.ir import te
from tcc.ir.dtype import LOW_PRECISION, round_to_bfloat16, to_low_precision, to_numpy
from tcc.ir.ops._storage_types import convert
from tcc.ir.tir_eval import run_prim_func
from tcc.rt.kernels import load_cpu_library

FLOATS = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn")


def _run(x: np.ndarray, src: str, dst: str, interpret: bool = False, **attrs) -> np.ndarray:
    a = te.placeholder((len(x),), src, "a")
    b = te.compute(a.shape, lambda i: convert(a[i], dst, **attrs), "b")
    func = te.create_prim_func([a, b])
    out = np.zeros(len(x), to_numpy(dst))
    if interpret:
        run_prim_func(func, [x, out])
    else:
        with load_cpu_library(compile_prim_funcs({"convert": func}, "llvm").shared_object) as lib:
            lib.call("convert", [x, out])
    return out


def _codes(dtype: str) -> np.ndarray:
    return np.arange(1 << (4 if "4" in dtype and dtype != "float8_e4m3fn" else 8), dtype=np.uint8)


def _probes(dtype: str) -> np.ndarray:
    """Every value of `dtype`, the midpoints between them and their float64 neighbours."""
    values = np.unique(np.abs(_codes_values(dtype)))
    values = values[np.isfinite(values)]
    mids = (values[:-1] + values[1:]) / 2
    near = np.concatenate([mids, values, values[-1:] * 1.07, values[-1:] * 1.2, values[-1:] * 4])
    near = np.concatenate([near, np.nextafter(near, np.inf), np.nextafter(near, -np.inf)])
    special = np.array([0.0, np.inf, np.nan, 1e-300, 5e-324, 1e300])
    x = np.concatenate([near, special])
    return np.concatenate([x, -x])


def _codes_values(dtype: str) -> np.ndarray:
    width = 4 if dtype == "float4_e2m1fn" else 8
    codes = np.arange(1 << width, dtype=np.uint8)
    return codes.view(to_numpy(dtype)).astype(np.float64)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("src", ["float32", "float64", "float16"])
@pytest.mark.parametrize("saturate", [True, False])
def test_float_encode_matches_reference(dtype, src, saturate):
    with np.errstate(over="ignore"):
        x = _probes(dtype).astype(src)
    got = _run(x, src, dtype, saturate=saturate)
    want = to_low_precision(x, dtype, saturate)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=f"{src}")


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [True, False])
def test_e8m0_encode_matches_reference(round_mode, saturate):
    powers = np.ldexp(1.0, np.arange(-130, 131))
    x = np.concatenate([powers, powers * 1.25, powers * 1.5, powers * 1.75, np.nextafter(powers, 0),
                        [0.0, np.inf, np.nan, 3.0, 1e-300, 1e300]])
    for src in ("float32", "float64"):
        with np.errstate(over="ignore"):
            xs = x.astype(src)
        got = _run(xs, src, "float8_e8m0fnu", saturate=saturate, round_mode=round_mode)
        want = to_low_precision(xs, "float8_e8m0fnu", saturate, round_mode)
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=src)


@pytest.mark.parametrize("dtype", ["int4", "uint4", "int2", "uint2"])
def test_int_encode_matches_reference(dtype):
    floats = np.array([0.0, 0.5, 1.5, 2.5, -2.5, -9.6, 7.49, 8.5, 1e30, np.inf, np.nan, -0.5, 3.5])
    for src, x in [("float32", floats), ("float64", floats), ("float16", floats[:-5]),
                   ("int64", np.array([-9, -8, 7, 8, 15, 16, -(2**63), 2**63 - 1])),
                   ("uint8", np.arange(256)), ("bool", np.array([True, False]))]:
        with np.errstate(over="ignore"):
            xs = x.astype(src)
        got = _run(xs, src, dtype)
        want = to_low_precision(xs, dtype)
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=src)


@pytest.mark.parametrize("dtype", sorted(LOW_PRECISION))
@pytest.mark.parametrize("dst", ["float32", "float16", "float64", "int32"])
def test_decode_matches_reference(dtype, dst):
    width = 4 if dtype in ("float4_e2m1fn", "int4", "uint4") else 2 if "int2" in dtype else 8
    x = np.arange(1 << width, dtype=np.uint8).view(to_numpy(dtype))
    if dst == "int32" and dtype not in ("int4", "uint4", "int2", "uint2"):
        x = x[np.isfinite(x.astype(np.float64)) & (np.abs(x.astype(np.float64)) < 2**31)]
    got = _run(x, dtype, dst)
    with np.errstate(over="ignore"):
        want = x.astype(to_numpy(dst))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("src", ["float32", "float64", "int32"])
def test_bfloat16_round_trip_matches_reference(src):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(500) * 1e3, [0.0, -0.0, np.inf, -np.inf, np.nan, 3e38,
                                                         1.00390625, 1.01171875, 1e-40]])
    if src == "int32":
        x = np.concatenate([np.nan_to_num(x, posinf=0, neginf=0)[:-3], [2**31 - 1, -(2**31)]])
    with np.errstate(invalid="ignore"):
        x = x.astype(src)
    got = _run(x, src, "bfloat16")
    want = round_to_bfloat16(x.astype(np.float32))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(_run(want, "bfloat16", "float64"), want.astype(np.float64))


@pytest.mark.parametrize("src,dst", [("float8_e5m2", "float8_e4m3fn"), ("float8_e4m3fnuz", "float8_e5m2"),
                                     ("float8_e4m3fn", "float4_e2m1fn"), ("float4_e2m1fn", "float8_e5m2fnuz")])
def test_low_precision_to_low_precision_goes_through_the_value(src, dst):
    width = 4 if src == "float4_e2m1fn" else 8
    x = np.arange(1 << width, dtype=np.uint8).view(to_numpy(src))
    got = _run(x, src, dst, saturate=False)
    want = to_low_precision(x, dst, saturate=False)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_interpreter_agrees_with_the_compiled_conversion():
    with np.errstate(over="ignore"):
        x = _probes("float8_e4m3fn").astype(np.float32)
    interpreted = _run(x, "float32", "float8_e4m3fn", interpret=True)
    np.testing.assert_array_equal(interpreted.view(np.uint8), _run(x, "float32", "float8_e4m3fn").view(np.uint8))
