"""The real-export corpus (tools/export_corpus.py): models written by torch's own ONNX
exporters from `transformers` and plain `torch` architectures, with dynamic batch and
sequence, and the same architectures as PyTorch programs (torch.export, .pt2). Each compiles
to ONE pack, which runs at two shapes in the Python and the C runtime; both must match the
reference (rtol 1e-3, atol 1e-4 times the output's largest magnitude; for an output of a
quantized model that a DequantizeLinear writes, one quantization step) and each other bit
for bit. The reference is onnxruntime for an ONNX model (for a quantized one, running the
graph as written: its fused integer kernels round differently on different CPUs), and for
a program the program itself, run by torch. The outputs of a model with a
DynamicQuantizeLinear are compared norm-wise instead (relative RMS error at most RTOL): that
op's scale comes from a tensor's range, so a last-bit difference in it (a layer norm summed
in another order) flips the rounding of an element near a half step, and the flip moves a
few elements downstream by more than the element-wise tolerance.

The exports live outside git (`TCC_CORPUS_DIR`, default `~/.cache/tcc/corpus`); `make corpus`
writes them. Without them the tests skip, saying so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.e2e.test_models import onnxruntime_outputs
from tests.packs import compiled_pack
from tests.runtime_c.capi import CRuntime, build_runtime

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from export_corpus import MODELS, PROGRAMS, QUANTIZED, default_dir, example_inputs  # noqa: E402

RTOL, ATOL = 1e-3, 1e-4
# A reference output no larger than this checks nothing: with atol floored at ATOL, zeros pass
# (MobileNetV2's exports once gave 2e-24 at most, MobileViT's all zeros: export_corpus.py's
# `_calibrated`).
MIN_REFERENCE = 1e-3
# Two shapes from one pack: the export's own and another batch and length.
SIZES = [{"batch": 2, "seq": 16, "frames": 4000}, {"batch": 3, "seq": 24, "frames": 6000}]


def _quantization_steps(model: onnx.ModelProto) -> dict[str, float]:
    """For each output a DequantizeLinear writes, its largest scale: one quantization step.
    A quantized model may round one element a step apart from onnxruntime, which fuses the
    quantize-dequantize pairs into integer kernels that round at other places."""
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    steps = {}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[1] in inits:
            steps[node.output[0]] = float(np.max(inits[node.input[1]]))
    return steps


def quantizes_dynamically(model: onnx.ModelProto) -> bool:
    return any(node.op_type == "DynamicQuantizeLinear" for node in model.graph.node)


def assert_matches_onnxruntime(got: np.ndarray, want: np.ndarray, what: str,
                               step: float = 0.0, normwise: bool = False) -> None:
    """`got` within the corpus tolerance of onnxruntime's `want`: element-wise (atol scaled
    by the output's largest magnitude, and at least `step`), or with `normwise` as a
    relative RMS error (see the module docstring)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (
        f"{what}: {got.dtype}{got.shape} vs onnxruntime {want.dtype}{want.shape}")
    assert_not_vanishing(want, what)
    if normwise and want.size:
        error = float(np.sqrt(np.mean((got.astype(np.float64) - want) ** 2)))
        size = max(float(np.sqrt(np.mean(want.astype(np.float64) ** 2))), ATOL)
        assert error <= RTOL * size, f"{what}: relative RMS error {error / size:.3g} > {RTOL}"
        return
    scale = float(np.max(np.abs(want))) if want.size else 1.0
    atol = max(ATOL * max(scale, 1.0), step * (1 + 1e-6))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=atol, err_msg=what)


def assert_not_vanishing(want: np.ndarray, what: str) -> None:
    """A floating reference output reaches MIN_REFERENCE somewhere."""
    if np.issubdtype(want.dtype, np.floating) and want.size:
        largest = float(np.max(np.abs(want)))
        assert largest > MIN_REFERENCE, (
            f"{what}: the reference output is at most {largest:.3g}, too small for the "
            "comparison to check anything; export the corpus again (tools/export_corpus.py)")


def test_a_vanishing_reference_is_refused():
    want = np.full((2, 8), 2e-24, np.float32)
    with pytest.raises(AssertionError, match="too small"):
        assert_matches_onnxruntime(np.zeros_like(want), want, "vanishing")
    assert_matches_onnxruntime(np.ones(3, np.int64), np.ones(3, np.int64), "integers")


def test_normwise_comparison_allows_a_few_flipped_elements_only():
    rng = np.random.default_rng(0)
    want = rng.standard_normal((2, 16, 64)).astype(np.float32)
    flipped = want.copy()
    flipped[0, 1, :3] += 3e-3  # a rounding flipped upstream: beyond the element-wise tolerance
    with pytest.raises(AssertionError):
        assert_matches_onnxruntime(flipped, want, "flipped")
    assert_matches_onnxruntime(flipped, want, "flipped", normwise=True)
    wrong = want.copy()
    wrong[0] *= 0.99  # one batch element 1% off: a wrong kernel, not a flipped rounding
    with pytest.raises(AssertionError, match="relative RMS error"):
        assert_matches_onnxruntime(wrong, want, "wrong", normwise=True)


