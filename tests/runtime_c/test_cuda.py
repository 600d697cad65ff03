"""CUDA packs in the C runtime, without a GPU.

tccrt opens the CUDA driver with dlopen (here the stand-in tests/rt/fake_libcuda.c, named by
$TCC_CUDA_DRIVER, which runs the pack's own CUDA source built for this CPU), keeps the VM's
tensors in the driver's memory and launches each kernel's launches on one stream. Its outputs
are tcc.rt's bit for bit (the same kernels through the same driver) and onnxruntime's within
tolerance, at two batch sizes from one pack, shared-memory reductions, tiled matrix
products and tiled convolutions included. What the host reads of a device tensor (a loop's trip count, an `If`
condition, a shape given as a tensor, a loop's scan outputs) comes back when it is read. No
driver, no device or no code for the device is one line, exit 2.
"""

from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import tcc.rt
from tcc.cli.main import cli
from tests.emit import cuda_on_host
from tests.rt.test_cuda import (
    DAMAGED_SPECS,
    _build,
    _convolutions,
    _edit_spec,
    _model,
    _products,
    _reductions,
)
from tests.rt.test_pack import expect_error, rewrite
from tests.runtime_c.capi import CRuntime, build_runtime
from tests.runtime_c.test_run import (
    SANITIZE,
    SANITIZER_ENV,
    assert_refused,
    assert_same_bits,
    input_args,
    read_outputs,
    tccrt,
)

pytestmark = [
    *cuda_on_host.NEEDS_STAND_IN,
    pytest.mark.skipif(shutil.which("cc") is None or shutil.which("make") is None, reason="needs cc and make"),
]


def _control_flow() -> onnx.ModelProto:
    """A shape given as an input tensor (Reshape), a Loop whose trip count is an input and
    whose scan outputs stack up, and an If on a condition a kernel computes: each is read by
    the host from a tensor in device memory."""
    f, i64, b = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
    body = helper.make_graph(
        [helper.make_node("Mul", ["acc_in", "w"], ["m"]), helper.make_node("Tanh", ["m"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["step"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", i64, []), helper.make_tensor_value_info("cond_in", b, []),
         helper.make_tensor_value_info("acc_in", f, ["n", 4])],
        [helper.make_tensor_value_info("cond_out", b, []), helper.make_tensor_value_info("acc_out", f, ["n", 4]),
         helper.make_tensor_value_info("step", f, ["n", 4])])
    then_branch = helper.make_graph([helper.make_node("Neg", ["final"], ["t"])], "then", [],
                                    [helper.make_tensor_value_info("t", f, ["n", 4])])
    else_branch = helper.make_graph([helper.make_node("Exp", ["final"], ["e"])], "else", [],
                                    [helper.make_tensor_value_info("e", f, ["n", 4])])
    constants = [onnx.numpy_helper.from_array(np.linspace(0.5, 1.5, 4).astype(np.float32), "w"),
                 onnx.numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
                 onnx.numpy_helper.from_array(np.array(True), "true")]
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["r"]),
         helper.make_node("Loop", ["trips", "true", "r"], ["final", "steps"], body=body),
         helper.make_node("ReduceSum", ["final"], ["total"], keepdims=0),
         helper.make_node("Greater", ["total", "zero"], ["positive"]),
         helper.make_node("If", ["positive"], ["chosen"], then_branch=then_branch, else_branch=else_branch)],
        "control",
        [helper.make_tensor_value_info("x", f, ["a", "b"]), helper.make_tensor_value_info("shape", i64, [2]),
         helper.make_tensor_value_info("trips", i64, [])],
        [helper.make_tensor_value_info("chosen", f, None), helper.make_tensor_value_info("steps", f, None)],
        constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _head_feeds(batch, rng):
    return {"x": rng.standard_normal((batch, 3, 8, 8)).astype(np.float32)}


def _reduction_feeds(batch, rng):
    return {"x": rng.standard_normal((batch, 6, 320)).astype(np.float32),
            "maps": rng.standard_normal((batch, 3, 14, 14)).astype(np.float32)}


def _product_feeds(batch, rng):
    query, key = rng.standard_normal((2, batch, 2, 20, 16)).astype(np.float32)
    return {"x": rng.standard_normal((batch, 20, 40)).astype(np.float32), "query": query, "key": key}


def _convolution_feeds(batch, rng):
    return {"x": rng.standard_normal((batch, 8, 12, 20)).astype(np.float32)}


def _control_feeds(batch, rng):
    return {"x": rng.standard_normal((batch, 8)).astype(np.float32),
            "shape": np.array([2 * batch, 4]), "trips": np.array(batch + 1)}


MODELS = {"head": (_model, _head_feeds), "reductions": (_reductions, _reduction_feeds),
          "products": (_products, _product_feeds), "convolutions": (_convolutions, _convolution_feeds),
          "control": (_control_flow, _control_feeds)}


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return build_runtime(tmp_path_factory.mktemp("tccrt-build"))


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    """Each model's CUDA pack, its kernels built for the stand-in driver, once."""
    made = {}

    def get(name: str) -> dict:
        if name not in made:
            made[name] = _build(tmp_path_factory.mktemp(f"cuda-{name}"), MODELS[name][0]())
        return made[name]
    return get


def _driver_env(built: dict, log=None, **more) -> dict[str, str]:
    env = {"TCC_CUDA_DRIVER": str(built["driver"]), "TCC_FAKE_CUDA_KERNELS": str(built["kernels"]),
           **{k: str(v) for k, v in more.items()}}
    if log is not None:
        env["TCC_FAKE_CUDA_LOG"] = str(log)
    return env


@pytest.fixture
def on_driver(monkeypatch):
    """Put a pack's stand-in driver in this process's environment (for tcc.rt, the C
    library loaded in-process and `tcc run`)."""
    for key in ("TCC_FAKE_CUDA_ARCH", "TCC_FAKE_CUDA_DEVICES", "TCC_FAKE_CUDA_NO_GPU", "TCC_FAKE_CUDA_LOG"):
        monkeypatch.delenv(key, raising=False)

    def use(built: dict, log=None, **more) -> None:
        for key, value in _driver_env(built, log, **more).items():
            monkeypatch.setenv(key, value)
    return use


def output_names(pack) -> list[str]:
    """The entry function's outputs, from the manifest (no driver needed)."""
    from tcc.rt.pack import read_pack

    with read_pack(pack) as contents:
        return [o["name"] for o in contents.signatures["main"]["outputs"]]


def _reference(model, feeds):
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("name", list(MODELS))
def test_tccrt_runs_a_cuda_pack_as_tcc_rt_does_and_matches_onnxruntime(build, packs, on_driver, tmp_path, name):
    built = packs(name)
    on_driver(built)
    make_feeds = MODELS[name][1]
    for batch in (2, 3):  # one pack, two shapes
        feeds = make_feeds(batch, np.random.default_rng(batch))
        d = tmp_path / f"batch{batch}"
        r = tccrt(build, "run", built["pack"], *input_args(d, feeds), "--output-dir", d / "out",
                  env=_driver_env(built))
        assert r.returncode == 0, r.stderr
        got = read_outputs(d / "out", output_names(built["pack"]))
        with tcc.rt.load(built["pack"]) as m:
            assert_same_bits(got, m.main(feeds))
        for g, want in zip(got, _reference(built["model"], feeds)):
            np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)


