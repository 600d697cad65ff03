"""CUDA packs without a GPU: `tcc compile --target cuda` writes them, tcc.rt.cuda runs them
through a stand-in for the driver (tests/rt/fake_libcuda.c, which runs the pack's own CUDA
source compiled for this CPU, thread after thread), and the results match onnxruntime. No
driver, no device, or a device the pack has no code for is a one-line error, and damage to
the launch specs is a PackError naming the file."""

from __future__ import annotations

import ctypes
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import tcc.rt
from tcc.api import compile_to_bytes
from tcc.cli.main import cli
from tcc.rt.cuda import pick_binary
from tcc.rt.errors import KernelError, PackError
from tests.emit import cuda_on_host
from tests.rt.test_pack import expect_error, rewrite

pytestmark = cuda_on_host.NEEDS_STAND_IN


def _model() -> onnx.ModelProto:
    """A small CNN head and a normalized projection: convolution with padding, pooling, a
    whole-map mean, a matrix product with bias, softmax and layer norm, over a symbolic
    batch."""
    rng = np.random.default_rng(0)

    def const(name, *shape):
        return onnx.numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "gw", "gb"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
        helper.make_node("LayerNormalization", ["logits", "ls", "lb"], ["normed"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 5]),
         helper.make_tensor_value_info("normed", TensorProto.FLOAT, ["batch", 5])],
        [const("cw", 4, 3, 3, 3), const("cb", 4), const("gw", 4, 5), const("gb", 5),
         const("ls", 5), const("lb", 5)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _reductions() -> onnx.ModelProto:
    """Long reductions, which the cross-thread rule gives a block of threads per output
    (partials in shared memory, a barrier): softmax and layer norm over rows of 320, and a
    global average pool over 14 x 14 maps."""
    rng = np.random.default_rng(1)
    scale, bias = (onnx.numpy_helper.from_array(rng.standard_normal(320).astype(np.float32), n)
                   for n in ("ls", "lb"))
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["probs"], axis=-1),
         helper.make_node("LayerNormalization", ["x", "ls", "lb"], ["normed"], axis=-1),
         helper.make_node("GlobalAveragePool", ["maps"], ["pooled"])],
        "reductions",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6, 320]),
         helper.make_tensor_value_info("maps", TensorProto.FLOAT, ["batch", 3, 14, 14])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("probs", "normed", "pooled")],
        [scale, bias])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _whole() -> onnx.ModelProto:
    """Reductions of a whole tensor into a scalar: one block of threads each."""
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["grid"], ["total"], keepdims=0),
         helper.make_node("ReduceMax", ["grid"], ["peak"], keepdims=0)],
        "whole",
        [helper.make_tensor_value_info("grid", TensorProto.FLOAT, [40, 96])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, []) for n in ("total", "peak")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _products() -> onnx.ModelProto:
    """Matrix products the tiling rule gives shared-memory tiles: a projection with bias
    and ReLU over a symbolic batch of 20-row sequences, and attention's scores against a
    transposed key."""
    rng = np.random.default_rng(2)
    w, b = (onnx.numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
            for n, s in (("w", (40, 48)), ("b", (48,))))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]),
         helper.make_node("Add", ["xw", "b"], ["xb"]),
         helper.make_node("Relu", ["xb"], ["projected"]),
         helper.make_node("Transpose", ["key"], ["key_t"], perm=[0, 1, 3, 2]),
         helper.make_node("MatMul", ["query", "key_t"], ["scores"])],
        "products",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 20, 40]),
         helper.make_tensor_value_info("query", TensorProto.FLOAT, ["batch", 2, 20, 16]),
         helper.make_tensor_value_info("key", TensorProto.FLOAT, ["batch", 2, 20, 16])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("projected", "scores")],
        [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _convolutions() -> onnx.ModelProto:
    """Convolutions the tiling rule gives shared-memory tiles of the input's window and the
    weights: a padded 3 x 3 conv with bias and ReLU, then a strided 1 x 1 conv, over a
    symbolic batch."""
    rng = np.random.default_rng(3)
    inits = [onnx.numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w3", (16, 8, 3, 3)), ("b3", (16,)), ("w1", (24, 16, 1, 1)))]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w3", "b3"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Conv", ["r", "w1"], ["y"], strides=[2, 2])],
        "convolutions",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8, 12, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 24, 6, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _build(folder, model) -> dict:
    onnx.save(model, folder / "m.onnx")
    data = compile_to_bytes(folder / "m.onnx", "cuda -arch=sm_80,sm_90")
    (folder / "m.tvmpack").write_bytes(data)
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        source = tf.extractfile("kernels/cuda.cu").read().decode()
    return {"folder": folder, "model": model, "pack": folder / "m.tvmpack", "data": data,
            "driver": cuda_on_host.build_fake_driver(folder),
            "kernels": cuda_on_host.build_packed(source, folder)}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The model, its CUDA pack, the stand-in driver and the pack's kernels built for it."""
    return _build(tmp_path_factory.mktemp("cuda"), _model())


@pytest.fixture(scope="module")
def reductions(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("cuda-reductions"), _reductions())


@pytest.fixture
def driver(built, monkeypatch, tmp_path):
    """The stand-in driver in place, logging to a file of this test's own."""
    log = tmp_path / "driver.log"
    monkeypatch.setenv("TCC_CUDA_DRIVER", str(built["driver"]))
    monkeypatch.setenv("TCC_FAKE_CUDA_KERNELS", str(built["kernels"]))
    monkeypatch.setenv("TCC_FAKE_CUDA_LOG", str(log))
    monkeypatch.delenv("TCC_FAKE_CUDA_ARCH", raising=False)
    monkeypatch.delenv("TCC_FAKE_CUDA_DEVICES", raising=False)
    monkeypatch.delenv("TCC_FAKE_CUDA_NO_GPU", raising=False)
    return log


def _reference(model, x, **more):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x, **more})


