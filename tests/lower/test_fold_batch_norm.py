"""fold-batch-norm: golden before/after modules, each also run on the reference interpreter
before and after (rtol 1e-5, atol 1e-6: the folded weights are rounded once to float32),
and two CNNs compiled after the pass against onnxruntime."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import tcc
from tcc.frontend.onnx import from_onnx
from tcc.ir import graph as G
from tcc.ir.dtype import to_numpy
from tcc.ir.interp import run
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_module
from tcc.ir.structural import structural_equal
from tcc.lower.passes import PASSES
from tcc.lower.passes.fold_batch_norm import fold_batch_norm
from tests.e2e.test_models import onnxruntime_outputs
from tests.models import builders


def with_values(mod):
    """Give every constant of a parsed module a value: positive, so variances are valid."""
    rng = np.random.default_rng(0)
    for name, t in mod.const_types.items():
        mod.const_values[name] = rng.uniform(0.5, 1.5, t.shape).astype(to_numpy(t.dtype))
    return mod


def random_inputs(fn: G.Function) -> list[np.ndarray]:
    """Normal inputs for `fn`'s parameters, each symbolic dimension 3."""
    rng = np.random.default_rng(1)
    shapes = [[d if isinstance(d, int) else 3 for d in p.type.shape] for p in fn.params]
    return [rng.standard_normal(s).astype(to_numpy(p.type.dtype)) for s, p in zip(shapes, fn.params)]


def verify(before: str, expected: str):
    mod = with_values(parse_module(before))
    text = print_module(mod)
    values = {k: v.copy() for k, v in mod.const_values.items()}
    got = fold_batch_norm(mod)
    assert structural_equal(got, parse_module(expected)), print_module(got)
    # the input module is left alone
    assert print_module(mod) == text
    assert mod.const_values.keys() == values.keys()
    assert all(np.array_equal(mod.const_values[k], v) for k, v in values.items())
    # every constant has a value of its declared type
    assert got.const_values.keys() == got.const_types.keys()
    for name, t in got.const_types.items():
        assert got.const_values[name].shape == t.shape
        assert got.const_values[name].dtype == to_numpy(t.dtype)
    feeds = random_inputs(mod["main"])
    for want, have in zip(run(mod, feeds), run(got, feeds)):
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-6)
    return mod, got


def stats(tag: str = "", channels: int = 4) -> str:
    """Constant types of batch-norm statistics s, b, m, v named with `tag`."""
    return ", ".join(f'"{k}{tag}": Tensor(({channels},), "float32")' for k in "sbmv")


def bn(tag: str = "") -> str:
    """The statistics operands and epsilon of a batch_norm over stats(tag)."""
    return ", ".join(f'const("{k}{tag}")' for k in "sbmv") + ", epsilon=0.001"


CONV = "strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1], groups=1"


def test_registered():
    assert PASSES["fold-batch-norm"] is fold_batch_norm


def test_conv_without_bias_gets_folded_weight_and_bias():
    mod, got = verify(
        f'''
constants = {{"w": Tensor((4, 3, 3, 3), "float32"), {stats()}}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 3, 5, 5), "float32")) -> Tensor((1, 4, 5, 5), "float32"):
    c: Tensor((1, 4, 5, 5), "float32") = op.conv2d(x, const("w"), {CONV})
    y: Tensor((1, 4, 5, 5), "float32") = op.batch_norm(c, {bn()})
    r: Tensor((1, 4, 5, 5), "float32") = op.relu(y)
    return r
''',
        f'''
constants = {{"w_folded": Tensor((4, 3, 3, 3), "float32"), "b_folded": Tensor((4,), "float32")}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 3, 5, 5), "float32")) -> Tensor((1, 4, 5, 5), "float32"):
    y: Tensor((1, 4, 5, 5), "float32") = op.conv2d(x, const("w_folded"), const("b_folded"), {CONV})
    r: Tensor((1, 4, 5, 5), "float32") = op.relu(y)
    return r
''',
    )
    k = {n: mod.const_values[n].astype(np.float64) for n in ("w", "s", "b", "m", "v")}
    inv = k["s"] / np.sqrt(k["v"] + 0.001)
    np.testing.assert_allclose(got.const_values["w_folded"], k["w"] * inv[:, None, None, None],
                               rtol=1e-7)
    np.testing.assert_allclose(got.const_values["b_folded"], k["b"] - k["m"] * inv, rtol=1e-7)


