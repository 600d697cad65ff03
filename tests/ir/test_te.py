"""te programs -> PrimFunc: golden text, round trip, determinism, and numerics through the
reference evaluator (tcc.ir.tir_eval) against numpy."""

import numpy as np
import pytest

from tcc.ir import te
from tcc.ir import tir as T
from tcc.ir.errors import ShapeError
from tcc.ir.expr import Var
from tcc.ir.module import IRModule
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_module, print_prim_func
from tcc.ir.structural import structural_equal, structural_hash
from tcc.ir.tir_eval import run_prim_func

RNG = np.random.default_rng(0)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def matmul(n=None):
    n = Var("n") if n is None else n
    A = te.placeholder((n, 8), "float32", "A")
    B = te.placeholder((8, 6), "float32", "B")
    k = te.reduce_axis(8, "k")
    C = te.compute((n, 6), lambda i, j: te.sum(A[i, k] * B[k, j], axis=[k]), "C")
    return te.create_prim_func([A, B, C])


MATMUL_TEXT = (
    (
        "@prim_func\n"
        'def matmul(A: Buffer((n, 8), "float32"), B: Buffer((8, 6), "float32"), '
        'C: Buffer((n, 6), "float32")):\n'
    )
    + """\
    with block("root"):
        reads()
        writes()
        for i in serial(0, n):
            for j in serial(0, 6):
                for k in serial(0, 8):
                    with block("C"):
                        v_i = axis.spatial(n, i)
                        v_j = axis.spatial(6, j)
                        v_k = axis.reduce(8, k)
                        reads(A[v_i, v_k], B[v_k, v_j])
                        writes(C[v_i, v_j])
                        with init():
                            C[v_i, v_j] = 0.0
                        C[v_i, v_j] = C[v_i, v_j] + A[v_i, v_k] * B[v_k, v_j]
"""
)


def module_of(func: T.PrimFunc, name: str = "f") -> IRModule:
    mod = IRModule()
    mod.functions[name] = func
    return mod


def run(func, *arrays):
    run_prim_func(func, list(arrays))
    return arrays[-1]


def test_matmul_golden_text():
    assert print_prim_func("matmul", matmul()) == MATMUL_TEXT


def test_matmul_symbolic_n_runs_at_every_size():
    func = matmul()
    for n in (1, 3, 5):
        a, b = rand(n, 8), rand(8, 6)
        c = run(func, a, b, np.zeros((n, 6), "float32"))
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_params_are_inputs_then_outputs_and_blocks_declare_accesses():
    func = matmul()
    assert [b.name for b in func.buffers] == ["A", "B", "C"]
    root = func.body
    assert isinstance(root, T.Block) and root.name == "root" and not root.alloc_buffers
    block = root.body.body.body.body
    assert isinstance(block, T.Block) and block.name == "C"
    assert [iv.kind for iv in block.iter_vars] == [T.IterKind.SPATIAL] * 2 + [T.IterKind.REDUCE]
    assert [r.buffer.name for r in block.reads] == ["A", "B"]
    assert isinstance(block.init, T.BufferStore)


def test_roundtrip_and_deterministic_builds():
    mod1, mod2 = module_of(matmul()), module_of(matmul())
    text = print_module(mod1)
    assert print_module(mod2) == text
    assert structural_equal(mod1, mod2)
    assert structural_hash(mod1) == structural_hash(mod2)
    parsed = parse_module(text)
    assert structural_equal(parsed, mod1)
    assert print_module(parsed) == text