def test_the_pack_holds_a_cubin_per_arch_ptx_and_the_source_and_is_deterministic(built, tmp_path):
    with tarfile.open(fileobj=io.BytesIO(built["data"])) as tf:
        names = tf.getnames()
        manifest = json.loads(tf.extractfile("manifest.json").read())
    assert {"kernels/cuda.sm_80.cubin", "kernels/cuda.sm_90.cubin",
            "kernels/cuda.compute_90.ptx", "kernels/cuda.cu"} <= set(names)
    assert not any(n.endswith((".o", ".so")) for n in names)
    library = manifest["device_kernels"]["cuda"]
    assert library["target"] == manifest["target"]
    assert library["target"].startswith("cuda -arch=sm_80,sm_90")
    assert sorted(library["kernels"]) == manifest["kernels"]["symbols"]
    onnx.save(built["model"], tmp_path / "again.onnx")
    assert compile_to_bytes(tmp_path / "again.onnx", "cuda -arch=sm_80,sm_90") == built["data"]


@pytest.mark.parametrize("batch", [1, 3])
def test_a_cuda_pack_runs_through_the_driver_and_matches_onnxruntime(built, driver, batch):
    x = np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)
    with tcc.rt.load(built["pack"]) as m:
        got = m.main(x)
        again = m.main(x)  # the second run reuses the pooled buffers and uploaded weights
    for g, a, want in zip(got, again, _reference(built["model"], x)):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(g, a)
    log = driver.read_text().splitlines()
    assert log[0] == "load cubin"
    launched = {line.split()[1] for line in log if line.startswith("launch ")}
    with tarfile.open(fileobj=io.BytesIO(built["data"])) as tf:
        spec = json.loads(tf.extractfile("manifest.json").read())["device_kernels"]["cuda"]
    assert launched == {launch["function"] for k in spec["kernels"].values()
                        for launch in k["launches"]}


@pytest.mark.parametrize("batch", [1, 2])
def test_blocks_of_threads_sharing_memory_run_phase_by_phase_and_match(reductions, monkeypatch,
                                                                       driver, batch):
    monkeypatch.setenv("TCC_FAKE_CUDA_KERNELS", str(reductions["kernels"]))
    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, 6, 320)).astype(np.float32)
    maps = rng.standard_normal((batch, 3, 14, 14)).astype(np.float32)
    with tcc.rt.load(reductions["pack"]) as m:
        got = m.main(x, maps)
    for g, want in zip(got, _reference(reductions["model"], x, maps=maps)):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)
    blocks = [line.split() for line in driver.read_text().splitlines() if line.startswith("launch")]
    assert any(int(b[5]) > 1 and int(b[2]) == batch * 6 for b in blocks)  # a block per row