def test_conv_bias_is_folded_with_the_shift():
    verify(
        f'''
constants = {{"w": Tensor((4, 3, 3), "float32"), "cb": Tensor((4,), "float32"), {stats()}}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((2, 3, 6), "float32")) -> Tensor((2, 4, 4), "float32"):
    c: Tensor((2, 4, 4), "float32") = op.conv1d(x, const("w"), const("cb"), strides=[1], padding=[0, 0], dilation=[1], groups=1)
    y: Tensor((2, 4, 4), "float32") = op.batch_norm(c, {bn()})
    return y
''',
        '''
constants = {"w_folded": Tensor((4, 3, 3), "float32"), "b_folded": Tensor((4,), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((2, 3, 6), "float32")) -> Tensor((2, 4, 4), "float32"):
    y: Tensor((2, 4, 4), "float32") = op.conv1d(x, const("w_folded"), const("b_folded"), strides=[1], padding=[0, 0], dilation=[1], groups=1)
    return y
''',
    )


def test_grouped_conv_transpose_scales_each_group_columns():
    verify(
        f'''
constants = {{"w": Tensor((4, 3, 2, 2), "float32"), {stats(channels=6)}}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 4, 3, 3), "float32")) -> Tensor((1, 6, 4, 4), "float32"):
    c: Tensor((1, 6, 4, 4), "float32") = op.conv2d_transpose(x, const("w"), strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1], groups=2, output_padding=None)
    y: Tensor((1, 6, 4, 4), "float32") = op.batch_norm(c, {bn()})
    return y
''',
        '''
constants = {"w_folded": Tensor((4, 3, 2, 2), "float32"), "b_folded": Tensor((6,), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((1, 4, 3, 3), "float32")) -> Tensor((1, 6, 4, 4), "float32"):
    y: Tensor((1, 6, 4, 4), "float32") = op.conv2d_transpose(x, const("w_folded"), const("b_folded"), strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1], groups=2, output_padding=None)
    return y
''',
    )


@pytest.mark.parametrize("trans_b", [False, True])
def test_gemm_scales_b_and_c_absorbs_the_shift(trans_b):
    b_shape = "(4, 3)" if trans_b else "(3, 4)"
    verify(
        f'''
constants = {{"bw": Tensor({b_shape}, "float32"), "c": Tensor((2, 1), "float32"), {stats()}}}

@function(inputs=["a"], outputs=["y"])
def main(a: Tensor((2, 3), "float32")) -> Tensor((2, 4), "float32"):
    g: Tensor((2, 4), "float32") = op.gemm(a, const("bw"), const("c"), alpha=2.0, beta=0.5, trans_a=False, trans_b={trans_b})
    y: Tensor((2, 4), "float32") = op.batch_norm(g, {bn()})
    return y
''',
        f'''
constants = {{"bw_folded": Tensor({b_shape}, "float32"), "b_folded": Tensor((2, 4), "float32")}}

@function(inputs=["a"], outputs=["y"])
def main(a: Tensor((2, 3), "float32")) -> Tensor((2, 4), "float32"):
    y: Tensor((2, 4), "float32") = op.gemm(a, const("bw_folded"), const("b_folded"), alpha=2.0, beta=1.0, trans_a=False, trans_b={trans_b})
    return y
''',
    )


def test_gemm_without_c_gets_the_shift_as_c():
    verify(
        f'''
constants = {{"bw": Tensor((3, 4), "float32"), {stats()}}}

@function(inputs=["a"], outputs=["y"])
def main(a: Tensor((2, 3), "float32")) -> Tensor((2, 4), "float32"):
    g: Tensor((2, 4), "float32") = op.gemm(a, const("bw"), None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False)
    y: Tensor((2, 4), "float32") = op.batch_norm(g, {bn()})
    return y
''',
        '''
constants = {"bw_folded": Tensor((3, 4), "float32"), "b_folded": Tensor((4,), "float32")}

@function(inputs=["a"], outputs=["y"])
def main(a: Tensor((2, 3), "float32")) -> Tensor((2, 4), "float32"):
    y: Tensor((2, 4), "float32") = op.gemm(a, const("bw_folded"), const("b_folded"), alpha=1.0, beta=1.0, trans_a=False, trans_b=False)
    return y
''',
    )


def test_matmul_scales_columns_then_adds_the_shift():
    verify(
        f'''
constants = {{"mw": Tensor((3, 4), "float32"), {stats()}}}

@function(inputs=["a"], outputs=["y"])
def main(a: Tensor((n, 3), "float32")) -> Tensor((n, 4), "float32"):
    mm: Tensor((n, 4), "float32") = op.matmul(a, const("mw"))
    y: Tensor((n, 4), "float32") = op.batch_norm(mm, {bn()})
    return y
''',
        '''
constants = {"mw_folded": Tensor((3, 4), "float32"), "b_folded": Tensor((4,), "float32")}

@function(inputs=["a"], outputs=["y"])
def main(a: Tensor((n, 3), "float32")) -> Tensor((n, 4), "float32"):
    mm: Tensor((n, 4), "float32") = op.matmul(a, const("mw_folded"))
    y: Tensor((n, 4), "float32") = op.add(mm, const("b_folded"))
    return y
''',
    )


