"""tcc: a tensor compiler toolchain (ONNX -> IR -> optimized code -> .tvmpack)."""

__version__ = "0.1.0"
