"""Whole models through tcc: import, save and reload the .tcir file, run the reference
interpreter, and compare with onnxruntime on seeded random inputs.

The transformers are imported once with symbolic batch and sequence sizes and run at two of
each. An op the importer does not support fails the test: these models are the targets the
op families must cover. The light CNNs with large weights are marked `slow` (deselect them
with `-m "not slow"`); they still run by default.
"""

import numpy as np
import onnx
import pytest

from tcc.frontend.onnx import from_onnx
from tcc.ir import irfile
from tcc.ir.interp import run
from tests.models import builders

ort = pytest.importorskip("onnxruntime")

RTOL, ATOL = 1e-4, 1e-5
# Over a few seconds each on two cores (large fully connected layers or 100+ convolutions).
HEAVY = {
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "vgg19",
    "zfnet512",
}


def import_through_file(model: onnx.ModelProto, tmp_path):
    """from_onnx, then a save/load round trip through the .tcir file the CLI stages exchange."""
    path = tmp_path / "model.tcir"
    irfile.save_module(path, from_onnx(model))
    return irfile.load_module(path)


def onnxruntime_outputs(model: onnx.ModelProto, feeds: dict, as_written: bool = False) -> list[np.ndarray]:
    """onnxruntime's outputs; with `as_written`, of the graph as written, without its graph
    optimizations (which fuse a quantized model's QuantizeLinear/DequantizeLinear pairs into
    integer kernels whose rounding depends on the CPU: on one without AVX-512 VNNI they
    came out up to 14 quantization steps from the graph's own float arithmetic)."""
    options = ort.SessionOptions()
    if as_written:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def check_against_onnxruntime(mod, model: onnx.ModelProto, feeds: dict) -> None:
    want = onnxruntime_outputs(model, feeds)
    got = run(mod, feeds)
    assert len(got) == len(want)
    for name, g, w in zip([o.name for o in model.graph.output], got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (
            f"{name}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        )
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f"output {name!r}")


def token_inputs(rng, batch: int, seq: int, vocab: int) -> dict:
    ids = rng.integers(0, vocab, size=(batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), np.int64)
    mask[batch - 1, seq // 2 :] = 0  # one padded sequence exercises the masked softmax
    return {"input_ids": ids, "attention_mask": mask}


@pytest.mark.parametrize(
    "builder", [builders.bert_encoder, builders.gpt2_decoder], ids=["bert_encoder", "gpt2_decoder"]
)
def test_transformer_at_several_sizes(builder, tmp_path):
    model = builder()
    mod = import_through_file(model, tmp_path)
    inputs = {vi.name for vi in model.graph.input}
    rng = np.random.default_rng(0)
    for batch in (1, 3):
        for seq in (5, 12):
            feeds = token_inputs(rng, batch, seq, vocab=100)
            check_against_onnxruntime(mod, model, {k: v for k, v in feeds.items() if k in inputs})


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n for n in builders.LIGHT_MODELS],
)
def test_light_model(name, tmp_path):
    model = builders.light_model(name)
    (image,) = model.graph.input
    shape = [d.dim_value for d in image.type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    check_against_onnxruntime(import_through_file(model, tmp_path), model, {image.name: x})


def test_builders_are_deterministic():
    assert (
        builders.bert_encoder().SerializeToString() == builders.bert_encoder().SerializeToString()
    )
    a, b = builders.light_model("squeezenet"), builders.light_model("squeezenet")
    assert a.SerializeToString() == b.SerializeToString()
