"""pretranspose-weights: golden before/after modules, each also run on the reference
interpreter before and after (a transpose is exact: equal bit for bit), and the BERT encoder
(whose feed-forward gemm reads its weight transposed) through the pipeline and compiled
against onnxruntime."""

import numpy as np
import pytest

from tcc.frontend.onnx import from_onnx
from tcc.ir.interp import run
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_module
from tcc.ir.structural import structural_equal
from tcc.lower.passes import PASSES, PIPELINE, run_pipeline
from tcc.lower.passes.pretranspose_weights import pretranspose_weights
from tests.e2e.test_models import onnxruntime_outputs, token_inputs
from tests.helpers import calls
from tests.lower.test_fold_batch_norm import random_inputs, with_values
from tests.models import builders
from tests.packs import compiled_fn


def verify(before: str, expected: str):
    mod = with_values(parse_module(before))
    text = print_module(mod)
    values = {k: v.copy() for k, v in mod.const_values.items()}
    got = pretranspose_weights(mod)
    assert structural_equal(got, parse_module(expected)), print_module(got)
    # the input module is left alone
    assert print_module(mod) == text
    assert all(np.array_equal(mod.const_values[k], v) for k, v in values.items())
    assert got.const_values.keys() == got.const_types.keys()
    feeds = random_inputs(mod["main"])
    for want, have in zip(run(mod, feeds), run(got, feeds)):
        np.testing.assert_array_equal(have, want)
    return mod, got


def unchanged(text: str):
    verify(text, text)


def test_registered_between_constant_folding_and_dead_code_elimination():
    assert PASSES["pretranspose-weights"] is pretranspose_weights
    at = PIPELINE.index("pretranspose-weights")
    assert PIPELINE.index("constant-folding") < at < PIPELINE.index("dead-code-elimination")


def test_constant_b_read_transposed_is_stored_transposed():
    mod, got = verify(
        '''
constants = {"w": Tensor((3, 5), "float32"), "c": Tensor((3,), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((n, 5), "float32")) -> Tensor((n, 3), "float32"):
    y: Tensor((n, 3), "float32") = op.gemm(x, const("w"), const("c"), alpha=0.5, beta=2.0, trans_a=False, trans_b=True)
    return y
''',
        '''
constants = {"c": Tensor((3,), "float32"), "w_t": Tensor((5, 3), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((n, 5), "float32")) -> Tensor((n, 3), "float32"):
    y: Tensor((n, 3), "float32") = op.gemm(x, const("w_t"), const("c"), alpha=0.5, beta=2.0, trans_a=False, trans_b=False)
    return y
''',
    )
    w = mod.const_values["w"]
    assert got.const_values["w_t"][4, 1] == w[1, 4]
    assert got.const_values["w_t"].flags.c_contiguous


def test_a_weight_another_op_reads_is_kept_beside_its_transpose():
    verify(
        '''
constants = {"w": Tensor((4, 4), "float32")}

@function(inputs=["x"], outputs=["y", "z"])
def main(x: Tensor((2, 4), "float32")) -> Tuple(Tensor((2, 4), "float32"), Tensor((2, 4), "float32")):
    y: Tensor((2, 4), "float32") = op.gemm(x, const("w"), None, alpha=1.0, beta=1.0, trans_a=False, trans_b=True)
    z: Tensor((2, 4), "float32") = op.matmul(x, const("w"))
    return y, z
''',
        '''
constants = {"w": Tensor((4, 4), "float32"), "w_t": Tensor((4, 4), "float32")}

@function(inputs=["x"], outputs=["y", "z"])
def main(x: Tensor((2, 4), "float32")) -> Tuple(Tensor((2, 4), "float32"), Tensor((2, 4), "float32")):
    y: Tensor((2, 4), "float32") = op.gemm(x, const("w_t"), None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False)
    z: Tensor((2, 4), "float32") = op.matmul(x, const("w"))
    return y, z
''',
    )


def test_gemms_sharing_a_weight_share_one_transpose_under_a_free_name():
    verify(
        '''
constants = {"w": Tensor((4, 4), "float32"), "w_t": Tensor((4,), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((2, 4), "float32")) -> Tensor((2, 4), "float32"):
    a: Tensor((2, 4), "float32") = op.gemm(x, const("w"), const("w_t"), alpha=1.0, beta=1.0, trans_a=False, trans_b=True)
    y: Tensor((2, 4), "float32") = op.gemm(a, const("w"), None, alpha=1.0, beta=1.0, trans_a=False, trans_b=True)
    return y
''',
        '''
constants = {"w_t": Tensor((4,), "float32"), "w_t_1": Tensor((4, 4), "float32")}

@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((2, 4), "float32")) -> Tensor((2, 4), "float32"):
    a: Tensor((2, 4), "float32") = op.gemm(x, const("w_t_1"), const("w_t"), alpha=1.0, beta=1.0, trans_a=False, trans_b=False)
    y: Tensor((2, 4), "float32") = op.gemm(a, const("w_t_1"), None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False)
    return y
''',
    )


