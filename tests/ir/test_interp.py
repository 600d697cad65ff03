"""The reference interpreter: size-variable binding and input validation."""

import numpy as np
import pytest

from tcc.ir.builder import FunctionBuilder
from tcc.ir.errors import InputError
from tcc.ir.expr import Var
from tcc.ir.graph import TensorType
from tcc.ir.interp import run
from tcc.ir.module import IRModule


def _module():
    n = Var("n")
    bb = FunctionBuilder()
    x = bb.param("x", TensorType((n, 3), "float32"))
    y = bb.param("y", TensorType((n, 3), "float32"))
    mod = IRModule()
    w = mod.add_constant("w", np.arange(3, dtype=np.float32))
    s = bb.emit("add", x, y)
    t = bb.emit("add", s, w)
    mod.functions["main"] = bb.finish([bb.emit("relu", t), s], ["out", "sum"])
    return mod


@pytest.mark.parametrize("batch", [1, 4])
def test_runs_for_any_binding_of_the_size_variable(batch):
    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, 3)).astype(np.float32)
    y = rng.standard_normal((batch, 3)).astype(np.float32)
    out, total = run(_module(), {"x": x, "y": y})
    np.testing.assert_array_equal(total, x + y)
    np.testing.assert_array_equal(out, np.maximum(x + y + np.arange(3, dtype=np.float32), 0))


def _x(shape=(2, 3), dtype=np.float32):
    return np.zeros(shape, dtype)


@pytest.mark.parametrize(
    "inputs, message",
    [
        ({"x": _x()}, "missing input 'y'"),
        ({"x": _x(), "y": _x(), "z": _x()}, "unknown input 'z'"),
        ({"x": _x(), "y": _x(dtype=np.float64)}, "input 'y': expected dtype float32, got float64"),
        ({"x": _x(), "y": _x((2, 3, 1))}, "input 'y': expected rank 2"),
        ({"x": _x(), "y": _x((2, 4))}, "input 'y': dimension 1 is 4"),
        ({"x": _x(), "y": _x((5, 3))}, "input 'y': dimension 0 is 5 but the signature (n, 3) requires 2"),
    ],
)
def test_bad_inputs_name_the_input(inputs, message):
    with pytest.raises(InputError) as e:
        run(_module(), inputs)
    assert message in str(e.value)


def test_positional_inputs_count_is_checked():
    with pytest.raises(InputError, match="expected 2 inputs"):
        run(_module(), [_x()])