def test_a_whole_tensor_reduces_in_one_block_of_threads(tmp_path, driver, monkeypatch):
    built = _build(tmp_path, _whole())
    monkeypatch.setenv("TCC_FAKE_CUDA_KERNELS", str(built["kernels"]))
    grid = np.random.default_rng(3).standard_normal((40, 96)).astype(np.float32)
    with tcc.rt.load(built["pack"]) as m:
        total, peak = m.main(grid)
    assert float(peak) == float(grid.max())  # a max regroups exactly
    np.testing.assert_allclose(total, grid.astype(np.float64).sum(), rtol=1e-5, atol=1e-4)
    blocks = [line.split() for line in driver.read_text().splitlines() if line.startswith("launch")]
    assert len(blocks) == 2 and all(b[2:5] == ["1", "1", "1"] and int(b[5]) > 1 for b in blocks)


@pytest.mark.parametrize("batch", [1, 2])
def test_tiled_matrix_products_run_phase_by_phase_and_match(tmp_path, driver, monkeypatch, batch):
    built = _build(tmp_path, _products())
    monkeypatch.setenv("TCC_FAKE_CUDA_KERNELS", str(built["kernels"]))
    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, 20, 40)).astype(np.float32)
    query, key = rng.standard_normal((2, batch, 2, 20, 16)).astype(np.float32)
    with tcc.rt.load(built["pack"]) as m:
        got = m.main(x, query, key)
    for g, want in zip(got, _reference(built["model"], x, query=query, key=key)):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)
    blocks = [line.split() for line in driver.read_text().splitlines() if line.startswith("launch")]
    products = [b for b in blocks if "matmul" in b[1]]
    # a block of threads on both axes, 4 x 4 outputs a thread: 16 threads (x) for 48
    # columns, 8 (y, x) for 20 rows or columns
    assert [b[5:7] for b in products] == [["16", "8"], ["8", "8"]], blocks


@pytest.mark.parametrize("batch", [1, 2])
def test_tiled_convolutions_run_phase_by_phase_and_match(tmp_path, driver, monkeypatch, batch):
    built = _build(tmp_path, _convolutions())
    monkeypatch.setenv("TCC_FAKE_CUDA_KERNELS", str(built["kernels"]))
    x = np.random.default_rng(batch).standard_normal((batch, 8, 12, 20)).astype(np.float32)
    with tcc.rt.load(built["pack"]) as m:
        (got,) = m.main(x)
    np.testing.assert_allclose(got, _reference(built["model"], x)[0], rtol=1e-4, atol=1e-4)
    blocks = [line.split() for line in driver.read_text().splitlines() if line.startswith("launch")]
    # the 3 x 3 conv: threads along columns, rows and output channels (16 x 4 x 4)
    assert any(b[5:8] == ["16", "4", "4"] for b in blocks if "conv" in b[1]), blocks


def test_tensors_stay_on_the_device_between_kernels(built, driver):
    """Only the input goes to the device and the two outputs come back on each run; the
    weights go over once, on the first; every intermediate stays in GPU memory."""
    x = np.ones((2, 3, 8, 8), np.float32)
    with tcc.rt.load(built["pack"]) as m:
        m.main(x)
        first = driver.read_text().splitlines()
        m.main(x)
        second = driver.read_text().splitlines()[len(first):]
    from tcc.rt.pack import read_pack

    with read_pack(built["pack"]) as contents:
        weights = len(contents.weights)
    assert first.count("copy to-device") == 1 + weights and first.count("copy to-host") == 2
    assert second.count("copy to-device") == 1 and second.count("copy to-host") == 2
    assert sum(line.startswith("launch") for line in second) >= 5


class _GpuTensor:
    """A DLPack producer claiming CUDA device 0 for a numpy array's memory, as torch does
    for a tensor on the GPU: the stand-in driver's device memory is host memory."""

    def __init__(self, a: np.ndarray, device=(2, 0), strides=None):
        from tcc.rt.cuda import DLManagedTensor

        self.array, self.device, self.deleted = a, device, []
        self._shape = (ctypes.c_int64 * a.ndim)(*a.shape)
        self._strides = None if strides is None else (ctypes.c_int64 * a.ndim)(*strides)
        self._managed = DLManagedTensor()
        t = self._managed.dl_tensor
        t.data, t.ndim, t.shape = a.ctypes.data, a.ndim, self._shape
        t.device.device_type, t.device.device_id = device
        t.dtype.code, t.dtype.bits, t.dtype.lanes = 2, 32, 1
        if self._strides is not None:
            t.strides = self._strides
        deleter_type = DLManagedTensor._fields_[2][1]
        self._deleter = deleter_type(lambda m: self.deleted.append(True))
        self._managed.deleter = self._deleter
        self.streams = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self._managed), b"dltensor", None)


