"""Padding selects along a vectorized loop: masked vector loads instead of a scalar loop.

A `select(cond, A[...], pad)` whose condition changes from lane to lane loads `A` only where
it holds. The backend runs it as `llvm.masked.load` when the load is contiguous along the
loop; the inputs here end right before an inaccessible page, so a lane that read where its
condition is false would crash the test instead of passing by luck.
"""

from __future__ import annotations

import ctypes
import mmap
import re
import sys

import numpy as np
import pytest

from tcc.emit.llvm import build_module, compile_prim_funcs
from tcc.ir.graph import TensorType
from tcc.ir.ops.registry import get_op
from tcc.ir.parser import parse_module
from tcc.lower.legalize import op_prim_func
from tcc.lower.schedule import Schedule
from tcc.rt.kernels import load_cpu_library
from tcc.target import parse_target

pytestmark = pytest.mark.skipif(
    sys.platform not in ("linux", "darwin"), reason="guard pages need mmap and mprotect"
)

RNG = np.random.default_rng(0)
MASKED_LOAD = "llvm.masked.load."
# a scalar loop (what the vectorizer refuses) stores lane by lane; vector code stores whole
# vectors, widened to a power of two and masked for other lane counts
VECTOR_STORE = re.compile(r"store <|llvm\.masked\.store\.")
PROT_NONE = 0  # <sys/mman.h>, on Linux and macOS alike


