"""`tccrt run` and `tcc run --runtime c` (runtime_c/tools/): one pack per model with a symbolic
batch, run by the C runtime and by tcc.rt, must give the same bits, and match onnxruntime;
.npy inputs are read in every format version and dtype, and outputs written byte for byte as
numpy.save writes them; bad inputs are refused with one `error: ...` line and exit 2, also in
a build under AddressSanitizer and UndefinedBehaviorSanitizer."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import tcc
import tcc.rt
from tcc.cli.arrays_io import safe_file_names
from tcc.cli.main import cli
from tcc.rt import c_runtime
from tests.e2e.test_models import onnxruntime_outputs, token_inputs
from tests.models import builders
from tests.packs import compiled_pack
from tests.runtime_c.capi import build_runtime

HAVE_TOOLS = shutil.which("cc") is not None and shutil.which("make") is not None
pytestmark = pytest.mark.skipif(not HAVE_TOOLS, reason="needs cc and make")

RTOL, ATOL = 1e-3, 1e-4  # as tests/e2e/test_compiled_models.py
SANITIZE = "-fsanitize=address,undefined -fno-omit-frame-pointer"
SANITIZER_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
}
TRANSFORMERS = ("bert_encoder", "gpt2_decoder")


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    return build_runtime(tmp_path_factory.mktemp("tccrt-build"))


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory) -> Path:
    return build_runtime(tmp_path_factory.mktemp("tccrt-asan"), SANITIZE)


# -- models and packs -------------------------------------------------------------------------


def symbolic_batch(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with dimension 0 of its inputs and outputs named `batch`."""
    for vi in [*model.graph.input, *model.graph.output]:
        dim = vi.type.tensor_type.shape.dim[0]
        dim.Clear()
        dim.dim_param = "batch"
    return model