def conv2d_padded():
    """A 3x3 convolution, stride 1, padding 1, the padding as a conditional load."""
    n = Var("n")
    X = te.placeholder((n, 2, 5, 5), "float32", "X")
    W = te.placeholder((3, 2, 3, 3), "float32", "W")
    c, rh, rw = te.reduce_axis(2, "c"), te.reduce_axis(3, "rh"), te.reduce_axis(3, "rw")

    def body(b, k, h, w):
        y, x = h + rh - 1, w + rw - 1
        inside = te.logical_and(te.logical_and(y >= 0, y < 5), te.logical_and(x >= 0, x < 5))
        return te.sum(
            te.if_then_else(inside, X[b, c, y, x], 0.0) * W[k, c, rh, rw], axis=[c, rh, rw]
        )

    Y = te.compute((n, 3, 5, 5), body, "Y")
    return te.create_prim_func([X, W, Y])


def test_conv2d_with_padding():
    func = conv2d_padded()
    x, w = rand(2, 2, 5, 5), rand(3, 2, 3, 3)
    y = run(func, x, w, np.zeros((2, 3, 5, 5), "float32"))
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
    expect = np.einsum("bchwij,kcij->bkhw", windows, w)
    np.testing.assert_allclose(y, expect, rtol=1e-4, atol=1e-5)
    block = func.body.body
    while not isinstance(block, T.Block):
        block = block.body
    # a padding load declares the point it reads when its condition holds (one past the
    # edge where it fails, which nothing reads), as a plain one does
    (x_region, w_region) = block.reads
    assert x_region.buffer.name == "X" and w_region.buffer.name == "W"
    lows = [str(lo) for lo, _ in x_region.ranges]
    assert lows[2].endswith("- 1") and lows[3].endswith("- 1"), lows
    assert [str(ext) for _, ext in x_region.ranges] == ["1"] * 4
    assert [str(ext) for _, ext in w_region.ranges] == ["1"] * 4
    assert_roundtrip(func)


def test_a_data_dependent_load_declares_the_whole_buffer():
    n = Var("n")
    table = te.placeholder((10, 4), "float32", "table")
    ids = te.placeholder((n,), "int64", "ids")
    out = te.compute((n, 4), lambda i, j: table[ids[i], j], "out")
    func = te.create_prim_func([table, ids, out])
    block = func.body.body
    while not isinstance(block, T.Block):
        block = block.body
    region = next(r for r in block.reads if r.buffer.name == "table")
    assert [(str(lo), str(ext)) for lo, ext in region.ranges] == [("0", "10"), ("0", "4")]


def softmax():
    n = Var("n")
    X = te.placeholder((n, 7), "float32", "X")
    k1, k2 = te.reduce_axis(7, "k"), te.reduce_axis(7, "k")
    M = te.compute((n,), lambda i: te.max(X[i, k1], axis=[k1]), "M")
    S = te.compute((n,), lambda i: te.sum(te.exp(X[i, k2] - M[i]), axis=[k2]), "S")
    Y = te.compute((n, 7), lambda i, j: te.exp(X[i, j] - M[i]) / S[i], "Y")
    return te.create_prim_func([X, Y])


def test_softmax_three_stages_with_intermediates():
    func = softmax()
    assert [b.name for b in func.body.alloc_buffers] == ["M", "S"]
    assert len(func.body.body.stmts) == 3
    x = rand(4, 7) * 10
    y = run(func, x, np.zeros((4, 7), "float32"))
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
    assert_roundtrip(func)


@pytest.mark.parametrize(
    "kind, ref", [("sum", np.sum), ("prod", np.prod), ("max", np.max), ("min", np.min)]
)
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_reduction_over_two_axes(kind, ref, dtype):
    X = te.placeholder((3, 4, 2), dtype, "X")
    r1, r2 = te.reduce_axis(3, "r1"), te.reduce_axis(2, "r2")
    Y = te.compute((4,), lambda j: getattr(te, kind)(X[r1, j, r2], axis=[r1, r2]), "Y")
    func = te.create_prim_func([X, Y])
    x = RNG.integers(-3, 4, (3, 4, 2)).astype(dtype)
    y = run(func, x, np.zeros(4, dtype))
    np.testing.assert_allclose(y, ref(x, axis=(0, 2)), rtol=1e-6)