def test_a_gpu_tensor_goes_in_through_dlpack_without_a_copy(built, driver):
    x = np.random.default_rng(7).standard_normal((2, 3, 8, 8)).astype(np.float32)
    tensor = _GpuTensor(x)
    with tcc.rt.load(built["pack"]) as m:
        m.main(x)  # the weights go over on the first run
        before = len(driver.read_text().splitlines())
        got = m.main(tensor)
        log = driver.read_text().splitlines()[before:]
    assert log.count("copy to-device") == 0 and log.count("copy to-host") == 2
    for g, want in zip(got, _reference(built["model"], x)):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)
    assert tensor.streams and all(s not in (None, 0) for s in tensor.streams)
    import gc

    gc.collect()
    assert tensor.deleted  # the producer's memory was handed back


def test_outputs_stay_on_the_gpu_and_go_back_in_through_dlpack(reductions, driver, monkeypatch):
    """`on_device` leaves the outputs in GPU memory. Given back as an input (as torch
    would pass a tensor it took with from_dlpack), one goes through DLPack without a
    copy either way; np.asarray copies it to the host; every capsule is released."""
    monkeypatch.setenv("TCC_FAKE_CUDA_KERNELS", str(reductions["kernels"]))
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 6, 320)).astype(np.float32)
    maps = rng.standard_normal((2, 3, 14, 14)).astype(np.float32)
    with tcc.rt.load(reductions["pack"]) as m:
        m.main(x, maps)  # the weights go over on the first run
        before = len(driver.read_text().splitlines())
        probs, normed, pooled = m.main.on_device(x, maps)
        assert probs.__dlpack_device__() == (2, 0) and probs.shape == (2, 6, 320)
        again = m.main.on_device(probs, maps)  # softmax of the softmax
        log = driver.read_text().splitlines()[before:]
        assert log.count("copy to-host") == 0 and log.count("copy to-device") == 3  # x, maps, maps
        host = np.asarray(probs)
        want = _reference(reductions["model"], host, maps=maps)
        for g, w in zip(again, want):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-5)
        with tcc.rt.load(_cpu_pack(reductions)) as cpu, \
                pytest.raises(tcc.rt.RunInputError, match="the pack runs on the CPU"):
            cpu.main.on_device(x, maps)
    from tcc.rt.cuda import _EXPORTED

    del probs, normed, pooled, again
    import gc

    gc.collect()
    assert not _EXPORTED


def test_a_capsule_nobody_consumes_is_released_after_one_was_taken_in(reductions, driver,
                                                                     monkeypatch):
    """Taking a tensor in through DLPack and handing one out that nobody consumes use the
    same C functions with other argument types: each keeps its own prototype, so the
    unconsumed capsule is still released."""
    monkeypatch.setenv("TCC_FAKE_CUDA_KERNELS", str(reductions["kernels"]))
    from tcc.rt.cuda import _EXPORTED

    x = np.ones((1, 6, 320), np.float32)
    maps = np.ones((1, 3, 14, 14), np.float32)
    with tcc.rt.load(reductions["pack"]) as m:
        probs, normed, pooled = m.main.on_device(x, maps)
        capsule = normed.__dlpack__()  # handed out, never consumed
        m.main(probs, maps)  # probs in through DLPack: its capsule is consumed here
        assert _EXPORTED
        del capsule
        del probs, normed, pooled
    import gc

    gc.collect()
    assert not _EXPORTED


def _cpu_pack(built) -> Path:
    path = built["folder"] / "cpu.tvmpack"
    path.write_bytes(compile_to_bytes(built["folder"] / "m.onnx", "llvm"))
    return path


@pytest.mark.parametrize("device, strides, words", [
    ((2, 1), None, "is on DLPack device 2:1; pass a numpy array or a tensor on CUDA device 0"),
    ((2, 0), (1, 2, 6, 48), "is not contiguous; pass x.contiguous()"),
])
def test_a_gpu_tensor_on_another_gpu_or_not_contiguous_is_one_line(built, driver, device,
                                                                   strides, words):
    x = np.zeros((2, 3, 8, 8), np.float32)
    with tcc.rt.load(built["pack"]) as m:
        with pytest.raises(tcc.rt.RunInputError, match=words):
            m.main(_GpuTensor(x, device, strides))


