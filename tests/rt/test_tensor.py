"""Arrays as the runtimes hold them: aligned copies start at 64-byte boundaries."""

import numpy as np
import pytest

from tcc.rt.format import ARENA_ALIGN
from tcc.rt.tensor import aligned_copy, aligned_empty


@pytest.mark.parametrize("array", [
    np.arange(1000, dtype=np.float32).reshape(10, 100),
    np.arange(7, dtype=np.int64)[::2],  # not contiguous
    np.array(3.5, np.float64),  # 0-d
    np.zeros((0, 4), np.float32),
    np.array([True, False, True]),
])
def test_an_aligned_copy_starts_at_an_arena_boundary_and_holds_the_same_values(array):
    for _ in range(4):  # numpy's allocator lands 16-byte aligned arrays anywhere
        out = aligned_copy(array)
        assert out.ctypes.data % ARENA_ALIGN == 0 or out.size == 0
        assert out.dtype == array.dtype and out.shape == array.shape
        assert out.flags.c_contiguous and out.flags.writeable
        np.testing.assert_array_equal(out, array)
    assert aligned_empty(100, 256).ctypes.data % 256 == 0
