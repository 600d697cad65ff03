"""simplify-algebra: golden before/after modules, a property test over random op chains,
and numerics kept on compiled models."""

import numpy as np
import onnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import tcc.api
from tcc.frontend.onnx import from_onnx
from tcc.ir.builder import FunctionBuilder
from tcc.ir.graph import TensorType
from tcc.ir.interp import run
from tcc.ir.module import IRModule
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_module
from tcc.ir.structural import structural_equal
from tcc.lower.passes.dead_code_elimination import dead_code_elimination
from tcc.lower.passes.simplify_algebra import simplify_algebra
from tests.e2e.test_models import onnxruntime_outputs, token_inputs
from tests.models import builders


def verify(before: str, expected: str, consts: dict | None = None) -> None:
    mod = parse_module(before)
    mod.const_values.update(consts or {})
    text = print_module(mod)
    got = simplify_algebra(mod)
    want = parse_module(expected)
    assert structural_equal(got, want), print_module(got)
    assert print_module(mod) == text  # the input module is left alone
    assert structural_equal(simplify_algebra(got), got)  # one call reaches the fixed point


F32 = np.float32
I32 = np.int32


def test_neutral_constants_of_any_non_enlarging_shape_are_removed():
    verify(
        '''
constants = {"one": Tensor((4,), "float32"), "zero": Tensor((1, 4), "float32"), "s1": Tensor((), "float32"), "i1": Tensor((1,), "int32")}

@function(inputs=["x", "k"], outputs=["y", "j"])
def main(x: Tensor((n, 4), "float32"), k: Tensor((m,), "int32")) -> Tuple(Tensor((n, 4), "float32"), Tensor((m,), "int32")):
    a: Tensor((n, 4), "float32") = op.mul(x, const("one"))
    b: Tensor((n, 4), "float32") = op.mul(const("one"), a)
    c: Tensor((n, 4), "float32") = op.add(b, const("zero"))
    d: Tensor((n, 4), "float32") = op.add(const("zero"), c)
    e: Tensor((n, 4), "float32") = op.sub(d, const("zero"))
    f: Tensor((n, 4), "float32") = op.div(e, const("s1"))
    g: Tensor((n, 4), "float32") = op.pow(f, const("s1"))
    y: Tensor((n, 4), "float32") = op.relu(g)
    h: Tensor((m,), "int32") = op.div(k, const("i1"))
    i: Tensor((m,), "int32") = op.pow(h, const("i1"))
    j: Tensor((m,), "int32") = op.neg(i)
    return y, j
''',
        '''
constants = {"one": Tensor((4,), "float32"), "zero": Tensor((1, 4), "float32"), "s1": Tensor((), "float32"), "i1": Tensor((1,), "int32")}

@function(inputs=["x", "k"], outputs=["y", "j"])
def main(x: Tensor((n, 4), "float32"), k: Tensor((m,), "int32")) -> Tuple(Tensor((n, 4), "float32"), Tensor((m,), "int32")):
    y: Tensor((n, 4), "float32") = op.relu(x)
    j: Tensor((m,), "int32") = op.neg(k)
    return y, j
''',
        {"one": np.ones(4, F32), "zero": np.array([[0.0, -0.0, 0.0, 0.0]], F32),
         "s1": np.array(1, F32), "i1": np.ones(1, I32)},
    )


def test_other_constants_positions_and_enlarging_broadcasts_are_kept():
    same = '''
constants = {"almost": Tensor((4,), "float32"), "zero": Tensor((4,), "float32"), "one": Tensor((4,), "float32"), "wide": Tensor((3, 4), "float32"), "f1": Tensor((), "float32")}

@function(inputs=["x", "v", "k"], outputs=["a", "b", "c", "d", "e", "f", "g", "h"])
def main(x: Tensor((4,), "float32"), v: Tensor((m,), "float32"), k: Tensor((4,), "int64")) -> Tuple(Tensor((4,), "float32"), Tensor((4,), "float32"), Tensor((4,), "float32"), Tensor((4,), "float32"), Tensor((3, 4), "float32"), Tensor((4,), "float32"), Tensor((4,), "int64"), Tensor((4,), "float32")):
    a: Tensor((4,), "float32") = op.mul(x, const("almost"))
    b: Tensor((4,), "float32") = op.mul(x, const("zero"))
    c: Tensor((4,), "float32") = op.sub(const("zero"), x)
    d: Tensor((4,), "float32") = op.div(const("one"), x)
    e: Tensor((3, 4), "float32") = op.add(x, const("wide"))
    f: Tensor((4,), "float32") = op.add(v, const("zero"))
    g: Tensor((4,), "int64") = op.pow(k, const("f1"))
    h: Tensor((4,), "float32") = op.pow(const("one"), x)
    return a, b, c, d, e, f, g, h
'''
    verify(same, same, {"almost": np.array([1, 1, 2, 1], F32), "zero": np.zeros(4, F32),
                        "one": np.ones(4, F32), "wide": np.zeros((3, 4), F32),
                        "f1": np.array(1, F32)})


