"""The C runtime's pack reader and `tccrt info` (runtime_c/): built with make once per
test session, run on packs from `tcc.compile`, and fed malformed packs, each of which must
be refused with one `error: ...` line and exit status 2, never a crash; the Python reader
(tcc.rt.pack) must refuse the same packs."""

from __future__ import annotations

import ctypes
import hashlib
import io
import json
import os
import random
import shutil
import struct
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import tcc
from tcc.cli.main import cli
from tcc.rt.errors import PackError
from tcc.rt.pack import read_pack

RUNTIME = Path(__file__).resolve().parents[2] / "runtime_c"
HAVE_TOOLS = shutil.which("cc") is not None and shutil.which("make") is not None
pytestmark = pytest.mark.skipif(not HAVE_TOOLS, reason="needs cc and make")


def _make(build: Path, *extra: str) -> Path:
    subprocess.run(["make", "-s", "-j2", "-C", str(RUNTIME), f"BUILD={build}", *extra],
                   check=True, capture_output=True, text=True)
    return build


@pytest.fixture(scope="session")
def build(tmp_path_factory) -> Path:
    # A build directory per test worker, so parallel workers never race on one tree.
    return _make(tmp_path_factory.mktemp("tccrt-build"))


@pytest.fixture(scope="session")
def pack_path(tmp_path_factory) -> Path:
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "W")
    b = numpy_helper.from_array(np.ones(3, dtype=np.float32), "B")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["mm"]), helper.make_node("Add", ["mm", "B"], ["s"]),
         helper.make_node("Relu", ["s"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [w, b],
    )
    path = tmp_path_factory.mktemp("pack") / "m.tvmpack"
    tcc.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), output=path)
    return path


def info(build: Path, path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(build / "tccrt"), "info", *args, str(path)], capture_output=True,
                          text=True, timeout=20)


def assert_refused(r: subprocess.CompletedProcess, what: str) -> str:
    # A signal shows as a negative returncode; 2 is the reader's own refusal.
    assert r.returncode == 2, f"{what}: exit {r.returncode}, stderr {r.stderr!r}"
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), f"{what}: {r.stderr!r}"
    assert r.stdout == ""
    return lines[0]


def python_refuses(path) -> bool:
    try:
        read_pack(path).close()
    except PackError:
        return True
    return False


# -- building packs with a changed manifest or member --------------------------------------------


