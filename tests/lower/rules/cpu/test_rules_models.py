"""The default rules on whole models: every stage of the model set's kernels gets a rule,
and models compiled with the rules (the default) match onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tcc.api import compile_onnx, load_module, lower
from tcc.lower.passes import run_pipeline
from tcc.lower.rules import UNSCHEDULED, rule_coverage
from tcc.target import parse_target
from tests.e2e.test_models import onnxruntime_outputs, token_inputs
from tests.models import builders
from tests.packs import compiled_fn

RTOL, ATOL = 1e-3, 1e-4
HOST = parse_target("llvm")


def _bert():
    return builders.bert_encoder(layers=2, hidden=64, heads=2, ffn=128, max_positions=64)


def _kernels_module(model):
    return lower(run_pipeline(load_module(model), target=HOST))


@pytest.mark.parametrize("name", ["resnet50", "squeezenet", "shufflenet", "densenet121",
                                  "inception_v1"])
def test_every_stage_of_a_cnn_gets_a_rule(name):
    coverage = rule_coverage(_kernels_module(builders.light_model(name)), HOST)
    assert coverage[UNSCHEDULED] == 0
    assert coverage["contraction"] > 0 and coverage["elementwise"] > 0


def test_every_stage_of_bert_gets_a_rule():
    coverage = rule_coverage(_kernels_module(_bert()), HOST)
    assert coverage[UNSCHEDULED] == 0
    # q/k/v/output projections, the two attention matmuls, the feed-forward pair
    assert coverage["contraction"] >= 4


def _check(fn, model, feeds):
    want = onnxruntime_outputs(model, feeds)
    got = fn(feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def test_bert_with_rules_matches_onnxruntime_at_two_sizes():
    model = _bert()
    fn = compile_onnx(model)
    names = {vi.name for vi in model.graph.input}
    rng = np.random.default_rng(0)
    for batch, seq in ((1, 64), (3, 17)):
        feeds = token_inputs(rng, batch, seq, vocab=100)
        _check(fn, model, {k: v for k, v in feeds.items() if k in names})


@pytest.mark.parametrize("name", ["squeezenet", "resnet50"])
def test_cnn_with_rules_matches_onnxruntime(name):
    model = builders.light_model(name)
    (image,) = model.graph.input
    shape = [d.dim_value for d in image.type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    fn = compiled_fn(model)
    fn.module.set_num_threads(2)
    _check(fn, model, {image.name: x})