def test_float_squares_become_products():
    # pow(x, 2) of floats is x * x; integers, other exponents and enlarging shapes stay
    verify(
        '''
constants = {"two": Tensor((), "float32"), "twos": Tensor((4,), "float32"), "i2": Tensor((), "int32"), "mixed": Tensor((4,), "float32"), "wide": Tensor((3, 4), "float32")}

@function(inputs=["x", "k"], outputs=["a", "b", "c", "d", "e"])
def main(x: Tensor((n, 4), "float32"), k: Tensor((4,), "int32")) -> Tuple(Tensor((n, 4), "float32"), Tensor((n, 4), "float32"), Tensor((4,), "int32"), Tensor((n, 4), "float32"), Tensor((3, 4), "float32")):
    a: Tensor((n, 4), "float32") = op.pow(x, const("two"))
    b: Tensor((n, 4), "float32") = op.pow(x, const("twos"))
    c: Tensor((4,), "int32") = op.pow(k, const("i2"))
    d: Tensor((n, 4), "float32") = op.pow(x, const("mixed"))
    e: Tensor((3, 4), "float32") = op.pow(const("twos"), const("wide"))
    return a, b, c, d, e
''',
        '''
constants = {"two": Tensor((), "float32"), "twos": Tensor((4,), "float32"), "i2": Tensor((), "int32"), "mixed": Tensor((4,), "float32"), "wide": Tensor((3, 4), "float32")}

@function(inputs=["x", "k"], outputs=["a", "b", "c", "d", "e"])
def main(x: Tensor((n, 4), "float32"), k: Tensor((4,), "int32")) -> Tuple(Tensor((n, 4), "float32"), Tensor((n, 4), "float32"), Tensor((4,), "int32"), Tensor((n, 4), "float32"), Tensor((3, 4), "float32")):
    a: Tensor((n, 4), "float32") = op.mul(x, x)
    b: Tensor((n, 4), "float32") = op.mul(x, x)
    c: Tensor((4,), "int32") = op.pow(k, const("i2"))
    d: Tensor((n, 4), "float32") = op.pow(x, const("mixed"))
    e: Tensor((3, 4), "float32") = op.pow(const("twos"), const("wide"))
    return a, b, c, d, e
''',
        {"two": np.array(2, F32), "twos": np.full(4, 2, F32), "i2": np.array(2, I32),
         "mixed": np.array([2, 2, 3, 2], F32), "wide": np.full((3, 4), 2, F32)},
    )
    x = np.random.default_rng(0).standard_normal(1000).astype(F32) * 1e3
    np.testing.assert_array_equal(np.power(x, F32(2)), x * x)  # the same rounding


def test_float_cubes_become_two_products_as_onnxruntime_rounds_them():
    # pow(x, 3) of floats is (x * x) * x, the square bound first; integers and other
    # exponents stay
    verify(
        '''
constants = {"three": Tensor((), "float32"), "i3": Tensor((), "int32"), "mixed": Tensor((4,), "float32")}

@function(inputs=["x", "k"], outputs=["a", "c", "d"])
def main(x: Tensor((n, 4), "float32"), k: Tensor((4,), "int32")) -> Tuple(Tensor((n, 4), "float32"), Tensor((4,), "int32"), Tensor((n, 4), "float32")):
    a: Tensor((n, 4), "float32") = op.pow(x, const("three"))
    c: Tensor((4,), "int32") = op.pow(k, const("i3"))
    d: Tensor((n, 4), "float32") = op.pow(x, const("mixed"))
    return a, c, d
''',
        '''
constants = {"three": Tensor((), "float32"), "i3": Tensor((), "int32"), "mixed": Tensor((4,), "float32")}

@function(inputs=["x", "k"], outputs=["a", "c", "d"])
def main(x: Tensor((n, 4), "float32"), k: Tensor((4,), "int32")) -> Tuple(Tensor((n, 4), "float32"), Tensor((4,), "int32"), Tensor((n, 4), "float32")):
    a_mul: Tensor((n, 4), "float32") = op.mul(x, x)
    a: Tensor((n, 4), "float32") = op.mul(a_mul, x)
    c: Tensor((4,), "int32") = op.pow(k, const("i3"))
    d: Tensor((n, 4), "float32") = op.pow(x, const("mixed"))
    return a, c, d
''',
        {"three": np.array(3, F32), "i3": np.array(3, I32), "mixed": np.array([3, 3, 2, 3], F32)},
    )


