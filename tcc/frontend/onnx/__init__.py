"""ONNX frontend: `from_onnx(model) -> IRModule`, one converter class per ONNX op."""

from tcc.frontend.onnx import (  # noqa: F401  (registers converters)
    control_flow,
    elementwise,
    index,
    linalg,
    nn,
    reduce,
    rnn,
    sequence,
    transform,
)
from tcc.frontend.onnx.importer import find_unsupported, format_unsupported, from_onnx, load_model

__all__ = ["find_unsupported", "format_unsupported", "from_onnx", "load_model"]
