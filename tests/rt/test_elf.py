"""tcc/rt/elf.py reads the dynamic symbols of real shared objects as readelf does, and refuses
what is not a well-formed ELF64 shared object with a message saying why."""

import shutil
import struct
import subprocess

import pytest

from tcc.rt.elf import ElfError, exported_functions, host_architecture, triple_architecture
from tests.rt.elf_objects import minimal_shared_object


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs cc")
def test_functions_of_a_real_shared_object(tmp_path):
    (tmp_path / "a.c").write_text("int visible(void) { return 1; }\n"
                                  "static int hidden(void) { return 2; }\n"
                                  "int data = 3;\n"
                                  "extern int puts(const char *);\n"
                                  "int uses(void) { return hidden() + puts(\"x\"); }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "a.so"), str(tmp_path / "a.c")], check=True)
    machine, names = exported_functions((tmp_path / "a.so").read_bytes())
    assert {"visible", "uses"} <= names
    assert not {"hidden", "data", "puts"} & names  # local, an object, undefined
    assert machine == {"x86_64": 62, "aarch64": 183}.get(host_architecture(), machine)


def test_the_minimal_object_round_trips():
    assert exported_functions(minimal_shared_object(["k1", "k2"], 183)) == (
        183, {"k1", "k2", "tcc_last_error", "tcc_set_num_threads"})


@pytest.mark.parametrize("edit, message", [
    (lambda b: b"MZ" + b[2:], "is not an ELF file"),
    (lambda b: b[:4] + b"\x01" + b[5:], "is not a 64-bit little-endian ELF file"),
    (lambda b: b[:16] + struct.pack("<H", 2) + b[18:], "is not a shared object (ELF type 2)"),
    (lambda b: b[:40] + struct.pack("<Q", 1 << 40) + b[48:], "has a malformed section header table"),
    (lambda b: b[:100], "has a malformed section header table"),
])
def test_malformed_objects(edit, message):
    with pytest.raises(ElfError, match=message.replace("(", r"\(").replace(")", r"\)")):
        exported_functions(edit(minimal_shared_object(["k"])))


def test_triples():
    assert triple_architecture("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=znver4") == "x86_64"
    assert triple_architecture("llvm -mtriple=arm64-apple-darwin") == "aarch64"
    assert triple_architecture("llvm") is None
