"""constant-folding: golden before/after modules (with constant values checked against numpy),
and compiled models whose weights reach their ops through constant chains."""

from collections import Counter

import numpy as np
import pytest

import tcc.api
import tcc.rt
from tcc.frontend.onnx import from_onnx
from tcc.ir import graph as G
from tcc.ir.builder import infer_call
from tcc.ir.module import IRModule
from tcc.ir.ops.registry import OPS, OpDef, get_op
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_module
from tcc.ir.structural import structural_equal
from tcc.lower.passes.constant_folding import constant_folding
from tests.e2e.test_models import onnxruntime_outputs, token_inputs
from tests.models import builders

RTOL, ATOL = 1e-4, 1e-5


def module(text: str, **values) -> IRModule:
    """Parse `text` and give its constants the values passed by name."""
    mod = parse_module(text)
    for name, value in values.items():
        value = np.asarray(value)
        t = mod.const_types[name]
        assert value.shape == t.shape, name
        mod.const_values[name] = value.astype(t.dtype)
    return mod


def verify(mod: IRModule, expected: str) -> IRModule:
    """Fold `mod`, compare with `expected` and check `mod` itself is left alone."""
    text, values = print_module(mod), dict(mod.const_values)
    got = constant_folding(mod)
    assert structural_equal(got, parse_module(expected)), print_module(got)
    assert print_module(mod) == text
    assert mod.const_values.keys() == values.keys()
    assert all(mod.const_values[k] is v for k, v in values.items())
    without_value = got.const_types.keys() - got.const_values.keys()
    assert without_value <= mod.const_types.keys() - values.keys()  # no value lost or missing
    return got


def test_a_chain_of_constant_calls_becomes_one_constant():
    a, b, c = np.array([1, 2, 3, 4]), np.array([10, 20, 30, 40]), np.array([0.5, -1, 2, 0.25])
    mod = module('''
constants = {"a": Tensor((4,), "float32"), "b": Tensor((4,), "float32"), "c": Tensor((4,), "float32"), "spare": Tensor((2,), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((n, 4), "float32")) -> Tensor((n, 4), "float32"):
    ab: Tensor((4,), "float32") = op.add(const("a"), const("b"))
    abc: Tensor((4,), "float32") = op.mul(ab, const("c"))
    u: Tensor((n, 4), "float32") = op.add(x, abc)
    y: Tensor((n, 4), "float32") = op.mul(u, const("c"))
    return y
''', a=a, b=b, c=c, spare=[0, 0])
    # "c" is still read at run time and stays; "spare" was unused before and is left to
    # dead-code-elimination.
    got = verify(mod, '''
constants = {"c": Tensor((4,), "float32"), "spare": Tensor((2,), "float32"), "abc": Tensor((4,), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((n, 4), "float32")) -> Tensor((n, 4), "float32"):
    u: Tensor((n, 4), "float32") = op.add(x, const("abc"))
    y: Tensor((n, 4), "float32") = op.mul(u, const("c"))
    return y
''')
    np.testing.assert_array_equal(got.const_values["abc"], [5.5, -22, 66, 11])


def test_an_identity_of_a_constant_reads_the_constant_itself():
    got = verify(module('''
constants = {"a": Tensor((4,), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
    i: Tensor((4,), "float32") = op.identity(const("a"))
    y: Tensor((4,), "float32") = op.add(x, i)
    return y
''', a=[1, 2, 3, 4]), '''
constants = {"a": Tensor((4,), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
    y: Tensor((4,), "float32") = op.add(x, const("a"))
    return y
''')
    np.testing.assert_array_equal(got.const_values["a"], [1, 2, 3, 4])


def test_a_module_without_constant_values_is_left_as_it_is():
    same = '''
constants = {"a": Tensor((4,), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
    n: Tensor((4,), "float32") = op.neg(const("a"))
    y: Tensor((4,), "float32") = op.add(x, n)
    return y
'''
    verify(parse_module(same), same)


