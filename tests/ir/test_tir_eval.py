"""The PrimFunc reference evaluator: statement and expression semantics, and its errors."""

import math

import numpy as np
import pytest

from tcc.ir import te
from tcc.ir.errors import InputError
from tcc.ir.parser import parse_module
from tcc.ir.tir_eval import TirEvalError, run_prim_func


def prim(text: str):
    """The single PrimFunc of module text `text`."""
    (func,) = parse_module(text).functions.values()
    return func


SUM_2D = prim("""
@prim_func
def f(A: Buffer((n, 3, 4), "float32"), B: Buffer((n,), "float32")):
    for i in parallel(0, n):
        for r in unrolled(0, 3):
            for s in vectorized(0, 4):
                with block("B"):
                    vi = axis.spatial(n, i)
                    vr = axis.reduce(3, r)
                    vs = axis.reduce(4, s)
                    reads(A[vi, vr, vs])
                    writes(B[vi])
                    with init():
                        B[vi] = 0.0
                    B[vi] = B[vi] + A[vi, vr, vs]
""")


def test_init_runs_once_per_output_and_every_loop_kind_runs():
    a = np.arange(24, dtype="float32").reshape(2, 3, 4)
    b = np.full(2, 99.0, "float32")  # garbage: init must overwrite it
    run_prim_func(SUM_2D, [a, b])
    np.testing.assert_array_equal(b, a.sum(axis=(1, 2)))


def test_if_allocate_evaluate_and_thread_binding():
    func = prim("""
@prim_func
def f(A: Buffer((4,), "float32"), B: Buffer((4,), "float32")):
    for t in thread_binding(0, 4, thread="threadIdx.x"):
        with allocate((1,), "float32", scope="local") as acc:
            acc[0] = A[t] * 2.0
            evaluate(exp(acc[0]))
            if t % 2 == 0:
                B[t] = acc[0]
            else:
                B[t] = 0.0 - acc[0]
""")
    b = np.zeros(4, "float32")
    run_prim_func(func, [np.arange(4, dtype="float32"), b])
    np.testing.assert_array_equal(b, [0, -2, 4, -6])


def test_select_evaluates_only_the_chosen_branch():
    func = prim("""
@prim_func
def f(A: Buffer((3,), "float32"), B: Buffer((5,), "float32")):
    for i in serial(0, 5):
        B[i] = select(i >= 1 and i < 4, A[i - 1], 0.0)
""")
    b = np.zeros(5, "float32")
    run_prim_func(func, [np.array([1, 2, 3], "float32"), b])
    np.testing.assert_array_equal(b, [0, 1, 2, 3, 0])


def test_integer_semantics_floor_division_and_wrapping_casts():
    func = prim("""
@prim_func
def f(A: Buffer((4,), "int32"), Q: Buffer((4,), "int32"), R: Buffer((4,), "int32"), W: Buffer((4,), "int8"), S: Buffer((4,), "int32"), T: Buffer((4,), "int32")):
    for i in serial(0, 4):
        Q[i] = A[i] // int32(3)
        R[i] = A[i] % int32(3)
        W[i] = cast("int8", A[i] * int32(50))
        S[i] = A[i] + int32(2147483600)
        T[i] = cast("int32", cast("float32", A[i]) / 2.0)
""")
    a = np.array([-7, -1, 5, 200], "int32")
    outs = [np.zeros(4, d) for d in ("int32", "int32", "int8", "int32", "int32")]
    run_prim_func(func, [a, *outs])
    q, r, w, s, t = outs
    np.testing.assert_array_equal(q, [-3, -1, 1, 66])
    np.testing.assert_array_equal(r, [2, 2, 2, 2])
    np.testing.assert_array_equal(w, (a * 50).astype("int8"))
    np.testing.assert_array_equal(s, a + np.int32(2147483600))
    np.testing.assert_array_equal(t, [-3, 0, 2, 100])  # float -> int truncates toward zero


def test_float32_arithmetic_stays_float32():
    func = prim("""
@prim_func
def f(A: Buffer((1,), "float32"), B: Buffer((1,), "float32")):
    B[0] = A[0] + 1e-08 - A[0]
""")
    b = np.zeros(1, "float32")
    run_prim_func(func, [np.ones(1, "float32"), b])
    assert b[0] == 0.0  # in float64 it would be 1e-08


UNARY = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "tanh": np.tanh, "erf": np.vectorize(math.erf), "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "abs": np.abs, "floor": np.floor, "ceil": np.ceil, "round": np.round, "trunc": np.trunc,
    "nearbyint": np.rint, "sin": np.sin, "cos": np.cos, "tan": np.tan, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "exp2": np.exp2, "log2": np.log2,
    "log1p": np.log1p, "expm1": np.expm1, "isnan": np.isnan, "isinf": np.isinf,
}  # fmt: skip
BINARY = {"pow": np.power, "fmod": np.fmod, "atan2": np.arctan2, "copysign": np.copysign}


