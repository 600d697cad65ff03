"""Gathers of an unrolled vector tile: contiguous row loads and a transpose in registers
(tcc.emit.llvm_transpose), bit for bit what the gathers read."""

from __future__ import annotations

import numpy as np
import pytest

from tcc.emit.llvm import build_module, compile_prim_funcs
from tcc.ir import te
from tcc.ir import tir as T
from tcc.ir.graph import TensorType
from tcc.lower.legalize import op_prim_func
from tcc.lower.rules import schedule_prim_func
from tcc.lower.rules.cpu import Machine
from tcc.lower.schedule import Schedule
from tcc.lower.schedule.state import walk
from tcc.rt.kernels import load_cpu_library
from tcc.target import parse_target

AVX512 = Machine(vector_bits=512, vector_registers=32, cores=2)


def _ir(func: T.PrimFunc) -> str:
    """The kernel's LLVM IR as tcc emits it, before LLVM optimizes it."""
    return str(build_module({"k": func}, parse_target("llvm"))[0])


def _run(func: T.PrimFunc, x: np.ndarray) -> np.ndarray:
    out = np.full([int(d) for d in func.buffers[-1].shape], np.nan, np.float32)
    with load_cpu_library(compile_prim_funcs({"k": func}).shared_object) as lib:
        lib.set_num_threads(2)
        lib.call("k", [x, out])
    return out


def _tile(func: T.PrimFunc) -> tuple[int, int] | None:
    """(rows, lanes) of the unrolled loop right around the vector loop, if there is one."""
    loops = [loc.stmt for loc in walk(func.body) if isinstance(loc.stmt, T.For)]
    for outer, inner in zip(loops, loops[1:]):
        if outer.kind is T.ForKind.UNROLLED and inner.kind is T.ForKind.VECTORIZED \
                and outer.body is inner:
            return outer.extent.value, inner.extent.value
    return None


@pytest.mark.parametrize("src, dst, shape, tile", [
    ("NCHW", "NCHW16c", (1, 64, 14, 14), (14, 16)),  # 14 columns of a plane, 16 channels
    ("NCHW", "NCHW16c", (1, 32, 56, 56), (14, 16)),
    ("NCHW", "NCHW8c", (2, 16, 7, 7), (7, 8)),
    ("NCHW", "NCHW4c", (1, 8, 9, 12), (12, 4)),
    ("NCHW", "NCHW3c", (1, 3, 10, 32), (16, 3)),  # an image's 3 channels
    ("NCHW", "NCHW2c", (1, 2, 10, 32), None),  # 2 lanes: gathered
    ("NCHW16c", "NCHW", (1, 4, 14, 14, 16), (16, 14)),  # 16 channels, 14 columns
    ("NCHW16c", "NCHW", (1, 2, 7, 7, 16), (16, 7)),
    ("NCHW16c", "NCHW", (1, 2, 56, 56, 16), (16, 8)),  # whole aligned 8-lane rows, not 14
    ("NCHW8c", "NCHW4c", (1, 2, 5, 6, 8), None),  # no gather along the lanes: a plain copy
])
def test_layout_transforms_run_as_transposed_tiles(src, dst, shape, tile):
    """The elementwise rule gives a transform whose load gathers along the lanes R x L
    tiles; the backend loads each tile's L rows whole (no lane-by-lane gather is left in
    its IR) and the result is the plain kernel's."""
    func = op_prim_func("layout_transform", [TensorType(shape, "float32")],
                        {"src": src, "dst": dst})
    scheduled = schedule_prim_func(func, AVX512)
    assert _tile(scheduled) == tile
    if tile is not None:
        ir = _ir(scheduled)
        assert "shufflevector" in ir and "insertelement" not in ir
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    assert _run(scheduled, x).tobytes() == _run(func, x).tobytes()


def test_a_transpose_with_odd_extents_runs_as_tiles():
    """(4, 33, 70) -> (4, 70, 33): tiles of 14 rows (of 70) by 11 lanes (of 33)."""
    func = op_prim_func("transpose", [TensorType((4, 33, 70), "float32")], {"axes": [0, 2, 1]})
    scheduled = schedule_prim_func(func, AVX512)
    assert _tile(scheduled) == (14, 11)
    x = np.random.default_rng(1).standard_normal((4, 33, 70)).astype(np.float32)
    np.testing.assert_array_equal(_run(scheduled, x), x.transpose(0, 2, 1))


def _unrolled_transpose(body) -> T.PrimFunc:
    """B[i, j] = body(A, i, j) for A (16, 8), B (8, 16): i unrolled around 16 lanes of j."""
    a = te.placeholder((16, 8), "float32", "A")
    b = te.compute((8, 16), lambda i, j: body(a, i, j), "B")
    sch = Schedule(te.create_prim_func([a, b]))
    i, j = sch.get_loops(sch.get_block("B"))
    sch.unroll(i)
    sch.vectorize(j)
    return sch.func


def test_only_loads_every_copy_and_lane_reads_come_from_a_tile():
    """A gather under a select (a branch some copies do not take) stays a gather: a tile
    would read what the loop does not. The same gather outside a select is a tile."""
    x = np.random.default_rng(2).standard_normal((16, 8)).astype(np.float32)
    plain = _unrolled_transpose(lambda a, i, j: a[j, i])
    ir = _ir(plain)
    assert "shufflevector" in ir and "insertelement" not in ir
    np.testing.assert_array_equal(_run(plain, x), x.T)
    selected = _unrolled_transpose(
        lambda a, i, j: te.if_then_else(i % 2 < 1, a[j, i], te.const(1.0, "float32")))
    assert "insertelement" in _ir(selected)
    want = np.where((np.arange(8) % 2 == 0)[:, None], x.T, np.float32(1.0))
    np.testing.assert_array_equal(_run(selected, x), want)


@pytest.mark.parametrize("columns", [14, 7, 4])
def test_a_tuner_may_pick_the_tiles_width(columns):
    """`transpose_columns` takes any width that divides the row (56: 4, 7, 8, 14), each a
    tile of the same kernel."""
    from tcc.lower.rules import finish_schedule, schedule_kernel
    from tcc.lower.schedule.sampling import Decisions

    shape = (1, 2, 56, 56, 16)
    func = op_prim_func("layout_transform", [TensorType(shape, "float32")],
                        {"src": "NCHW16c", "dst": "NCHW"})
    (block,) = [loc.stmt.name for loc in walk(func.body)
                if isinstance(loc.stmt, T.Block) and loc.stmt.name != "root"]
    sch = schedule_kernel(func, AVX512, Decisions({f"{block}.transpose_columns": columns}))
    scheduled = finish_schedule(sch.func)
    assert _tile(scheduled) == (16, columns)
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    assert _run(scheduled, x).tobytes() == _run(func, x).tobytes()