def test_tensors_stay_in_device_memory_between_kernels(build, packs, on_driver, tmp_path):
    """The weights go over once, when the module loads; each run copies its input over and
    its two outputs back, and every tensor between kernels stays in device memory."""
    built = packs("head")
    log = tmp_path / "driver.log"
    on_driver(built, log)
    module = CRuntime(build / "libtccrt.so").load(built["pack"])
    loaded = log.read_text().splitlines()
    x = np.ones((2, 3, 8, 8), np.float32)
    module.run("main", [x])
    first = log.read_text().splitlines()[len(loaded):]
    module.run("main", [x])
    second = log.read_text().splitlines()[len(loaded) + len(first):]
    module.close()
    from tcc.rt.pack import read_pack

    with read_pack(built["pack"]) as contents:
        weights = len(contents.weights)
    assert loaded[0] == "load cubin" and loaded.count("copy to-device") == weights
    for run in (first, second):
        assert run.count("copy to-device") == 1 and run.count("copy to-host") == 2, run
        assert sum(line.startswith("launch ") for line in run) >= 5


def test_the_profile_gives_every_gpu_kernel_a_row(build, packs, on_driver, tmp_path):
    built = packs("head")
    on_driver(built)
    from tcc.rt.pack import read_pack

    with read_pack(built["pack"]) as contents:
        symbols = set(contents.device_kernels["cuda"])
    feeds = _head_feeds(2, np.random.default_rng(0))
    r = tccrt(build, "run", built["pack"], *input_args(tmp_path, feeds), "--output-dir", tmp_path / "out",
              "--profile", env=_driver_env(built))
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if " kernel " in line]
    assert {row[-1] for row in rows} == symbols, r.stdout
    result = CliRunner().invoke(cli, ["run", str(built["pack"]), "--random-inputs", "--shape", "x=1,3,8,8",
                                      "--runtime", "c", "--profile"], env={"TCCRT": str(build / "tccrt")})
    assert result.exit_code == 0 and "softmax_kernel" in result.output, result.output


