"""Converters for nn ONNX ops."""