@pytest.fixture(scope="module")
def crt(tmp_path_factory) -> CRuntime:
    build = build_runtime(tmp_path_factory.mktemp("crt"))
    return CRuntime(build / "libtccrt.so")


@pytest.mark.parametrize("name", [*MODELS, *QUANTIZED])
def test_corpus_model(name, crt):
    path = default_dir() / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path} is not exported; run `make corpus`")
    spec = json.loads(path.with_suffix(".json").read_text())
    model = onnx.load(str(path))
    pack = compiled_pack(model)
    steps = _quantization_steps(model) if spec.get("quantized") else {}
    normwise = quantizes_dynamically(model)
    import tcc.rt

    with tcc.rt.load(pack) as py_module:
        c_module = crt.load(pack)
        for k, sizes in enumerate(SIZES):
            feeds = example_inputs(spec["inputs"], sizes, seed=k)
            want = onnxruntime_outputs(model, feeds, as_written=bool(spec.get("quantized")))
            got = py_module["main"](feeds)
            got = list(got) if isinstance(got, (list, tuple)) else [got]
            c_got = c_module.run("main", [feeds[i.name] for i in model.graph.input])
            assert len(got) == len(want) == len(c_got)
            for out, g, c, w in zip(model.graph.output, got, c_got, want):
                assert_matches_onnxruntime(g, w, f"{name} output {out.name!r} at {sizes}",
                                           steps.get(out.name, 0.0), normwise)
                assert np.array_equal(g, c, equal_nan=True), (
                    f"{name} output {out.name!r}: the C runtime differs from the Python one")


@pytest.mark.parametrize("name", [*PROGRAMS])
def test_corpus_program(name, crt, tmp_path):
    path = default_dir() / f"{name}.pt2"
    if not path.exists():
        pytest.skip(f"{path} is not exported; run `make corpus`")
    torch = pytest.importorskip("torch")
    from tcc.api import compile_to_bytes

    spec = json.loads(path.with_suffix(".json").read_text())
    program = torch.export.load(str(path))
    pack = tmp_path / f"{name}.tvmpack"
    pack.write_bytes(compile_to_bytes(path))
    import tcc.rt

    with tcc.rt.load(pack) as py_module:
        c_module = crt.load(pack)
        for k, sizes in enumerate(SIZES):
            feeds = example_inputs(spec["inputs"], sizes, seed=k)
            args = [feeds[i["name"]] for i in spec["inputs"]]
            with torch.no_grad():
                want = program.module()(*[torch.from_numpy(a) for a in args])
            want = [w.numpy() for w in (want if isinstance(want, (list, tuple)) else [want])]
            got = py_module["main"](*args)
            got = list(got) if isinstance(got, (list, tuple)) else [got]
            c_got = c_module.run("main", args)
            assert len(got) == len(want) == len(c_got)
            for i, (g, c, w) in enumerate(zip(got, c_got, want)):
                assert g.dtype == w.dtype and g.shape == w.shape, (
                    f"output {i}: {g.dtype}{g.shape} vs torch {w.dtype}{w.shape}")
                assert_not_vanishing(w, f"{name} output {i} at {sizes}")
                atol = ATOL * max(float(np.max(np.abs(w))) if w.size else 1.0, 1.0)
                np.testing.assert_allclose(g, w, rtol=RTOL, atol=atol,
                                           err_msg=f"{name} output {i} at {sizes}")
                assert np.array_equal(g, c, equal_nan=True), (
                    f"{name} output {i}: the C runtime differs from the Python one")


# Programs some of whose graphs torch.compile(backend="tcc") still leaves to eager mode, and
# why; every other program's graphs must all go to tcc.
@pytest.mark.parametrize("name", [*PROGRAMS])
def test_corpus_program_through_torch_compile(name, caplog):
    """The same programs as modules, compiled by torch.compile(backend="tcc"): each matches
    eager at both shapes, and every graph goes to tcc (no fallback logged)."""
    path = default_dir() / f"{name}.pt2"
    if not path.exists():
        pytest.skip(f"{path} is not exported; run `make corpus`")
    torch = pytest.importorskip("torch")
    import logging

    spec = json.loads(path.with_suffix(".json").read_text())
    module = torch.export.load(str(path)).module()
    torch._dynamo.reset()
    compiled = torch.compile(module, backend="tcc")
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="tcc.dynamo"):
        for k, sizes in enumerate(SIZES):
            feeds = example_inputs(spec["inputs"], sizes, seed=k)
            args = [torch.from_numpy(feeds[i["name"]]) for i in spec["inputs"]]
            want, got = module(*args), compiled(*args)
            want, got = (w if isinstance(w, (list, tuple)) else [w] for w in (want, got))
            for w, g in zip(want, got):
                assert_not_vanishing(w.numpy(), f"{name} at {sizes}")
                atol = ATOL * max(float(w.abs().max()) if w.numel() else 1.0, 1.0)
                torch.testing.assert_close(g, w, rtol=RTOL, atol=atol)
    torch._dynamo.reset()
    assert [r.getMessage() for r in caplog.records if r.name == "tcc.dynamo"] == []
