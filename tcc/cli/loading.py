"""Open whatever file a command is given: a .tcir IR file, an ONNX model or a PyTorch
program (.pt2)."""

from __future__ import annotations

from pathlib import Path

from tcc.infile import not_a_file
from tcc.ir.errors import TccError


def load_ir(path: Path):
    """An IRModule from a .tcir file, or imported on the fly from a .onnx model or a .pt2
    program."""
    why = not_a_file(path)
    if why:
        raise TccError(f"{path}: {why}")
    if path.suffix == ".onnx":
        from tcc.frontend.onnx import from_onnx

        return from_onnx(path)
    if path.suffix == ".pt2":
        from tcc.frontend.torch import from_exported_program

        return from_exported_program(path)
    from tcc.ir.irfile import load_module

    return load_module(path)