def test_a_compiled_cube_is_what_onnxruntime_computes():
    """GELU's tanh form cubes its input: the compiled model gives onnxruntime's Pow bit for
    bit (onnxruntime computes (x * x) * x), and stays within 2 ulp of numpy's power."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    three = numpy_helper.from_array(np.array(3, F32), "three")
    graph = helper.make_graph([helper.make_node("Pow", ["x", "three"], ["y"])], "cube", [x],
                              [y], [three])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    data = np.random.default_rng(0).standard_normal(100_000).astype(F32) * 30
    (want,) = onnxruntime_outputs(model, {"x": data})
    fn = tcc.api.compile_onnx(model)
    got = fn({"x": data})
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_max_ulp(got, np.power(data, F32(3)), maxulp=2)


def test_casts_to_the_own_dtype_and_identities_are_removed():
    verify(
        '''
@function(inputs=["x"], outputs=["y", "z"])
def main(x: Tensor((n, 4), "float32")) -> Tuple(Tensor((n, 4), "float32"), Tensor((n, 4), "int32")):
    a: Tensor((n, 4), "float32") = op.cast(x, dtype="float32")
    b: Tensor((n, 4), "float32") = op.identity(a)
    y: Tensor((n, 4), "float32") = op.exp(b)
    z: Tensor((n, 4), "int32") = op.cast(b, dtype="int32")
    return y, z
''',
        '''
@function(inputs=["x"], outputs=["y", "z"])
def main(x: Tensor((n, 4), "float32")) -> Tuple(Tensor((n, 4), "float32"), Tensor((n, 4), "int32")):
    y: Tensor((n, 4), "float32") = op.exp(x)
    z: Tensor((n, 4), "int32") = op.cast(x, dtype="int32")
    return y, z
''',
    )


def test_reshape_chains_become_one_reshape_or_their_source():
    verify(
        '''
@function(inputs=["x"], outputs=["y", "z", "w"])
def main(x: Tensor((n, 6), "float32")) -> Tuple(Tensor((n, 2, 3), "float32"), Tensor((n, 6), "float32"), Tensor((n, 3, 2), "float32")):
    a: Tensor((n, 3, 2), "float32") = op.reshape(x, shape=[n, 3, 2])
    b: Tensor((n, 1, 6), "float32") = op.reshape(a, shape=[n, 1, 6])
    y: Tensor((n, 2, 3), "float32") = op.reshape(b, shape=[n, 2, -1])
    c: Tensor((n, 6), "float32") = op.squeeze(b, axes=[1])
    z: Tensor((n, 6), "float32") = op.exp(c)
    d: Tensor((1, n, 3, 2), "float32") = op.expand_dims(a, axes=[0])
    e: Tensor((n, 3, 2, 1), "float32") = op.reshape(d, shape=[n, 3, 2, 1])
    w: Tensor((n, 3, 2), "float32") = op.squeeze(e, axes=[3])
    f: Tensor((n, 1, 3, 2), "float32") = op.expand_dims(w, axes=[1])
    return y, z, w
''',
        '''
@function(inputs=["x"], outputs=["y", "z", "w"])
def main(x: Tensor((n, 6), "float32")) -> Tuple(Tensor((n, 2, 3), "float32"), Tensor((n, 6), "float32"), Tensor((n, 3, 2), "float32")):
    a: Tensor((n, 3, 2), "float32") = op.reshape(x, shape=[n, 3, 2])
    b: Tensor((n, 1, 6), "float32") = op.reshape(x, shape=[n, 1, 6])
    y: Tensor((n, 2, 3), "float32") = op.reshape(x, shape=[n, 2, -1])
    z: Tensor((n, 6), "float32") = op.exp(x)
    d: Tensor((1, n, 3, 2), "float32") = op.reshape(x, shape=[1, n, 3, 2])
    e: Tensor((n, 3, 2, 1), "float32") = op.reshape(x, shape=[n, 3, 2, 1])
    w: Tensor((n, 3, 2), "float32") = op.reshape(x, shape=[n, 3, 2])
    f: Tensor((n, 1, 3, 2), "float32") = op.reshape(x, shape=[n, 1, 3, 2])
    return y, z, w
''',
    )


def test_squeeze_of_expand_dims_and_back_is_the_source():
    verify(
        '''
@function(inputs=["x"], outputs=["y", "z"])
def main(x: Tensor((n, 1, 4), "float32")) -> Tuple(Tensor((n, 1, 4), "float32"), Tensor((n, 1, 4), "float32")):
    a: Tensor((n, 1, 1, 4), "float32") = op.expand_dims(x, axes=[-2])
    b: Tensor((n, 1, 4), "float32") = op.squeeze(a, axes=[2])
    y: Tensor((n, 1, 4), "float32") = op.relu(b)
    c: Tensor((n, 4), "float32") = op.squeeze(x, axes=[1])
    d: Tensor((n, 1, 4), "float32") = op.expand_dims(c, axes=[1])
    z: Tensor((n, 1, 4), "float32") = op.relu(d)
    return y, z
''',
        '''
@function(inputs=["x"], outputs=["y", "z"])
def main(x: Tensor((n, 1, 4), "float32")) -> Tuple(Tensor((n, 1, 4), "float32"), Tensor((n, 1, 4), "float32")):
    a: Tensor((n, 1, 1, 4), "float32") = op.expand_dims(x, axes=[-2])
    y: Tensor((n, 1, 4), "float32") = op.relu(x)
    c: Tensor((n, 4), "float32") = op.squeeze(x, axes=[1])
    z: Tensor((n, 1, 4), "float32") = op.relu(x)
    return y, z
''',
    )


def test_transposes_compose_and_identity_permutations_vanish():
    verify(
        '''
@function(inputs=["x"], outputs=["y", "z", "w"])
def main(x: Tensor((a, b, c), "float32")) -> Tuple(Tensor((c, a, b), "float32"), Tensor((a, b, c), "float32"), Tensor((a, b, c), "float32")):
    t: Tensor((b, a, c), "float32") = op.transpose(x, axes=[1, 0, 2])
    y: Tensor((c, a, b), "float32") = op.transpose(t, axes=[-1, 1, 0])
    u: Tensor((c, b, a), "float32") = op.transpose(x)
    v: Tensor((a, b, c), "float32") = op.transpose(u)
    z: Tensor((a, b, c), "float32") = op.exp(v)
    w: Tensor((a, b, c), "float32") = op.transpose(x, axes=[0, 1, 2])
    return y, z, w
''',
        '''
@function(inputs=["x"], outputs=["y", "z", "w"])
def main(x: Tensor((a, b, c), "float32")) -> Tuple(Tensor((c, a, b), "float32"), Tensor((a, b, c), "float32"), Tensor((a, b, c), "float32")):
    t: Tensor((b, a, c), "float32") = op.transpose(x, axes=[1, 0, 2])
    y: Tensor((c, a, b), "float32") = op.transpose(x, axes=[2, 0, 1])
    u: Tensor((c, b, a), "float32") = op.transpose(x)
    z: Tensor((a, b, c), "float32") = op.exp(x)
    return y, z, x
''',
    )


def test_outputs_may_become_parameters_or_repeat_and_keep_their_names():
    verify(
        '''
@function(inputs=["p"], outputs=["o", "q"])
def body(p: Tensor((4,), "float32")) -> Tuple(Tensor((4,), "float32"), Tensor((4,), "float32")):
    a: Tensor((4,), "float32") = op.identity(p)
    b: Tensor((4,), "float32") = op.reshape(a, shape=[4])
    return a, b


@function(inputs=["x0", "x1"], outputs=["y0", "y1"])
def main(x0: Tensor((), "bool"), x1: Tensor((4,), "float32")) -> Tuple(Tensor((4,), "float32"), Tensor((4,), "float32")):
    r: Tuple(Tensor((4,), "float32"), Tensor((4,), "float32")) = if_(x0, then_branch="body", else_branch="body", args=[x1])
    return r[0], r[1]
''',
        '''
@function(inputs=["p"], outputs=["o", "q"])
def body(p: Tensor((4,), "float32")) -> Tuple(Tensor((4,), "float32"), Tensor((4,), "float32")):
    return p, p


@function(inputs=["x0", "x1"], outputs=["y0", "y1"])
def main(x0: Tensor((), "bool"), x1: Tensor((4,), "float32")) -> Tuple(Tensor((4,), "float32"), Tensor((4,), "float32")):
    r: Tuple(Tensor((4,), "float32"), Tensor((4,), "float32")) = if_(x0, then_branch="body", else_branch="body", args=[x1])
    return r[0], r[1]
''',
    )


def test_a_value_is_never_replaced_by_a_bare_constant():
    same = '''
constants = {"w": Tensor((2, 3), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
    a: Tensor((2, 3), "float32") = op.reshape(const("w"), shape=[2, 3])
    b: Tensor((2, 3), "float32") = op.identity(const("w"))
    c: Tensor((2, 3), "float32") = op.add(a, b)
    y: Tensor((2, 3), "float32") = op.add(x, c)
    return y
'''
    verify(same, same, {"w": np.zeros((2, 3), F32)})


# -- property: random chains keep the interpreter's result exactly ------------------------------

SHAPE = (2, 3, 4)


def _factorization(draw, total: int) -> list[int]:
    """A random shape holding `total` elements (with some 1s)."""
    primes, n, p = [], total, 2
    while n > 1:
        while n % p == 0:
            primes.append(p)
            n //= p
        p += 1
    order = draw(st.permutations(primes + [1] * draw(st.integers(0, 2))))
    cuts = sorted(draw(st.sets(st.integers(1, max(len(order) - 1, 1)), max_size=3)))
    bounds = [0, *[c for c in cuts if c < len(order)], len(order)]
    return [int(np.prod(order[i:j])) for i, j in zip(bounds, bounds[1:])]


def _neutral_shape(draw, shape: tuple) -> tuple:
    """A constant shape that broadcasts against `shape`: usually one that does not enlarge
    it (a suffix with some axes 1), sometimes one that adds a leading axis."""
    if draw(st.integers(0, 4)) == 0:
        return (2, *shape)
    suffix = shape[len(shape) - draw(st.integers(0, len(shape))):]
    return tuple(d if draw(st.booleans()) else 1 for d in suffix)


def _step(draw, fb: FunctionBuilder, mod: IRModule, values: list) -> None:
    """Append one random op call on a random earlier value."""
    x = draw(st.sampled_from(values))
    shape, dtype = x.type.shape, x.type.dtype
    kind = draw(st.sampled_from(
        ["reshape", "transpose", "expand_dims", "squeeze", "binary", "cast", "identity"]))
    if kind == "reshape":
        new = _factorization(draw, int(np.prod(shape)))
        if draw(st.booleans()):
            new[draw(st.integers(0, len(new) - 1))] = -1
        values.append(fb.emit("reshape", x, shape=new))
    elif kind == "transpose":
        perm = draw(st.none() | st.permutations(range(len(shape))))
        values.append(fb.emit("transpose", x, axes=None if perm is None else list(perm)))
    elif kind == "squeeze" and 1 in shape:
        ones = [i for i, d in enumerate(shape) if d == 1]
        values.append(fb.emit("squeeze", x, axes=draw(st.lists(
            st.sampled_from(ones), min_size=1, unique=True))))
    elif kind in ("expand_dims", "squeeze"):
        values.append(fb.emit("expand_dims", x, axes=[draw(st.integers(0, len(shape)))]))
    elif kind == "binary":
        op = draw(st.sampled_from(["add", "sub", "mul", "div", "pow"]))
        fill = draw(st.sampled_from([1, 2] if op == "div" else [0, 1, 2]))
        const = mod.add_constant(f"c{len(mod.const_types)}",
                                 np.full(_neutral_shape(draw, shape), fill, dtype))
        left = op in ("add", "mul", "sub") and draw(st.booleans())
        values.append(fb.emit(op, *((const, x) if left else (x, const))))
    elif kind == "cast":
        to = draw(st.sampled_from([dtype, "float32", "int32"]))
        values.append(fb.emit("cast", x, dtype=to))
    else:
        values.append(fb.emit("identity", x))


@st.composite
def chains(draw):
    """A module whose main applies random simplifiable (and not) ops to one input, and
    returns the last value and one more (possibly the input itself), with inputs for it."""
    dtype = draw(st.sampled_from(["float32", "int32"]))
    mod, fb = IRModule(), FunctionBuilder()
    values = [fb.param("x", TensorType(SHAPE, dtype))]
    for _ in range(draw(st.integers(1, 10))):
        _step(draw, fb, mod, values)
    outputs = [values[-1], draw(st.sampled_from(values))]
    mod.functions["main"] = fb.finish(outputs, ["last", "other"])
    seed = draw(st.integers(0, 2**16))
    x = np.random.default_rng(seed).integers(1, 6, SHAPE).astype(dtype)  # exact in both dtypes
    return mod, x


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains())
def test_random_chains_keep_the_interpreters_result_exactly(case):
    mod, x = case
    text = print_module(mod)
    got = simplify_algebra(mod)
    assert print_module(mod) == text
    assert len(got["main"].bindings) <= len(mod["main"].bindings)
    assert structural_equal(simplify_algebra(got), got)
    want = run(mod, [x])
    out = run(got, [x])
    for g, w in zip(out, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


# -- numerics on compiled models ---------------------------------------------------------------


def _bindings(mod: IRModule) -> int:
    return sum(len(f.bindings) for f in mod.graph_functions.values())


def _check_compiled(mod: IRModule, model: onnx.ModelProto, feeds: dict) -> None:
    got = tcc.api.compile_onnx(mod)(feeds)
    want = onnxruntime_outputs(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4)


def test_bert_compiled_with_and_without_the_pass_matches_onnxruntime():
    model = builders.bert_encoder()
    mod = from_onnx(model)
    simplified = dead_code_elimination(simplify_algebra(mod))
    # each layer's key transpose (heads first, then keys last) becomes one transpose
    assert _bindings(simplified) == _bindings(dead_code_elimination(mod)) - 2
    feeds = token_inputs(np.random.default_rng(0), 2, 7, vocab=100)
    for m in (mod, simplified):
        _check_compiled(m, model, feeds)


def _with_redundant_ops(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with no-op nodes of the kind exporters leave around its one input and one
    output: Identity, an NCHW->NHWC->NCHW transpose pair, Mul by ones, Add of zero, Div by
    one, a Reshape and a Cast to what the value already is."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    (image,), (result,) = graph.input, graph.output
    shape = [d.dim_value for d in image.type.tensor_type.shape.dim]
    out_shape = [d.dim_value for d in result.type.tensor_type.shape.dim]
    consts = {"ones_c": np.ones((1, shape[1], 1, 1), np.float32),
              "zero_s": np.zeros((), np.float32), "one_s": np.ones((), np.float32),
              "in_shape": np.array(shape, np.int64), "out_shape": np.array(out_shape, np.int64)}
    graph.initializer.extend(numpy_helper.from_array(a, k) for k, a in consts.items())
    for node in graph.node:
        node.input[:] = ["p_in" if i == image.name else i for i in node.input]
        node.output[:] = ["p_out" if o == result.name else o for o in node.output]
    node = helper.make_node
    prologue = [
        node("Identity", [image.name], ["p0"]),
        node("Transpose", ["p0"], ["p1"], perm=[0, 2, 3, 1]),
        node("Transpose", ["p1"], ["p2"], perm=[0, 3, 1, 2]),
        node("Mul", ["p2", "ones_c"], ["p3"]),
        node("Add", ["zero_s", "p3"], ["p4"]),
        node("Reshape", ["p4", "in_shape"], ["p5"]),
        node("Cast", ["p5"], ["p6"], to=TensorProto.FLOAT),
        node("Div", ["p6", "one_s"], ["p_in"]),
    ]
    epilogue = [
        node("Reshape", ["p_out"], ["e0"]),
        node("Identity", ["e0"], [result.name]),
    ]
    epilogue[0].input.append("out_shape")
    nodes = prologue + list(graph.node) + epilogue
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    return model


def test_cnn_with_exporter_leftovers_compiles_to_the_same_graph_and_numerics():
    original = builders.light_model("squeezenet")
    model = _with_redundant_ops(original)
    mod = from_onnx(model)
    simplified = dead_code_elimination(simplify_algebra(mod))
    assert structural_equal(simplified, dead_code_elimination(from_onnx(original)))
    (image,) = model.graph.input
    shape = [d.dim_value for d in image.type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    for m in (mod, simplified):
        _check_compiled(m, model, {image.name: x})


def test_zero_pads_before_convolutions_become_their_padding():
    # a pad of the spatial axes by +0 folds into each convolution that reads it (asymmetric
    # pads included); a pad by zero everywhere is its input; other pads stay
    conv = 'strides=[1, 1], dilation=[1, 1], groups=1'
    verify(
        f'''
constants = {{"zero": Tensor((), "float32"), "one": Tensor((), "float32"), "negzero": Tensor((), "float32"), "w": Tensor((4, 3, 3, 3), "float32")}}

@function(inputs=["x"], outputs=["a", "b", "c", "d", "e"])
def main(x: Tensor((n, 3, 8, 8), "float32")) -> Tuple(Tensor((n, 4, 7, 7), "float32"), Tensor((n, 4, 8, 8), "float32"), Tensor((n, 4, 8, 8), "float32"), Tensor((n, 4, 8, 8), "float32"), Tensor((n, 3, 8, 8), "float32")):
    p: Tensor((n, 3, 9, 9), "float32") = op.pad(x, const("zero"), pads=[0, 0, 0, 0, 0, 0, 1, 1], mode="constant")
    a: Tensor((n, 4, 7, 7), "float32") = op.conv2d(p, const("w"), {conv}, padding=[0, 0, 0, 0])
    q: Tensor((n, 3, 10, 10), "float32") = op.pad(x, const("zero"), pads=[0, 0, 1, 1, 0, 0, 1, 1], mode="constant")
    b: Tensor((n, 4, 8, 8), "float32") = op.conv2d(q, const("w"), {conv}, padding=[0, 0, 0, 0])
    r: Tensor((n, 3, 10, 10), "float32") = op.pad(x, const("one"), pads=[0, 0, 1, 1, 0, 0, 1, 1], mode="constant")
    c: Tensor((n, 4, 8, 8), "float32") = op.conv2d(r, const("w"), {conv}, padding=[0, 0, 0, 0])
    s: Tensor((n, 3, 10, 10), "float32") = op.pad(x, const("negzero"), pads=[0, 0, 1, 1, 0, 0, 1, 1], mode="constant")
    d: Tensor((n, 4, 8, 8), "float32") = op.conv2d(s, const("w"), {conv}, padding=[0, 0, 0, 0])
    e: Tensor((n, 3, 8, 8), "float32") = op.pad(x, const("one"), pads=[0, 0, 0, 0, 0, 0, 0, 0], mode="constant")
    return a, b, c, d, e
''',
        f'''
constants = {{"zero": Tensor((), "float32"), "one": Tensor((), "float32"), "negzero": Tensor((), "float32"), "w": Tensor((4, 3, 3, 3), "float32")}}

@function(inputs=["x"], outputs=["a", "b", "c", "d", "e"])
def main(x: Tensor((n, 3, 8, 8), "float32")) -> Tuple(Tensor((n, 4, 7, 7), "float32"), Tensor((n, 4, 8, 8), "float32"), Tensor((n, 4, 8, 8), "float32"), Tensor((n, 4, 8, 8), "float32"), Tensor((n, 3, 8, 8), "float32")):
    p: Tensor((n, 3, 9, 9), "float32") = op.pad(x, const("zero"), pads=[0, 0, 0, 0, 0, 0, 1, 1], mode="constant")
    a: Tensor((n, 4, 7, 7), "float32") = op.conv2d(x, const("w"), {conv}, padding=[0, 0, 1, 1])
    q: Tensor((n, 3, 10, 10), "float32") = op.pad(x, const("zero"), pads=[0, 0, 1, 1, 0, 0, 1, 1], mode="constant")
    b: Tensor((n, 4, 8, 8), "float32") = op.conv2d(x, const("w"), {conv}, padding=[1, 1, 1, 1])
    r: Tensor((n, 3, 10, 10), "float32") = op.pad(x, const("one"), pads=[0, 0, 1, 1, 0, 0, 1, 1], mode="constant")
    c: Tensor((n, 4, 8, 8), "float32") = op.conv2d(r, const("w"), {conv}, padding=[0, 0, 0, 0])
    s: Tensor((n, 3, 10, 10), "float32") = op.pad(x, const("negzero"), pads=[0, 0, 1, 1, 0, 0, 1, 1], mode="constant")
    d: Tensor((n, 4, 8, 8), "float32") = op.conv2d(s, const("w"), {conv}, padding=[0, 0, 0, 0])
    return a, b, c, d, x
''',
        {"zero": np.array(0, F32), "one": np.array(1, F32), "negzero": np.array(-0.0, F32),
         "w": np.ones((4, 3, 3, 3), F32)},
    )


def test_a_padded_convolution_computes_what_the_pad_and_convolution_did():
    """Compiled: as onnxruntime runs the Pad and Conv nodes, and bit for bit as tcc runs
    them unfolded."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((6, 4, 3, 3)).astype(F32)
    g = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads", "zero"], ["p"], mode="constant"),
         helper.make_node("Conv", ["p", "w"], ["y"], strides=[2, 2])],
        "pad_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 11, 11])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"),
         numpy_helper.from_array(np.array([0, 0, 0, 1, 0, 0, 1, 1], np.int64), "pads"),
         numpy_helper.from_array(np.array(0, F32), "zero")],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    mod = from_onnx(model)
    simplified = dead_code_elimination(simplify_algebra(mod))
    assert not any(b.value.op == "pad" for b in simplified.functions["main"].bindings)
    x = rng.standard_normal((1, 4, 11, 11)).astype(F32)
    _check_compiled(simplified, model, {"x": x})
    padded, folded = (tcc.api.compile_onnx(m, optimize=False)({"x": x})[0]
                      for m in (mod, simplified))
    np.testing.assert_array_equal(folded, padded)