def test_batch_norms_in_a_row_fold_into_one_conv_and_shared_weights_stay():
    verify(
        f'''
constants = {{"w": Tensor((4, 3, 3, 3), "float32"), {stats()}, {stats("2")}}}

@function(inputs=["x"], outputs=["y", "z"])
def main(x: Tensor((1, 3, 5, 5), "float32")) -> Tuple(Tensor((1, 4, 5, 5), "float32"), Tensor((1, 4, 5, 5), "float32")):
    c: Tensor((1, 4, 5, 5), "float32") = op.conv2d(x, const("w"), {CONV})
    y1: Tensor((1, 4, 5, 5), "float32") = op.batch_norm(c, {bn()})
    y: Tensor((1, 4, 5, 5), "float32") = op.batch_norm(y1, {bn("2")})
    z: Tensor((1, 4, 5, 5), "float32") = op.conv2d(x, const("w"), {CONV})
    return y, z
''',
        f'''
constants = {{"w": Tensor((4, 3, 3, 3), "float32"), "w_folded_folded": Tensor((4, 3, 3, 3), "float32"), "b2_folded": Tensor((4,), "float32")}}

@function(inputs=["x"], outputs=["y", "z"])
def main(x: Tensor((1, 3, 5, 5), "float32")) -> Tuple(Tensor((1, 4, 5, 5), "float32"), Tensor((1, 4, 5, 5), "float32")):
    y: Tensor((1, 4, 5, 5), "float32") = op.conv2d(x, const("w_folded_folded"), const("b2_folded"), {CONV})
    z: Tensor((1, 4, 5, 5), "float32") = op.conv2d(x, const("w"), {CONV})
    return y, z
''',
    )


def test_producers_that_cannot_fold_leave_a_scale_shift():
    # c has a second user, the batched matmul's channel axis is not its weight's column
    # axis, and a conv weight that is an input has no value to fold into.
    verify(
        f'''
constants = {{"w": Tensor((4, 3, 3, 3), "float32"), "mw": Tensor((5, 2), "float32"), {stats()}, {stats("3", 3)}}}

@function(inputs=["x", "a", "wx"], outputs=["y", "r", "ym", "yw"])
def main(x: Tensor((1, 3, 5, 5), "float32"), a: Tensor((2, 3, 5), "float32"), wx: Tensor((4, 3, 3, 3), "float32")) -> Tuple(Tensor((1, 4, 5, 5), "float32"), Tensor((1, 4, 5, 5), "float32"), Tensor((2, 3, 2), "float32"), Tensor((1, 4, 5, 5), "float32")):
    c: Tensor((1, 4, 5, 5), "float32") = op.conv2d(x, const("w"), {CONV})
    y: Tensor((1, 4, 5, 5), "float32") = op.batch_norm(c, {bn()})
    r: Tensor((1, 4, 5, 5), "float32") = op.relu(c)
    mm: Tensor((2, 3, 2), "float32") = op.matmul(a, const("mw"))
    ym: Tensor((2, 3, 2), "float32") = op.batch_norm(mm, {bn("3")})
    cw: Tensor((1, 4, 5, 5), "float32") = op.conv2d(x, wx, {CONV})
    yw: Tensor((1, 4, 5, 5), "float32") = op.batch_norm(cw, {bn()})
    return y, r, ym, yw
''',
        f'''
constants = {{"w": Tensor((4, 3, 3, 3), "float32"), "mw": Tensor((5, 2), "float32"), "s_folded": Tensor((4, 1, 1), "float32"), "b_folded": Tensor((4, 1, 1), "float32"), "s3_folded": Tensor((3, 1), "float32"), "b3_folded": Tensor((3, 1), "float32"), "s_folded_1": Tensor((4, 1, 1), "float32"), "b_folded_1": Tensor((4, 1, 1), "float32")}}

@function(inputs=["x", "a", "wx"], outputs=["y", "r", "ym", "yw"])
def main(x: Tensor((1, 3, 5, 5), "float32"), a: Tensor((2, 3, 5), "float32"), wx: Tensor((4, 3, 3, 3), "float32")) -> Tuple(Tensor((1, 4, 5, 5), "float32"), Tensor((1, 4, 5, 5), "float32"), Tensor((2, 3, 2), "float32"), Tensor((1, 4, 5, 5), "float32")):
    c: Tensor((1, 4, 5, 5), "float32") = op.conv2d(x, const("w"), {CONV})
    y_scaled: Tensor((1, 4, 5, 5), "float32") = op.mul(c, const("s_folded"))
    y: Tensor((1, 4, 5, 5), "float32") = op.add(y_scaled, const("b_folded"))
    r: Tensor((1, 4, 5, 5), "float32") = op.relu(c)
    mm: Tensor((2, 3, 2), "float32") = op.matmul(a, const("mw"))
    ym_scaled: Tensor((2, 3, 2), "float32") = op.mul(mm, const("s3_folded"))
    ym: Tensor((2, 3, 2), "float32") = op.add(ym_scaled, const("b3_folded"))
    cw: Tensor((1, 4, 5, 5), "float32") = op.conv2d(x, wx, {CONV})
    yw_scaled: Tensor((1, 4, 5, 5), "float32") = op.mul(cw, const("s_folded_1"))
    yw: Tensor((1, 4, 5, 5), "float32") = op.add(yw_scaled, const("b_folded_1"))
    return y, r, ym, yw
''',
    )


