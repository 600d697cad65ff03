"""Tests for the low-level .tcir container (tcc/ir/irfile.py)."""

import hashlib
import io
import json
import os
import struct
import tarfile
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tcc.ir import irfile
from tcc.ir.errors import IRFileError
from tcc.ir.irfile import FORMAT_VERSION, HEADER_SIZE, MAGIC, read_container, write_container

TEXT = "# módulo ∑\n@main\ndef f(x: Tensor[(n, 4), 'float32']):\n    return x\n"
ALL_DTYPES = (
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64".split()
)


def sample(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(size=shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


def assert_same(got, want):
    want = np.asarray(want)
    assert got.dtype == want.dtype.newbyteorder("=")
    assert got.shape == want.shape
    assert got.tobytes() == np.ascontiguousarray(want.astype(got.dtype)).tobytes()


def small_file(tmp_path, name="m.tcir"):
    path = tmp_path / name
    arrays = {"b": np.arange(3, dtype=np.int16), "w": np.array([[1.5, -2.0]], np.float32)}
    write_container(path, "x = 1\n", arrays, producer="tcc test")
    return path


def load_error(path, mmap=True) -> str:
    with pytest.raises(IRFileError) as info:
        read_container(path, mmap=mmap)
    msg = str(info.value)
    assert msg.startswith(str(path) + ": ") and "\n" not in msg
    return msg


def rewrite(path, manifest=None, blob=None, version=FORMAT_VERSION, patch=None):
    """Re-seal a file with a new manifest (dict or raw bytes) and a matching header checksum."""
    data = bytearray(path.read_bytes())
    _, _, _, m_off, _, _ = struct.unpack("<8sIIQQ32s", data[:HEADER_SIZE])
    if patch:
        for off, new in patch:
            data[off : off + len(new)] = new
    if blob is None:
        blob = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    data = data[:m_off] + blob
    header = struct.pack(
        "<8sIIQQ32s", MAGIC, version, 0, m_off, len(blob), hashlib.sha256(blob).digest()
    )
    path.write_bytes(header + data[HEADER_SIZE:])


# --- round trip ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mmap", [True, False])
def test_round_trip_every_dtype_and_shape(tmp_path, mmap):
    arrays = {}
    for i, dt in enumerate(ALL_DTYPES):
        arrays[f"{dt}_2d"] = sample(dt, (3, 5), seed=i)
        arrays[f"{dt}_0d"] = sample(dt, (), seed=i)
        arrays[f"{dt}_empty"] = np.zeros((2, 0, 3), dtype=dt)
    arrays["noncontig"] = sample("float32", (6, 8))[::2, 1::3]
    arrays["transposed"] = sample("int32", (4, 5)).T
    arrays["big_endian_f"] = sample("float64", (7,)).astype(">f8")
    arrays["big_endian_i"] = sample("int32", (2, 3)).astype(">i4")
    arrays["big_endian_0d"] = np.array(7, dtype=">u2")
    arrays["scalar"] = np.float32(3.25)
    path = tmp_path / "m.tcir"
    write_container(path, TEXT, arrays, producer="tcc 0.1.0")
    text, got, manifest = read_container(path, mmap=mmap)
    assert text == TEXT
    assert sorted(got) == sorted(arrays)
    for name, want in arrays.items():
        assert_same(got[name], want)
        assert got[name].dtype.byteorder in ("<", "=", "|")
    assert manifest["format_version"] == FORMAT_VERSION
    assert manifest["producer"] == "tcc 0.1.0"
    assert [e["name"] for e in manifest["arrays"]] == sorted(arrays)
    assert {e["dtype"] for e in manifest["arrays"]} == set(ALL_DTYPES)


def test_round_trip_empty(tmp_path):
    path = tmp_path / "empty.tcir"
    write_container(path, "", {}, producer="")
    text, arrays, manifest = read_container(path)
    assert (text, arrays, manifest["arrays"], manifest["producer"]) == ("", {}, [], "")


def test_mmap_arrays_are_readonly_memmaps(tmp_path):
    path = small_file(tmp_path)
    _, arrays, _ = read_container(path, mmap=True)
    assert isinstance(arrays["w"], np.memmap)
    for a in arrays.values():
        assert not a.flags.writeable
        with pytest.raises(ValueError):
            a[...] = 0
    _, arrays, _ = read_container(path, mmap=False)
    assert not any(a.flags.writeable for a in arrays.values())


def test_deterministic_bytes(tmp_path):
    arrays = {"z": np.ones((2, 2), np.float16), "a": np.arange(5, dtype=np.uint64)}
    write_container(tmp_path / "1.tcir", TEXT, arrays, "p")
    write_container(tmp_path / "2.tcir", TEXT, dict(reversed(list(arrays.items()))), "p")
    assert (tmp_path / "1.tcir").read_bytes() == (tmp_path / "2.tcir").read_bytes()


def test_layout_aligned_and_manifest_last(tmp_path):
    arrays = {f"a{i}": np.arange(i, dtype=np.int8) for i in range(8)}
    arrays["s"] = np.int64(5)
    path = tmp_path / "m.tcir"
    write_container(path, "abc", arrays, "p")
    data = path.read_bytes()
    magic, version, reserved, m_off, m_len, m_sha = struct.unpack("<8sIIQQ32s", data[:64])
    assert (magic, version, reserved) == (MAGIC, FORMAT_VERSION, 0)
    assert m_off % 64 == 0 and m_off + m_len == len(data)
    blob = data[m_off:]
    assert hashlib.sha256(blob).digest() == m_sha
    manifest = json.loads(blob)
    assert blob == json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    assert manifest["text"]["offset"] == 64
    assert all(e["offset"] % 64 == 0 for e in manifest["arrays"])
    for e in manifest["arrays"]:
        raw = data[e["offset"] : e["offset"] + e["nbytes"]]
        assert hashlib.sha256(raw).hexdigest() == e["sha256"]


# --- write failures ---------------------------------------------------------------------------


def test_unsupported_dtype_names_array_and_leaves_nothing(tmp_path):
    path = tmp_path / "m.tcir"
    bad = {"a": np.arange(3), "b": np.array(["x", "y"], dtype=object)}
    with pytest.raises(IRFileError, match="'b'.*object"):
        write_container(path, TEXT, bad, "p")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(IRFileError, match="'s'.*<U3"):
        write_container(path, TEXT, {"s": np.array(["abc"])}, "p")
    with pytest.raises(IRFileError, match="'c'.*complex"):
        write_container(path, TEXT, {"c": np.zeros(2, np.complex64)}, "p")
    assert list(tmp_path.iterdir()) == []


def test_failed_write_keeps_existing_target(tmp_path, monkeypatch):
    path = small_file(tmp_path)
    before = path.read_bytes()
    with pytest.raises(IRFileError):
        write_container(path, "new", {"a": np.zeros(1), "b": np.array([None])}, "p")
    assert path.read_bytes() == before and list(tmp_path.iterdir()) == [path]

    def broken_fsync(fd):  # fails after every section has been written to the temp file
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(irfile.os, "fsync", broken_fsync)
    with pytest.raises(IRFileError, match="cannot write IR file: No space left"):
        write_container(path, "new", {"a": np.zeros(1), "b": np.ones(4)}, "p")
    assert path.read_bytes() == before and list(tmp_path.iterdir()) == [path]


def test_interrupted_write_cleans_up(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(irfile.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_container(tmp_path / "m.tcir", TEXT, {"a": np.zeros(3)}, "p")
    assert list(tmp_path.iterdir()) == []


def test_write_into_missing_directory(tmp_path):
    with pytest.raises(IRFileError, match="cannot write IR file"):
        write_container(tmp_path / "nope" / "m.tcir", TEXT, {}, "p")


def test_write_rejects_bad_names_and_text(tmp_path):
    with pytest.raises(IRFileError, match="names must be strings"):
        write_container(tmp_path / "m.tcir", TEXT, {3: np.zeros(1)}, "p")
    with pytest.raises(IRFileError, match="not valid Unicode"):
        write_container(tmp_path / "m.tcir", "a\ud800", {}, "p")
    assert list(tmp_path.iterdir()) == []


# --- read failures: exhaustive truncation and corruption --------------------------------------


def test_every_truncation_is_an_irfile_error(tmp_path):
    data = small_file(tmp_path).read_bytes()
    cut = tmp_path / "cut.tcir"
    for n in range(len(data)):
        cut.write_bytes(data[:n])
        for mmap in (True, False):
            load_error(cut, mmap=mmap)


def test_every_flipped_byte_is_caught_or_harmless_padding(tmp_path):
    path = small_file(tmp_path)
    data = path.read_bytes()
    text, arrays, manifest = read_container(path)
    used = set(range(HEADER_SIZE))
    sections = [(manifest["text"]["offset"], manifest["text"]["length"])]
    sections += [(e["offset"], e["nbytes"]) for e in manifest["arrays"]]
    for off, n in sections:
        used.update(range(off, off + n))
    m_off = struct.unpack_from("<Q", data, 16)[0]
    used.update(range(m_off, len(data)))
    assert len(used) < len(data)  # the file has some padding
    bad = tmp_path / "bad.tcir"
    for pos in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            flipped = bytearray(data)
            flipped[pos] ^= mask
            bad.write_bytes(bytes(flipped))
            if pos in used:
                load_error(bad)
            else:
                t, a, m = read_container(bad)
                assert (t, m) == (text, manifest)
                assert all(a[k].tobytes() == arrays[k].tobytes() for k in arrays)


def test_array_checksum_mismatch_message(tmp_path):
    path = small_file(tmp_path)
    manifest = read_container(path)[2]
    w = next(e for e in manifest["arrays"] if e["name"] == "w")
    data = bytearray(path.read_bytes())
    data[w["offset"]] ^= 0x10
    path.write_bytes(bytes(data))
    assert load_error(path).endswith("corrupted: checksum mismatch in array 'w'")


def test_text_checksum_mismatch_message(tmp_path):
    path = small_file(tmp_path)
    data = bytearray(path.read_bytes())
    data[64] ^= 0x10
    path.write_bytes(bytes(data))
    assert "checksum mismatch in the module text" in load_error(path)


# --- read failures: not a tcir file -------------------------------------------------------------


def test_missing_file_and_directory(tmp_path):
    assert "no such file" in load_error(tmp_path / "missing.tcir")
    assert "is a directory" in load_error(tmp_path)


def test_empty_and_short_files(tmp_path):
    path = tmp_path / "m.tcir"
    path.write_bytes(b"")
    assert "empty" in load_error(path)
    path.write_bytes(MAGIC + b"\x01\x00")
    assert "truncated" in load_error(path)
    path.write_bytes(b"hi")
    assert "bad magic" in load_error(path)


def test_wrong_magic(tmp_path):
    path = tmp_path / "m.tcir"
    path.write_bytes(b"GARBAGE!" + bytes(100))
    msg = load_error(path)
    assert msg.endswith("not a tcc IR file (bad magic)")


def test_newline_mangled_magic(tmp_path):
    path = small_file(tmp_path)
    path.write_bytes(path.read_bytes().replace(b"\r\n", b"\n"))
    assert "newlines were converted" in load_error(path)


def test_onnx_file_suggests_tcc_import(tmp_path):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    node = helper.make_node("Relu", ["x"], ["y"])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]))
    for name in ("model.onnx", "model.tcir"):
        path = tmp_path / name
        path.write_bytes(model.SerializeToString())
        msg = load_error(path)
        assert "bad magic" in msg and "ONNX" in msg and "`tcc import`" in msg


def test_archives_are_recognised(tmp_path):
    zpath = tmp_path / "m.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("model.onnx", b"x")
    assert "zip archive" in load_error(zpath)
    tpath = tmp_path / "m.tar"
    with tarfile.open(tpath, "w") as t:
        info = tarfile.TarInfo("model.onnx")
        info.size = 1
        t.addfile(info, io.BytesIO(b"x"))
    assert "tar" in load_error(tpath) and "`tcc import`" in load_error(tpath)


def test_future_and_zero_version(tmp_path):
    path = small_file(tmp_path)
    manifest = read_container(path)[2]
    rewrite(path, manifest, version=FORMAT_VERSION + 1)
    assert load_error(path).endswith(
        f"written by a newer tcc (format version {FORMAT_VERSION + 1}, this tcc reads up to "
        f"{FORMAT_VERSION}); upgrade tcc"
    )
    rewrite(path, manifest, version=0)
    assert "unknown format version 0" in load_error(path)


def test_trailing_bytes_and_reserved_field(tmp_path):
    path = small_file(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data + b"\x00")
    assert "unexpected bytes after the manifest" in load_error(path)
    path.write_bytes(data[:12] + b"\x01" + data[13:])
    assert "reserved" in load_error(path)


# --- read failures: manifest garbage with a valid checksum ------------------------------------


def _mutated(tmp_path, mutate):
    path = small_file(tmp_path)
    manifest = read_container(path)[2]
    mutate(manifest)
    rewrite(path, manifest)
    return load_error(path)


EMPTY_SHA = hashlib.sha256(b"").hexdigest()


def _arr(m, name):
    return next(e for e in m["arrays"] if e["name"] == name)


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda m: m.pop("arrays"), "arrays is missing"),
        (lambda m: m.pop("producer"), "producer is missing"),
        (lambda m: m.update(text=[]), "text is missing or not an object"),
        (lambda m: m["text"].update(offset="64"), "text.offset is missing or not a non-negative"),
        (lambda m: m["text"].update(length=True), "text.length"),
        (lambda m: m["text"].update(sha256="XYZ"), "text.sha256"),
        (lambda m: m.update(format_version=2), "disagrees with the header"),
        (lambda m: m.update(arrays={}), "arrays is missing or not a list"),
        (lambda m: m["arrays"].append(5), "arrays[2].name is missing"),
        (lambda m: m["arrays"].reverse(), "not unique and sorted"),
        (lambda m: m["arrays"].append(dict(m["arrays"][1])), "not unique and sorted"),
        (lambda m: _arr(m, "w").update(dtype="object"), "unsupported dtype 'object'"),
        (lambda m: _arr(m, "w").update(shape=[2, -1]), "invalid shape"),
        (lambda m: _arr(m, "w").update(shape=[2**70, 0]), "invalid shape"),
        (lambda m: _arr(m, "w").update(shape=[1] * 100), "100 dimensions (max 64)"),
        (
            lambda m: _arr(m, "w").update(shape=[2**61, 2**61, 0], nbytes=0, sha256=EMPTY_SHA),
            "unusable shape",
        ),
        (lambda m: _arr(m, "w").update(shape=[1, 3]), "needs 12"),
        (lambda m: _arr(m, "w").update(offset=-64), "offset is missing or not a non-negative"),
        (lambda m: _arr(m, "w").update(offset=_arr(m, "w")["offset"] + 4), "not 64-aligned"),
        (lambda m: _arr(m, "w").update(offset=_arr(m, "b")["offset"]), "overlaps array 'b'"),
        (lambda m: _arr(m, "w").update(offset=0), "overlaps the header"),
        (lambda m: _arr(m, "w").update(offset=2**40), "runs past the manifest"),
        (lambda m: m["text"].update(length=10**6), "runs past the manifest"),
    ],
)
def test_manifest_garbage(tmp_path, mutate, expected):
    assert expected in _mutated(tmp_path, mutate)


