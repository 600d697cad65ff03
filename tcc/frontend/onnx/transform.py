"""Converters for transform ONNX ops."""