def before_guard_page(values: np.ndarray) -> np.ndarray:
    """A copy of `values` whose last element ends a page; the next page cannot be read."""
    page = mmap.PAGESIZE
    size = -(-values.nbytes // page) * page
    mem = mmap.mmap(-1, size + page)
    start = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    assert libc.mprotect(start + size, page, PROT_NONE) == 0, ctypes.get_errno()
    out = np.frombuffer(mem, values.dtype, values.size, size - values.nbytes)
    out = out.reshape(values.shape)
    out[...] = values
    return out


def compute_ir(funcs, name: str) -> str:
    """The unoptimized LLVM IR of kernel `name`'s compute function (what tcc emitted)."""
    text = str(build_module(funcs, parse_target("llvm"))[0])
    body = text[text.index(f'@"{name}.compute"') :]
    return body[: body.index("\n}\n")]


def width_innermost(func, block: str, vectorize: bool):
    """`func` with the output's width loop moved inside the reduction loops, as lanes when
    `vectorize`; the reduction order of each output element is unchanged."""
    sch = Schedule(func)
    blk = sch.get_block(block)
    n, c, h, w, *reduce = sch.get_loops(blk)
    sch.reorder(n, c, h, *reduce, w)
    if vectorize:
        sch.vectorize(w)
    return sch.func


def run_both(func, block: str, inputs: list[np.ndarray], out_shape):
    """The kernel's output vectorized and serial, and the vectorized kernel's IR."""
    funcs = {
        "lanes": width_innermost(func, block, True),
        "serial": width_innermost(func, block, False),
    }
    cm = compile_prim_funcs(funcs)
    guarded = [before_guard_page(x) for x in inputs]
    outs = {}
    with load_cpu_library(cm.shared_object) as lib:
        for name in funcs:
            outs[name] = np.zeros(out_shape, np.float32)
            lib.call(name, [*guarded, outs[name]])
    return outs["lanes"], outs["serial"], compute_ir(funcs, "lanes")


def conv(x: tuple, w: tuple, stride: int):
    attrs = {"strides": (stride, stride), "padding": (1, 1, 1, 1), "dilation": (1, 1),
             "groups": 1}  # fmt: skip
    func = op_prim_func("conv2d", [TensorType(x, "float32"), TensorType(w, "float32")], attrs)
    return func, get_op("conv2d").ref, attrs


@pytest.mark.parametrize("width, lanes", [(8, 8), (13, 13), (56, 8)])
def test_padded_conv_vectorizes_its_width_with_masked_loads(width, lanes):
    func, ref, attrs = conv((1, 3, 5, width), (2, 3, 3, 3), stride=1)
    x = RNG.standard_normal((1, 3, 5, width)).astype(np.float32)
    w = RNG.standard_normal((2, 3, 3, 3)).astype(np.float32)
    lanes_out, serial, ir_text = run_both(func, "conv2d", [x, w], (1, 2, 5, width))
    assert f"{MASKED_LOAD}v{lanes}f32" in ir_text and VECTOR_STORE.search(ir_text)
    np.testing.assert_array_equal(lanes_out, serial)
    np.testing.assert_allclose(lanes_out, ref(x, w, **attrs), rtol=1e-5, atol=1e-5)


def test_padded_max_pool_vectorizes_its_width_with_masked_loads():
    attrs = {"kernel": (3, 3), "padding": (1, 1, 1, 1), "strides": None, "dilation": None,
             "ceil_mode": False}  # fmt: skip
    func = op_prim_func("max_pool2d", [TensorType((1, 2, 6, 16), "float32")], attrs)
    x = RNG.standard_normal((1, 2, 6, 16)).astype(np.float32)
    lanes, serial, ir_text = run_both(func, "max_pool2d", [x], (1, 2, 6, 16))
    assert MASKED_LOAD in ir_text and VECTOR_STORE.search(ir_text)
    np.testing.assert_array_equal(lanes, serial)
    np.testing.assert_array_equal(lanes, get_op("max_pool2d").ref(x, **attrs))


def test_strided_padded_conv_keeps_the_scalar_loop():
    """With stride 2 the padded load gathers along the width; a gather cannot be masked
    lane by lane, so the loop stays scalar (for LLVM's loop vectorizer) and stays right."""
    func, ref, attrs = conv((1, 2, 6, 16), (2, 2, 3, 3), stride=2)
    x = RNG.standard_normal((1, 2, 6, 16)).astype(np.float32)
    w = RNG.standard_normal((2, 2, 3, 3)).astype(np.float32)
    lanes, serial, ir_text = run_both(func, "conv2d", [x, w], (1, 2, 3, 8))
    assert MASKED_LOAD not in ir_text and not VECTOR_STORE.search(ir_text)
    np.testing.assert_allclose(lanes, ref(x, w, **attrs), rtol=1e-5, atol=1e-5)


CONCAT = """
@prim_func
def concat(A: Buffer((5,), "{dt}"), B: Buffer((11,), "{dt}"), C: Buffer((16,), "{dt}")):
    for i in vectorized(0, 16):
        C[i] = select(i < 5, A[i], B[i - 5] + select(i >= 8, B[i - 8], {dt}(0)))


@prim_func
def uniform(A: Buffer((16,), "{dt}"), S: Buffer((n,), "{dt}"), C: Buffer((16,), "{dt}"), k: int64):
    for i in vectorized(0, 16):
        C[i] = select(i >= k, A[i] + S[n + k - 16], A[i])


@prim_func
def scalar(A: Buffer((16,), "{dt}"), S: Buffer((1,), "{dt}"), C: Buffer((16,), "{dt}")):
    for i in vectorized(0, 16):
        C[i] = select(i >= 8, A[i] + S[0], A[i])
"""


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_both_branches_and_nested_selects_load_only_their_lanes(dtype):
    """Each branch's loads are masked to the lanes that choose it, a nested select's to the
    lanes that reach it: A is read past its end and B before its start otherwise."""
    funcs = parse_module(CONCAT.format(dt=dtype)).prim_funcs
    assert compute_ir(funcs, "concat").count(MASKED_LOAD) == 3
    a = before_guard_page(RNG.integers(-9, 9, 5).astype(dtype))
    b = before_guard_page(RNG.integers(-9, 9, 11).astype(dtype))
    c = np.zeros(16, dtype)
    with load_cpu_library(compile_prim_funcs(funcs).shared_object) as lib:
        lib.call("concat", [a, b, c])
    tail = b + np.concatenate([np.zeros(3, dtype), b[:8]])
    np.testing.assert_array_equal(c, np.concatenate([a, tail]))


def test_a_uniform_load_under_a_lane_mask_is_read_only_when_a_lane_chooses_it():
    """`S[n + k - 16]` is one address for all lanes, in bounds (for k >= 16 - n) exactly
    when some lane chooses its branch (k <= 15): the loop runs as vector code, reading it
    where a lane is active and through a safe address where none is (k = 16: S[n] is past
    the end of S, on a page that cannot be read)."""
    funcs = parse_module(CONCAT.format(dt="float32")).prim_funcs
    body = compute_ir(funcs, "uniform")
    assert VECTOR_STORE.search(body)
    a = RNG.standard_normal(16).astype(np.float32)
    s = before_guard_page(RNG.standard_normal(7).astype(np.float32))
    with load_cpu_library(compile_prim_funcs(funcs).shared_object) as lib:
        for k in (16, 15, 9):
            c = np.zeros(16, np.float32)
            lib.call("uniform", [a, s, c, np.array(k, np.int64)])
            want = np.where(np.arange(16) >= k, a + (s[7 + k - 16] if k <= 15 else 0), a)
            np.testing.assert_array_equal(c, want)


def test_a_scalar_operand_under_a_lane_mask_is_loaded_for_all_lanes():
    """`S[0]` of a one-element buffer is in bounds whichever lanes choose it, so it is
    loaded plainly and the loop runs as vector code, A masked as before."""
    body = compute_ir(parse_module(CONCAT.format(dt="float32")).prim_funcs, "scalar")
    assert MASKED_LOAD in body and VECTOR_STORE.search(body)


# -- guards on the lanes: the last tile of a split that does not divide -----------------------

GUARDED = """
@prim_func
def tail(A: Buffer((n,), "float32"), S: Buffer((m,), "float32"), B: Buffer((n,), "float32"), k: int64):
    for i in vectorized(0, 48):
        if i < n:
            B[i] = A[i] * 2.0 + S[k]


@prim_func
def tile(A: Buffer((4, n), "float32"), B: Buffer((n,), "float32")):
    with block("root"):
        acc = alloc_buffer((16,), "float32", scope="local")
        for j in serial(0, (n + 15) // 16):
            for i in vectorized(0, 16):
                if j * 16 + i < n:
                    acc[i] = 0.0
            for r in serial(0, 4):
                for i2 in vectorized(0, 16):
                    if j * 16 + i2 < n:
                        acc[i2] = acc[i2] + A[r, j * 16 + i2]
            for i3 in vectorized(0, 16):
                if j * 16 + i3 < n:
                    B[j * 16 + i3] = acc[i3]
"""


@pytest.mark.parametrize("n", [0, 5, 16, 17, 48])
def test_a_guarded_lanes_loop_runs_as_masked_vector_code(n):
    """Only the lanes the guard lets through load and store: A and B end right before an
    inaccessible page. `S[k]` is one address for every lane; with no lane active (n = 0,
    and the later 16-lane steps of n = 5) it is read from a safe slot, so an index far out of
    bounds there is harmless, as in the scalar loop that never reads it."""
    funcs = parse_module(GUARDED).prim_funcs
    body = compute_ir(funcs, "tail")
    assert "llvm.masked.store." in body and MASKED_LOAD in body
    a = before_guard_page(RNG.standard_normal(n).astype(np.float32))
    b = before_guard_page(np.full(n, 7.0, np.float32))
    s = RNG.standard_normal(4).astype(np.float32)
    k = 2 if n else 1 << 40
    with load_cpu_library(compile_prim_funcs({"tail": funcs["tail"]}).shared_object) as lib:
        lib.call("tail", [a, s, b, k])
    np.testing.assert_array_equal(b, a * np.float32(2) + (s[k] if n else 0))


@pytest.mark.parametrize("n", [16, 21, 3])
def test_a_register_tile_under_a_guard_stays_in_registers(n):
    """A local accumulator indexed by the lanes inside its size is loaded and stored whole,
    the lanes the guard turns off keeping what they held (a masked store would keep the tile
    in memory: its value is not forwarded to the next load)."""
    funcs = parse_module(GUARDED).prim_funcs
    cm = compile_prim_funcs({"tile": funcs["tile"]})
    body = cm.llvm_ir[cm.llvm_ir.index("@tile(") :]
    assert "alloca" not in body[: body.index("\n}\n")]
    a = before_guard_page(RNG.standard_normal((4, n)).astype(np.float32))
    b = before_guard_page(np.zeros(n, np.float32))
    with load_cpu_library(cm.shared_object) as lib:
        lib.call("tile", [a, b])
    np.testing.assert_allclose(b, a.sum(axis=0), rtol=1e-6)


ODD_LANES = """
@prim_func
def rows(A: Buffer((5, 13), "float32"), B: Buffer((5, 13), "float32")):
    for i in serial(0, 5):
        for j in vectorized(0, 13):
            B[i, j] = A[i, j] * 2.0
"""


def test_a_lane_count_that_is_no_power_of_two_loads_and_stores_one_masked_vector():
    """13 lanes: one 16-lane access with the last 3 lanes off, which never touch memory
    (the arrays end right before an inaccessible page), instead of LLVM's 8 + 4 + 1."""
    funcs = parse_module(ODD_LANES).prim_funcs
    body = compute_ir(funcs, "rows")
    assert f"{MASKED_LOAD}v16f32" in body and "llvm.masked.store.v16f32" in body
    a = before_guard_page(RNG.standard_normal((5, 13)).astype(np.float32))
    b = before_guard_page(np.zeros((5, 13), np.float32))
    with load_cpu_library(compile_prim_funcs(funcs).shared_object) as lib:
        lib.call("rows", [a, b])
    np.testing.assert_array_equal(b, a * np.float32(2))