def test_a_gpu_newer_than_every_cubin_runs_the_ptx(build, packs, on_driver, tmp_path):
    built = packs("head")
    log = tmp_path / "driver.log"
    feeds = _head_feeds(1, np.random.default_rng(1))
    r = tccrt(build, "run", built["pack"], *input_args(tmp_path, feeds), "--output-dir", tmp_path / "out",
              env=_driver_env(built, log, TCC_FAKE_CUDA_ARCH=120))
    assert r.returncode == 0, r.stderr
    assert log.read_text().splitlines()[0] == "load ptx"
    got = read_outputs(tmp_path / "out", output_names(built["pack"]))
    np.testing.assert_allclose(got[0], _reference(built["model"], feeds)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("more, words", [
    ({"TCC_CUDA_DRIVER": "/nonexistent/libcuda.so.1"}, "no CUDA driver found: /nonexistent/libcuda.so.1"),
    ({"TCC_FAKE_CUDA_DEVICES": 0}, "no CUDA device found"),
    ({"TCC_FAKE_CUDA_NO_GPU": 1}, "no CUDA device found: the driver sees no GPU"),
    ({"TCC_FAKE_CUDA_ARCH": 75}, "this GPU is sm_75; compile again with --target 'cuda -arch=sm_75'"),
])
def test_no_driver_no_device_or_no_code_for_the_gpu_is_one_line_exit_2(build, packs, tmp_path, more,
                                                                       words):
    built = packs("head")
    env = {**_driver_env(built), **{k: str(v) for k, v in more.items()}}
    feeds = _head_feeds(1, np.random.default_rng(0))
    r = tccrt(build, "run", built["pack"], *input_args(tmp_path, feeds), "--output-dir", tmp_path / "out",
              env=env)
    line = assert_refused(r, words)
    assert line.startswith(f"error: {built['pack']}: ")
    assert not (tmp_path / "out").exists()  # nothing half-written
    result = CliRunner().invoke(cli, ["run", str(built["pack"]), "--random-inputs", "--shape", "x=1,3,8,8",
                                      "--runtime", "c"], env={**env, "TCCRT": str(build / "tccrt")})
    assert result.exit_code == 2 and words in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_the_same_tensors_in_and_out_with_the_c_library_in_process(build, packs, on_driver):
    """tccrt_module_run through the C API: host tensors in, host tensors out, as from a CPU
    pack; the module and its device memory are released without a leak (the sanitized run
    below checks that)."""
    built = packs("reductions")
    on_driver(built)
    feeds = _reduction_feeds(2, np.random.default_rng(5))
    module = CRuntime(build / "libtccrt.so").load(built["pack"])
    try:
        got = module.run("main", [feeds["x"], feeds["maps"]])
    finally:
        module.close()
    with tcc.rt.load(built["pack"]) as m:
        assert_same_bits(got, m.main(feeds))


def test_a_sanitized_tccrt_runs_a_cuda_pack_clean(packs, tmp_path_factory, tmp_path):
    """Under AddressSanitizer, UndefinedBehaviorSanitizer and LeakSanitizer: device tensors,
    the memory pool, host reads of device tensors and the driver's handles are all released."""
    sanitized = build_runtime(tmp_path_factory.mktemp("tccrt-asan"), SANITIZE)
    built = packs("control")
    env = {**SANITIZER_ENV, **_driver_env(built)}
    feeds = _control_feeds(2, np.random.default_rng(2))
    r = tccrt(sanitized, "run", built["pack"], *input_args(tmp_path, feeds), "--output-dir", tmp_path / "out",
              "--bench", "2", env=env)
    assert r.returncode == 0 and "ERROR" not in r.stderr and "runtime error" not in r.stderr, r.stderr
    got = read_outputs(tmp_path / "out", output_names(built["pack"]))
    for g, want in zip(got, _reference(built["model"], feeds)):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("edit, match", DAMAGED_SPECS)
def test_damaged_launch_specs_are_refused_as_tcc_rt_refuses_them(build, packs, tmp_path, edit, match):
    data = rewrite(packs("head")["data"], edit_manifest=_edit_spec(edit))
    said = expect_error(tmp_path, data, match)
    line = assert_refused(tccrt(build, "info", tmp_path / "bad.tvmpack"), match)
    assert line == f"error: {said}"


def test_a_pack_with_cpu_and_gpu_kernels_is_refused_in_one_line(build, packs, tmp_path):
    """tcc emits a pack's kernels for one target; a pack listing one kernel outside its GPU
    library is refused when loaded, not run with host memory handed to GPU kernels."""
    def move_one_to_the_cpu(m):
        kernels = m["device_kernels"]["cuda"]["kernels"]
        kernels.pop(sorted(kernels)[0])
    bad = tmp_path / "mixed.tvmpack"
    bad.write_bytes(rewrite(packs("head")["data"], edit_manifest=move_one_to_the_cpu))
    feeds = _head_feeds(1, np.random.default_rng(0))
    r = tccrt(build, "run", bad, *input_args(tmp_path, feeds), "--output-dir", tmp_path / "out",
              env=_driver_env(packs("head")))
    assert_refused(r, "has both CPU and GPU kernels")
