"""Converters for recurrent ONNX ops (RNN, GRU, LSTM).

Each node becomes one `rnn` / `gru` / `lstm` call returning all outputs; the converter
hands out the ones the node uses. The ONNX attributes are normalized here: activation
names are matched case-insensitively (as onnxruntime does), and the packed
`activation_alpha` / `activation_beta` lists (consumed in order by the functions that take
the parameter) are spread to one value per activation, defaults filled in.
"""

from __future__ import annotations

from tcc.frontend.onnx.base import OnnxOp, converter
from tcc.ir.ops.rnn import (
    ACTIVATION_PARAMS,
    ACTIVATIONS,
    DEFAULT_ACTIVATIONS,
    DIRECTIONS,
    num_directions,
)

_CANONICAL = {name.lower(): name for name in ACTIVATIONS}


def _activations(node, op: str, dirs: int) -> list[str] | None:
    """The node's gate functions, one per function per direction (None: the defaults)."""
    names = node.attrs.get("activations")
    if not names:
        return None
    want = len(DEFAULT_ACTIVATIONS[op]) * dirs
    if len(names) != want:
        raise node.error(
            f"expected {want} activations ({len(DEFAULT_ACTIVATIONS[op])} per direction), "
            f"got {len(names)}"
        )
    unknown = [n for n in names if n.lower() not in _CANONICAL]
    if unknown:
        raise node.error(
            f"unsupported activation(s) {', '.join(unknown)}; "
            f"expected one of {', '.join(ACTIVATIONS)}"
        )
    return [_CANONICAL[n.lower()] for n in names]


def _spread(node, names: list[str], key: str, slot: int) -> list[float] | None:
    """ONNX packs `key` with only the values of functions that take the parameter; give
    every function its value (the next packed one, or its default)."""
    packed = list(node.attrs.get(key) or [])
    if not packed:
        return None
    out = []
    for name in names:
        default = ACTIVATION_PARAMS.get(name, (None, None))[slot]
        if default is None:
            out.append(0.0)
        else:
            out.append(float(packed.pop(0)) if packed else default)
    return out


def _attrs(node, op: str) -> dict:
    """The op attributes shared by rnn, gru and lstm."""
    direction = node.attrs.get("direction", "forward")
    if direction not in DIRECTIONS:
        raise node.error(
            f"unsupported direction {direction!r}; expected one of {', '.join(DIRECTIONS)}"
        )
    layout = node.attrs.get("layout", 0)
    if layout not in (0, 1):
        raise node.error(f"unsupported layout {layout}; expected 0 or 1")
    dirs = num_directions(direction)
    acts = _activations(node, op, dirs)
    expanded = acts or list(DEFAULT_ACTIVATIONS[op]) * dirs
    clip = node.attrs.get("clip")
    return {
        "direction": direction,
        "activations": acts,
        "activation_alpha": _spread(node, expanded, "activation_alpha", 0),
        "activation_beta": _spread(node, expanded, "activation_beta", 1),
        "clip": None if clip is None else float(clip),
        "layout": layout,
    }


def _check_hidden_size(ctx, node) -> None:
    """The `hidden_size` attribute must agree with R, which the op takes it from."""
    want = node.attrs.get("hidden_size")
    r = ctx.type_of(node, 2)
    got = r.shape[-1] if r is not None and r.ndim == 3 else None
    if want is not None and isinstance(got, int) and got != want:
        raise node.error(f"hidden_size is {want} but R has hidden size {got}")


def _operands(ctx, node, count: int) -> list:
    """The first `count` operands (None where absent), trailing absent ones dropped."""
    args = [ctx.input(node, i) for i in range(count)]
    while args and args[-1] is None:
        args.pop()
    return args


def _outputs(ctx, node, value, count: int) -> list:
    """The fields of the op's tuple that the node uses (None for an unused output)."""
    outs = []
    for i in range(count):
        used = i < len(node.outputs) and node.outputs[i]
        outs.append(ctx.bb.get_item(value, i, name=node.outputs[i]) if used else None)
    return outs


class _Recurrent(OnnxOp):
    """One converter for all opsets: later versions only add `layout` (14) and types, and
    opset 1's `output_sequence` does not change what is computed."""

    op = ""
    n_inputs = 6
    n_outputs = 2

    @classmethod
    def extra_attrs(cls, node) -> dict:
        return {}

    @classmethod
    def v1(cls, ctx, node):
        _check_hidden_size(ctx, node)
        attrs = {**_attrs(node, cls.op), **cls.extra_attrs(node)}
        value = ctx.emit(cls.op, *_operands(ctx, node, cls.n_inputs), **attrs)
        return _outputs(ctx, node, value, cls.n_outputs)


@converter("RNN")
class RNN(_Recurrent):
    op = "rnn"


@converter("GRU")
class GRU(_Recurrent):
    op = "gru"

    @classmethod
    def extra_attrs(cls, node) -> dict:
        return {"linear_before_reset": bool(node.attrs.get("linear_before_reset", 0))}


@converter("LSTM")
class LSTM(_Recurrent):
    op = "lstm"
    n_inputs = 8
    n_outputs = 3

    @classmethod
    def extra_attrs(cls, node) -> dict:
        return {"input_forget": bool(node.attrs.get("input_forget", 0))}
