"""Reading packs: round trips, and every kind of damage is a one-line PackError naming the
file (never a crash or a hang)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tcc.emit.pack import _tar_parts, pack_bytes
from tcc.emit.vm import compile_module
from tcc.rt.errors import PackError
from tcc.rt.format import MANIFEST_HASH_FIELD
from tcc.rt.pack import read_pack
from tests.emit.test_pack_write import FakeCpuModule, build
from tests.emit.test_vm_compile import batch_module


def unpack(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        return {m.name: tf.extractfile(m).read() for m in tf.getmembers()}


def rewrite(data: bytes, edit_manifest=None, edit_members=None) -> bytes:
    """Change a pack and make every hash consistent again, as a careful forger would."""
    files = unpack(data)
    if edit_members:
        edit_members(files)
    m = json.loads(files.pop("manifest.json"))
    m["members"] = {n: {"size": len(b), "sha256": hashlib.sha256(b).hexdigest()}
                    for n, b in sorted(files.items())}
    if edit_manifest:
        edit_manifest(m)
    m[MANIFEST_HASH_FIELD] = "0" * 64
    text = json.dumps(m, sort_keys=True, indent=1).encode() + b"\n"
    digest = hashlib.sha256(text).hexdigest()
    files["manifest.json"] = text.replace(b"0" * 64, digest.encode(), 1)
    return b"".join(_tar_parts(files))


def expect_error(tmp_path, data: bytes, match: str):
    path = tmp_path / "bad.tvmpack"
    path.write_bytes(data)
    with pytest.raises(PackError, match=match) as info:
        read_pack(path)
    msg = str(info.value)
    assert msg.startswith(str(path)) and "\n" not in msg
    return msg


def test_round_trip(tmp_path):
    path = tmp_path / "m.tvmpack"
    mod = batch_module()
    exe = compile_module(mod)
    path.write_bytes(pack_bytes(exe, FakeCpuModule(["matmul", "add_one", "split_1_2"]), "llvm",
                                mod.const_values))
    with read_pack(path) as pc:
        assert pc.executable.as_text() == exe.as_text()
        assert pc.signatures == exe.signatures
        assert pc.target == "llvm"
        assert pc.kernel_symbols == ["add_one", "matmul", "split_1_2"]
        assert pc.object_code.startswith(b"\x7fELF object") and pc.shared_object.startswith(b"\x7fELF")
        w = pc.weights["w"]
        np.testing.assert_array_equal(w, mod.const_values["w"])
        assert not w.flags.writeable and not w.flags.owndata  # a view of the mapped file
        assert w.ctypes.data % 64 == 0


def test_reread_after_rewrite_is_accepted(tmp_path):
    """The forging helper itself makes valid packs (so the errors below are the edits')."""
    path = tmp_path / "m.tvmpack"
    path.write_bytes(rewrite(build()))
    read_pack(path).close()


@pytest.mark.parametrize("name", ["bytecode.bin", "kernels/llvm.o", "kernels/llvm.so",
                                  "manifest.json", "weights.bin"])
def test_flipped_byte_in_each_member(tmp_path, name):
    data = bytearray(build())
    with tarfile.open(fileobj=io.BytesIO(bytes(data))) as tf:
        info = tf.getmember(name)
    for at in (0, info.size // 2, info.size - 1):
        bad = bytearray(data)
        bad[info.offset_data + at] ^= 0x20
        expect_error(tmp_path, bytes(bad), "corrupted|not valid JSON|malformed|fields")


def test_truncated_at_many_points(tmp_path):
    data = build()
    for cut in sorted({0, 1, 511, 512, 1024, 1500, len(data) // 3, len(data) // 2,
                       len(data) - 10241, len(data) - 10240 - 1}):
        expect_error(tmp_path, data[:cut], "too small|truncated|corrupted")


def test_wrong_version(tmp_path):
    bad = rewrite(build(), edit_manifest=lambda m: m.update(format_version=2))
    expect_error(tmp_path, bad, r"format version 2 is not supported .*rebuild the pack")


def test_wrong_bytecode_version(tmp_path):
    bad = rewrite(build(), edit_manifest=lambda m: m["bytecode"].update(version=9))
    expect_error(tmp_path, bad, r"bytecode version 9 is not supported")


def test_garbage_and_missing_files(tmp_path):
    expect_error(tmp_path, b"", "too small")
    expect_error(tmp_path, np.random.default_rng(0).bytes(8192), "checksum|ustar|malformed")
    with pytest.raises(PackError, match="cannot read"):
        read_pack(tmp_path / "nope.tvmpack")


def test_extra_and_missing_members(tmp_path):
    def add(files):
        files["extra.txt"] = b"hi"

    forged = rewrite(build(), edit_members=add, edit_manifest=lambda m: m["members"].pop("extra.txt"))
    expect_error(tmp_path, forged, r"unlisted: \['extra.txt'\]")


def test_manifest_field_types_are_checked(tmp_path):
    bad = rewrite(build(), edit_manifest=lambda m: m["kernels"].update(symbols="matmul"))
    expect_error(tmp_path, bad, "kernels.symbols has the wrong type")
    bad = rewrite(build(), edit_manifest=lambda m: m.update(surprise=1))
    expect_error(tmp_path, bad, r"unknown: \['surprise'\]")


def test_weight_index_out_of_bounds(tmp_path):
    bad = rewrite(build(), edit_manifest=lambda m: m["weights"]["arrays"]["w"].update(offset=64))
    expect_error(tmp_path, bad, "weight 'w': offset 64 .* out of bounds")
    bad = rewrite(build(), edit_manifest=lambda m: m["weights"]["arrays"]["w"].update(shape=[4, 4]))
    expect_error(tmp_path, bad, "weight 'w': 48 bytes do not hold shape")


def test_bytecode_naming_an_unknown_kernel(tmp_path):
    bad = rewrite(build(), edit_manifest=lambda m: m["kernels"].update(symbols=["matmul"]))
    expect_error(tmp_path, bad, "calls kernel 'add_one', which the kernel table lacks")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_any_single_byte_change_is_caught_or_harmless(tmp_path, data):
    """A change to any byte either is reported or (tar padding) leaves the pack as it was."""
    good = build()
    at = data.draw(st.integers(0, len(good) - 1))
    value = data.draw(st.integers(0, 255))
    bad = bytearray(good)
    bad[at] = value
    path = tmp_path / "fuzz.tvmpack"
    path.write_bytes(bytes(bad))
    try:
        pc = read_pack(path)
    except PackError as e:
        assert "\n" not in str(e)
        return
    with pc:
        assert pc.executable.encode() == compile_module(batch_module()).encode()
        np.testing.assert_array_equal(pc.weights["w"], batch_module().const_values["w"])
