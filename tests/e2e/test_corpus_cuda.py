"""The real-export corpus compiled for `--target cuda` and run through the stand-in driver.

Each exported ONNX model of the corpus (tools/export_corpus.py: transformers and torch
architectures written by torch's own exporters, dynamic batch and sequence) compiles to one
CUDA pack: the CUDA rules, CUDA C, NVRTC's cubins. The pack's own CUDA source, built for this
CPU, runs under tests/rt/fake_libcuda.c (blocks one after another, a block's threads as
coroutines between barriers) through tcc.rt, with its tensors in the driver's "device"
memory, at two shapes from the one pack; the outputs must match onnxruntime as the CPU
corpus test's do. Exports missing (`make corpus`) or no NVRTC: the tests skip.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path

import onnx
import pytest

from tcc.emit.nvrtc import nvrtc_available
from tests.e2e.test_models import onnxruntime_outputs
from tests.emit import cuda_on_host

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from export_corpus import MODELS, QUANTIZED, default_dir, example_inputs  # noqa: E402

from tests.e2e.test_corpus import (  # noqa: E402
    SIZES,
    _quantization_steps,
    assert_matches_onnxruntime,
    quantizes_dynamically,
)

pytestmark = [
    pytest.mark.skipif(not nvrtc_available(), reason="NVRTC is not installed (pip install 'tcc[cuda]')"),
    pytest.mark.skipif(cuda_on_host.cxx() is None, reason="no C++ compiler for the stand-in driver"),
]


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    return cuda_on_host.build_fake_driver(tmp_path_factory.mktemp("driver"))


@pytest.mark.parametrize("name", [*MODELS, *QUANTIZED])
def test_corpus_model_on_cuda(name, driver, tmp_path, monkeypatch):
    path = default_dir() / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path} is not exported; run `make corpus`")
    from tcc.api import compile_to_bytes

    spec = json.loads(path.with_suffix(".json").read_text())
    model = onnx.load(str(path))
    data = compile_to_bytes(model, "cuda -arch=sm_80,sm_90")
    pack = tmp_path / f"{name}.tvmpack"
    pack.write_bytes(data)
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        source = tf.extractfile("kernels/cuda.cu").read().decode()
    monkeypatch.setenv("TCC_CUDA_DRIVER", str(driver))
    monkeypatch.setenv("TCC_FAKE_CUDA_KERNELS", str(cuda_on_host.build_packed(source, tmp_path)))
    steps = _quantization_steps(model) if spec.get("quantized") else {}
    normwise = quantizes_dynamically(model)
    import tcc.rt

    with tcc.rt.load(pack) as module:
        for k, sizes in enumerate(SIZES):
            feeds = example_inputs(spec["inputs"], sizes, seed=k)
            want = onnxruntime_outputs(model, feeds, as_written=bool(spec.get("quantized")))
            got = module["main"](feeds)
            got = list(got) if isinstance(got, (list, tuple)) else [got]
            assert len(got) == len(want)
            for out, g, w in zip(model.graph.output, got, want):
                assert_matches_onnxruntime(g, w, f"{name} output {out.name!r} at {sizes}",
                                           steps.get(out.name, 0.0), normwise)
