"""The compile driver (tcc.api): the pack it writes while the kernels compile is the pack it
returns, and a compile that fails after the weights were written leaves nothing behind."""

from __future__ import annotations

import os
import tarfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper

from tcc.api import compile_to_bytes, compile_to_file
from tcc.errors import TccError


def _model(path):
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TP.FLOAT, [64, 32],
                           rng.standard_normal(64 * 32).astype(np.float32).tobytes(), raw=True)
    b = helper.make_tensor("b", TP.FLOAT, [32], rng.standard_normal(32).astype(np.float32).tobytes(),
                           raw=True)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["t"]),
                           helper.make_node("Add", ["t", "b"], ["u"]),
                           helper.make_node("Relu", ["u"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TP.FLOAT, [2, 64])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [2, 32])], [w, b])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture
def no_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TCC_CACHE_DIR", str(tmp_path / "cache"))


def test_the_file_written_during_the_compile_is_the_pack(tmp_path, no_cache):
    model = _model(tmp_path / "m.onnx")
    size = compile_to_file(model, tmp_path / "m.tvmpack", cache=False)
    data = (tmp_path / "m.tvmpack").read_bytes()
    assert size == len(data) and data == compile_to_bytes(model, cache=False)
    with tarfile.open(tmp_path / "m.tvmpack") as tf:
        assert tf.getnames()[0] == "weights.bin"  # written while the kernels compiled


def test_a_compile_failing_after_the_weights_were_written_leaves_no_file(tmp_path, no_cache,
                                                                          monkeypatch):
    import tcc.emit.cpu_kernels as cpu_kernels

    model = _model(tmp_path / "m.onnx")
    out = tmp_path / "out"
    out.mkdir()
    written = []

    def failing_link(*args, **kwargs):
        written.append(sorted(os.listdir(out)))  # the weights are in a temporary file by now
        raise TccError("the linker failed")

    monkeypatch.setattr(cpu_kernels, "link_objects", failing_link)
    with pytest.raises(TccError, match="the linker failed"):
        compile_to_file(model, out / "m.tvmpack")
    assert len(written) == 1 and len(written[0]) == 1 and written[0][0].endswith(".tmp")
    assert os.listdir(out) == []