_LINEAR = '''
constants = {"w": Tensor((8, 16), "float32"), "b": Tensor((16,), "float32")}

@function(inputs=["x"], outputs=["y", "z", "h", "o"])
def main(x: Tensor((n, s, 8), "float32")) -> Tuple(Tensor((n, s, 16), "float32"), Tensor((n, s, 4, 4), "float32"), Tensor((n, s, 16), "float32"), Tensor((n * s, 16), "float32")):
    flat: Tensor((n * s, 8), "float32") = op.reshape(x, shape=[n * s, 8])
    mm: Tensor((n * s, 16), "float32") = op.matmul(flat, const("w"))
    biased: Tensor((n * s, 16), "float32") = op.add(mm, const("b"))
    y: Tensor((n, s, 16), "float32") = op.reshape(biased, shape=[n, s, 16])
    mm2: Tensor((n * s, 16), "float32") = op.matmul(flat, const("w"))
    z: Tensor((n, s, 4, 4), "float32") = op.reshape(mm2, shape=[n, s, 4, 4])
    mm3: Tensor((n * s, 16), "float32") = op.matmul(flat, const("w"))
    h: Tensor((n, s, 16), "float32") = op.reshape(mm3, shape=[n, s, 16])
    o: Tensor((n * s, 16), "float32") = op.relu(mm3)
    return y, z, h, o
'''


