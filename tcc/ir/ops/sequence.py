"""Sequences and optionals (ONNX `seq(tensor)` and `optional(...)` values).

A sequence is a list of tensors whose length is known at run time only; an optional is a
value or nothing (tcc.ir.graph.SequenceType, OptionalType). These ops run in the reference
interpreter; they have no loop program (a list of tensors is not a buffer), so `tcc compile`
names them and points to the interpreter.

Positions follow ONNX: a negative position counts from the end, and one outside the
sequence is an error at run time, named by the op.
"""

from __future__ import annotations

import numpy as np

from tcc.ir.dtype import check_dtype
from tcc.ir.errors import InputError, ShapeError
from tcc.ir.expr import fresh_var
from tcc.ir.graph import OptionalType, SequenceType, TensorType, join_sequence_shapes
from tcc.ir.ops._util import scalar_int
from tcc.ir.ops.registry import REQUIRED, OpDef, normalize_axis, register, tensor


def sequence(t, op: str, what: str = "input") -> SequenceType:
    if not isinstance(t, SequenceType):
        raise ShapeError(f"op {op}: {what} must be a sequence, got {t}")
    return t


def element_shape(t: TensorType) -> tuple[int | None, ...]:
    """A tensor's shape as sequence elements record it: static dims kept, the rest None."""
    return tuple(d if isinstance(d, int) else None for d in t.shape)


def element_type(t: SequenceType, op: str) -> TensorType:
    """The type of one element taken out of `t`: fresh size variables where elements differ."""
    if t.shape is None:
        raise ShapeError(
            f"op {op}: the rank of the sequence's elements is not known before run time "
            "(it is empty, or mixes ranks); tcc needs it to type the element")
    return TensorType(tuple(fresh_var("d") if d is None else d for d in t.shape), t.dtype)


def _position_type(t, op: str) -> None:
    if t is None:
        return
    t = tensor(t, op, "position")
    if t.dtype not in ("int32", "int64") or t.ndim > 1 or (t.ndim == 1 and t.shape[0] not in (1,)):
        raise ShapeError(f"op {op}: position must be an int32 or int64 scalar, got {t}")


def _position(position, length: int, op: str, insert: bool = False) -> int:
    """The index a position operand names; for an insertion `length` itself is allowed."""
    p = scalar_int(position)
    high = length if insert else length - 1
    if not -length <= p <= high:
        raise InputError(
            f"{op}: position {p} is outside the sequence of {length} tensor"
            f"{'' if length == 1 else 's'} (valid: {-length} to {high})")
    return p + length if p < 0 else p


def _insert_infer(args, attrs):
    op = "sequence_insert"
    seq, x = sequence(args[0], op), tensor(args[1], op, "tensor")
    _position_type(args[2] if len(args) > 2 else None, op)
    if x.dtype != seq.dtype:
        raise ShapeError(f"op {op}: a {x.dtype} tensor cannot join a sequence of {seq.dtype}")
    shape = element_shape(x) if seq.empty else join_sequence_shapes(seq.shape, element_shape(x))
    return SequenceType(seq.dtype, shape)


def _insert_ref(seq, x, position=None):
    out = list(seq)
    at = len(out) if position is None else _position(position, len(out), "sequence_insert", True)
    out.insert(at, x)
    return out


def _erase_infer(args, attrs):
    seq = sequence(args[0], "sequence_erase")
    _position_type(args[1] if len(args) > 1 else None, "sequence_erase")
    return seq


def _erase_ref(seq, position=None):
    out = list(seq)
    if not out:
        raise InputError("sequence_erase: the sequence is empty; there is nothing to erase")
    del out[-1 if position is None else _position(position, len(out), "sequence_erase")]
    return out


def _at_ref(seq, position):
    return seq[_position(position, len(seq), "sequence_at")]


def _construct_infer(args, attrs):
    op = "sequence_construct"
    types = [tensor(a, op, f"input {i}") for i, a in enumerate(args)]
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise ShapeError(f"op {op}: the tensors of a sequence share one dtype, got "
                         f"{', '.join(sorted(dtypes))}")
    shape = element_shape(types[0])
    for t in types[1:]:
        shape = join_sequence_shapes(shape, element_shape(t))
    return SequenceType(types[0].dtype, shape)


def _empty_infer(args, attrs):
    check_dtype(attrs["dtype"])
    return SequenceType(attrs["dtype"], None, empty=True)


register(OpDef("sequence_empty", _empty_infer, lambda dtype: [], {"dtype": "float32"},
               num_args=(0, 0), doc="An empty sequence of `dtype` tensors."))
register(OpDef("sequence_construct", _construct_infer, lambda *xs: list(xs), num_args=(1, None),
               doc="A sequence of the given tensors, in order."))
register(OpDef("sequence_insert", _insert_infer, _insert_ref, num_args=(2, 3),
               doc="The sequence with `tensor` inserted at `position` (default: at the end)."))
register(OpDef("sequence_erase", _erase_infer, _erase_ref, num_args=(1, 2),
               doc="The sequence without the tensor at `position` (default: the last)."))
register(OpDef(
    "sequence_at",
    lambda args, attrs: (_position_type(args[1], "sequence_at"),
                         element_type(sequence(args[0], "sequence_at"), "sequence_at"))[1],
    _at_ref, num_args=(2, 2), doc="The tensor at `position`."))
register(OpDef(
    "sequence_length",
    lambda args, attrs: (sequence(args[0], "sequence_length"), TensorType((), "int64"))[1],
    lambda seq: np.array(len(seq), np.int64), doc="The number of tensors, as an int64 scalar."))


