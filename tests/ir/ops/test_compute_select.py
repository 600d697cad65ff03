"""Loop programs of the value-dependent ops (tcc.ir.ops.select) against their references."""

import numpy as np
import pytest

from tcc.ir.errors import NoLoopProgram
from tcc.ir.graph import TensorType
from tcc.ir.ops import get_op
from tcc.lower.legalize import placeholders
from tests.helpers import assert_close, ref, run_compute


@pytest.mark.parametrize("dtype", ["int32", "float64"])
@pytest.mark.parametrize("axis", [None, 0, 2, -1])
@pytest.mark.parametrize("sorted_", [False, True])
def test_unique_loop_program_matches_np_unique(dtype, axis, sorted_):
    """Items with repeats in every position, ordered by value (lexicographically for slices)
    or by first occurrence; the count comes from the reference, as the count kernel's
    result would."""
    rng = np.random.default_rng(3)
    x = rng.integers(-2, 2, (3, 4, 2)).astype(dtype)
    x[2] = x[0]  # a repeated slice along axis 0
    x[..., 1] = x[..., 0]  # ... and along the last axis
    want = ref("unique", x, axis=axis, sorted=sorted_)
    got = run_compute("unique", x, axis=axis, sorted=sorted_, count=len(want[1]))
    assert_close(got, list(want), rtol=0, atol=0)
    (count,) = run_compute("unique_count", x, axis=axis)
    assert count.tolist() == [len(want[1])]


def test_unique_of_bools_has_no_loop_program():
    (x,) = placeholders([TensorType((2,), "bool")])
    with pytest.raises(NoLoopProgram, match="dtype bool"):
        get_op("unique").compute(x, axis=None, sorted=True, count=2)


@pytest.mark.parametrize("dtype, threshold", [("float32", 0.1), ("float64", 0.1), ("int32", 1.5)])
def test_binarize(dtype, threshold):
    x = np.array([0.1, 0.2, -1.0, np.nan, 1.5, 2.0] if dtype != "int32" else [0, 1, 2, 3, -2, 1],
                 dtype)
    assert_close(run_compute("binarize", x, threshold=threshold),
                 [ref("binarize", x, threshold=threshold)], rtol=0, atol=0)