@pytest.mark.parametrize("kind, identity", [("sum", 0.0), ("prod", 1.0), ("max", -np.inf)])
def test_a_reduction_over_no_elements_writes_its_identity(kind, identity):
    """A reduction loop of extent 0 never runs, so the init inside it never would: the
    stage is a plain store of the identity."""
    X = te.placeholder((4, 0), "float32", "X")
    r = te.reduce_axis(0, "r")
    Y = te.compute((4,), lambda i: getattr(te, kind)(X[i, r], axis=r), "Y")
    func = te.create_prim_func([X, Y])
    y = run(func, np.zeros((4, 0), "float32"), np.full(4, 7.0, "float32"))  # 7: stale memory
    np.testing.assert_array_equal(y, np.full(4, identity, "float32"))


def test_reduction_identities():
    assert str(te.reduce_identity("max", "float32")) == 'float32("-inf")'
    assert te.reduce_identity("min", "int8").value == 127
    assert te.reduce_identity("max", "uint16").value == 0
    assert te.reduce_identity("prod", "float16").value == 1.0


def test_full_reduction_to_a_scalar_with_where():
    X = te.placeholder((6,), "float32", "X")
    r = te.reduce_axis(6, "r")
    Y = te.compute((), lambda: te.sum(X[r], axis=r, where=X[r] > 0.0), "Y")
    func = te.create_prim_func([X, Y])
    x = rand(6)
    y = run(func, x, np.zeros((), "float32"))
    np.testing.assert_allclose(y, x[x > 0].sum(), rtol=1e-6)
    assert_roundtrip(func)


def test_elementwise_chain_with_casts():
    n = Var("n")
    A = te.placeholder((n,), "int32", "A")
    F = te.compute(
        (n,),
        lambda i: te.cast(A[i], "float32") * 0.5 + te.sqrt(te.abs(te.cast("float32", A[i]))),
        "F",
    )
    H = te.compute((n,), lambda i: te.cast(te.tanh(F[i] / 100.0), "float16"), "H")
    W = te.compute((n,), lambda i: te.cast(A[i] * 3, "int8"), "W")  # wraps around
    B = te.compute((n,), lambda i: te.cast(H[i], "float32") + te.cast(W[i], "float32"), "B")
    func = te.create_prim_func([A, B])
    assert [b.name for b in func.body.alloc_buffers] == ["F", "H", "W"]
    a = RNG.integers(-1000, 1000, 9).astype("int32")
    b = run(func, a, np.zeros(9, "float32"))
    f = a.astype("float32") * np.float32(0.5) + np.sqrt(np.abs(a.astype("float32")))
    h = np.tanh(f / np.float32(100)).astype("float16")
    w = (a * 3).astype("int8")
    np.testing.assert_allclose(b, h.astype("float32") + w.astype("float32"), rtol=1e-3)
    assert_roundtrip(func)


