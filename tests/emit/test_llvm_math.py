"""float32 exp, erf, tanh and sigmoid as tcc's CPU backend computes them (tcc/emit/llvm_math.py):
within their stated error of float64 references over the whole float range, special values
exact, and the same bits in vector and scalar code."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tcc.emit.llvm import compile_prim_funcs
from tcc.ir.graph import TensorType
from tcc.lower.legalize import op_prim_func
from tcc.lower.schedule import Schedule
from tcc.rt.kernels import load_cpu_library

N = 1 << 16
OPS = ("exp", "erf", "tanh", "sigmoid")


def _vectorized(func):
    sch = Schedule(func)
    (loop,) = sch.get_loops(sch.get_block(func.body.body.body.name))
    _, lanes = sch.split(loop, [None, 16])
    sch.vectorize(lanes)
    return sch.func


@pytest.fixture(scope="module")
def kernels():
    funcs = {}
    for op in OPS:
        plain = op_prim_func(op, [TensorType((N,), "float32")], {})
        funcs[f"scalar_{op}"] = plain
        funcs[f"vector_{op}"] = _vectorized(plain)
    with load_cpu_library(compile_prim_funcs(funcs).shared_object) as lib:
        yield lib


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(0)
    x = np.concatenate([
        rng.uniform(-110, 95, N // 4),
        rng.uniform(-10, 10, N // 4),
        rng.uniform(-1e-3, 1e-3, N // 4),
        rng.standard_normal(N // 4) * 3,
    ]).astype(np.float32)
    x[:12] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 88.72, 88.73, -103.9, -104.0, 1e-30, 20, -20]
    return x


def _run(lib, name, x):
    """The kernel on `x` (shorter inputs padded to N with zeros, the padding cut off)."""
    padded = np.zeros(N, np.float32)
    padded[: x.size] = x
    y = np.full_like(padded, 7.0)
    lib.call(name, [padded, y])
    return y[: x.size]


REFERENCE = {
    "exp": np.exp,
    "tanh": np.tanh,
    "sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)),
    "erf": np.vectorize(math.erf),
}


@pytest.mark.parametrize("op", OPS)
def test_vector_and_scalar_code_give_the_same_bits(kernels, op):
    x = _inputs()
    np.testing.assert_array_equal(_run(kernels, f"vector_{op}", x), _run(kernels, f"scalar_{op}", x))


@pytest.mark.parametrize("op, max_ulp, max_abs", [
    ("exp", 2, 0.0), ("sigmoid", 3, 0.0), ("erf", 0, 5e-7), ("tanh", 0, 4e-7),
])
def test_error_against_float64(kernels, op, max_ulp, max_abs):
    x = _inputs()
    got = _run(kernels, f"vector_{op}", x).astype(np.float64)
    with np.errstate(over="ignore"):
        ref = REFERENCE[op](x.astype(np.float64))
        rounded = ref.astype(np.float32)
    normal = np.isfinite(rounded) & (np.abs(rounded) >= np.finfo(np.float32).tiny)
    err = np.abs(got[normal] - ref[normal])
    if max_ulp:
        ulp = np.spacing(np.abs(rounded[normal])).astype(np.float64)
        assert (err / ulp).max() <= max_ulp
    else:
        assert err.max() <= max_abs


def test_special_values(kernels):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 89.0, -105.0, -100.0, 1e-30, 30, -30],
                 np.float32)
    exp = _run(kernels, "vector_exp", x)
    assert np.isnan(exp[0]) and exp[1] == np.inf and exp[2] == 0 and exp[3] == exp[4] == 1
    assert exp[5] == np.inf and exp[6] == 0
    assert 0 < exp[7] < np.finfo(np.float32).tiny  # exp(-100) is subnormal, not flushed
    assert abs(exp[7] - np.float32(math.exp(-100))) <= np.spacing(np.float32(0))
    tanh = _run(kernels, "vector_tanh", x)
    assert np.isnan(tanh[0]) and tanh[1] == 1 and tanh[2] == -1 and tanh[9] == 1 and tanh[10] == -1
    assert tanh[8] == x[8] and np.signbit(tanh[4])
    erf = _run(kernels, "vector_erf", x)
    assert np.isnan(erf[0]) and erf[1] == 1 and erf[2] == -1 and erf[3] == 0 and np.signbit(erf[4])
    sig = _run(kernels, "vector_sigmoid", x)
    assert np.isnan(sig[0]) and sig[1] == 1 and sig[2] == 0 and sig[3] == 0.5