def test_results_larger_than_64_kib_and_their_operands_stay():
    sig = '''
@function(inputs=["x", "p", "q"], outputs=["y", "pf", "qb"])
def main(x: Tensor((256, 256), "float32"), p: Tensor((128, 128), "float32"), q: Tensor((129, 128), "float32")) -> Tuple(Tensor((256, 256), "float32"), Tensor((128, 128), "float32"), Tensor((129, 128), "float32")):
'''
    mod = module('''
constants = {"s": Tensor((1,), "float32"), "w": Tensor((256, 256), "float32")}
''' + sig + '''
    fits: Tensor((128, 128), "float32") = op.broadcast_to(const("s"), shape=[128, 128])
    big: Tensor((129, 128), "float32") = op.broadcast_to(const("s"), shape=[129, 128])
    wt: Tensor((256, 256), "float32") = op.transpose(const("w"), axes=[1, 0])
    y: Tensor((256, 256), "float32") = op.matmul(x, wt)
    pf: Tensor((128, 128), "float32") = op.add(p, fits)
    qb: Tensor((129, 128), "float32") = op.add(q, big)
    return y, pf, qb
''', s=[3], w=np.arange(256 * 256).reshape(256, 256))
    # A broadcast to exactly 64 KiB folds, one row more does not; a transpose is as large
    # as its operand, so a 256 KiB one folds.
    got = verify(mod, '''
constants = {"s": Tensor((1,), "float32"), "fits": Tensor((128, 128), "float32"), "wt": Tensor((256, 256), "float32")}
''' + sig + '''
    big: Tensor((129, 128), "float32") = op.broadcast_to(const("s"), shape=[129, 128])
    y: Tensor((256, 256), "float32") = op.matmul(x, const("wt"))
    pf: Tensor((128, 128), "float32") = op.add(p, const("fits"))
    qb: Tensor((129, 128), "float32") = op.add(q, big)
    return y, pf, qb
''')
    np.testing.assert_array_equal(got.const_values["fits"], np.full((128, 128), 3))
    np.testing.assert_array_equal(got.const_values["wt"], np.arange(256 * 256).reshape(256, 256).T)


def test_values_that_depend_on_the_run_stay():
    # A symbolic result shape, a static shape holding a size variable's value, and a result
    # whose length only the data gives.
    same = '''
constants = {"a": Tensor((4,), "float32")}

@function(inputs=["x"], outputs=["y", "s", "z"])
def main(x: Tensor((n, 4), "float32")) -> Tuple(Tensor((n, 4), "float32"), Tensor((2,), "int64"), Tensor((1, k), "int64")):
    b: Tensor((n, 4), "float32") = op.broadcast_to(const("a"), shape=[n, 4])
    y: Tensor((n, 4), "float32") = op.add(x, b)
    s: Tensor((2,), "int64") = op.shape_to_tensor(dims=[n, 4], scalar=False, dtype="int64")
    z: Tensor((1, k), "int64") = op.nonzero(const("a"))
    return y, s, z
'''
    verify(module(same, a=[0, 1, 0, 2]), same)


def _uniform_ref(shape):
    return np.random.default_rng().random(shape, dtype=np.float32)


def test_random_ops_stay(monkeypatch):
    get_op("add")  # the families register before one more op joins them
    monkeypatch.setitem(OPS, "random_uniform", OpDef(
        "random_uniform", lambda types, attrs: G.TensorType(tuple(attrs["shape"]), "float32"),
        _uniform_ref, attrs={"shape": [4]}, num_args=(0, 0)))
    same = '''
constants = {"a": Tensor((4,), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
    r: Tensor((4,), "float32") = op.random_uniform(shape=[4])
    noise: Tensor((4,), "float32") = op.mul(r, const("a"))
    y: Tensor((4,), "float32") = op.add(x, noise)
    return y
'''
    verify(module(same, a=[1, 2, 3, 4]), same)


def test_tuple_items_of_a_folded_call_become_constants():
    got = verify(module('''
constants = {"a": Tensor((4,), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((2,), "float32")) -> Tensor((2,), "float32"):
    t: Tuple(Tensor((1,), "float32"), Tensor((3,), "float32")) = op.split(const("a"), sizes=[1, 3], axis=0)
    lo: Tensor((1,), "float32") = t[0]
    hi: Tensor((3,), "float32") = t[1]
    h: Tensor((2,), "float32") = op.strided_slice(hi, begin=[0], end=[2], axes=[0], strides=[1])
    u: Tensor((2,), "float32") = op.add(x, h)
    y: Tensor((2,), "float32") = op.mul(u, lo)
    return y
''', a=[5, 6, 7, 8]), '''
constants = {"t_0": Tensor((1,), "float32"), "h": Tensor((2,), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((2,), "float32")) -> Tensor((2,), "float32"):
    u: Tensor((2,), "float32") = op.add(x, const("h"))
    y: Tensor((2,), "float32") = op.mul(u, const("t_0"))
    return y
''')
    np.testing.assert_array_equal(got.const_values["t_0"], [5])
    np.testing.assert_array_equal(got.const_values["h"], [6, 7])