@pytest.mark.parametrize(
    "blob, expected",
    [
        (b"{not json", "manifest is not valid JSON"),
        (b"\xff\xfe", "manifest is not valid JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (b"[" * 100000, "manifest is not valid JSON"),
        (b"", "manifest is not valid JSON"),
        (b'{"format_version": 1.0}', "format_version is missing"),
    ],
)
def test_manifest_not_json(tmp_path, blob, expected):
    path = small_file(tmp_path)
    rewrite(path, blob=blob)
    assert expected in load_error(path)


def test_text_not_utf8_even_with_matching_checksum(tmp_path):
    path = small_file(tmp_path)
    manifest = read_container(path)[2]
    bad_text = b"x = \xff\n"
    manifest["text"]["sha256"] = hashlib.sha256(bad_text).hexdigest()
    rewrite(path, manifest, patch=[(64, bad_text)])
    assert "module text is not valid UTF-8 at byte 4" in load_error(path)


def test_bool_array_with_bad_bytes(tmp_path):
    path = tmp_path / "m.tcir"
    write_container(path, "", {"m": np.array([True, False])}, "p")
    manifest = read_container(path)[2]
    e = manifest["arrays"][0]
    e["sha256"] = hashlib.sha256(b"\x02\x00").hexdigest()
    rewrite(path, manifest, patch=[(e["offset"], b"\x02\x00")])
    assert "holds bytes other than 0 and 1" in load_error(path)


# --- property test -----------------------------------------------------------------------------

_arrays = st.dictionaries(
    st.text(min_size=0, max_size=8),
    st.tuples(
        st.sampled_from(ALL_DTYPES),
        st.lists(st.integers(0, 4), max_size=3),
        st.integers(0, 2**32 - 1),
        st.booleans(),
    ),
    max_size=5,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(), spec=_arrays, mmap=st.booleans())
def test_property_round_trip(tmp_path, text, spec, mmap):
    arrays = {}
    for name, (dtype, shape, seed, big_endian) in spec.items():
        a = sample(dtype, tuple(shape), seed)
        arrays[name] = a.astype(a.dtype.newbyteorder(">")) if big_endian else a
    path = tmp_path / "p.tcir"
    write_container(path, text, arrays, producer="hypothesis")
    got_text, got, manifest = read_container(path, mmap=mmap)
    assert got_text == text and sorted(got) == sorted(arrays)
    for name, want in arrays.items():
        assert_same(got[name], want)
    del got  # release the mapping before the next example overwrites the file
    assert os.path.getsize(path) == struct.unpack_from("<QQ", path.read_bytes(), 16)[0] + len(
        json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    )
