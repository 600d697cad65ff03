"""Seed packs for the fuzzers: real packs of small models (an MLP with a symbolic batch, an
If feeding a Loop with a scan output, four weights, an ONNX Loop calling a VM function), with
the kernel members shrunk (tests/runtime_c/test_fuzz.py _short_kernels)."""

from __future__ import annotations

from pathlib import Path

import tcc
from tests.emit.test_vm_loops import onnx_loop_model
from tests.runtime_c.test_fuzz import _control_flow, _mlp, _short_kernels, _weights
from tests.runtime_c.test_reader import repack


def seed_packs(folder: Path) -> list[bytes]:
    out = []
    for name, model in [("mlp", _mlp()), ("control_flow", _control_flow()), ("weights", _weights()),
                        ("loop", onnx_loop_model())]:
        path = Path(folder) / f"{name}.tvmpack"
        tcc.compile(model, output=path)
        out.append(repack(path.read_bytes(), members_edit=_short_kernels))
    return out
