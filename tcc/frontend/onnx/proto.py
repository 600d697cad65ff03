"""ONNX's protobuf messages, and the values in them, without importing the onnx package
where tcc can.

`import onnx` takes 0.6-0.7 s, most of it in ml_dtypes, which onnx imports and which
registers its numpy loops one by one (docs/compile.md): more than a cold ResNet-50 compile
spends in any stage but its kernels. Reading a model needs only protobuf. So this module
adds the installed onnx's own message descriptors (the serialized file in its generated
`onnx_ml_pb2.py`) to protobuf's default pool and takes the classes protobuf makes of them.
Protobuf keeps one class per descriptor, and onnx adds the same file when it is imported:
the classes here are the very classes `onnx.ModelProto` and the rest, before or after onnx
is imported, so a model from either works with both. Where that cannot be had (onnx's
generated file reads differently, protobuf is not its upb implementation, or onnx is
imported already), the classes are onnx's own.

What needs onnx proper imports it when used: tensors of the types numpy lacks or in
unusual storage (`to_array`), external data, local functions (onnx's inliner), op
function bodies and op schemas (tcc.frontend.onnx.functions). A plain model (ResNet-50)
is read without it.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np

_MESSAGES = ("ModelProto", "GraphProto", "NodeProto", "TensorProto", "AttributeProto",
             "TypeProto", "ValueInfoProto", "FunctionProto", "SparseTensorProto")


@functools.cache
def messages() -> SimpleNamespace:
    """The ONNX message classes by name (`messages().ModelProto`), identical to onnx's."""
    if "onnx" not in sys.modules:
        found = _from_descriptor()
        if found is not None:
            return found
    import onnx

    return SimpleNamespace(**{name: getattr(onnx, name) for name in _MESSAGES})


def _from_descriptor() -> SimpleNamespace | None:
    try:
        from google.protobuf import descriptor_pool, message_factory
        from google.protobuf.internal import api_implementation

        if api_implementation.Type() != "upb":  # other implementations may make two classes
            return None
        spec = importlib.util.find_spec("onnx")
        if spec is None or spec.origin is None:
            return None
        with open(os.path.join(os.path.dirname(spec.origin), "onnx_ml_pb2.py"), encoding="utf-8") as f:
            source = f.read()
        call = "AddSerializedFile("
        start = source.index(call) + len(call)
        serialized = ast.literal_eval(source[start:source.index(")\n", start)])
        if not isinstance(serialized, bytes):
            return None
        pool = descriptor_pool.Default()
        pool.AddSerializedFile(serialized)
        return SimpleNamespace(**{
            name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"onnx.{name}"))
            for name in _MESSAGES})
    except Exception:  # onnx's generated file reads otherwise: import onnx instead
        return None


def __getattr__(name: str) -> Any:  # proto.TensorProto, ...
    if name in _MESSAGES:
        return getattr(messages(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_model(value) -> bool:
    """Whether `value` is an ONNX ModelProto, without importing onnx for an object that cannot
    be one."""
    return type(value).__name__ == "ModelProto" and isinstance(value, messages().ModelProto)


# ONNX element types (TensorProto.DataType) with a numpy dtype of numpy's own, by number
_NUMPY_TYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
                7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32",
                13: "uint64", 14: "complex64", 15: "complex128"}
# tcc's dtypes that numpy lacks (ml_dtypes holds them), by ONNX element type
_LOW_PRECISION_TYPES = {16: "bfloat16", 17: "float8_e4m3fn", 18: "float8_e4m3fnuz",
                        19: "float8_e5m2", 20: "float8_e5m2fnuz", 21: "uint4", 22: "int4",
                        23: "float4_e2m1fn", 24: "float8_e8m0fnu", 25: "uint2", 26: "int2"}
STRING = 8
# the typed fields whose values are the elements as they are
_PLAIN_FIELDS = {1: "float_data", 6: "int32_data", 7: "int64_data", 11: "double_data"}


def dtype_name(elem_type: int) -> str | None:
    """tcc's name for an ONNX element type ("float32", "bfloat16", "string"), None for one
    tcc has no dtype for."""
    if elem_type == STRING:
        return "string"
    return _NUMPY_TYPES.get(elem_type) or _LOW_PRECISION_TYPES.get(elem_type)


def element_type(dtype: str) -> int | None:
    """The ONNX element type of tcc's dtype `dtype`, None where ONNX has none."""
    for number in (*_NUMPY_TYPES, *_LOW_PRECISION_TYPES, STRING):
        if dtype_name(number) == dtype:
            return number
    return None


def to_array(tensor, raw_data=None) -> np.ndarray:
    """The values of a TensorProto, as onnx.numpy_helper.to_array gives them; `raw_data` (a
    buffer) stands for its raw_data field where it was read apart from the message
    (tcc.frontend.onnx.raw_data). Tensors of numpy's own types, held in raw_data or in the
    field of their own type, are read here; the rest by onnx."""
    elem = tensor.data_type
    dtype = _NUMPY_TYPES.get(elem)
    if (dtype is not None and sys.byteorder == "little" and not tensor.HasField("segment")
            and tensor.data_location != 1):  # 1: EXTERNAL
        dims = tuple(tensor.dims)
        if raw_data is not None:
            return np.frombuffer(raw_data, dtype=dtype).reshape(dims)
        if tensor.HasField("raw_data"):
            return np.frombuffer(tensor.raw_data, dtype=dtype).reshape(dims)
        field = _PLAIN_FIELDS.get(elem)
        if field is not None:
            return np.asarray(getattr(tensor, field), dtype=dtype).reshape(dims)
    from onnx import numpy_helper

    if raw_data is not None:  # onnx reads the message: one with its raw_data
        whole = type(tensor)()
        whole.CopyFrom(tensor)
        whole.raw_data = bytes(raw_data)
        tensor = whole
    return numpy_helper.to_array(tensor)


# AttributeProto.AttributeType -> the field holding the value (a list for the plural ones)
_ATTRIBUTE_FIELDS = {1: ("f", False), 2: ("i", False), 3: ("s", False), 4: ("t", False),
                     5: ("g", False), 11: ("sparse_tensor", False), 13: ("tp", False),
                     6: ("floats", True), 7: ("ints", True), 8: ("strings", True),
                     9: ("tensors", True), 10: ("graphs", True), 12: ("sparse_tensors", True),
                     14: ("type_protos", True)}


def attribute_value(attribute) -> Any:
    """An AttributeProto's value, as onnx.helper.get_attribute_value gives it (None for an
    undefined one)."""
    if attribute.ref_attr_name:
        raise ValueError(f"attribute {attribute.name!r} refers to the function's attribute "
                         f"{attribute.ref_attr_name!r} and has no value of its own")
    if attribute.type == 0:  # UNDEFINED
        return None
    found = _ATTRIBUTE_FIELDS.get(attribute.type)
    if found is None:
        raise ValueError(f"attribute {attribute.name!r} has unknown type {attribute.type}")
    field, plural = found
    value = getattr(attribute, field)
    return list(value) if plural else value
