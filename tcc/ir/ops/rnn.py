"""Recurrent ops: rnn, gru, lstm (ONNX layouts, all directions)."""
