"""The C pack reader under a fuzzer (runtime_c/test/fuzz.c): 100,000 mutants of real packs
per build, plain -O2 and ASan+UBSan, with no crash, hang or sanitizer report, a one-line
message for every refusal, and deep mutations (re-sealed so every hash holds) reaching
the manifest checks, the bytecode decoder and the verifier.  Single mutants are
reproducible from (seed, iteration) and the Python reader judges them as the C one does."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tcc
from tcc.rt.elf import exported_functions
from tcc.rt.errors import PackError
from tcc.rt.pack import read_pack
from tests.rt.elf_objects import minimal_shared_object
from tests.runtime_c.test_reader import HAVE_TOOLS, RUNTIME, _make, _sanitizers_work, repack

pytestmark = pytest.mark.skipif(not HAVE_TOOLS, reason="needs cc and make")

F = TensorProto.FLOAT
SANITIZE = "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
CFLAGS = ["-std=c11", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Wextra", "-Werror", "-O2",
          f"-I{RUNTIME / 'include'}"]
ITERATIONS = 100_000
# Refusals where the C reader is stricter than Python's json and tcc.rt.format.decode, as
# docs/c-runtime.md lists: NUL bytes in names and strings, lone surrogates.
C_STRICTER = ("contains a NUL byte", "\\u0000 in a string", "lone surrogate")


# -- seed packs -------------------------------------------------------------------------------------


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _mlp():
    """A batch-polymorphic MLP: shape programs, match patterns, weights, three kernels."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "W")
    b = numpy_helper.from_array(np.ones(3, np.float32), "B")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"]), helper.make_node("Add", ["mm", "B"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    return _model(nodes, [_vi("x", F, ["batch", 4])], [_vi("y", F, ["batch", 3])], [w, b])


def _control_flow():
    """An If feeding a Loop with a scan output: VM calls, jumps, a loop head, the loop builtins."""
    out = helper.make_empty_tensor_value_info
    then = helper.make_graph([helper.make_node("Add", ["x", "bias"], ["t"])], "then", [], [out("t")])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [out("e")])
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "bias"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["i", "i"], ["twice"])],
        "body", [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []), _vi("acc_in", F, ["n", 3])],
        [out("cond_out"), out("acc_out"), out("twice")])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
             helper.make_node("Loop", ["m", "", "y"], ["final", "scan"], body=body)]
    inputs = [_vi("c", TensorProto.BOOL, []), _vi("m", TensorProto.INT64, []), _vi("x", F, ["n", 3]),
              _vi("bias", F, [3])]
    return _model(nodes, inputs, [out("final"), out("scan")])