def test_a_linear_layer_over_flattened_rows_multiplies_the_rows_in_place():
    """PyTorch's nn.Linear as torch.export writes it (`view`, `addmm` or `mm`, `view`)
    becomes the matmul of the unflattened input, as an ONNX export has it; a product that
    something else also reads keeps its flattened form."""
    consts = {"w": np.random.default_rng(0).standard_normal((8, 16)).astype(F32),
              "b": np.random.default_rng(1).standard_normal(16).astype(F32)}
    verify(_LINEAR, '''
constants = {"w": Tensor((8, 16), "float32"), "b": Tensor((16,), "float32")}

@function(inputs=["x"], outputs=["y", "z", "h", "o"])
def main(x: Tensor((n, s, 8), "float32")) -> Tuple(Tensor((n, s, 16), "float32"), Tensor((n, s, 4, 4), "float32"), Tensor((n, s, 16), "float32"), Tensor((n * s, 16), "float32")):
    flat: Tensor((n * s, 8), "float32") = op.reshape(x, shape=[n * s, 8])
    mm: Tensor((n * s, 16), "float32") = op.matmul(flat, const("w"))
    biased: Tensor((n * s, 16), "float32") = op.add(mm, const("b"))
    y_matmul: Tensor((n, s, 16), "float32") = op.matmul(x, const("w"))
    y: Tensor((n, s, 16), "float32") = op.add(y_matmul, const("b"))
    mm2: Tensor((n * s, 16), "float32") = op.matmul(flat, const("w"))
    z_matmul: Tensor((n, s, 16), "float32") = op.matmul(x, const("w"))
    z: Tensor((n, s, 4, 4), "float32") = op.reshape(z_matmul, shape=[n, s, 4, 4])
    mm3: Tensor((n * s, 16), "float32") = op.matmul(flat, const("w"))
    h: Tensor((n, s, 16), "float32") = op.reshape(mm3, shape=[n, s, 16])
    o: Tensor((n * s, 16), "float32") = op.relu(mm3)
    return y, z, h, o
''', consts)
    mod = parse_module(_LINEAR)
    mod.const_values.update(consts)
    x = np.random.default_rng(2).standard_normal((2, 3, 8)).astype(F32)
    for want, got in zip(run(mod, [x]), run(simplify_algebra(mod), [x])):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
