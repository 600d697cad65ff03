"""Profiling packs: every kernel call is timed and named after the graph bindings (ONNX node
outputs) that call it; kernel origins travel in the manifest as an optional, checked field."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper

import tcc
import tcc.rt
from tcc.emit.pack import PackWriteError, pack_bytes
from tcc.emit.vm import compile_module
from tcc.lower.legalize import kernel_origins
from tcc.rt.format import FuncKind
from tcc.rt.pack import read_pack
from tcc.rt.vm import VirtualMachine
from tests.emit.test_pack_write import FakeCpuModule
from tests.emit.test_vm_compile import Contents, FakeLibrary, batch_module, if_module
from tests.rt.test_pack import expect_error, rewrite

BATCH_KERNELS = ["matmul", "add_one", "split_1_2"]


def small_model() -> onnx.ModelProto:
    """MatMul -> Add -> Relu -> MatMul -> Add -> Softmax; the two Adds share one kernel."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["sum"]),
        helper.make_node("Relu", ["sum"], ["act"]),
        helper.make_node("MatMul", ["act", "w2"], ["mm2"]),
        helper.make_node("Add", ["mm2", "b"], ["sum2"]),
        helper.make_node("Softmax", ["sum2"], ["y"], axis=-1),
    ]
    rng = np.random.default_rng(0)
    inits = [
        helper.make_tensor("w", TP.FLOAT, [8, 4], rng.standard_normal(32).astype(np.float32)),
        helper.make_tensor("w2", TP.FLOAT, [4, 4], rng.standard_normal(16).astype(np.float32)),
        helper.make_tensor("b", TP.FLOAT, [4], rng.standard_normal(4).astype(np.float32)),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, ["batch", 8])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, ["batch", 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def compiled():
    # unfused, so every ONNX node has a kernel of its own to name (fused kernels list every
    # node they merge: tests/lower/test_fuse_ops.py)
    fn = tcc.compile_onnx(small_model(), optimize=False)
    yield fn.module
    fn.module.close()


def _kernel_symbols(module) -> set[str]:
    return {name for kind, name in module.executable.table if kind == FuncKind.KERNEL}


def test_rows_cover_every_kernel_and_shares_add_up(compiled):
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    rows = compiled.profile("main", [x], runs=3)
    kernels = [r for r in rows if r.kind == "kernel"]
    assert {r.name for r in kernels} == _kernel_symbols(compiled)
    assert sum(r.share for r in rows) == pytest.approx(1.0)
    assert all(r.share >= 0 and r.total_ms >= 0 for r in rows)
    assert [r.share for r in rows] == sorted((r.share for r in rows), reverse=True)
    assert sum(r.calls for r in kernels) == 6  # per run, not summed over the runs
    assert {r.name for r in rows if r.kind == "builtin"} >= {"alloc", "shapes"}
    assert [r.name for r in rows if r.kind == "vm"] == ["interpreter"]
    for r in rows:
        assert r.mean_ms == pytest.approx(r.total_ms / r.calls)


def test_origins_name_the_onnx_outputs(compiled):
    origins = {r.name: r.origins for r in compiled.profile("main", [np.ones((2, 8), np.float32)])
               if r.kind == "kernel"}
    by_first = {o[0]: o for o in origins.values()}
    assert by_first["sum"] == ("sum", "sum2")  # one shared add kernel, in order of use
    assert {o for o in origins.values() if len(o) == 1} == {("mm",), ("act",), ("mm2",), ("y",)}
    assert compiled.kernel_origins == {k: list(v) for k, v in origins.items()}


def test_profiling_keeps_the_results(compiled):
    x = np.random.default_rng(2).standard_normal((5, 8)).astype(np.float32)
    want = compiled.main(x)[0]
    compiled.profile("main", {"x": x}, runs=2, warmup=0)
    np.testing.assert_array_equal(compiled.main(x)[0], want)
    with pytest.raises(ValueError, match="runs >= 1"):
        compiled.profile("main", [x], runs=0)


def test_vm_profile_api_with_numpy_kernels(tmp_path):
    mod = batch_module()
    exe = compile_module(mod)
    assert exe.kernel_origins == {"matmul": ["y"], "add_one": ["z"], "split_1_2": ["t"]}
    plain = VirtualMachine(Contents(exe, mod.const_values), FakeLibrary())
    assert plain.profile is None
    with pytest.raises(ValueError, match="profile=True"):
        plain.profile_rows()
    vm = VirtualMachine(Contents(exe, mod.const_values), FakeLibrary(), profile=True)
    assert vm.profile_rows() == []
    for _ in range(4):
        vm.run("main", [np.ones((2, 4), np.float32)])
    rows = {(r.kind, r.name): r for r in vm.profile_rows()}
    assert rows["kernel", "matmul"].origins == ("y",) and rows["kernel", "matmul"].calls == 1
    assert rows["builtin", "views"].calls == 1 and rows["builtin", "tuples"].calls >= 1
    assert sum(r.share for r in rows.values()) == pytest.approx(1.0)


def test_origins_include_every_graph_function():
    mod = if_module()
    assert kernel_origins(mod) == {"add_one": ["r"], "negate": ["r"]}
    exe = compile_module(mod, symbols={"add_one": "add_one_v2"})
    assert exe.kernel_origins == {"add_one_v2": ["r"], "negate": ["r"]}


def _pack(tmp_path, **kw):
    mod = batch_module()
    path = tmp_path / "m.tvmpack"
    path.write_bytes(pack_bytes(compile_module(mod), FakeCpuModule(BATCH_KERNELS), "llvm",
                                mod.const_values, **kw))
    return path


def test_origins_round_trip_and_can_be_overridden(tmp_path):
    with read_pack(_pack(tmp_path)) as pc:
        assert pc.kernel_origins == {"add_one": ["z"], "matmul": ["y"], "split_1_2": ["t"]}
    with read_pack(_pack(tmp_path, kernel_origins={"matmul": ["conv0", "conv1"]})) as pc:
        assert pc.kernel_origins == {"matmul": ["conv0", "conv1"]}
    with pytest.raises(PackWriteError, match="kernel library lacks: nope"):
        _pack(tmp_path, kernel_origins={"nope": ["a"]})


def test_old_pack_without_origins_loads_and_profiles(tmp_path):
    old = rewrite(_pack(tmp_path).read_bytes(), edit_manifest=lambda m: m.pop("kernel_origins"))
    path = tmp_path / "old.tvmpack"
    path.write_bytes(old)
    with tcc.rt.load(path, kernel_library=FakeLibrary()) as m:
        assert m.kernel_origins == {}
        rows = m.profile("main", [np.ones((3, 4), np.float32)])
        assert {r.name for r in rows if r.kind == "kernel"} == set(BATCH_KERNELS)
        assert all(r.origins == () for r in rows)


@pytest.mark.parametrize("origins, match", [
    ([], r"kernel_origins has the wrong type \(list\)"),
    ({"matmul": "y"}, r"kernel_origins of 'matmul' has the wrong type \(str\)"),
    ({"matmul": ["y", 3]}, r"an origin of 'matmul' has the wrong type \(int\)"),
    ({"conv": ["y"]}, r"kernel_origins names kernel 'conv', which the kernel table lacks"),
])
def test_malformed_origins_are_pack_errors(tmp_path, origins, match):
    def edit(m):
        m["kernel_origins"] = origins

    expect_error(tmp_path, rewrite(_pack(tmp_path).read_bytes(), edit_manifest=edit), match)