def _weights():
    """Four weights of two dtypes at 64-byte aligned offsets, two entry inputs of fixed shape."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), f"W{i}")
             for i, s in enumerate([(8, 8), (8, 8), (8,)])]
    inits.append(numpy_helper.from_array(np.arange(5, dtype=np.int64), "I"))
    nodes = [helper.make_node("MatMul", ["x", "W0"], ["a"]), helper.make_node("MatMul", ["a", "W1"], ["b"]),
             helper.make_node("Add", ["b", "W2"], ["y"]), helper.make_node("Add", ["k", "I"], ["z"])]
    return _model(nodes, [_vi("x", F, [2, 8]), _vi("k", TensorProto.INT64, [5])],
                  [_vi("y", F, [2, 8]), _vi("z", TensorProto.INT64, [5])], inits)


def _short_kernels(members: dict[str, bytes]) -> None:
    """The object cut to 256 bytes, the shared object replaced by the smallest one that
    defines the same kernels for the same machine."""
    for name in members:
        if name.endswith(".o"):
            members[name] = members[name][:256]
        elif name.endswith(".so"):
            machine, functions = exported_functions(members[name])
            members[name] = minimal_shared_object(functions, machine)


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> dict[str, list[Path]]:
    """"full": the packs as compiled.  "short": the same with the kernel members shrunk to a
    few hundred bytes and re-sealed (_short_kernels); the reader only hashes kernel code and
    reads the shared object's symbol table, so this changes nothing it checks, but a
    sanitized run then spends its time parsing rather than in SHA-256."""
    d = tmp_path_factory.mktemp("fuzz-seeds")
    out: dict[str, list[Path]] = {"full": [], "short": []}
    for name, model in [("mlp", _mlp()), ("control_flow", _control_flow()), ("weights", _weights())]:
        full = d / f"{name}.tvmpack"
        tcc.compile(model, output=full)
        short = d / f"{name}.short.tvmpack"
        short.write_bytes(repack(full.read_bytes(), members_edit=_short_kernels))
        out["full"].append(full)
        out["short"].append(short)
    return out


# -- the driver, built against each library -----------------------------------------------------


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory):
    """fuzzer("plain" | "sanitized") -> the tccrt_fuzz executable, built on first use."""
    built: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in built:
            d = tmp_path_factory.mktemp(f"fuzz-{kind}")
            flags = SANITIZE if kind == "sanitized" else ""
            if flags and not _sanitizers_work(d):
                pytest.skip("the compiler cannot build with -fsanitize=address,undefined")
            _make(d, *([f"EXTRA_CFLAGS={flags}"] if flags else []))
            exe = d / "tccrt_fuzz"
            subprocess.run(["cc", *CFLAGS, *flags.split(), "-o", str(exe), str(RUNTIME / "test" / "fuzz.c"),
                            str(d / "libtccrt.a"), "-ldl", "-lpthread"], check=True, capture_output=True, text=True)
            built[kind] = exe
        return built[kind]

    return get


def run_fuzzer(exe: Path, seeds: list[Path], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), *map(str, seeds), *args], capture_output=True, text=True, timeout=900)


def outcomes(stdout: str) -> tuple[int, dict[str, int]]:
    """The iteration count and the count of each outcome (accepted, or the stage that refused)."""
    head = re.match(r"tccrt_fuzz: (\d+) iterations in ", stdout)
    assert head, stdout
    counts = {m[1]: int(m[2]) for m in re.finditer(r"^([a-z-]+) +(\d+) +\d+$", stdout, re.M)}
    return int(head[1]), counts


# -- the tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind, seed_kind, seed", [("sanitized", "short", 1), ("plain", "full", 2)])
def test_100k_mutants_find_no_crash_hang_or_silent_refusal(fuzzer, seeds, kind, seed_kind, seed):
    """The driver aborts on a crash, a sanitizer report, an open over 1 s, a refusal without
    a one-line message and an accepted pack whose tables answer wrongly; so exit 0 is the
    claim, and the counts show the mutants got past the hashes to the deep checks."""
    r = run_fuzzer(fuzzer(kind), seeds[seed_kind], "--iterations", str(ITERATIONS), "--seed", str(seed))
    assert r.returncode == 0 and r.stderr == "", f"exit {r.returncode}:\n{r.stderr[-4000:]}"
    done, counts = outcomes(r.stdout)
    assert done == ITERATIONS == sum(counts.values()), r.stdout
    need = {"accepted": 0.01, "json": 0.02, "manifest": 0.02, "bytecode": 0.02, "verify": 0.01,
            "shared-object": 0.0005}
    short = {k: counts.get(k, 0) for k, share in need.items() if counts.get(k, 0) < share * ITERATIONS}
    assert not short, f"too few mutants reach these stages: {short}\n{r.stdout}"
    # A message the driver cannot place means its table of reasons (fuzz.c REASONS) is stale.
    assert counts["other"] <= 0.001 * ITERATIONS, r.stdout


def test_a_mutant_is_reproducible_and_the_python_reader_agrees(fuzzer, seeds, tmp_path):
    """`--iteration I --save FILE` rebuilds one mutant; the Python reader accepts what the C
    reader accepts, and refuses what it refuses except where C is documented stricter."""
    exe, pack = fuzzer("plain"), tmp_path / "mutant.tvmpack"
    accepted = 0
    for i in range(0, 300 * 7, 7):
        r = run_fuzzer(exe, seeds["short"], "--seed", "3", "--iteration", str(i), "--save", str(pack))
        assert r.returncode == 0 and r.stderr == "", r.stderr
        m = re.fullmatch(rf"iteration {i}: (\d+) bytes, ([a-z-]+)(?:: (.*))?\n", r.stdout)
        assert m and int(m[1]) == pack.stat().st_size, r.stdout
        try:
            read_pack(pack).close()
            python = None
        except PackError as e:
            python = str(e)
        if m[2] == "accepted":
            accepted += 1
            assert python is None, f"iteration {i}: C accepted, Python refused: {python}"
        else:
            assert python or any(s in m[3] for s in C_STRICTER), f"iteration {i}: only C refused: {m[3]}"
    assert accepted >= 5
    first = pack.read_bytes()
    run_fuzzer(exe, seeds["short"], "--seed", "3", "--iteration", str(i), "--save", str(pack))
    assert pack.read_bytes() == first


def test_the_fuzzer_refuses_a_seed_the_reader_refuses(fuzzer, tmp_path):
    bad = tmp_path / "bad.tvmpack"
    bad.write_bytes(b"\0" * 4096)
    r = run_fuzzer(fuzzer("plain"), [bad], "--iterations", "1")
    assert r.returncode == 2 and r.stdout == ""
    assert re.fullmatch(rf"tccrt_fuzz: {re.escape(str(bad))}: the seed pack must be valid: <memory>: .+\n", r.stderr)
