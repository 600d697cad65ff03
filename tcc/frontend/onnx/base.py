"""Converter base: one `OnnxOp` subclass per ONNX op, with a `v<N>` method per opset range."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from tcc.frontend.onnx import proto
from tcc.ir.errors import FrontendError

if TYPE_CHECKING:
    import onnx


@dataclass
class OnnxNode:
    """An ONNX node with decoded attributes (bytes -> str, tensors -> numpy arrays)."""

    name: str
    op_type: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    opset: int = 0
    proto: onnx.NodeProto | None = None

    @classmethod
    def from_proto(cls, node: onnx.NodeProto, opset: int, index: int) -> OnnxNode:
        attrs = {a.name: decode_attribute(a) for a in node.attribute}
        return cls(
            name=node.name or f"{node.op_type}_{index}",
            op_type=node.op_type,
            domain=normalize_domain(node.domain),
            inputs=list(node.input),
            outputs=list(node.output),
            attrs=attrs,
            opset=opset,
            proto=node,
        )

    def where(self) -> str:
        return f"node {self.name!r} ({self.op_type}, opset {self.opset})"

    def error(self, message: str) -> FrontendError:
        """A FrontendError located at this node."""
        return FrontendError(f"{self.where()}: {message}")

    def choice(self, name: str, default: str, allowed) -> str:
        """String attribute `name`, rejected with a node error when tcc does not know the value."""
        value = self.attrs.get(name, default)
        if value not in allowed:
            raise self.error(f"unsupported {name} {value!r}; supported: {', '.join(allowed)}")
        return value

    def has_input(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] != ""


def normalize_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def decode_attribute(a: onnx.AttributeProto) -> Any:
    v = proto.attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    if isinstance(v, proto.TensorProto):
        return proto.to_array(v)
    if isinstance(v, list) and v and isinstance(v[0], bytes):
        return [x.decode("utf-8", errors="replace") for x in v]
    if isinstance(v, list) and v and isinstance(v[0], proto.TensorProto):
        return [proto.to_array(x) for x in v]
    return v


class OnnxOp:
    """Subclasses set `op_type` (and `domain`) and define classmethods `v1`, `v13`, ...:
    `vN(ctx, node)` handles opsets N up to the next defined version and returns the node's
    outputs (one value or a list; None for an absent optional output)."""

    op_type: ClassVar[str] = ""
    domain: ClassVar[str] = ""

    @classmethod
    def versions(cls) -> list[int]:
        return sorted(int(k[1:]) for k in dir(cls) if k[:1] == "v" and k[1:].isdigit())

    @classmethod
    def impl_for(cls, opset: int):
        """The `vN` method with the largest N <= opset, or None."""
        usable = [v for v in cls.versions() if v <= opset]
        return getattr(cls, f"v{usable[-1]}") if usable else None


CONVERTERS: dict[tuple[str, str], type[OnnxOp]] = {}


def converter(op_type: str, domain: str = ""):
    """Class decorator registering an OnnxOp subclass for `op_type`."""

    def wrap(cls: type[OnnxOp]) -> type[OnnxOp]:
        cls.op_type, cls.domain = op_type, normalize_domain(domain)
        key = (cls.domain, op_type)
        if key in CONVERTERS:
            raise ValueError(f"converter for {op_type} registered twice")
        CONVERTERS[key] = cls
        return cls

    return wrap


def onnx_dtype(elem_type: int) -> str:
    """tcc dtype name of an ONNX TensorProto element type (FrontendError when tcc has none)."""
    name = proto.dtype_name(elem_type)
    if name is None:
        try:
            onnx_name = proto.TensorProto.DataType.Name(elem_type)
        except ValueError:
            onnx_name = str(elem_type)
        raise FrontendError(f"unsupported ONNX element type {onnx_name}")
    return name
