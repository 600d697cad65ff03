"""Converters for linear-algebra ONNX ops (MatMul, Gemm, Einsum, Attention, ...)."""
