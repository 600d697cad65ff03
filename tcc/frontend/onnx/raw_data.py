"""A model file's weights read once, each into an array of its own.

Reading a model with protobuf copies each initializer's `raw_data` three times: the file
into one `bytes`, that into protobuf's own memory as it parses, and the field into a `bytes`
of its own when read. ResNet-50's 100 MB of weights were in memory three times, and the
copies were 0.15 s of a cold compile's 0.28 s import. `read_lifted` walks the file instead
(protobuf's wire format: ModelProto.graph, field 7; GraphProto.initializer, field 5;
TensorProto.raw_data, field 9), reads each of those fields' values straight into a buffer
of its own, and gives the rest of the model's bytes, without those fields, for protobuf to
parse. Everything else (nodes, subgraphs and their initializers, tensors in attributes)
stays in the message as it was. The buffers are aligned, which views of one buffer holding
the file would not be (numpy reads unaligned arrays 30-50% slower); like `raw_data` they
are read-only.
"""

from __future__ import annotations

import numpy as np

_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_RAW_DATA = 7, 5, 9
_LEN = 2  # the wire type of length-delimited fields
_WINDOW = 1 << 16  # the structure is read through a window of this many bytes


class _Unexpected(Exception):
    """The file is not what a well-formed model is: protobuf is left to say what."""


class _File:
    """Reads of a regular file's bytes by position."""

    def __init__(self, f):
        self._f = f
        self.size = f.seek(0, 2)
        self._base, self._window = 0, b""

    def _ensure(self, start: int, end: int) -> None:
        if self._base <= start and end <= self._base + len(self._window):
            return
        if end > self.size:
            raise _Unexpected
        self._f.seek(start)
        want = max(end, min(start + _WINDOW, self.size)) - start
        window = self._f.read(want)
        if len(window) != want:  # the file changed under the reader
            raise _Unexpected
        self._base, self._window = start, window

    def bytes(self, start: int, end: int) -> bytes:
        self._ensure(start, end)
        return self._window[start - self._base:end - self._base]

    def varint(self, pos: int) -> tuple[int, int]:
        """The varint at `pos`, and the position after it."""
        self._ensure(pos, min(pos + 10, self.size))
        window, offset = self._window, pos - self._base
        result = shift = 0
        while True:
            byte = window[offset]  # IndexError past the file's end
            offset += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result, offset + self._base
            shift += 7
            if shift > 63:
                raise _Unexpected

    def array(self, start: int, end: int) -> np.ndarray:
        """The bytes start..end in an array of their own: copied from the window where it
        holds them (a small tensor), else read from the file straight into the array."""
        if end - start <= _WINDOW:
            self._ensure(start, end)
            offset = start - self._base
            out = np.frombuffer(self._window, np.uint8, end - start, offset).copy()
        else:
            out = np.empty(end - start, np.uint8)
            view, got = memoryview(out), 0
            self._f.seek(start)
            while got < len(out):
                n = self._f.readinto(view[got:])
                if not n:
                    raise _Unexpected
                got += n
        out.flags.writeable = False
        return out

    def fields(self, pos: int, end: int):
        """(field number, wire type, start of the field, start of its value, end) of each
        field of the message at pos..end; a length-delimited value runs value start..end."""
        while pos < end:
            start = pos
            tag, pos = self.varint(pos)
            wire_type = tag & 7
            if wire_type == 0:
                _, after = self.varint(pos)
            elif wire_type == 1:
                after = pos + 8
            elif wire_type == _LEN:
                length, pos = self.varint(pos)
                after = pos + length
            elif wire_type == 5:
                after = pos + 4
            else:  # groups: no ONNX message has them
                raise _Unexpected
            if after > end:
                raise _Unexpected
            yield tag >> 3, wire_type, start, pos, after
            pos = after


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _message(tag: int, pieces: list) -> list:
    return [_encode_varint(tag), _encode_varint(sum(len(p) for p in pieces)), *pieces]


def _tensor(file: _File, pos: int, end: int) -> tuple[list, np.ndarray | None]:
    """The pieces of the TensorProto at pos..end without its raw_data, and that."""
    pieces: list = []
    raw = None
    for number, wire_type, start, value, after in file.fields(pos, end):
        if number == _TENSOR_RAW_DATA and wire_type == _LEN:
            raw = file.array(value, after)  # protobuf keeps the last of a singular field
        else:
            pieces.append(file.bytes(start, after))
    return pieces, raw


def read_lifted(f) -> tuple[bytes, dict[int, np.ndarray]] | None:
    """The serialized model in the regular file `f` (open for binary reads) without its
    graph's initializers' raw_data, and those, by the index of their initializer; None
    where the file does not read as one model (protobuf then says what is wrong with it)."""
    try:
        file = _File(f)
        pieces: list = []
        lifted: dict[int, np.ndarray] = {}
        graphs = 0
        for number, wire_type, start, value, after in file.fields(0, file.size):
            if number != _MODEL_GRAPH or wire_type != _LEN:
                pieces.append(file.bytes(start, after))
                continue
            graphs += 1  # a second graph field merges into the first: left to protobuf
            graph: list = []
            initializers = 0
            for inner, inner_type, i_start, i_value, i_after in file.fields(value, after):
                if inner != _GRAPH_INITIALIZER or inner_type != _LEN:
                    graph.append(file.bytes(i_start, i_after))
                    continue
                tensor, raw = _tensor(file, i_value, i_after)
                if raw is not None:
                    lifted[initializers] = raw
                graph += _message(_GRAPH_INITIALIZER << 3 | _LEN, tensor)
                initializers += 1
            pieces += _message(_MODEL_GRAPH << 3 | _LEN, graph)
    except (_Unexpected, IndexError):
        return None
    if graphs > 1:
        return None
    return b"".join(pieces), lifted
