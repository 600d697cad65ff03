"""The C runtime keeps a module's freed tensors and arenas for its next calls
(runtime_c/src/host_pool.c): once warm, a call asks the C library for no big block. Counted
with a preloaded shim around posix_memalign, so what glibc does with freed memory (it gave
MPT's legacy export fresh pages every call) does not decide the test."""

from __future__ import annotations

import shutil
import subprocess
import threading

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import tcc
from tests.runtime_c.capi import CRuntime
from tests.runtime_c.test_reader import _make

pytestmark = pytest.mark.skipif(shutil.which("cc") is None or shutil.which("make") is None,
                                reason="needs cc and make")

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
static long big;
int posix_memalign(void **p, size_t align, size_t n) {
  static int (*real)(void **, size_t, size_t);
  if (!real) real = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
  if (n >= 65536) big++;
  return real(p, align, n);
}
__attribute__((destructor)) static void report(void) { fprintf(stderr, "big blocks: %ld\n", big); }
"""


def _mlp():
    """Two matmuls over a symbolic row count: their intermediate goes in a planned arena."""
    rng = np.random.default_rng(0)
    w = [helper.make_tensor(f"w{i}", TP.FLOAT, [256, 256], rng.standard_normal(256 * 256).tolist())
         for i in (1, 2)]
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Tanh", ["h"], ["t"]),
         helper.make_node("MatMul", ["t", "w2"], ["y"])], "mlp",
        [helper.make_tensor_value_info("x", TP.FLOAT, ["n", 256])],
        [helper.make_tensor_value_info("y", TP.FLOAT, ["n", 256])], w)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return _make(tmp_path_factory.mktemp("tccrt-host-pool"))


def test_a_warm_module_allocates_no_big_block_per_call(build, tmp_path):
    shim = tmp_path / "shim.so"
    (tmp_path / "shim.c").write_text(SHIM)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", str(tmp_path / "shim.c"), "-o", str(shim), "-ldl"],
                   check=True, capture_output=True)
    tcc.compile(_mlp(), output=tmp_path / "m.tvmpack")
    np.save(tmp_path / "x.npy", np.ones((128, 256), np.float32))

    def big_blocks(runs: int) -> int:
        r = subprocess.run([str(build / "tccrt"), "run", str(tmp_path / "m.tvmpack"), "--input",
                            f"x={tmp_path / 'x.npy'}", "--bench", str(runs), "--threads", "1"],
                           capture_output=True, text=True, env={"LD_PRELOAD": str(shim)}, timeout=60)
        assert r.returncode == 0, r.stderr
        return int(r.stderr.split("big blocks: ")[1].split()[0])

    once, many = big_blocks(1), big_blocks(21)
    assert once > 0  # the arena (128 x 256 floats) and the output are big blocks
    assert many == once, f"20 more calls asked for {many - once} more big blocks"


def test_runs_on_several_threads_at_once_share_the_pool(build, tmp_path):
    """tccrt_module_run may be called from several threads at once (tcc_runtime.h): their
    arenas and outputs come from one pool, and every run still computes its own input's
    result."""
    model = _mlp()
    w1, w2 = (numpy_helper.to_array(t) for t in model.graph.initializer)
    tcc.compile(model, output=tmp_path / "m.tvmpack")
    crt = CRuntime(build / "libtccrt.so")
    m = crt.load(tmp_path / "m.tvmpack")
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((64 + 32 * k, 256)).astype(np.float32) for k in range(4)]
    wrong = []

    def work(x):
        want = np.tanh(x @ w1) @ w2
        for _ in range(30):
            (y,) = m.run("main", [x])
            if not np.allclose(y, want, rtol=1e-4, atol=1e-3):
                wrong.append(float(np.abs(y - want).max()))

    threads = [threading.Thread(target=work, args=(x,)) for x in xs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    m.close()
    assert not wrong, f"{len(wrong)} runs gave another result (largest error {max(wrong)})"