def test_a_tuple_used_whole_stays():
    same = '''
constants = {"a": Tensor((4,), "float32")}

@function(inputs=["x"], outputs=["t"])
def main(x: Tensor((2,), "float32")) -> Tuple(Tensor((2,), "float32"), Tensor((2,), "float32")):
    t: Tuple(Tensor((2,), "float32"), Tensor((2,), "float32")) = op.split(const("a"), sizes=[2, 2], axis=0)
    return t
'''
    verify(module(same, a=[5, 6, 7, 8]), same)


def test_callees_of_control_flow_fold_like_main():
    got = verify(module('''
constants = {"a": Tensor((4,), "float32")}

@function(inputs=["p0"], outputs=["o0"])
def then(p0: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
    e: Tensor((4,), "float32") = op.exp(const("a"))
    v: Tensor((4,), "float32") = op.add(p0, e)
    return v


@function(name="else", inputs=["p0"], outputs=["o0"])
def else_(p0: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
    return p0


@function(inputs=["x0", "x1"], outputs=["y0"])
def main(x0: Tensor((), "bool"), x1: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
    n: Tensor((4,), "float32") = op.neg(const("a"))
    r: Tensor((4,), "float32") = if_(x0, then_branch="then", else_branch="else", args=[n])
    y: Tensor((4,), "float32") = op.add(r, x1)
    return y
''', a=[0, 1, 2, 3]), '''
constants = {"e": Tensor((4,), "float32"), "n": Tensor((4,), "float32")}

@function(inputs=["p0"], outputs=["o0"])
def then(p0: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
    v: Tensor((4,), "float32") = op.add(p0, const("e"))
    return v


@function(name="else", inputs=["p0"], outputs=["o0"])
def else_(p0: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
    return p0


@function(inputs=["x0", "x1"], outputs=["y0"])
def main(x0: Tensor((), "bool"), x1: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
    r: Tensor((4,), "float32") = if_(x0, then_branch="then", else_branch="else", args=[const("n")])
    y: Tensor((4,), "float32") = op.add(r, x1)
    return y
''')
    np.testing.assert_allclose(got.const_values["e"], np.exp([0, 1, 2, 3]), rtol=1e-6)
    np.testing.assert_array_equal(got.const_values["n"], [0, -1, -2, -3])


def test_a_returned_value_keeps_its_variable_and_a_second_run_changes_nothing():
    expected = '''
constants = {"z": Tensor((4,), "float32")}

@function(inputs=["x"], outputs=["y", "z"])
def main(x: Tensor((4,), "float32")) -> Tuple(Tensor((4,), "float32"), Tensor((4,), "float32")):
    z: Tensor((4,), "float32") = op.identity(const("z"))
    y: Tensor((4,), "float32") = op.add(x, const("z"))
    return y, z
'''
    once = verify(module('''
constants = {"a": Tensor((4,), "float32")}

@function(inputs=["x"], outputs=["y", "z"])
def main(x: Tensor((4,), "float32")) -> Tuple(Tensor((4,), "float32"), Tensor((4,), "float32")):
    z: Tensor((4,), "float32") = op.neg(const("a"))
    y: Tensor((4,), "float32") = op.add(x, z)
    return y, z
''', a=[1, 2, 3, 4]), expected)
    twice = verify(once, expected)
    np.testing.assert_array_equal(twice.const_values["z"], [-1, -2, -3, -4])


def test_a_call_its_reference_rejects_stays_for_run_time():
    # The index is out of range: a run that reaches this gather reports it, not the compiler.
    same = '''
constants = {"a": Tensor((4,), "float32"), "i": Tensor((1,), "int64")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1,), "float32")) -> Tensor((1,), "float32"):
    g: Tensor((1,), "float32") = op.gather(const("a"), const("i"), axis=0)
    y: Tensor((1,), "float32") = op.add(x, g)
    return y
'''
    verify(module(same, a=[1, 2, 3, 4], i=[7]), same)