def test_index_arithmetic_and_intrinsics():
    A = te.placeholder((4, 6), "float32", "A")
    T2 = te.compute((6, 4), lambda i, j: A[j, i], "T")  # transpose
    R = te.compute((24,), lambda i: T2[i % 6, i // 6], "R")  # reshape
    Y = te.compute((24,), lambda i: te.maximum(te.exp(R[i]), te.sigmoid(R[i])), "Y")
    func = te.create_prim_func([A, Y])
    a = rand(4, 6)
    y = run(func, a, np.zeros(24, "float32"))
    r = a.T.reshape(-1, order="F")
    np.testing.assert_allclose(y, np.maximum(np.exp(r), 1 / (1 + np.exp(-r))), rtol=1e-5)


def test_same_names_get_unique_block_names():
    A = te.placeholder((3,), "float32", "A")
    B = te.compute((3,), lambda i: A[i] + 1.0, "add")
    C = te.compute((3,), lambda i: B[i] * 2.0, "add")
    func = te.create_prim_func([A, C])
    text = print_prim_func("f", func)
    assert 'block("add")' in text and 'block("add_1")' in text
    c = run(func, np.arange(3, dtype="float32"), np.zeros(3, "float32"))
    np.testing.assert_allclose(c, (np.arange(3) + 1) * 2)


def test_helpers():
    x = te.placeholder((2,), "float32", "x")[0]
    assert te.exp(x).dtype == "float32" and te.isnan(x).dtype == "bool"
    assert te.pow(x, 2).args[1].dtype == "float32"
    assert te.cast(x, "float32") is x
    assert te.const(3, "int8").dtype == "int8" and te.const(1, "float16").value == 1.0
    assert te.max_value("int8").value == 127 and te.min_value("uint8").value == 0
    assert te.max(x, 1.0).op == "max" and te.min(x, 1.0).op == "min"
    assert te.equal(x, 1.0).op == "eq" and te.logical_not(te.less(x, 0.0)).dtype == "bool"


# -- errors ------------------------------------------------------------------------------------


def test_unlisted_placeholder_is_an_error():
    A = te.placeholder((3,), "float32", "A")
    B = te.compute((3,), lambda i: A[i] * 2.0, "B")
    with pytest.raises(ShapeError, match="placeholder 'A' .* not in the tensor list"):
        te.create_prim_func([B])


def test_mismatched_dtypes_are_an_error():
    A = te.placeholder((3,), "float32", "A")
    B = te.placeholder((3,), "float16", "B")
    with pytest.raises(ShapeError, match="add of float32 and float16.*te.cast"):
        te.compute((3,), lambda i: A[i] + B[i], "C")


def test_reduction_must_be_whole_body():
    A = te.placeholder((3,), "float32", "A")
    r = te.reduce_axis(3, "r")
    with pytest.raises(ShapeError, match="whole body"):
        te.compute((1,), lambda i: te.sum(A[r], axis=[r]) * 2.0, "B")


def test_reduce_axis_outside_its_reduction_is_an_error():
    A = te.placeholder((3,), "float32", "A")
    r = te.reduce_axis(3, "r")
    B = te.compute((3,), lambda i: A[r], "B")
    with pytest.raises(ShapeError, match="reduce axis 'r'"):
        te.create_prim_func([A, B])


def test_wrong_index_count_and_arity():
    A = te.placeholder((3, 4), "float32", "A")
    with pytest.raises(ShapeError, match="2 dimensions but is indexed with 1"):
        A[0]
    with pytest.raises(ShapeError, match="takes 1 index arguments but the shape has 2"):
        te.compute((3, 4), lambda i: A[i, 0], "B")


def test_float_intrinsic_of_an_integer_is_an_error():
    A = te.placeholder((3,), "int32", "A")
    with pytest.raises(ShapeError, match="te.exp takes float arguments, got int32"):
        te.exp(A[0])
    assert te.abs(A[0]).dtype == "int32"


def test_size_variable_no_shape_holds_is_a_scalar_parameter():
    m = Var("m")
    A = te.placeholder((3,), "float32", "A")
    B = te.compute((3,), lambda i: A[i] * te.cast(m, "float32"), "B")
    func = te.create_prim_func([A, B])
    assert func.params[2] is m and te.scalar_params(func) == (m,)
    out = np.zeros(3, "float32")
    run_prim_func(func, [np.ones(3, "float32"), out, 5])
    np.testing.assert_array_equal(out, [5, 5, 5])


def test_a_float_variable_is_no_size_and_an_error():
    x = Var("x", "float32")
    A = te.placeholder((3,), "float32", "A")
    B = te.compute((3,), lambda i: A[i] * x, "B")
    with pytest.raises(ShapeError, match="float32 variable 'x'"):
        te.create_prim_func([A, B])


def assert_roundtrip(func):
    mod = module_of(func)
    text = print_module(mod)
    parsed = parse_module(text)
    assert structural_equal(parsed, mod), text
    assert print_module(parsed) == text
