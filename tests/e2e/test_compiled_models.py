"""Whole models compiled to a .tvmpack (`tcc compile` path) and run by the Python loader,
against onnxruntime (rtol 1e-3, atol 1e-4). The transformers come from ONE pack each and
run at batch 1 and 3 and sequence lengths 16 and 128."""

import numpy as np
import pytest

import tcc
from tests.e2e.test_models import HEAVY, onnxruntime_outputs, token_inputs
from tests.models import builders
from tests.packs import compiled_fn

RTOL, ATOL = 1e-3, 1e-4


def check(fn, model, feeds):
    want = onnxruntime_outputs(model, feeds)
    got = fn(feeds)
    assert len(got) == len(want)
    for name, g, w in zip([o.name for o in model.graph.output], got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, f"{name}: {g.shape} vs {w.shape}"
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f"output {name!r}")


@pytest.mark.parametrize("builder", ["bert_encoder", "gpt2_decoder"])
def test_transformer_one_pack_many_sizes(builder):
    model = getattr(builders, builder)(max_positions=128)
    fn = tcc.compile_onnx(model)
    inputs = {vi.name for vi in model.graph.input}
    rng = np.random.default_rng(0)
    for batch in (1, 3):
        for seq in (16, 128):
            feeds = token_inputs(rng, batch, seq, vocab=100)
            check(fn, model, {k: v for k, v in feeds.items() if k in inputs})


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n for n in builders.LIGHT_MODELS],
)
def test_light_model_compiled(name):
    model = builders.light_model(name)
    (image,) = model.graph.input
    shape = [d.dim_value for d in image.type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    check(compiled_fn(model), model, {image.name: x})


@pytest.mark.parametrize("op, want", [("ReduceProd", 1.0), ("ReduceSum", 0.0)])
def test_compiled_reduction_over_an_empty_axis(op, want):
    """The output of a reduction over no elements is its identity, whatever the memory
    held before (a pack's arena is reused between runs)."""
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 0])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [1])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    fn = compiled_fn(model)
    for _ in range(2):
        (y,) = fn({"x": np.zeros((3, 0), np.float32)})
        np.testing.assert_array_equal(y, np.full(3, want, np.float32))