def members_of(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        return {m.name: tf.extractfile(m).read() for m in tf.getmembers()}


def tar(members: dict[str, bytes]) -> bytes:
    """A ustar archive as tcc writes one (sorted, mtime 0, no padding past two zero blocks)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for name in sorted(members):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mtime, ti.mode = len(members[name]), 0, 0o644
            tf.addfile(ti, io.BytesIO(members[name]))
            end = tf.offset
    return buf.getvalue()[: end + 1024]


def seal(manifest: dict) -> bytes:
    """The manifest's bytes with a correct manifest_sha256."""
    manifest = dict(manifest, manifest_sha256="0" * 64)
    raw = json.dumps(manifest, sort_keys=True, indent=1).encode()
    digest = hashlib.sha256(raw).hexdigest()
    return raw.replace(b"0" * 64, digest.encode(), 1)


def repack(data: bytes, edit=None, members_edit=None) -> bytes:
    """`data` with its manifest changed by `edit(manifest)` and its members by
    `members_edit(members)`, every hash recomputed so only the change itself is wrong."""
    members = members_of(data)
    manifest = json.loads(members.pop("manifest.json"))
    if members_edit:
        members_edit(members)
    for name, blob in members.items():
        if name in manifest["members"]:
            manifest["members"][name] = {"size": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
    if edit:
        edit(manifest)
    members["manifest.json"] = seal(manifest)
    return tar(members)


def _set(path: list, value):
    def edit(m):
        d = m
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
    return edit


def _drop(key):
    return lambda m: m.pop(key)


SEMANTIC = {
    "format version 2": _set(["format_version"], 2),
    "format version as float": _set(["format_version"], 1.0),
    "format version as bool": _set(["format_version"], True),
    "other format": _set(["format"], "zip"),
    "bytecode version 2": _set(["bytecode", "version"], 2),
    "missing target": _drop("target"),
    "unknown field": _set(["extra"], 1),
    "target not a string": _set(["target"], 7),
    "weights alignment 32": _set(["weights", "alignment"], 32),
    "weight misaligned": _set(["weights", "arrays", "W", "offset"], 8),
    "weight out of bounds": _set(["weights", "arrays", "W", "offset"], 1 << 40),
    "weight negative offset": _set(["weights", "arrays", "W", "offset"], -64),
    "weight nbytes wrong": _set(["weights", "arrays", "W", "nbytes"], 44),
    "weight huge shape": _set(["weights", "arrays", "W", "shape"], [1 << 62, 1 << 62]),
    "weight unknown dtype": _set(["weights", "arrays", "W", "dtype"], "float7"),
    "weight negative dim": _set(["weights", "arrays", "W", "shape"], [-4, -3]),
    "weight extra field": _set(["weights", "arrays", "W", "extra"], 0),
    "weights without member": _set(["weights", "member"], None),
    "weights member missing": _set(["weights", "member"], "nothere.bin"),
    "bytecode member missing": _set(["bytecode", "member"], "nothere.bin"),
    "object member missing": _set(["kernels", "object"], "kernels/x.o"),
    "symbol not a string": _set(["kernels", "symbols"], [1]),
    "signature dtype": _set(["entry_functions", "main", "inputs", 0, "dtype"], "f32"),
    "signature dim float": _set(["entry_functions", "main", "inputs", 0, "shape"], [1.5, 4]),
    "signature dim negative": _set(["entry_functions", "main", "outputs", 0, "shape"], [-1, 3]),
    "signature missing outputs": lambda m: m["entry_functions"]["main"].pop("outputs"),
    "origins not a dict": _set(["kernel_origins"], []),
    "origins unknown kernel": _set(["kernel_origins"], {"nosuch": ["y"]}),
    "origins not strings": _set(["kernel_origins"], {"add_kernel": [1]}),
    "member size wrong": _set(["members", "weights.bin", "size"], 1),
    "member sha malformed": _set(["members", "weights.bin", "sha256"], "A" * 64),
    "member listed but absent": _set(["members", "extra.bin"], {"size": 0, "sha256": "0" * 64}),
    "manifest listed as member": _set(["members", "manifest.json"], {"size": 0, "sha256": "0" * 64}),
    "entry_functions a list": _set(["entry_functions"], []),
}


def _bytecode(edit):
    """A members_edit that rewrites bytecode.bin's int64 words (or its bytes)."""
    def members_edit(members):
        raw = members["bytecode.bin"]
        words = list(struct.unpack(f"<{len(raw) // 8}q", raw))
        out = edit(words)
        members["bytecode.bin"] = out if isinstance(out, bytes) else struct.pack(f"<{len(out)}q", *out)
    return members_edit


BYTECODE = {
    "bytecode truncated": _bytecode(lambda w: w[:-1]),
    "bytecode trailing word": _bytecode(lambda w: w + [0]),
    "bytecode odd size": _bytecode(lambda w: struct.pack(f"<{len(w)}q", *w) + b"\0"),
    "bytecode bad magic": _bytecode(lambda w: [w[0] ^ 1, *w[1:]]),
    "bytecode version 2 inside": _bytecode(lambda w: [w[0], 2, *w[2:]]),
    "bytecode huge table": _bytecode(lambda w: [*w[:2], 1 << 62, *w[3:]]),
    "bytecode negative count": _bytecode(lambda w: [*w[:4], -1, *w[5:]]),
    "bytecode huge string": _bytecode(lambda w: [*w[:6], (1 << 63) - 1, *w[7:]]),
    "bytecode unknown kind": _bytecode(lambda w: [*w[:5], 7, *w[6:]]),
    "bytecode empty": _bytecode(lambda w: b""),
}


def _hash_replaced_twice(data: bytes) -> bytes:
    members = members_of(data)
    m = json.loads(members["manifest.json"])
    m["target"] = m["manifest_sha256"]  # the digest now occurs twice
    raw = json.dumps(m, sort_keys=True).encode()
    members["manifest.json"] = raw
    return tar(members)


# -- tests ---------------------------------------------------------------------------------------


def test_selftest_sha256_and_json(build):
    r = subprocess.run([str(build / "tccrt_selftest")], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr


def test_sha256_matches_hashlib_at_block_edges(build, tmp_path):
    rng = random.Random(0)
    for n in (0, 1, 37, 55, 56, 63, 64, 65, 111, 119, 120, 127, 128, 129, 1000, 4097):
        f = tmp_path / f"{n}.bin"
        data = bytes(rng.randrange(256) for _ in range(n))
        f.write_bytes(data)
        out = subprocess.run([str(build / "tccrt_selftest"), "sha256", str(f)], capture_output=True,
                             text=True, check=True).stdout.strip()
        assert out == hashlib.sha256(data).hexdigest(), n


def test_info_json_matches_tcc_show(build, pack_path):
    r = info(build, pack_path, "--json")
    assert r.returncode == 0, r.stderr
    shown = CliRunner().invoke(cli, ["show", str(pack_path), "--json"], catch_exceptions=False)
    assert shown.exit_code == 0
    assert json.loads(r.stdout) == json.loads(shown.output)


def test_info_text(build, pack_path):
    r = info(build, pack_path)
    assert r.returncode == 0 and r.stderr == ""
    with read_pack(pack_path) as contents:
        target, symbols = contents.target, contents.kernel_symbols
    assert f"target: {target}\n" in r.stdout
    assert "  main(x: float32[batch, 4]) -> (y: float32[batch, 3])\n" in r.stdout
    assert f"kernels: {len(symbols)} (object kernels/llvm.o" in r.stdout
    assert all(f"  {s}\n" in r.stdout for s in symbols)
    assert "weights: 2 (60 bytes)\n  B: float32[3] at offset 0\n  W: float32[4, 3] at offset 64\n" in r.stdout


def test_library_api_through_ctypes(build, pack_path):
    """libtccrt.so: open from memory, the signature queries, weights pointing into the
    caller's buffer (not copied), and errors through tccrt_last_error."""
    lib = ctypes.CDLL(str(build / "libtccrt.so"))
    lib.tccrt_last_error.restype = ctypes.c_char_p
    data = pack_path.read_bytes()
    buf = ctypes.create_string_buffer(data, len(data))
    pack = ctypes.c_void_p()
    assert lib.tccrt_pack_open_memory(buf, ctypes.c_size_t(len(data)), ctypes.byref(pack)) == 0
    try:
        n, name = ctypes.c_size_t(), ctypes.c_char_p()
        assert lib.tccrt_pack_function_count(pack, ctypes.byref(n)) == 0 and n.value == 1
        assert lib.tccrt_pack_function_name(pack, ctypes.c_size_t(0), ctypes.byref(name)) == 0
        assert name.value == b"main"
        assert lib.tccrt_pack_function_name(pack, ctypes.c_size_t(1), ctypes.byref(name)) == 1
        assert b"function 1 is out of range" in lib.tccrt_last_error()
        idx = ctypes.c_size_t()
        assert lib.tccrt_pack_function_find(pack, b"nope", ctypes.byref(idx)) == 1

        class Dim(ctypes.Structure):
            _fields_ = [("value", ctypes.c_int64), ("symbol", ctypes.c_char_p)]

        class TensorInfo(ctypes.Structure):
            _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p), ("rank", ctypes.c_size_t),
                        ("dims", ctypes.POINTER(Dim))]

        class WeightInfo(ctypes.Structure):
            _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p), ("rank", ctypes.c_size_t),
                        ("shape", ctypes.POINTER(ctypes.c_int64)), ("offset", ctypes.c_uint64),
                        ("nbytes", ctypes.c_uint64), ("data", ctypes.c_void_p)]

        t = TensorInfo()
        assert lib.tccrt_pack_signature_tensor(pack, ctypes.c_size_t(0), 0, ctypes.c_size_t(0),
                                               ctypes.byref(t)) == 0
        assert (t.name, t.dtype, t.rank) == (b"x", b"float32", 2)
        assert (t.dims[0].value, t.dims[0].symbol, t.dims[1].value, t.dims[1].symbol) == (-1, b"batch", 4, None)
        w = WeightInfo()
        assert lib.tccrt_pack_weight(pack, ctypes.c_size_t(1), ctypes.byref(w)) == 0
        assert (w.name, w.dtype, w.rank, w.shape[0], w.shape[1]) == (b"W", b"float32", 2, 4, 3)
        base = ctypes.addressof(buf)
        assert base <= w.data < base + len(data) and w.data % 64 == (base % 64)
        got = np.frombuffer(ctypes.string_at(w.data, w.nbytes), dtype="<f4").reshape(4, 3)
        np.testing.assert_array_equal(got, np.arange(12, dtype=np.float32).reshape(4, 3))
    finally:
        lib.tccrt_pack_release(pack)
    bad = ctypes.create_string_buffer(b"\0" * 2048, 2048)
    assert lib.tccrt_pack_open_memory(bad, ctypes.c_size_t(2048), ctypes.byref(pack)) == 3
    assert lib.tccrt_last_error().startswith(b"<memory>: truncated or padded")


