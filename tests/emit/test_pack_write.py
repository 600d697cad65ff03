"""The pack writer: a deterministic POSIX tar with a hashed manifest and mappable weights."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile

import numpy as np
import pytest

from tcc.emit.pack import PackWriteError, pack_bytes, write_pack
from tcc.emit.vm import compile_module
from tcc.rt.format import MANIFEST_HASH_FIELD, PACK_VERSION, WEIGHT_ALIGN
from tests.emit.test_vm_compile import batch_module, if_module
from tests.rt.elf_objects import minimal_shared_object


class FakeCpuModule:
    """What the LLVM backend hands the writer: object code, maybe a shared object, symbols."""

    def __init__(self, symbols, shared=True):
        self.symbols = list(symbols)
        self.object_code = b"\x7fELF object " + ",".join(sorted(symbols)).encode()
        self.shared_object = minimal_shared_object(symbols) if shared else None


def build(mod=None, weights=None, target="llvm"):
    mod = mod or batch_module()
    exe = compile_module(mod)
    weights = dict(mod.const_values) if weights is None else weights
    kernels = FakeCpuModule(["matmul", "add_one", "split_1_2", "negate"])
    return pack_bytes(exe, kernels, target, weights)


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        return {m.name: m for m in tf.getmembers()}


def member_bytes(data: bytes, name: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        return tf.extractfile(name).read()


def test_same_inputs_give_the_same_bytes(tmp_path):
    assert build() == build()
    write_pack(tmp_path / "a.tvmpack", compile_module(batch_module()),
               FakeCpuModule(["matmul", "add_one", "split_1_2"]), "llvm", batch_module().const_values)
    write_pack(tmp_path / "b.tvmpack", compile_module(batch_module()),
               FakeCpuModule(["matmul", "add_one", "split_1_2"]), "llvm", batch_module().const_values)
    assert (tmp_path / "a.tvmpack").read_bytes() == (tmp_path / "b.tvmpack").read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["a.tvmpack", "b.tvmpack"]  # no temp files left


def test_weights_lead_the_sorted_members_with_fixed_metadata():
    infos = members(build())
    assert list(infos) == ["weights.bin", "bytecode.bin", "kernels/llvm.o", "kernels/llvm.so",
                           "manifest.json"]
    for m in infos.values():
        assert (m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) == (0, 0, 0, "", "", 0o644)
        assert m.isreg()


@pytest.mark.skipif(shutil.which("tar") is None, reason="no tar tool")
def test_standard_tar_reads_it(tmp_path):
    path = tmp_path / "m.tvmpack"
    path.write_bytes(build())
    out = subprocess.run(["tar", "tf", str(path)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["weights.bin", "bytecode.bin", "kernels/llvm.o",
                                  "kernels/llvm.so", "manifest.json"]


def test_manifest_describes_the_pack():
    data = build(target="llvm -mcpu=generic")
    raw = member_bytes(data, "manifest.json")
    m = json.loads(raw)
    assert m["format"] == "tvmpack" and m["format_version"] == PACK_VERSION
    assert m["target"] == "llvm -mcpu=generic"
    assert m["entry_functions"]["main"]["inputs"] == [{"name": "x", "dtype": "float32", "shape": ["n", 4]}]
    assert m["kernels"]["symbols"] == ["add_one", "matmul", "negate", "split_1_2"]
    for name, info in m["members"].items():
        body = member_bytes(data, name)
        assert info == {"size": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    digest = m[MANIFEST_HASH_FIELD]
    assert hashlib.sha256(raw.replace(digest.encode(), b"0" * 64)).hexdigest() == digest


def test_weights_are_aligned_in_the_file():
    # a 0-d weight keeps its shape; a big-endian, transposed one is stored little-endian in
    # C order
    weights = {"b": np.arange(3, dtype=np.int8), "a": np.ones((5, 3), np.float64),
               "c": np.float32(2.5), "w": np.arange(12, dtype=np.float32).reshape(4, 3),
               "t": np.arange(12, dtype=">f4").reshape(3, 4).T}
    data = build(weights=weights)
    start = members(data)["weights.bin"].offset_data
    index = json.loads(member_bytes(data, "manifest.json"))["weights"]["arrays"]
    assert sorted(index) == ["a", "b", "c", "t", "w"]
    for name, a in weights.items():
        entry = index[name]
        assert (start + entry["offset"]) % WEIGHT_ALIGN == 0
        assert entry["shape"] == list(np.shape(a))
        raw = data[start + entry["offset"] : start + entry["offset"] + entry["nbytes"]]
        stored = np.frombuffer(raw, np.dtype(a.dtype).newbyteorder("<")).reshape(np.shape(a))
        np.testing.assert_array_equal(stored, a)


def test_missing_weight_is_refused():
    with pytest.raises(PackWriteError, match="loads weights that were not given: w"):
        build(weights={})


def test_missing_kernel_is_refused():
    exe = compile_module(if_module())
    with pytest.raises(PackWriteError, match="kernels the kernel library lacks: negate"):
        pack_bytes(exe, FakeCpuModule(["add_one"]), "llvm", {})


def test_no_shared_object_and_no_weights():
    exe = compile_module(if_module())
    data = pack_bytes(exe, FakeCpuModule(["add_one", "negate"], shared=False), "llvm", {})
    assert list(members(data)) == ["bytecode.bin", "kernels/llvm.o", "manifest.json"]
    m = json.loads(member_bytes(data, "manifest.json"))
    assert m["kernels"]["shared_object"] is None and m["weights"]["member"] is None


def test_weights_digested_apart_give_the_same_pack():
    from tcc.emit.pack import pack_parts, weights_member

    mod = batch_module()
    exe, kernels = compile_module(mod), FakeCpuModule(["matmul", "add_one", "split_1_2", "negate"])
    apart = b"".join(pack_parts(exe, kernels, "llvm", weights_member(dict(mod.const_values))))
    assert apart == build(mod)