@pytest.mark.parametrize(
    "b, trans",
    [
        ("w", "trans_a=False, trans_b=False"),  # already stored as read
        ("v", "trans_a=False, trans_b=True"),  # not a constant
        ("w", "trans_a=True, trans_b=False"),  # only B's layout decides the vector loads
    ],
    ids=["not-transposed", "parameter", "trans-a"],
)
def test_gemms_left_alone(b, trans):
    unchanged(
        f'''
constants = {{"w": Tensor((4, 4), "float32")}}

@function(inputs=["x", "v"], outputs=["y"])
def main(x: Tensor((4, 4), "float32"), v: Tensor((4, 4), "float32")) -> Tensor((4, 4), "float32"):
    y: Tensor((4, 4), "float32") = op.gemm(x, {b if b == "v" else 'const("w")'}, None, alpha=1.0, beta=1.0, {trans})
    return y
'''
    )


def test_gemm_in_a_branch_function_is_rewritten():
    verify(
        '''
constants = {"w": Tensor((4, 4), "float32")}

@function(inputs=["p0"], outputs=["o0"])
def then(p0: Tensor((2, 4), "float32")) -> Tensor((2, 4), "float32"):
    v: Tensor((2, 4), "float32") = op.gemm(p0, const("w"), None, alpha=1.0, beta=1.0, trans_a=False, trans_b=True)
    return v


@function(name="else", inputs=["p0"], outputs=["o0"])
def else_(p0: Tensor((2, 4), "float32")) -> Tensor((2, 4), "float32"):
    return p0


@function(inputs=["x0", "x1"], outputs=["y0"])
def main(x0: Tensor((), "bool"), x1: Tensor((2, 4), "float32")) -> Tensor((2, 4), "float32"):
    r: Tensor((2, 4), "float32") = if_(x0, then_branch="then", else_branch="else", args=[x1])
    return r
''',
        '''
constants = {"w_t": Tensor((4, 4), "float32")}

@function(inputs=["p0"], outputs=["o0"])
def then(p0: Tensor((2, 4), "float32")) -> Tensor((2, 4), "float32"):
    v: Tensor((2, 4), "float32") = op.gemm(p0, const("w_t"), None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False)
    return v


@function(name="else", inputs=["p0"], outputs=["o0"])
def else_(p0: Tensor((2, 4), "float32")) -> Tensor((2, 4), "float32"):
    return p0


@function(inputs=["x0", "x1"], outputs=["y0"])
def main(x0: Tensor((), "bool"), x1: Tensor((2, 4), "float32")) -> Tensor((2, 4), "float32"):
    r: Tensor((2, 4), "float32") = if_(x0, then_branch="then", else_branch="else", args=[x1])
    return r
''',
    )


# ---------------------------------------------------------------------------------------------
# the transformers


def _transposed_gemms(mod) -> int:
    return sum(c.op == "gemm" and c.attrs["trans_b"] for c in calls(mod, "main"))


def test_bert_feed_forward_gemm_reads_its_weight_in_order():
    model = builders.bert_encoder()
    mod = from_onnx(model)
    plain = run_pipeline(mod, disable=["pretranspose-weights", "fuse-ops"])
    pretransposed = run_pipeline(mod, disable=["fuse-ops"])
    assert (_transposed_gemms(plain), _transposed_gemms(pretransposed)) == (1, 0)
    assert len(pretransposed.const_types) == len(plain.const_types)
    names = {i.name for i in model.graph.input}
    feeds = token_inputs(np.random.default_rng(0), 2, 5, vocab=100)
    feeds = {k: v for k, v in feeds.items() if k in names}
    for want, have in zip(run(plain, feeds), run(pretransposed, feeds)):
        np.testing.assert_array_equal(have, want)
    wants, gots = onnxruntime_outputs(model, feeds), compiled_fn(model)(feeds)
    assert len(gots) == len(wants)
    for want, got in zip(wants, gots):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_gpt2_has_no_weight_read_transposed():
    """GPT-2's tied output projection is a constant transpose folded at import: its matmul
    already reads the weight as (K, N)."""
    mod = from_onnx(builders.gpt2_decoder())
    assert structural_equal(pretranspose_weights(mod), mod)