def every_dtype_model() -> onnx.ModelProto:
    """One input per dtype .npy carries (n elements each), each output computed from it; plus
    outputs whose names need the file-name rule ('/', a clash, '..', non-ASCII)."""
    types = {
        "b": TensorProto.BOOL,
        "i8": TensorProto.INT8,
        "u8": TensorProto.UINT8,
        "i16": TensorProto.INT16,
        "u16": TensorProto.UINT16,
        "i32": TensorProto.INT32,
        "u32": TensorProto.UINT32,
        "i64": TensorProto.INT64,
        "u64": TensorProto.UINT64,
        "f16": TensorProto.FLOAT16,
        "f32": TensorProto.FLOAT,
        "f64": TensorProto.DOUBLE,
    }
    nodes, inputs, outputs = [], [], []
    for name, t in types.items():
        inputs.append(helper.make_tensor_value_info(name, t, ["n"]))
        outputs.append(helper.make_tensor_value_info(f"{name}/out", t, ["n"]))
        op = "Not" if t == TensorProto.BOOL else "Add"
        nodes.append(helper.make_node(op, [name] * (1 if op == "Not" else 2), [f"{name}/out"]))
    for extra in ("f32_out", "..", "é"):
        outputs.append(helper.make_tensor_value_info(extra, TensorProto.FLOAT, ["n"]))
        nodes.append(helper.make_node("Neg", ["f32"], [extra]))
    graph = helper.make_graph(nodes, "every_dtype", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def load_model(name: str) -> onnx.ModelProto:
    if name in TRANSFORMERS:
        return getattr(builders, name)()  # batch and seq are symbolic already
    if name == "every_dtype":
        return every_dtype_model()
    return symbolic_batch(builders.light_model(name))


@pytest.fixture(scope="module")
def packs():
    """`packs(name)` -> (pack path, model): compiled on first use (tests/packs.py)."""
    cache = {}

    def get(name: str) -> tuple[Path, onnx.ModelProto]:
        if name not in cache:
            model = load_model(name)
            cache[name] = (compiled_pack(model), model)
        return cache[name]

    return get


def feeds_for(name: str, model: onnx.ModelProto, batch: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    names = [vi.name for vi in model.graph.input]
    if name in TRANSFORMERS:
        feeds = token_inputs(rng, batch, 8 * batch, vocab=100)
        return {k: v for k, v in feeds.items() if k in names}
    (image,) = model.graph.input
    shape = [batch] + [d.dim_value for d in image.type.tensor_type.shape.dim[1:]]
    return {image.name: rng.standard_normal(shape, dtype=np.float32)}


# -- running ----------------------------------------------------------------------------------


def tccrt(build: Path, *args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(build / "tccrt"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=None if env is None else {**os.environ, **env},
    )


def input_args(directory: Path, feeds: dict[str, np.ndarray]) -> list[str]:
    """Save each input as .npy in `directory`; the `--input NAME=PATH` arguments."""
    directory.mkdir(parents=True, exist_ok=True)
    args = []
    for i, (name, value) in enumerate(feeds.items()):
        np.save(directory / f"input{i}.npy", value)
        args += ["--input", f"{name}={directory / f'input{i}.npy'}"]
    return args


def output_names(pack: Path) -> list[str]:
    with tcc.rt.load(pack) as m:
        return [o["name"] for o in m.signature()["outputs"]]


def read_outputs(directory: Path, names: list[str]) -> list[np.ndarray]:
    return [np.load(directory / f"{f}.npy") for f in safe_file_names(names)]


def run_c(build: Path, pack: Path, feeds: dict, directory: Path, *extra) -> list[np.ndarray]:
    r = tccrt(
        build, "run", pack, *input_args(directory, feeds), "--output-dir", directory / "out", *extra
    )
    assert r.returncode == 0, r.stderr
    return read_outputs(directory / "out", output_names(pack))


def run_python(pack: Path, feeds: dict) -> list[np.ndarray]:
    with tcc.rt.load(pack) as m:
        return m["main"](feeds)


def assert_same_bits(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert (g.dtype, g.shape) == (w.dtype, w.shape), (
            f"output {i}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        )
        assert g.tobytes() == w.tobytes(), f"output {i}: max difference {np.max(np.abs(g - w))}"


def assert_close_to_onnxruntime(model, feeds, got: list[np.ndarray]) -> None:
    for g, w, vi in zip(got, onnxruntime_outputs(model, feeds), model.graph.output):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f"output {vi.name!r}")


def assert_refused(r: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 2 (never a signal), nothing on stdout, one `error:` line naming the problem."""
    assert r.returncode == 2, f"exit {r.returncode}: {r.stderr!r}"
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert r.stdout == ""
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


# -- (a) parity: the C runtime, tcc.rt and onnxruntime -------------------------------------------

# Two batch sizes each (bert runs through `tcc run` below).  shufflenet reshapes to a fixed
# batch of 1 inside the graph, so it runs twice at batch 1 and must refuse batch 2 (the test
# after this one).  resnet50 is left out: its compile alone takes 9-13 s on a busy 2-core CI.
SIZES = {"gpt2_decoder": (1, 3), "squeezenet": (1, 2), "shufflenet": (1, 1)}


@pytest.mark.parametrize("name", list(SIZES))
def test_tccrt_matches_python_runtime_bit_for_bit(build, packs, tmp_path, name):
    pack, model = packs(name)
    for seed, batch in enumerate(SIZES[name]):
        feeds = feeds_for(name, model, batch, seed)
        got = run_c(build, pack, feeds, tmp_path / f"run{seed}")
        assert_same_bits(got, run_python(pack, feeds))
        assert_close_to_onnxruntime(model, feeds, got)


def test_fixed_batch_reshape_refused_alike(build, packs, tmp_path):
    pack, model = packs("shufflenet")
    feeds = feeds_for("shufflenet", model, 2, 0)
    line = assert_refused(tccrt(build, "run", pack, *input_args(tmp_path, feeds)), "cannot view")
    with pytest.raises(tcc.rt.RunInputError) as e:
        run_python(pack, feeds)
    assert line == f"error: {e.value}"


def tcc_run(*args, tccrt_path: Path | None = None):
    env = {"TCCRT": str(tccrt_path)} if tccrt_path else None
    return CliRunner().invoke(cli, ["run", *map(str, args)], env=env, catch_exceptions=False)


def test_tcc_run_runtime_c_same_files_as_python(build, packs, tmp_path):
    """bert through `tcc run` with each runtime: the same output files, bit for bit, and
    --check against onnxruntime passes."""
    pack, model = packs("bert_encoder")
    onnx_path = tmp_path / "bert.onnx"
    onnx.save(model, onnx_path)
    for batch in (1, 3):
        args = input_args(tmp_path / f"in{batch}", feeds_for("bert_encoder", model, batch, batch))
        dirs = {rt: tmp_path / f"{rt}{batch}" for rt in ("python", "c")}
        for rt, d in dirs.items():
            r = tcc_run(
                pack,
                *args,
                "--output-dir",
                d,
                "--runtime",
                rt,
                "--check",
                "--onnx",
                onnx_path,
                tccrt_path=build / "tccrt",
            )
            assert r.exit_code == 0, r.output
            assert "FAIL" not in r.stdout and r.stdout.count("ok") == 2
        names = output_names(pack)
        assert_same_bits(read_outputs(dirs["c"], names), read_outputs(dirs["python"], names))
        assert sorted(p.name for p in dirs["c"].iterdir()) == [
            "pooled_output.npy",
            "sequence_output.npy",
        ]


# -- .npy in every version and dtype; outputs as numpy.save writes them ---------------------------


def every_dtype_feeds(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(n)
    feeds = {"b": rng.integers(0, 2, n).astype(bool)}
    for name, dtype in [
        ("i8", np.int8),
        ("u8", np.uint8),
        ("i16", np.int16),
        ("u16", np.uint16),
        ("i32", np.int32),
        ("u32", np.uint32),
        ("i64", np.int64),
        ("u64", np.uint64),
    ]:
        feeds[name] = rng.integers(0, np.iinfo(dtype).max // 2, n).astype(dtype)
    for name, dtype in [("f16", np.float16), ("f32", np.float32), ("f64", np.float64)]:
        feeds[name] = rng.standard_normal(n).astype(dtype)
    return feeds


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_npy_versions_dtypes_and_exact_output_bytes(build, packs, tmp_path, version):
    pack, _ = packs("every_dtype")
    feeds = every_dtype_feeds(5 + version[0])
    args = []
    for i, (name, value) in enumerate(feeds.items()):
        with open(tmp_path / f"in{i}.npy", "wb") as f:
            np.lib.format.write_array(f, value, version=version)
        args += ["--input", f"{name}={tmp_path / f'in{i}.npy'}"]
    out = tmp_path / "out"
    r = tccrt(build, "run", pack, *args, "--output-dir", out)
    assert r.returncode == 0, r.stderr
    names = output_names(pack)
    assert r.stdout.splitlines()[0] == f"b/out: bool[{len(feeds['b'])}]"
    assert len(r.stdout.splitlines()) == len(names)
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(f"{f}.npy" for f in safe_file_names(names))
    assert {"f32_out.npy", "f32_out_1.npy", "_...npy", "_.npy"} <= set(files)
    got = read_outputs(out, names)
    assert_same_bits(got, run_python(pack, feeds))
    for f, arr in zip(safe_file_names(names), got):
        np.save(tmp_path / "ref.npy", arr)
        assert (out / f"{f}.npy").read_bytes() == (tmp_path / "ref.npy").read_bytes(), f


# -- (b) wrong inputs, options and files ----------------------------------------------------------


def _bad_files(d: Path) -> dict[str, Path]:
    ids = np.arange(16, dtype=np.int64).reshape(2, 8) % 100
    files = {
        "ids": ids,
        "mask": np.ones((2, 8), np.int64),
        "f32": ids.astype(np.float32),
        "rank1": ids.ravel(),
        "seq9": np.ones((2, 9), np.int64),
    }
    paths = {}
    for k, v in files.items():
        np.save(d / f"{k}.npy", v)
        paths[k] = d / f"{k}.npy"
    np.save(d / "fortran.npy", np.asfortranarray(ids))
    np.savez(d / "arch.npz", ids=ids)
    (d / "garbage.npy").write_bytes(b"\x93NUMPY\x01\x00\x10\x00{'descr': oops}\n")
    (d / "text.npy").write_text("not numpy at all\n")
    (d / "trunc.npy").write_bytes((d / "ids.npy").read_bytes()[:-8])
    paths.update({k: d / f"{k}.npy" for k in ("fortran", "garbage", "text", "trunc")})
    paths["npz"] = d / "arch.npz"
    return paths


BAD_RUNS = {  # what is given -> words the error line must hold
    "unknown name": (
        ["input_ids=ids", "attention_mask=mask", "token_type=mask"],
        [],
        ["no input named 'token_type'", "'input_ids', 'attention_mask'"],
    ),
    "missing input": (["input_ids=ids"], [], ["input 'attention_mask' is missing"]),
    "duplicate input": (
        ["input_ids=ids", "input_ids=ids", "attention_mask=mask"],
        [],
        ["'input_ids' is given twice"],
    ),
    "wrong dtype": (
        ["input_ids=f32", "attention_mask=mask"],
        [],
        ["input 'input_ids'", "expected dtype int64, got float32"],
    ),
    "wrong rank": (["input_ids=rank1", "attention_mask=mask"], [], ["input 'input_ids'", "rank 2"]),
    "wrong dimension": (
        ["input_ids=ids", "attention_mask=seq9"],
        [],
        ["input 'attention_mask'", "dimension 1"],
    ),
    "unknown option": (
        ["input_ids=ids", "attention_mask=mask"],
        ["--fast"],
        ["unknown option '--fast'"],
    ),
    "bad --bench": (["input_ids=ids", "attention_mask=mask"], ["--bench", "0"], ["--bench '0'"]),
    "unknown function": (
        ["input_ids=ids", "attention_mask=mask"],
        ["--function", "nope"],
        ["no entry function 'nope'", "'main'"],
    ),
    "missing file": (
        ["input_ids=nofile", "attention_mask=mask"],
        [],
        ["input 'input_ids'", "no such file"],
    ),
    "not npy": (["input_ids=text", "attention_mask=mask"], [], ["text.npy is not an .npy file"]),
    "npz": (["input_ids=npz", "attention_mask=mask"], [], [".npz archive"]),
    "malformed header": (
        ["input_ids=garbage", "attention_mask=mask"],
        [],
        ["malformed .npy header", "numpy.save"],
    ),
    "fortran order": (
        ["input_ids=fortran", "attention_mask=mask"],
        [],
        ["Fortran order", "np.ascontiguousarray"],
    ),
    "truncated": (["input_ids=trunc", "attention_mask=mask"], [], ["truncated"]),
}


def bad_run_args(d: Path, given: list[str]) -> list[str]:
    paths = _bad_files(d)
    args = []
    for g in given:
        name, _, key = g.partition("=")
        args += ["--input", f"{name}={paths.get(key, d / (key + '.npy'))}"]
    return args


@pytest.mark.parametrize("case", list(BAD_RUNS))
def test_bad_inputs_refused(build, packs, tmp_path, case):
    pack, _ = packs("bert_encoder")
    given, extra, words = BAD_RUNS[case]
    assert_refused(tccrt(build, "run", pack, *bad_run_args(tmp_path, given), *extra), *words)


@pytest.mark.parametrize(
    "case", ["unknown name", "missing input", "wrong dtype", "wrong rank", "wrong dimension"]
)
def test_input_errors_read_as_in_python(build, packs, tmp_path, case):
    """`tcc run` says the same thing about wrong inputs with either runtime."""
    pack, _ = packs("bert_encoder")
    args = bad_run_args(tmp_path, BAD_RUNS[case][0])
    said = {}
    for rt in ("python", "c"):
        r = tcc_run(pack, *args, "--runtime", rt, tccrt_path=build / "tccrt")
        assert r.exit_code == 2
        said[rt] = r.stderr
    assert said["c"] == said["python"]


def test_usage_and_bad_packs(build, packs, tmp_path):
    assert_refused(tccrt(build, "run"), "needs a pack")
    assert_refused(tccrt(build, "run", tmp_path / "none.tvmpack"), "none.tvmpack")
    (tmp_path / "bad.tvmpack").write_bytes(b"\0" * 1024)
    assert_refused(tccrt(build, "run", tmp_path / "bad.tvmpack"), "bad.tvmpack")
    assert_refused(tccrt(build, "frobnicate"), "unknown command 'frobnicate'")
    assert_refused(
        tccrt(build, "run", packs("bert_encoder")[0], "--threads"), "--threads needs a value"
    )
    for args in (["--help"], ["run", "--help"], ["info", "-h"]):
        r = tccrt(build, *args)
        assert r.returncode == 0 and r.stderr == ""
        assert r.stdout.startswith("usage: tccrt info") and "Exit status: 0 ok; 2" in r.stdout


def test_tccrt_profile_times_every_kernel_and_builtin(build, packs, tmp_path):
    pack, model = packs("bert_encoder")
    feeds = feeds_for("bert_encoder", model, 2, 0)
    r = tccrt(build, "run", pack, *input_args(tmp_path, feeds), "--bench", "3", "--profile")
    assert r.returncode == 0, r.stderr
    text = r.stdout[r.stdout.index("profile: "):].splitlines()
    assert re.fullmatch(r"profile: [\d.]+ ms per run, mean of 3 runs", text[0])
    rows = [line.split() for line in text[2:-1]]
    shares = [float(row[0].rstrip("%")) for row in rows]
    assert abs(sum(shares) - 100) < 0.5 + 0.05 * len(rows)  # each share is rounded to 0.1%
    kinds = {row[1] for row in rows}
    assert kinds == {"kernel", "builtin", "vm"}
    with tcc.rt.load(pack) as m:  # every kernel the Python profile sees, tccrt sees
        py_kernels = {r.name for r in m.profile("main", feeds) if r.kind == "kernel"}
    assert {row[-1] for row in rows if row[1] == "kernel"} == py_kernels
    outside = float(re.fullmatch(r"outside kernels: ([\d.]+)% of the run time", text[-1]).group(1))
    kernel_share = sum(s for s, row in zip(shares, rows) if row[1] == "kernel")
    assert abs(outside - (100 - kernel_share)) < 0.5 + 0.05 * len(rows)


def test_tcc_run_runtime_c_errors(build, packs, tmp_path, monkeypatch):
    pack, _ = packs("bert_encoder")
    tcir = tmp_path / "m.tcir"
    tcir.write_text("")
    r = tcc_run(tcir, "--runtime", "c")
    assert r.exit_code == 2 and "--runtime c runs compiled packs only" in r.stderr
    r = tcc_run(pack, "--runtime", "c", "--random-inputs", "--profile", tccrt_path=build / "tccrt")
    assert r.exit_code == 0 and "profile: " in r.stdout and "outside kernels: " in r.stdout
    # neither $TCCRT, nor a build in the source tree, nor tccrt on the PATH
    monkeypatch.delenv("TCCRT", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(c_runtime, "__file__", str(tmp_path / "tcc" / "rt" / "c_runtime.py"))
    r = tcc_run(pack, "--runtime", "c", "--random-inputs")
    assert r.exit_code == 2
    assert (
        "the C runtime is not built; run `make runtime` (or set TCCRT=/path/to/tccrt)" in r.stderr
    )


# -- (c) under AddressSanitizer and UndefinedBehaviorSanitizer ------------------------------------


def test_sanitized_runs_clean(sanitized, packs, tmp_path):
    pack, model = packs("bert_encoder")
    feeds = feeds_for("bert_encoder", model, 2, 0)
    args = input_args(tmp_path / "in", feeds)
    r = tccrt(
        sanitized,
        "run",
        pack,
        *args,
        "--output-dir",
        tmp_path / "out",
        "--bench",
        "2",
        env=SANITIZER_ENV,
    )
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert_same_bits(read_outputs(tmp_path / "out", output_names(pack)), run_python(pack, feeds))
    every, _ = packs("every_dtype")
    feeds = every_dtype_feeds(3)
    r = tccrt(
        sanitized,
        "run",
        every,
        *input_args(tmp_path / "every", feeds),
        "--output-dir",
        tmp_path / "every_out",
        env=SANITIZER_ENV,
    )
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert_same_bits(
        read_outputs(tmp_path / "every_out", output_names(every)), run_python(every, feeds)
    )
    for case in (
        "unknown name",
        "wrong dtype",
        "wrong dimension",
        "malformed header",
        "fortran order",
        "truncated",
        "unknown option",
    ):
        given, extra, words = BAD_RUNS[case]
        d = tmp_path / case.replace(" ", "_")
        d.mkdir()
        args = bad_run_args(d, given)
        assert_refused(tccrt(sanitized, "run", pack, *args, *extra, env=SANITIZER_ENV), *words)


BAD_SHAPE_DATA = [  # (model, its shape operand, a value that does not fit, words of the refusal)
    ("expand", (4, 2, 5), "does not broadcast"),
    ("expand", (2, -1, 1), "does not broadcast"),
    ("expand", (2**40, 3, 1), "out of memory"),
    ("reshape", (5, -1, 1), "multiply out"),
    ("reshape", (-1, -1, 2), "more than one -1"),
    ("reshape", (2, -3, 2), "below -1"),
    ("reduce", (0, 3), "outside"),
    ("reduce", (1, -2), "twice"),
]


def test_bad_shape_data_is_refused_cleanly_under_the_sanitizers(sanitized, tmp_path):
    """Sizes read from tensors that do not fit the op reading them stop tccrt with one line
    naming the node, exit 2, and no sanitizer report (no out-of-bounds access, no leak)."""
    from tests.e2e import test_dynamic_shapes as dyn

    models = {"expand": dyn._expand_model(), "reshape": dyn._reshape_model(),
              "reduce": dyn._reduce_model("ReduceSum", 0)}
    x = {"expand": np.zeros((3, 1), np.float32), "reshape": np.zeros((2, 6), np.float32),
         "reduce": np.zeros((2, 3, 4), np.float32)}
    operand = {"expand": "shape", "reshape": "shape", "reduce": "axes"}
    # a size too big for memory must come back as NULL from malloc, as it does without ASan
    env = {**SANITIZER_ENV, "ASAN_OPTIONS": "detect_leaks=1:allocator_may_return_null=1"}
    for k, (kind, value, words) in enumerate(BAD_SHAPE_DATA):
        feeds = {"x": x[kind], operand[kind]: np.array(value, np.int64)}
        r = tccrt(sanitized, "run", compiled_pack(models[kind]), *input_args(tmp_path / str(k), feeds),
                  env=env)
        # ASan notes the allocation it refused; that note is no error report
        r.stderr = "".join(line for line in r.stderr.splitlines(keepends=True)
                           if "WARNING: AddressSanitizer failed to allocate" not in line)
        line = assert_refused(r, words)
        assert "'y'" in line or "out of memory" in line, line


# -- (d) --bench and --output-dir -----------------------------------------------------------------


def test_bench_and_atomic_output_dir(build, packs, tmp_path):
    pack, model = packs("bert_encoder")
    args = input_args(tmp_path / "in", feeds_for("bert_encoder", model, 1, 0))
    r = tccrt(build, "run", pack, *args, "--bench", "3", "--threads", "1")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:2] == ["sequence_output: float32[1, 8, 64]", "pooled_output: float32[1, 64]"]
    m = re.fullmatch(r"bench: 3 runs, median ([\d.]+) ms \(min ([\d.]+), max ([\d.]+)\)", lines[2])
    assert m and float(m[2]) <= float(m[1]) <= float(m[3])
    # a folder whose parent is missing: an error, and no file anywhere
    r = tccrt(build, "run", pack, *args, "--output-dir", tmp_path / "no" / "out")
    assert_refused(r, "--output-dir", "cannot write outputs")
    assert not (tmp_path / "no").exists()
    # an existing folder: the outputs and nothing else (no temporary files left)
    (tmp_path / "out").mkdir()
    r = tccrt(build, "run", pack, *args, "--output-dir", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "pooled_output.npy",
        "sequence_output.npy",
    ]
    # the first output cannot take its name: the error, and no temporary file left behind
    (tmp_path / "clash" / "sequence_output.npy").mkdir(parents=True)
    r = tccrt(build, "run", pack, *args, "--output-dir", tmp_path / "clash")
    assert_refused(r, "--output-dir", "cannot write outputs")
    assert [p.name for p in (tmp_path / "clash").iterdir()] == ["sequence_output.npy"]
    # a temporary left by a killed tccrt (its process is gone) is removed by the next run
    (tmp_path / "out" / ".tccrt-999999999-0-0.npy.tmp").write_bytes(b"partial")
    r = tccrt(build, "run", pack, *args, "--output-dir", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert len(list((tmp_path / "out").iterdir())) == 2
    if os.geteuid() == 0:  # an output that is a character device is written into, not replaced
        dev = tmp_path / "out" / "pooled_output.npy"
        dev.unlink()
        os.mknod(dev, 0o20666, os.makedev(1, 3))
        r = tccrt(build, "run", pack, *args, "--output-dir", tmp_path / "out")
        assert r.returncode == 0, r.stderr
        assert os.stat(dev).st_mode & 0o170000 == 0o020000
    r = tcc_run(pack, *args, "--runtime", "c", "--bench", "2", tccrt_path=build / "tccrt")
    assert r.exit_code == 0, r.output
    assert re.search(
        r"^bench: 2 runs, median [\d.]+ ms \(min [\d.]+, max [\d.]+\)$", r.stdout, re.M
    )