def test_truncation_at_many_points(build, pack_path, tmp_path):
    data = pack_path.read_bytes()
    cuts = sorted({0, 1, 511, 512, 513, 1535, 1536, len(data) - 1, len(data) - 512, len(data) - 1024,
                   *range(0, len(data), 2048), *random.Random(1).sample(range(len(data)), 40)})
    for cut in cuts:
        f = tmp_path / "t.tvmpack"
        f.write_bytes(data[:cut])
        assert_refused(info(build, f), f"truncated at {cut}")


def test_flipped_byte_in_every_member_and_header(build, pack_path, tmp_path):
    data = pack_path.read_bytes()
    with tarfile.open(pack_path) as tf:
        spans = [(m.name, m.offset_data, m.size) for m in tf.getmembers()]
    points = []
    for name, off, size in spans:
        points += [(f"{name} byte {i}", off + i) for i in {0, size // 2, size - 1}]
        points += [(f"{name} header byte {i}", off - 512 + i) for i in (0, 100, 124, 148, 156, 257)]
    for what, pos in points:
        mutated = bytearray(data)
        mutated[pos] ^= 0x20
        f = tmp_path / "f.tvmpack"
        f.write_bytes(bytes(mutated))
        line = assert_refused(info(build, f), what)
        assert str(f) in line
        assert python_refuses(f), what


def test_malformed_manifests_and_bytecode_refused_like_python(build, pack_path, tmp_path):
    data = pack_path.read_bytes()
    cases = {name: repack(data, edit) for name, edit in SEMANTIC.items()}
    cases.update({name: repack(data, members_edit=e) for name, e in BYTECODE.items()})
    cases["digest occurs twice"] = _hash_replaced_twice(data)
    cases["unlisted member"] = repack(data, members_edit=lambda ms: ms.update({"zz.bin": b"x"}))
    cases["duplicate key"] = tar({**members_of(data), "manifest.json": seal({}).replace(
        b"{", b'{"format": 1, "format": 1,', 1)})
    for name, blob in cases.items():
        f = tmp_path / "m.tvmpack"
        f.write_bytes(blob)
        assert_refused(info(build, f), name)
        assert python_refuses(f), name
    # The rebuilt pack itself is accepted by both, so each case fails on its change alone.
    f.write_bytes(repack(data))
    assert info(build, f).returncode == 0 and not python_refuses(f)


def test_version_message_says_rebuild(build, pack_path, tmp_path):
    f = tmp_path / "v.tvmpack"
    f.write_bytes(repack(pack_path.read_bytes(), SEMANTIC["format version 2"]))
    line = assert_refused(info(build, f), "version")
    assert "format version 2 is not supported" in line and "rebuild the pack" in line


def test_garbage_empty_missing_and_usage(build, tmp_path):
    rng = random.Random(2)
    cases = {"empty": b"", "garbage": bytes(rng.randrange(256) for _ in range(5000)),
             "zeros": b"\0" * 4096, "text": b"hello\n" * 400}
    for name, blob in cases.items():
        f = tmp_path / f"{name}.tvmpack"
        f.write_bytes(blob)
        assert_refused(info(build, f), name)
    assert "cannot read" in assert_refused(info(build, tmp_path / "nope.tvmpack"), "missing")
    assert "not a regular file" in assert_refused(info(build, tmp_path), "directory")
    r = subprocess.run([str(build / "tccrt")], capture_output=True, text=True)
    assert_refused(r, "usage")


def _mutants(data: bytes, count: int, seed: int) -> list[bytes]:
    """Malformed packs: truncations, bit flips, overwritten tar size fields and manifest
    bytes, extreme numbers."""
    rng = random.Random(seed)
    out = []
    man = data.index(b'{\n "bytecode"') if b'{\n "bytecode"' in data else data.index(b'"bytecode"')
    for i in range(count):
        m = bytearray(data)
        kind = i % 4
        if kind == 0:
            m = m[: rng.randrange(len(m))]
        elif kind == 1:
            for _ in range(rng.randrange(1, 8)):
                m[rng.randrange(len(m))] ^= 1 << rng.randrange(8)
        elif kind == 2:  # a tar size field set to an extreme octal value
            hdr = 512 * rng.randrange(len(m) // 512)
            m[hdr + 124: hdr + 136] = rng.choice([b"77777777777\0", b"00000000000\0", b"7" * 12])
        else:  # manifest text overwritten near its start
            pos = man + rng.randrange(200)
            m[pos: pos + 4] = rng.choice([b"9999", b"-1,", b'""', b"[[[[", b"\\u00"])
        out.append(bytes(m))
    return out


def test_random_mutants_refused_like_python(build, pack_path, tmp_path):
    data = pack_path.read_bytes()
    for i, blob in enumerate(_mutants(data, 120, seed=3)):
        f = tmp_path / "x.tvmpack"
        f.write_bytes(blob)
        r = info(build, f)
        py = python_refuses(f)
        if r.returncode == 0:
            assert not py, f"mutant {i}: C accepted, Python refused"
        else:
            assert_refused(r, f"mutant {i}")
            assert py, f"mutant {i}: C refused ({r.stderr.strip()}), Python accepted"


def _sanitizers_work(tmp_path: Path) -> bool:
    src = tmp_path / "probe.c"
    src.write_text("int main(void) { return 0; }\n")
    r = subprocess.run(["cc", "-fsanitize=address,undefined", str(src), "-o", str(tmp_path / "probe")],
                       capture_output=True)
    return r.returncode == 0 and subprocess.run([str(tmp_path / "probe")]).returncode == 0


def test_reader_under_address_and_undefined_sanitizers(pack_path, tmp_path):
    if not _sanitizers_work(tmp_path):
        pytest.skip("the compiler cannot build with -fsanitize=address,undefined")
    san = _make(tmp_path / "asan", "OPT=-O1", "EXTRA_CFLAGS=-fsanitize=address,undefined "
                "-fno-sanitize-recover=undefined -fno-omit-frame-pointer -g")
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:exitcode=99",
               UBSAN_OPTIONS="halt_on_error=1:exitcode=98")
    r = subprocess.run([str(san / "tccrt_selftest")], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    data = pack_path.read_bytes()
    blobs = [data, *_mutants(data, 40, seed=4), repack(data, SEMANTIC["weight huge shape"]),
             repack(data, SEMANTIC["origins unknown kernel"])]
    for i, blob in enumerate(blobs):
        f = tmp_path / "s.tvmpack"
        f.write_bytes(blob)
        r = subprocess.run([str(san / "tccrt"), "info", str(f)], capture_output=True, text=True, env=env)
        assert r.returncode in (0, 2), f"blob {i}: exit {r.returncode}: {r.stderr[-2000:]}"
        assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr[-2000:]


def test_docs_example_compiles_and_runs(build, pack_path, tmp_path):
    """The C program of docs/c-runtime.md, built against libtccrt.a."""
    doc = (RUNTIME.parent / "docs" / "c-runtime.md").read_text()
    src = tmp_path / "demo.c"
    src.write_text(doc.split("```c\n", 1)[1].split("```", 1)[0])
    exe = tmp_path / "demo"
    subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{RUNTIME / 'include'}", str(src),
                    str(build / "libtccrt.a"), "-o", str(exe)], check=True, capture_output=True)
    r = subprocess.run([str(exe), str(pack_path)], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "main takes 1 inputs\n  x dim 0: batch\n  x dim 1: fixed\n"
