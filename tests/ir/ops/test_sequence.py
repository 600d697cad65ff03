"""Sequence and optional ops: what their types say the elements share, and their references'
position rules (checked against Python's list semantics and numpy)."""

import numpy as np
import pytest

from tcc.ir.errors import InputError, ShapeError
from tcc.ir.expr import Var
from tcc.ir.graph import OptionalType, SequenceType, TensorType, join_types
from tests.helpers import infer, ref

n = Var("n")
F32 = "float32"


def _t(*shape, dtype=F32):
    return TensorType(shape, dtype)


def test_elements_share_only_what_every_element_has():
    assert infer("sequence_construct", _t(n, 4), _t(3, 4)) == SequenceType(F32, (None, 4))
    assert infer("sequence_construct", _t(2, 4), _t(2, 4)) == SequenceType(F32, (2, 4))
    # ONNX lets a sequence mix ranks: then the rank is unknown
    assert infer("sequence_construct", _t(2), _t(2, 4)) == SequenceType(F32, None)
    empty = infer("sequence_empty", dtype=F32)
    assert empty == SequenceType(F32, None, empty=True)
    assert infer("sequence_insert", empty, _t(n, 4)) == SequenceType(F32, (None, 4))
    assert infer("sequence_insert", SequenceType(F32, None), _t(3)) == SequenceType(F32, None)


def test_a_taken_element_gets_fresh_dims_where_elements_differ():
    t = infer("sequence_at", SequenceType(F32, (None, 4)), _t(dtype="int64"))
    assert isinstance(t.shape[0], Var) and t.shape[1] == 4
    with pytest.raises(ShapeError, match="the rank of the sequence's elements is not known"):
        infer("sequence_at", SequenceType(F32, None), _t(dtype="int64"))
    with pytest.raises(ShapeError, match="position must be an int32 or int64 scalar"):
        infer("sequence_at", SequenceType(F32, (4,)), _t(2, dtype="int64"))
    with pytest.raises(ShapeError, match="a float64 tensor cannot join a sequence of float32"):
        infer("sequence_insert", SequenceType(F32, (4,)), _t(4, dtype="float64"))


def test_join_of_sequences_and_optionals():
    """What If branches and loop iterations give: an empty sequence joins anything of its
    dtype; a value that may be absent on one path is an optional."""
    seq = SequenceType(F32, (2, None))
    assert join_types(SequenceType(F32, None, empty=True), seq, "v") == seq
    assert join_types(SequenceType(F32, (2, 3)), seq, "v") == seq
    assert join_types(OptionalType(seq), SequenceType(F32, (2, 5)), "v") == OptionalType(seq)
    with pytest.raises(ShapeError, match="dtype and rank must agree"):
        join_types(seq, SequenceType("int64", (2, 3)), "v")


@pytest.mark.parametrize("position", [None, -3, -1, 0, 2, 3])
def test_insert_follows_list_insert(position):
    seq = [np.full(1, k, np.float32) for k in range(3)]
    x = np.full(1, 9, np.float32)
    want = list(seq)
    want.insert(3 if position is None else position, x)
    got = ref("sequence_insert", seq, x, None if position is None else np.array(position))
    assert [int(a[0]) for a in got] == [int(a[0]) for a in want]
    assert len(seq) == 3  # the operand is not changed


@pytest.mark.parametrize("op, position, valid", [
    ("sequence_insert", 4, "-3 to 3"), ("sequence_insert", -4, "-3 to 3"),
    ("sequence_erase", 3, "-3 to 2"), ("sequence_at", -4, "-3 to 2"),
])
def test_positions_outside_the_sequence_are_errors(op, position, valid):
    seq = [np.zeros(1, np.float32)] * 3
    args = (seq, np.zeros(1, np.float32)) if op == "sequence_insert" else (seq,)
    with pytest.raises(InputError, match=f"position {position} is outside the sequence of 3 "
                                         f"tensors \\(valid: {valid}\\)"):
        ref(op, *args, np.array([position]))


def test_erase_defaults_to_the_last_and_an_empty_sequence_is_an_error():
    seq = [np.full(1, k, np.float32) for k in range(3)]
    assert [int(a[0]) for a in ref("sequence_erase", seq)] == [0, 1]
    with pytest.raises(InputError, match="the sequence is empty"):
        ref("sequence_erase", [])


@pytest.mark.parametrize("split, keepdims, sizes", [
    (None, 1, [1] * 5), (None, 0, [1] * 5), (np.array(2), 1, [2, 2, 1]),
    (np.array([3, 0, 2]), 1, [3, 0, 2]),
])
def test_split_to_sequence_parts(split, keepdims, sizes):
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    parts = ref("split_to_sequence", x, split, axis=1, keepdims=keepdims)
    if keepdims:
        assert [p.shape[1] for p in parts] == sizes
        np.testing.assert_array_equal(np.concatenate(parts, axis=1), x)
    else:
        assert [p.shape for p in parts] == [(2,)] * 5
        np.testing.assert_array_equal(np.stack(parts, axis=1), x)
    t = infer("split_to_sequence", _t(2, 5), None if split is None else _t(*split.shape, dtype="int64"),
              axis=1, keepdims=keepdims)
    assert t == SequenceType(F32, (2, None) if split is not None else ((2, 1) if keepdims else (2,)))


def test_split_sizes_that_do_not_add_up_are_an_error():
    with pytest.raises(InputError, match=r"the split sizes \[2, 2\] must be non-negative and add "
                                         r"up to the axis length 5"):
        ref("split_to_sequence", np.zeros((5,), np.float32), np.array([2, 2]))


def test_optionals():
    seq = SequenceType(F32, (4,))
    assert infer("optional", seq) == OptionalType(seq)
    assert infer("optional", None, dtype=F32, shape=[4], sequence=True) == OptionalType(seq)
    t = infer("optional", None, dtype=F32, shape=[None, 3])
    assert isinstance(t.elem.shape[0], Var) and t.elem.shape[1] == 3
    assert infer("optional_get_element", OptionalType(seq)) == seq
    assert infer("optional_get_element", _t(2)) == _t(2)
    assert not ref("optional_has_element", None) and ref("optional_has_element", [])
    with pytest.raises(InputError, match="the optional is empty"):
        ref("optional_get_element", None)