def test_a_float16_model_compiles_with_the_runtime_headers_and_matches_the_cpu_target(
        driver, tmp_path, monkeypatch):
    """float16 kernels include cuda_fp16.h, from the CUDA runtime wheel, and compute as the
    CPU target does (in float32, rounded to float16 where stored): the pack's results are
    the same model's compiled for the CPU within one float16 step (the CPU's exp is its own
    polynomial, the stand-in's libm's; the stand-in runs __half as GCC's _Float16)."""
    from tcc.emit.nvrtc import runtime_include

    if runtime_include() is None:
        pytest.skip("nvidia-cuda-runtime-cu12 (cuda_fp16.h) is not installed")
    half = TensorProto.FLOAT16
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Softmax", ["r"], ["y"], axis=-1), helper.make_node("Exp", ["a"], ["e"])],
        "half",
        [helper.make_tensor_value_info("a", half, ["n", 16]),
         helper.make_tensor_value_info("b", half, [16, 8])],
        [helper.make_tensor_value_info("y", half, ["n", 8]),
         helper.make_tensor_value_info("e", half, ["n", 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    built = _build(tmp_path, model)
    monkeypatch.setenv("TCC_FAKE_CUDA_KERNELS", str(built["kernels"]))
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((3, 16)) / 4).astype(np.float16)
    b = (rng.standard_normal((16, 8)) / 4).astype(np.float16)
    with tcc.rt.load(built["pack"]) as m:
        got = m.main(a, b)
    with tcc.rt.load(_cpu_pack(built)) as cpu:
        want = cpu.main(a, b)
    for g, w in zip(got, want):
        assert g.dtype == np.float16
        np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=2e-3, atol=1e-4)


def test_the_profile_times_each_kernel_on_the_gpu(built, driver):
    """A kernel's time is the GPU's between CUDA events around its launches (the stand-in
    driver's events read the host's clock); every kernel of the pack has a row."""
    from tcc.rt.pack import read_pack

    x = np.ones((2, 3, 8, 8), np.float32)
    with tcc.rt.load(built["pack"]) as m:
        rows = m.profile("main", [x], runs=2)
    with read_pack(built["pack"]) as contents:
        symbols = set(contents.device_kernels["cuda"])
    kernels = {r.name: r for r in rows if r.kind == "kernel"}
    assert set(kernels) == symbols
    assert all(r.total_ms > 0 and r.calls == 1 for r in kernels.values())
    r = CliRunner().invoke(cli, ["run", str(built["pack"]), "--random-inputs", "--shape",
                                 "x=1,3,8,8", "--profile"])
    assert r.exit_code == 0 and "softmax_kernel" in r.output, r.output


def test_one_pack_runs_at_two_batch_sizes_and_through_the_cli(built, driver, tmp_path):
    for batch in (2, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)
        np.save(tmp_path / "x.npy", x)
        r = CliRunner().invoke(cli, ["run", str(built["pack"]), "--input", f"x={tmp_path / 'x.npy'}",
                                     "--output-dir", str(tmp_path / f"out{batch}")])
        assert r.exit_code == 0, r.output
        want = _reference(built["model"], x)
        for name, w in zip(("probs", "normed"), want):
            np.testing.assert_allclose(np.load(tmp_path / f"out{batch}" / f"{name}.npy"), w,
                                       rtol=1e-4, atol=1e-5)


def test_a_gpu_newer_than_every_cubin_runs_the_ptx(built, driver, monkeypatch):
    monkeypatch.setenv("TCC_FAKE_CUDA_ARCH", "120")
    x = np.ones((1, 3, 8, 8), np.float32)
    with tcc.rt.load(built["pack"]) as m:
        got = m.main(x)
    assert driver.read_text().splitlines()[0] == "load ptx"
    np.testing.assert_allclose(got[0], _reference(built["model"], x)[0], rtol=1e-4, atol=1e-5)


def test_the_binary_for_a_gpu_is_its_generations_newest_cubin_else_ptx():
    have = {"sm_80": b"", "sm_86": b"", "sm_90": b"", "compute_90": b""}
    assert pick_binary(have, 80) == "sm_80"
    assert pick_binary(have, 87) == "sm_86"  # a cubin runs on later minor versions
    assert pick_binary(have, 90) == "sm_90"
    assert pick_binary(have, 100) == "compute_90"  # a new major version: the driver JITs PTX
    assert pick_binary(have, 75) is None
    assert pick_binary({"sm_90": b""}, 100) is None


@pytest.mark.parametrize("env, words", [
    ({"TCC_CUDA_DRIVER": "/nonexistent/libcuda.so.1"}, "no CUDA driver found: /nonexistent/libcuda.so.1"),
    ({"TCC_FAKE_CUDA_DEVICES": "0"}, "no CUDA device found"),
    ({"TCC_FAKE_CUDA_NO_GPU": "1"}, "no CUDA device found: the driver sees no GPU"),
    ({"TCC_FAKE_CUDA_ARCH": "75"}, "this GPU is sm_75; compile again with --target 'cuda -arch=sm_75'"),
])
def test_no_driver_no_device_or_no_code_for_the_gpu_is_one_line_exit_2(built, driver, monkeypatch,
                                                                       tmp_path, env, words):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(PackError, match=words) as info:
        tcc.rt.load(built["pack"])
    assert str(info.value).startswith(str(built["pack"])) and "\n" not in str(info.value)
    r = CliRunner().invoke(cli, ["run", str(built["pack"]), "--random-inputs", "--shape", "batch=1"])
    assert r.exit_code == 2 and words in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_a_kernel_given_the_wrong_shapes_refuses_before_launching(built, driver):
    from tcc.rt.cuda import load_cuda_library
    from tcc.rt.pack import read_pack

    with read_pack(built["pack"]) as contents:
        specs = contents.device_kernels["cuda"]
        symbol = next(s for s, k in specs.items()  # softmax's: (batch, 5) -> (batch, 5)
                      if [p["shape"][0] for p in k["params"]] == [2, 2])
        with load_cuda_library(contents.device_binaries["cuda"], specs) as lib:
            a = np.zeros((2, 5), np.float32)
            with pytest.raises(KernelError, match=f"{symbol}: argument 1 has shape"):
                lib.call(symbol, [a, np.zeros((3, 5), np.float32)])
            with pytest.raises(KernelError, match="expected 2 arguments"):
                lib.call(symbol, [a])
    assert not any(line.startswith("launch") for line in driver.read_text().splitlines())


def _edit_spec(edit):
    def edit_manifest(m):
        spec = m["device_kernels"]["cuda"]
        edit(spec, next(iter(spec["kernels"].values())))
    return edit_manifest


# Damage to a launch spec, and the words of the refusal (the C runtime's test reads these too).
DAMAGED_SPECS = [
    (lambda lib, k: k["launches"][0].update(block=[2048, 1, 1]), "has a malformed block"),
    (lambda lib, k: k["launches"][0].update(grid=[2, 2, 0, 1, 2, 0, 1]), "grid: malformed shape program"),
    (lambda lib, k: k["launches"][0].update(grid=[3, 2, 1, 7, 2, 0, 1, 2, 0, 1]),
     "pushes a bad operand"),
    (lambda lib, k: k.update(bind=[[0, 9]]), "reads a size variable from a bad place"),
    (lambda lib, k: k.update(writes=[99]), "writes a bad parameter"),
    (lambda lib, k: k["launches"][0].update(function="x; rm"), "malformed name"),
    (lambda lib, k: lib["binaries"].update(sm_x="kernels/cuda.sm_80.cubin"), "binary named 'sm_x'"),
    (lambda lib, k: lib["kernels"].update(stray=k), "kernel 'stray', which the kernel table lacks"),
]


@pytest.mark.parametrize("edit, match", DAMAGED_SPECS)
def test_damaged_launch_specs_are_pack_errors(built, tmp_path, edit, match):
    expect_error(tmp_path, rewrite(built["data"], edit_manifest=_edit_spec(edit)), match)


def test_a_device_kind_this_runtime_does_not_know_is_a_pack_error(built, tmp_path):
    def edit(m):
        m["device_kernels"]["rocm"] = m["device_kernels"]["cuda"]
    expect_error(tmp_path, rewrite(built["data"], edit_manifest=edit), "no kernels for device 'rocm'")