def test_bfloat16_results_are_rounded_to_bfloat16():
    # 1 + 2**-8 and 1 + 3 * 2**-8 lie halfway between bfloat16 neighbours: ties go to even.
    got = verify(module('''
constants = {"a": Tensor((2,), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((2,), "bfloat16")) -> Tensor((2,), "bfloat16"):
    b: Tensor((2,), "bfloat16") = op.cast(const("a"), dtype="bfloat16", saturate=True, round_mode="up")
    y: Tensor((2,), "bfloat16") = op.add(x, b)
    return y
''', a=[1.00390625, 1.01171875]), '''
constants = {"b": Tensor((2,), "bfloat16")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((2,), "bfloat16")) -> Tensor((2,), "bfloat16"):
    y: Tensor((2,), "bfloat16") = op.add(x, const("b"))
    return y
''')
    np.testing.assert_array_equal(got.const_values["b"], np.array([1.0, 1.015625], np.float32))


# -- compiled models -----------------------------------------------------------------------------


def _behind_chains(mod: IRModule) -> IRModule:
    """`mod` with every constant operand of rank >= 2 in main read through
    `transpose(reshape(flat copy))`, the chains the importer folds before a pass can see them
    (and the shape batch-norm folding leaves behind)."""
    out = IRModule(dict(mod.functions), dict(mod.const_types), dict(mod.const_values))
    bindings = []

    def bind(op: str, arg: G.Expr, name: str, **attrs) -> G.Var:
        attrs, t = infer_call(op, [arg], attrs)
        v = G.Var(name, t)
        bindings.append(G.Binding(v, G.Call(op, (arg,), attrs)))
        return v

    def chained(w: G.Constant) -> G.Var:
        axes = list(reversed(range(w.type.ndim)))
        stored = np.ascontiguousarray(mod.const_values[w.name].transpose(axes))
        flat = out.add_constant(out.unique_constant_name(f"{w.name}.flat"), stored.reshape(-1))
        shaped = bind("reshape", flat, f"{w.name}.t", shape=list(stored.shape))
        return bind("transpose", shaped, w.name, axes=axes)

    main = mod["main"]
    for b in main.bindings:
        if isinstance(b.value, G.Call):
            args = tuple(chained(a) if isinstance(a, G.Constant) and a.type.ndim >= 2 else a
                         for a in b.value.args)
            b = G.Binding(b.var, G.Call(b.value.op, args, b.value.attrs))
        bindings.append(b)
    out.functions["main"] = G.Function(main.params, tuple(bindings), main.ret,
                                       main.input_names, main.output_names)
    out.prune_constants()
    return out


def _calls(mod: IRModule) -> Counter:
    return Counter(b.value.op for f in mod.graph_functions.values() for b in f.bindings
                   if isinstance(b.value, G.Call))


def _run_compiled(mod: IRModule, feeds: dict, tmp_path, tag: str) -> list[np.ndarray]:
    path = tmp_path / f"{tag}.tvmpack"
    path.write_bytes(tcc.api.compile_to_bytes(mod))
    with tcc.rt.load(path) as m:
        return [np.asarray(o) for o in m["main"](feeds)]


def _squeezenet():
    model = builders.light_model("squeezenet")
    (image,) = model.graph.input
    shape = [d.dim_value for d in image.type.tensor_type.shape.dim]
    return model, {image.name: np.random.default_rng(0).standard_normal(shape, dtype=np.float32)}


def _bert():
    model = builders.bert_encoder()
    inputs = {vi.name for vi in model.graph.input}
    feeds = token_inputs(np.random.default_rng(0), 2, 8, vocab=100)
    return model, {k: v for k, v in feeds.items() if k in inputs}


@pytest.mark.parametrize("make", [_squeezenet, _bert], ids=["squeezenet", "bert_encoder"])
def test_compiled_models_match_onnxruntime_with_the_chains_folded(make, tmp_path):
    model, feeds = make()
    imported = from_onnx(model)
    chained = _behind_chains(imported)
    added = sum((_calls(chained) - _calls(imported)).values())
    assert added >= 10  # the model has weights that now go through chains
    folded = constant_folding(chained)
    assert _calls(folded) == _calls(imported)
    assert len(folded.const_types) == len(imported.const_types)
    assert folded.constant_bytes() == imported.constant_bytes()
    want = onnxruntime_outputs(model, feeds)
    with_chains = _run_compiled(chained, feeds, tmp_path, "chained")
    without = _run_compiled(folded, feeds, tmp_path, "folded")
    for w, c, f in zip(want, with_chains, without, strict=True):
        np.testing.assert_allclose(c, w, rtol=RTOL, atol=ATOL)
        np.testing.assert_array_equal(f, c)  # the same weights reach the same kernels
