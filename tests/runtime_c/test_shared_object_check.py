"""A pack's shared object is checked before anything loads it (tcc/rt/elf.py and
runtime_c/src/elf.c): one whose constructor would run, but which lacks the runtime's
functions or a kernel, or was built for another machine, is refused by both runtimes with the
same message, and its constructor never runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import tcc.rt
from tcc.cli.main import cli
from tcc.rt.errors import PackError
from tests.cli.test_cli_output_paths import _model
from tests.runtime_c.test_reader import HAVE_TOOLS, _make, members_of, repack

pytestmark = pytest.mark.skipif(not HAVE_TOOLS, reason="needs cc and make")

SO = "kernels/llvm.so"
CONSTRUCTOR = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void ran(void) {
  FILE *f = fopen(getenv("TCC_TEST_MARKER"), "w");
  if (f) fclose(f);
}
%s
"""


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    return _make(tmp_path_factory.mktemp("tccrt-build"))


@pytest.fixture(scope="module")
def pack_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("pack") / "m.tvmpack"
    tcc.compile(_model(), output=path)
    return path


def _shared_object(tmp_path: Path, body: str) -> bytes:
    src, so = tmp_path / "evil.c", tmp_path / "evil.so"
    src.write_text(CONSTRUCTOR % body)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    return so.read_bytes()


def _with_so(pack_path: Path, tmp_path: Path, so: bytes, name: str) -> Path:
    def swap(members):
        members[SO] = so

    out = tmp_path / name
    out.write_bytes(repack(pack_path.read_bytes(), members_edit=swap))
    return out


def _refusals(build: Path, pack: Path, tmp_path: Path) -> list[str]:
    """The message of each way to run `pack`; none of them may run the constructor."""
    marker = tmp_path / "constructor-ran"
    env = {"TCC_TEST_MARKER": str(marker)}
    messages = []
    try:
        tcc.rt.load(pack).close()
        messages.append("loaded")
    except PackError as e:
        messages.append(str(e))
    for args in (["info", str(pack)], ["run", str(pack), "--input", "x=/nonexistent.npy"]):
        r = subprocess.run([str(build / "tccrt"), *args], capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin", **env})
        assert r.returncode == 2, r.stderr
        messages.append(r.stderr.strip().removeprefix("error: "))
    r = CliRunner().invoke(cli, ["run", str(pack), "--random-inputs", "--runtime", "c"],
                           env={"TCCRT": str(build / "tccrt"), **env})
    assert r.exit_code == 2, r.output
    messages.append(r.output.strip().removeprefix("error: "))
    assert not marker.exists(), "the shared object's constructor ran"
    return messages


@pytest.mark.parametrize("body, message", [
    ("", "the shared object has no tcc_last_error/tcc_set_num_threads; it was not built by tcc's CPU backend"),
    ("const char *tcc_last_error(void) { return 0; }\nvoid tcc_set_num_threads(int n) { (void)n; }",
     "the shared object lacks kernel '{kernel}' of the kernel table; compile the pack again"),
])
def test_a_shared_object_that_is_not_the_packs_never_runs(build, pack_path, tmp_path, body, message):
    pack = _with_so(pack_path, tmp_path, _shared_object(tmp_path, body), "evil.tvmpack")
    kernel = sorted(tcc.rt.pack.read_pack(pack_path).kernel_symbols)[0]
    want = f"{pack}: " + message.format(kernel=kernel)
    assert _refusals(build, pack, tmp_path) == [want] * 4


def test_not_an_elf_file(build, pack_path, tmp_path):
    pack = _with_so(pack_path, tmp_path, b"#!/bin/sh\necho hi\n" * 10, "text.tvmpack")
    assert _refusals(build, pack, tmp_path) == [f"{pack}: {SO} is not an ELF file; compile the pack again"] * 4


def test_a_truncated_section_table(build, pack_path, tmp_path):
    so = members_of(pack_path.read_bytes())[SO]
    pack = _with_so(pack_path, tmp_path, so[: len(so) - 100], "cut.tvmpack")
    want = f"{pack}: {SO} has a malformed section header table; compile the pack again"
    assert _refusals(build, pack, tmp_path) == [want] * 4


def test_a_target_for_another_machine(build, pack_path, tmp_path):
    def other_arch(m):
        m["target"] = m["target"].replace("-mtriple=x86_64", "-mtriple=aarch64")

    pack = tmp_path / "arm.tvmpack"
    pack.write_bytes(repack(pack_path.read_bytes(), edit=other_arch))
    want = f"{pack}: {SO} is code for ELF machine 62, but the target names aarch64; compile the pack again"
    if "x86_64" not in tcc.rt.pack.read_pack(pack_path).target:
        pytest.skip("the test pack is not for x86_64")
    assert _refusals(build, pack, tmp_path) == [want] * 4


def test_a_cross_compiled_pack_is_refused_by_both_runtimes_at_load(build, tmp_path):
    host = tcc.rt.elf.host_architecture()
    other = "aarch64" if host != "aarch64" else "x86_64"
    pack = tmp_path / "cross.tvmpack"
    tcc.compile(_model(), target=f"llvm -mtriple={other}-linux-gnu", output=pack)
    want = (f"{pack}: the pack's kernels are built for {other}, and this machine is {host}; "
            "compile the model again on this machine")
    with pytest.raises(PackError) as e:
        tcc.rt.load(pack)
    assert str(e.value) == want
    np.save(tmp_path / "x.npy", np.ones((2, 4), np.float32))
    r = subprocess.run([str(build / "tccrt"), "run", str(pack), "--input", f"x={tmp_path / 'x.npy'}"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip() == f"error: {want}"
