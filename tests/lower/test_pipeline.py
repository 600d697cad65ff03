"""run_pipeline: what running the graph passes does to the process around them."""

import numpy as np
import pytest

import tcc.lower.passes as passes
from tcc.ir.parser import parse_module
from tcc.lower.passes import PIPELINE, run_pipeline

MODULE = '''
@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
    a: Tensor((4,), "float32") = op.relu(x)
    y: Tensor((4,), "float32") = op.exp(a)
    return y
'''


def _huge_pages() -> bool:
    toggle = np._core.multiarray._set_madvise_hugepage
    was = toggle(False)
    toggle(was)
    return was


def test_the_passes_run_on_small_pages_and_give_the_setting_back(monkeypatch):
    """numpy's huge-page advice is off while the passes run (memory compaction stalled
    ResNet-50's weight copies) and as it was afterwards, when a pass fails too."""
    before = _huge_pages()
    seen = []
    run_pipeline(parse_module(MODULE), print_after="all", on_print=lambda _: seen.append(_huge_pages()))
    assert len(seen) >= len(PIPELINE) // 2 and not any(seen)
    assert _huge_pages() == before

    def failing(mod, *args):
        raise RuntimeError("a pass failed")

    monkeypatch.setitem(passes.PASSES, PIPELINE[0], failing)
    with pytest.raises(RuntimeError, match="a pass failed"):
        run_pipeline(parse_module(MODULE))
    assert _huge_pages() == before
