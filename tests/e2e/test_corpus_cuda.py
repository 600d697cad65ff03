"""The real-export corpus compiled for `--target cuda` and run through the stand-in driver.

Each exported ONNX model of the corpus (tools/export_corpus.py: transformers and torch
architectures written by torch's own exporters, dynamic batch and sequence) compiles to one
CUDA pack: the CUDA rules, CUDA C, NVRTC's cubins. The pack's own CUDA source, built for this
CPU, runs under tests/rt/fake_libcuda.c (blocks one after another, a block's threads as
coroutines between barriers) through tcc.rt and through the C runtime, with its tensors in
the driver's "device" memory, at two shapes from the one pack; the outputs must match
onnxruntime as the CPU corpus test's do, and the two runtimes each other bit for bit.
Exports missing (`make corpus`) or no NVRTC: the tests skip.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.e2e.test_models import onnxruntime_outputs
from tests.emit import cuda_on_host
from tests.runtime_c.capi import CRuntime, build_runtime

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from export_corpus import MODELS, QUANTIZED, default_dir, example_inputs  # noqa: E402

from tests.e2e.test_corpus import (  # noqa: E402
    SIZES,
    _quantization_steps,
    assert_matches_onnxruntime,
    quantizes_dynamically,
)

pytestmark = cuda_on_host.NEEDS_STAND_IN


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    return cuda_on_host.build_fake_driver(tmp_path_factory.mktemp("driver"))


@pytest.fixture(scope="module")
def crt(tmp_path_factory) -> CRuntime:
    return CRuntime(build_runtime(tmp_path_factory.mktemp("crt")) / "libtccrt.so")


@pytest.mark.parametrize("name", [*MODELS, *QUANTIZED])
def test_corpus_model_on_cuda(name, driver, crt, tmp_path, monkeypatch):
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

    c_module = crt.load(pack)
    with tcc.rt.load(pack) as module:
        for k, sizes in enumerate(SIZES):
            feeds = example_inputs(spec["inputs"], sizes, seed=k)
            want = onnxruntime_outputs(model, feeds, as_written=bool(spec.get("quantized")))
            got = module["main"](feeds)
            got = list(got) if isinstance(got, (list, tuple)) else [got]
            c_got = c_module.run("main", [feeds[i.name] for i in model.graph.input])
            assert len(got) == len(want) == len(c_got)
            for out, g, c, w in zip(model.graph.output, got, c_got, want):
                assert_matches_onnxruntime(g, w, f"{name} output {out.name!r} at {sizes}",
                                           steps.get(out.name, 0.0), normwise)
                assert np.array_equal(g, c, equal_nan=True), (
                    f"{name} output {out.name!r}: the C runtime differs from the Python one")
    c_module.close()
