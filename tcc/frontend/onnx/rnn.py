"""Converters for recurrent ONNX ops (RNN, GRU, LSTM)."""
