"""tcc.api: what a compile does to the process around it."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tcc.api import compile_to_bytes, compile_to_file
from tcc.errors import TccError


def _huge_pages() -> bool:
    toggle = np._core.multiarray._set_madvise_hugepage
    was = toggle(False)
    toggle(was)
    return was


def test_a_compile_runs_on_small_pages_and_gives_the_setting_back(tmp_path):
    """numpy's huge-page advice is off while a compile runs (memory compaction stalled the
    graph passes' weight copies) and as it was once the compile is done, failed or not."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    before = _huge_pages()
    seen = []
    compile_to_bytes(tmp_path / "m.onnx", on_stage=lambda _: seen.append(_huge_pages()), cache=False)
    compile_to_file(tmp_path / "m.onnx", tmp_path / "m.tvmpack",
                    on_stage=lambda _: seen.append(_huge_pages()))
    assert seen and not any(seen)
    assert _huge_pages() == before
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    with pytest.raises(TccError, match="not a valid ONNX model"):
        compile_to_bytes(tmp_path / "bad.onnx", cache=False)
    assert _huge_pages() == before
