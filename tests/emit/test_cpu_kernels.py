"""A model's kernels compiled apart, in parallel and through the compile cache: the same
object code and shared object whichever way each kernel was obtained, and the same results
as the kernels compiled in one LLVM module."""

from __future__ import annotations

import subprocess

import numpy as np
from onnx import TensorProto as TP
from onnx import helper

import tcc.rt
from tcc.api import compile_to_bytes, lower
from tcc.emit.cpu_kernels import compile_kernels
from tcc.emit.llvm import compile_prim_funcs
from tcc.emit.object_cache import ObjectCache
from tcc.frontend.onnx import from_onnx
from tcc.lower.passes import run_pipeline
from tcc.lower.rules import schedule_module
from tcc.target import host_target


def _model():
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("Softmax", ["r"], ["s"], axis=-1),
             helper.make_node("ReduceSum", ["s", "axes"], ["y"], keepdims=0)]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TP.FLOAT, None)],
        [helper.make_tensor("w", TP.FLOAT, [64, 48], rng.standard_normal(64 * 48).tolist()),
         helper.make_tensor("axes", TP.INT64, [1], [0])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _lowered():
    return lower(run_pipeline(from_onnx(_model()), target=host_target()))


def test_kernels_from_the_cache_give_the_same_bytes_as_kernels_compiled_here(tmp_path):
    funcs = _lowered().prim_funcs
    assert len(funcs) >= 2
    cache = ObjectCache(tmp_path)
    cold = compile_kernels(funcs, host_target(), jobs=2, cache=cache)
    assert (cold.cached, cold.compiled) == (0, len(funcs))
    warm = compile_kernels(funcs, host_target(), jobs=2, cache=cache)
    assert (warm.cached, warm.compiled) == (len(funcs), 0)
    serial = compile_kernels(funcs, host_target(), jobs=1)  # no cache, in this process
    for other in (warm, serial):
        assert other.module.object_code == cold.module.object_code
        assert other.module.shared_object == cold.module.shared_object
        assert other.module.symbols == tuple(sorted(funcs))
    # a damaged entry is compiled again, to the same bytes
    entry = next(p for p in tmp_path.rglob("*") if p.is_file())
    entry.write_bytes(entry.read_bytes()[:-1])
    again = compile_kernels(funcs, host_target(), jobs=2, cache=cache)
    assert (again.cached, again.compiled) == (len(funcs) - 1, 1)
    assert again.module.shared_object == cold.module.shared_object


def test_a_pack_of_kernels_compiled_apart_computes_the_model(tmp_path):
    rng = np.random.default_rng(0)
    w = np.asarray(rng.standard_normal(64 * 48), dtype=np.float64).astype(np.float32).reshape(64, 48)
    x = np.random.default_rng(1).standard_normal((7, 64)).astype(np.float32)
    r = np.maximum(x @ w, 0)
    e = np.exp(r - r.max(axis=-1, keepdims=True))
    want = (e / e.sum(axis=-1, keepdims=True)).sum(axis=0)
    packs = []
    for cache in (True, False):
        packs.append(compile_to_bytes(_model(), "llvm", cache=cache))
        (tmp_path / "m.tvmpack").write_bytes(packs[-1])
        with tcc.rt.load(tmp_path / "m.tvmpack") as m:
            np.testing.assert_allclose(m["main"](x)[0], want, rtol=1e-5, atol=1e-6)
    assert packs[0] == packs[1]


def test_the_runtime_state_is_one_hidden_copy_per_shared_object(tmp_path):
    lowered = _lowered()
    apart = compile_kernels(lowered.prim_funcs, host_target(), jobs=2).module
    whole = compile_prim_funcs(schedule_module(lowered, host_target()).prim_funcs, host_target())
    assert apart.symbols == whole.symbols
    so = tmp_path / "k.so"
    so.write_bytes(apart.shared_object)
    exported = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True,
                              text=True, check=True).stdout
    assert "tcc_last_error" in exported and "tcc_set_num_threads" in exported
    assert "tcc_error_buffer" not in exported and "tcc_num_threads" not in exported