@pytest.mark.parametrize("name", sorted(UNARY) + sorted(BINARY))
def test_intrinsics_match_numpy(name):
    x = np.array([0.5, 1.5, 2.5, 3.7, 0.01], "float32")
    y = np.array([-2.0, 0.5, 1.5, -0.3, 2.0], "float32")
    X = te.placeholder((5,), "float32", "X")
    Y = te.placeholder((5,), "float32", "Y")
    fn = getattr(te, name)
    Z = te.compute((5,), (lambda i: fn(X[i])) if name in UNARY else (lambda i: fn(X[i], Y[i])))
    func = te.create_prim_func([X, Y, Z])
    z = np.zeros(5, "bool" if name in ("isnan", "isinf") else "float32")
    run_prim_func(func, [x, y, z])
    expect = UNARY[name](x) if name in UNARY else BINARY[name](x, y)
    np.testing.assert_allclose(z, expect.astype(z.dtype), rtol=2e-6)


def test_size_variable_only_inside_expressions_cannot_be_bound():
    func = prim("""
@prim_func
def f(A: Buffer((n * 2,), "float32"), B: Buffer((n * 2,), "float32"), m: int32, k: int64):
    for i in serial(0, n * 2):
        B[i] = A[i] * cast("float32", m) + cast("float32", k)
""")
    b = np.zeros(4, "float32")
    with pytest.raises(InputError, match="size variable 'n' .* cannot be bound"):
        run_prim_func(func, [np.ones(4, "float32"), b, 3, 1])


def test_scalar_parameters_are_bound():
    func = prim("""
@prim_func
def f(A: Buffer((n,), "float32"), B: Buffer((n,), "float32"), m: int32):
    for i in serial(0, n):
        B[i] = A[i] * cast("float32", m)
""")
    b = np.zeros(3, "float32")
    run_prim_func(func, [np.ones(3, "float32"), b, np.int32(3)])
    np.testing.assert_array_equal(b, [3, 3, 3])


def test_alloc_buffers_start_as_nan():
    func = prim("""
@prim_func
def f(B: Buffer((2,), "float32")):
    with block("root"):
        tmp = alloc_buffer((2,), "float32")
        reads()
        writes()
        tmp[0] = 1.0
        B[0] = tmp[0]
        B[1] = tmp[1]
""")
    b = np.zeros(2, "float32")
    run_prim_func(func, [b])
    assert b[0] == 1.0 and np.isnan(b[1])


# -- errors ------------------------------------------------------------------------------------


def test_wrong_buffer_shape_names_the_argument_and_the_binding():
    a, b = np.zeros((2, 3, 4), "float32"), np.zeros(3, "float32")
    with pytest.raises(InputError) as err:
        run_prim_func(SUM_2D, [a, b])
    msg = str(err.value)
    assert "argument 1 ('B'): dimension 0 is 3, expected n = 2" in msg
    assert "n from 'A' dimension 0" in msg and "shape (2,)" in msg
    with pytest.raises(InputError, match=r"argument 0 \('A'\): dimension 1 is 5, expected 3"):
        run_prim_func(SUM_2D, [np.zeros((2, 5, 4), "float32"), np.zeros(2, "float32")])


def test_wrong_count_rank_dtype():
    a, b = np.zeros((2, 3, 4), "float32"), np.zeros(2, "float32")
    with pytest.raises(InputError, match="expected 2 arguments \\(A, B\\), got 1"):
        run_prim_func(SUM_2D, [a])
    with pytest.raises(InputError, match="rank 2 .* expected rank 3"):
        run_prim_func(SUM_2D, [a[0], b])
    with pytest.raises(InputError, match="dtype float64, expected float32"):
        run_prim_func(SUM_2D, [a.astype("float64"), b])
    with pytest.raises(InputError, match="expected a numpy array, got list"):
        run_prim_func(SUM_2D, [a, [0.0, 0.0]])


def test_out_of_bounds_access_names_buffer_and_block():
    func = prim("""
@prim_func
def f(A: Buffer((3,), "float32"), B: Buffer((3,), "float32")):
    for i in serial(0, 3):
        with block("shift"):
            vi = axis.spatial(3, i)
            reads(A[vi - 1])
            writes(B[vi])
            B[vi] = A[vi - 1]
""")
    with pytest.raises(TirEvalError, match=r"block 'shift': buffer 'A' accessed at \(-1,\)"):
        run_prim_func(func, [np.zeros(3, "float32"), np.zeros(3, "float32")])


def test_iteration_value_outside_extent_is_an_error():
    func = prim("""
@prim_func
def f(B: Buffer((4,), "float32")):
    for i in serial(0, 4):
        with block("B"):
            vi = axis.spatial(3, i)
            reads()
            writes(B[vi])
            B[vi] = 1.0
""")
    with pytest.raises(TirEvalError, match=r"block 'B': iteration variable vi = 3 .* \[0, 3\)"):
        run_prim_func(func, [np.zeros(4, "float32")])


def test_integer_division_by_zero_is_an_error():
    func = prim("""
@prim_func
def f(A: Buffer((1,), "int32")):
    A[0] = A[0] // int32(0)
""")
    with pytest.raises(TirEvalError, match="division by zero"):
        run_prim_func(func, [np.ones(1, "int32")])
