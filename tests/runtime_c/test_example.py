"""The C example of docs/c-runtime.md ("## Example"): compiled against build/libtccrt.a as the
doc says, run on a small pack, and what it prints checked against tcc.rt."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tcc
import tcc.rt
from tests.runtime_c.capi import RUNTIME, build_runtime

DOC = RUNTIME.parent / "docs" / "c-runtime.md"
HAVE_TOOLS = shutil.which("cc") is not None and shutil.which("make") is not None
pytestmark = pytest.mark.skipif(not HAVE_TOOLS, reason="needs cc and make")


def example_source() -> str:
    """The one ```c block of the "## Example" section."""
    text = DOC.read_text()
    section = text.split("\n## Example\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```c\n(.*?)```", section, re.S)
    assert len(blocks) == 1, f"{DOC}: expected one ```c block under ## Example, found {len(blocks)}"
    return blocks[0]


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("example")
    build = build_runtime(d / "build")
    (d / "example.c").write_text(example_source())
    subprocess.run(
        [
            "cc",
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{RUNTIME / 'include'}",
            str(d / "example.c"),
            str(build / "libtccrt.a"),
            "-ldl",
            "-lpthread",
            "-o",
            str(d / "example"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return d / "example"


@pytest.fixture(scope="module")
def pack(tmp_path_factory) -> Path:
    """y = relu(x @ W + B) with x float32[batch, 4]."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), "W")
    b = numpy_helper.from_array(np.full(3, 0.5, np.float32), "B")
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["mm"]),
            helper.make_node("Add", ["mm", "B"], ["s"]),
            helper.make_node("Relu", ["s"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [w, b],
    )
    path = tmp_path_factory.mktemp("pack") / "m.tvmpack"
    tcc.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), output=path)
    return path


def test_example_prints_the_python_runtimes_values(example, pack):
    r = subprocess.run([str(example), str(pack)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    x = (0.25 * np.arange(8)).astype(np.float32).reshape(2, 4)  # as the example fills it
    with tcc.rt.load(pack) as m:
        (want,) = m["main"](x)
    assert lines[0] == f"float32{list(want.shape)}"
    got = np.array([float(v) for v in lines[1:]], dtype=np.float32)
    assert got.tobytes() == want.ravel()[:4].tobytes()
    assert np.count_nonzero(got) > 0  # relu leaves values to compare


def test_example_reports_errors(example, tmp_path):
    r = subprocess.run(
        [str(example), str(tmp_path / "none.tvmpack")], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("error: ") and "none.tvmpack" in r.stderr