# ---------------------------------------------------------------------------------------------
# split_to_sequence, concat_from_sequence


def _split_infer(args, attrs):
    op = "split_to_sequence"
    x = tensor(args[0], op, "input")
    axis = normalize_axis(attrs["axis"], x.ndim, op)
    shape = list(element_shape(x))
    split = args[1] if len(args) > 1 else None
    if split is not None:
        split = tensor(split, op, "split")
        if split.dtype not in ("int32", "int64") or split.ndim > 1:
            raise ShapeError(f"op {op}: split must be an int32 or int64 scalar or vector, got {split}")
        shape[axis] = None
    elif attrs["keepdims"]:
        shape[axis] = 1
    else:
        del shape[axis]
    return SequenceType(x.dtype, tuple(shape))


def _split_ref(x, split=None, axis=0, keepdims=1):
    op = "split_to_sequence"
    axis %= max(x.ndim, 1)
    n = x.shape[axis]
    if split is None:
        parts = np.split(x, n, axis=axis)
        return parts if keepdims else [np.squeeze(p, axis) for p in parts]
    split = np.asarray(split)
    if split.ndim == 0:
        step = int(split)
        if step <= 0:
            raise InputError(f"{op}: the split size is {step}; it must be positive")
        sizes = [step] * (n // step) + ([n % step] if n % step else [])
    else:
        sizes = [int(s) for s in split]
        if any(s < 0 for s in sizes) or sum(sizes) != n:
            raise InputError(f"{op}: the split sizes {sizes} must be non-negative and add up to "
                             f"the axis length {n}")
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


register(OpDef("split_to_sequence", _split_infer, _split_ref, {"axis": 0, "keepdims": 1},
               num_args=(1, 2),
               doc="The input split along `axis` into a sequence: by the sizes of `split`, into "
                   "parts of a scalar `split`'s size, or (without `split`) into single slices, "
                   "whose axis `keepdims` keeps."))


def _concat_infer(args, attrs):
    op = "concat_from_sequence"
    seq = sequence(args[0], op)
    elem = element_type(seq, op)
    if attrs["new_axis"]:
        axis = normalize_axis(attrs["axis"], elem.ndim + 1, op)
        shape = list(elem.shape)
        shape.insert(axis, fresh_var("n"))
    else:
        axis = normalize_axis(attrs["axis"], elem.ndim, op)
        shape = list(elem.shape)
        shape[axis] = fresh_var("n")
    return TensorType(tuple(shape), seq.dtype)


def _concat_ref(seq, axis, new_axis):
    op = "concat_from_sequence"
    if not seq:
        raise InputError(f"{op}: the sequence is empty; there is nothing to concatenate")
    try:
        if new_axis:
            return np.stack(seq, axis=axis % (seq[0].ndim + 1))
        return np.concatenate(seq, axis=axis % max(seq[0].ndim, 1))
    except ValueError:
        shapes = ", ".join(str(tuple(s.shape)) for s in seq)
        raise InputError(f"{op}: tensors of shapes {shapes} do not "
                         f"{'stack' if new_axis else 'concatenate'} along axis {axis}") from None


register(OpDef("concat_from_sequence", _concat_infer, _concat_ref,
               {"axis": REQUIRED, "new_axis": 0},
               doc="The sequence's tensors concatenated along `axis` (stacked on a new axis "
                   "there with `new_axis`)."))


# ---------------------------------------------------------------------------------------------
# optionals


def _optional_infer(args, attrs):
    if args[0] is not None:
        x = args[0]
        if not isinstance(x, (TensorType, SequenceType)):
            raise ShapeError(f"op optional: wraps a tensor or a sequence, got {x}")
        return OptionalType(x)
    if attrs["dtype"] is None:
        raise ShapeError("op optional: an empty optional needs its element type (the dtype "
                         "attribute)")
    check_dtype(attrs["dtype"])
    shape = attrs["shape"]
    if attrs["sequence"]:
        return OptionalType(SequenceType(attrs["dtype"], None if shape is None else tuple(shape)))
    if shape is None:
        raise ShapeError("op optional: an empty optional tensor needs its rank (the shape "
                         "attribute)")
    return OptionalType(TensorType(tuple(fresh_var("d") if d is None else d for d in shape),
                                   attrs["dtype"]))


register(OpDef(
    "optional", _optional_infer, lambda x=None, dtype=None, shape=None, sequence=False: x,
    {"dtype": None, "shape": None, "sequence": False}, num_args=(1, 1),
    doc="An optional holding the operand, or, with the operand absent, an empty optional of "
        "the element type the attributes give (a tensor, or a sequence with `sequence`; None "
        "in `shape` for a dimension not known)."))


def _elem_of(t):
    return t.elem if isinstance(t, OptionalType) else t


def _get_infer(args, attrs):
    t = _elem_of(args[0])
    if not isinstance(t, (TensorType, SequenceType)):
        raise ShapeError(f"op optional_get_element: takes an optional, a tensor or a sequence, "
                         f"got {args[0]}")
    return t


def _get_ref(x):
    if x is None:
        raise InputError("optional_get_element: the optional is empty; check it with "
                         "OptionalHasElement first")
    return x


register(OpDef("optional_get_element", _get_infer, _get_ref,
               doc="The value an optional holds (a tensor or sequence operand is returned as "
                   "it is); an empty optional is an error."))
register(OpDef(
    "optional_has_element", lambda args, attrs: TensorType((), "bool"),
    lambda x=None: np.array(x is not None), num_args=(1, 1),
    doc="Whether the operand holds a value: false for an empty optional or an absent operand."))
