"""A process that ran parallel kernels and then forks: the child's kernels must still run
(single-threaded: libgomp cannot restart its threads in a forked child) and give the same
results, instead of waiting forever."""

from __future__ import annotations

import os
import signal
import sys

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

import tcc


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform != "linux", reason="needs fork")
def test_parallel_kernels_run_in_a_forked_child():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, [256, 1024])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [256, 1024])])
    fn = tcc.compile_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    fn.module.set_num_threads(2)  # a big elementwise stage runs as a parallel loop
    x = np.random.default_rng(0).standard_normal((256, 1024)).astype(np.float32)
    want = fn(x)[0]
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only when the kernel ran and agreed
        signal.alarm(20)
        ok = False
        try:
            ok = np.array_equal(fn(x)[0], want)
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status}"
