"""PrimFuncs and runners shared by the schedule tests.

The functions are the real loop programs of ops (through legalization), small enough for the
reference evaluator. `outputs_of` runs a PrimFunc on copies of the same arrays with
`tcc.ir.tir_eval`; `compile_all` builds several PrimFuncs into one CPU library, so a test
pays for one LLVM compile however many schedules it checks.
"""

from __future__ import annotations

import json

import numpy as np

from tcc.emit.llvm import compile_prim_funcs
from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.graph import TensorType
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_prim_func
from tcc.ir.structural import structural_equal
from tcc.ir.tir_eval import run_prim_func
from tcc.lower.legalize import op_prim_func
from tcc.lower.schedule import Schedule, Trace
from tcc.rt.kernels import load_cpu_library


def prims(text: str) -> dict[str, T.PrimFunc]:
    """The PrimFuncs of an IR text (golden cases), by name."""
    return parse_module(text).prim_funcs


def prim(text: str) -> T.PrimFunc:
    """The one PrimFunc of an IR text."""
    (func,) = prims(text).values()
    return func


def op_func(op: str, *shapes, **attrs) -> T.PrimFunc:
    """The PrimFunc legalization makes for `op` on float32 operands of `shapes`."""
    func = op_prim_func(op, [TensorType(tuple(s), "float32") for s in shapes], attrs)
    assert func is not None
    return func


def add2d() -> T.PrimFunc:
    """A broadcasting elementwise add over a 5x7 iteration space."""
    return op_func("add", (5, 7), (7,))


def matmul() -> T.PrimFunc:
    """A 6x7 matmul reducing over 10."""
    return op_func("matmul", (6, 10), (10, 7))


def softmax() -> T.PrimFunc:
    """Softmax over rows of 4x9: two reductions and an elementwise stage, one buffer apiece."""
    return op_func("softmax", (4, 9), axes=[1])


def symbolic_matmul() -> T.PrimFunc:
    """A matmul whose row count is the size variable n."""
    n = E.Var("n")
    func = op_prim_func(
        "matmul", [TensorType((n, 8), "float32"), TensorType((8, 5), "float32")], {}
    )
    assert func is not None
    return func


def assert_prints_and_replays(sch, make) -> None:
    """The scheduled function survives printing and parsing, and its trace survives JSON and
    replays on a fresh schedule of `make()` to an equal function."""
    text = print_prim_func("f", sch.func)
    assert structural_equal(parse_module(text).prim_funcs["f"], sch.func)
    trace = Trace.from_json(json.loads(json.dumps(sch.trace.as_json())))
    assert trace == sch.trace
    fresh = Schedule(make())
    trace.apply(fresh)
    assert structural_equal(fresh.func, sch.func)


def arrays_for(func: T.PrimFunc, rng: np.random.Generator, sizes: dict | None = None) -> list:
    """Random arrays for every buffer parameter (outputs too: a kernel must overwrite them);
    `sizes` gives the size variables by name."""
    sizes = sizes or {}
    out = []
    for buf in func.buffers:
        env = {v: sizes[v.name] for v in E.free_vars(list(buf.shape))}
        shape = tuple(int(E.evaluate(d, env)) for d in buf.shape)
        out.append(rng.standard_normal(shape).astype(buf.dtype))
    return out


def outputs_of(func: T.PrimFunc, arrays: list) -> list[np.ndarray]:
    """Every buffer after running `func` with tir_eval on copies of `arrays`."""
    copies = [a.copy() for a in arrays]
    run_prim_func(func, copies)
    return copies


def compile_all(funcs: dict[str, T.PrimFunc]):
    """One loaded CPU library holding every PrimFunc under its key."""
    return load_cpu_library(compile_prim_funcs(funcs).shared_object)


def run_compiled(lib, name: str, arrays: list) -> list[np.ndarray]:
    copies = [a.copy() for a in arrays]
    lib.call(name, copies)
    return copies
