"""Converters for indexing ONNX ops (Gather*, Scatter*, Resize, NonZero, ...)."""
