"""Converters for reduce ONNX ops."""
