"""tcc: a tensor compiler toolchain (ONNX or PyTorch -> IR -> optimized code -> .tvmpack)."""

from tcc.errors import TccError

__version__ = "0.1.0"
__all__ = ["TccError", "__version__", "compile", "compile_onnx", "compile_program"]


def compile(model_or_path, target: str = "llvm", output=None, optimize: bool = True,  # noqa: A001
            sign=None):
    """Compile a model (ONNX ModelProto/bytes/path, a `torch.export.ExportedProgram` or .pt2
    path, or a .tcir path) into a .tvmpack: returns
    the pack's bytes, or writes `output`. `optimize=False` skips the graph passes; `sign`
    (an Ed25519 private key's PEM file) signs the pack (docs/security.md)."""
    from tcc.api import compile as _compile

    return _compile(model_or_path, target, output, optimize=optimize, sign=sign)


def compile_onnx(model, target: str = "llvm", optimize: bool = True):
    """Compile an ONNX model and load it: returns `fn(*arrays) -> list of outputs`."""
    from tcc.api import compile_onnx as _compile_onnx

    return _compile_onnx(model, target, optimize=optimize)


def compile_program(program, target: str = "llvm", optimize: bool = True):
    """Compile a PyTorch program (`torch.export.ExportedProgram`, or a .pt2 file saved by
    `torch.export.save`) and load it: returns `fn(*arrays) -> list of outputs`."""
    from tcc.api import compile_program as _compile_program

    return _compile_program(program, target, optimize=optimize)