def test_standalone_batch_norm_becomes_scale_shift():
    verify(
        f'''
constants = {{{stats()}}}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((n, 4, 3, 3, 2), "float64")) -> Tensor((n, 4, 3, 3, 2), "float64"):
    y: Tensor((n, 4, 3, 3, 2), "float64") = op.batch_norm(x, {bn()})
    return y
''',
        '''
constants = {"s_folded": Tensor((4, 1, 1, 1), "float64"), "b_folded": Tensor((4, 1, 1, 1), "float64")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((n, 4, 3, 3, 2), "float64")) -> Tensor((n, 4, 3, 3, 2), "float64"):
    y_scaled: Tensor((n, 4, 3, 3, 2), "float64") = op.mul(x, const("s_folded"))
    y: Tensor((n, 4, 3, 3, 2), "float64") = op.add(y_scaled, const("b_folded"))
    return y
''',
    )


def test_statistics_that_are_not_constants_and_training_form_stay():
    same = f'''
constants = {{"w": Tensor((4, 3, 3, 3), "float32"), {stats()}}}

@function(inputs=["x", "mean"], outputs=["y", "t"])
def main(x: Tensor((1, 3, 5, 5), "float32"), mean: Tensor((4,), "float32")) -> Tuple(Tensor((1, 4, 5, 5), "float32"), Tensor((1, 4, 5, 5), "float32")):
    c: Tensor((1, 4, 5, 5), "float32") = op.conv2d(x, const("w"), {CONV})
    y: Tensor((1, 4, 5, 5), "float32") = op.batch_norm(c, const("s"), const("b"), mean, const("v"), epsilon=0.001)
    tr: Tuple(Tensor((1, 4, 5, 5), "float32"), Tensor((4,), "float32"), Tensor((4,), "float32")) = op.batch_norm_train(y, {bn()}, momentum=0.9)
    t: Tensor((1, 4, 5, 5), "float32") = tr[0]
    return y, t
'''
    verify(same, same)


# ---------------------------------------------------------------------------------------------
# real models: every batch_norm goes, and the compiled result still matches onnxruntime


def with_logits(model):
    """The model with the softmax's input as a second output: shufflenet's random weights
    saturate its softmax, which would hide any error behind a one-hot result."""
    (softmax,) = [n for n in model.graph.node if n.op_type == "Softmax"]
    model.graph.output.append(
        helper.make_tensor_value_info(softmax.input[0], TensorProto.FLOAT, None)
    )
    return model


def op_counts(mod) -> dict[str, int]:
    counts: dict[str, int] = {}
    for fn in mod.graph_functions.values():
        for b in fn.bindings:
            if isinstance(b.value, G.Call):
                counts[b.value.op] = counts.get(b.value.op, 0) + 1
    return counts


@pytest.mark.parametrize("name", ["resnet50", "shufflenet"])
def test_cnn_folds_every_batch_norm_and_matches_onnxruntime(name):
    model = with_logits(builders.light_model(name))
    mod = from_onnx(model)
    folded = fold_batch_norm(mod)
    before, after = op_counts(mod), op_counts(folded)
    assert before["batch_norm"] > 0 and "batch_norm" not in after
    # every batch_norm of these models follows a single-use conv: nothing is added
    assert {k: v for k, v in before.items() if k != "batch_norm"} == after
    (image,) = model.graph.input
    shape = [d.dim_value for d in image.type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    want = onnxruntime_outputs(model, {image.name: x})
    got = tcc.compile_onnx(folded)(x)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        # rtol 1e-4, atol 1e-5 of the output's range: float32 rounding of folded weights
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * np.abs(w).max())
