"""The sizes each kernel of a model is tuned at: read off one run of the model.

A kernel is symbolic in its sizes (one workload serves every batch size), but it is
measured at one size. The model runs once, scheduled by the default rules, on seeded random
inputs whose symbolic dimensions take the sizes the user names (`--shape input=1,128` for an
input, `--shape batch=1` for a dimension by name), else 1 for a leading dimension (the
batch) and 128 for the others (the sequence). Every kernel call is recorded; the first call
of each kernel binds its size variables (from its arrays' shapes and its scalar
arguments). Running the model, rather than evaluating shape expressions, also covers sizes
that depend on data.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from tcc.errors import TccError
from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.module import IRModule

BATCH, SEQUENCE = 1, 128


class _Recorder:
    """A kernel library that records the arguments of the first call of each kernel."""

    def __init__(self, library):
        self.library = library
        self.calls: dict[str, list] = {}

    def call(self, symbol: str, arrays) -> None:
        if symbol not in self.calls:
            self.calls[symbol] = [np.shape(a) if np.ndim(a) else np.asarray(a).item()
                                  for a in arrays]
        self.library.call(symbol, arrays)

    def __getattr__(self, name):
        return getattr(self.library, name)


def input_shapes(signature: dict, named: dict[str, list[int]]) -> dict[str, list[int]]:
    """The shape of each input: `named` by input name, else its dimensions, symbolic ones
    by name from `named` (a one-element list), else BATCH leading and SEQUENCE after. A name
    in `named` that is neither an input nor a symbolic dimension is an error."""
    inputs = [spec["name"] for spec in signature["inputs"]]
    dims = sorted({d for spec in signature["inputs"] for d in spec.get("shape", ())
                   if isinstance(d, str)})
    for name in named:
        if name not in inputs and name not in dims:
            raise TccError(f"--shape {name}: the model has no input or symbolic dimension of "
                           f"this name (inputs: {', '.join(inputs) or 'none'}; dimensions: "
                           f"{', '.join(dims) or 'none'})")
    shapes = {}
    for spec in signature["inputs"]:
        if "shape" not in spec:
            raise TccError(f"input {spec['name']!r} is not a tensor; tuning makes up tensor "
                           "inputs only")
        if spec["name"] in named:
            shapes[spec["name"]] = list(named[spec["name"]])
            continue
        dims = []
        for axis, d in enumerate(spec["shape"]):
            if isinstance(d, int):
                dims.append(d)
            elif d in named and len(named[d]) == 1:
                dims.append(named[d][0])
            else:
                dims.append(BATCH if axis == 0 else SEQUENCE)
        shapes[spec["name"]] = dims
    return shapes


def bind(func: T.PrimFunc, arguments: list) -> dict[str, int]:
    """The size variables of `func` as one call's arguments (shapes, scalars) bind them."""
    sizes: dict[str, int] = {}
    for param, arg in zip(func.params, arguments):
        if isinstance(param, T.Buffer):
            for dim, n in zip(param.shape, arg if isinstance(arg, tuple) else ()):
                if isinstance(dim, E.Var):
                    sizes[dim.name] = int(n)
        elif isinstance(param, E.Var) and not isinstance(arg, tuple):
            sizes[param.name] = int(arg)
    return sizes


def kernel_shapes(lowered: IRModule, target, named: dict[str, list[int]],
                  entry: str = "main") -> tuple[dict[str, dict[str, int]], dict[str, np.ndarray]]:
    """The sizes of each kernel (by name) in one run of `lowered` at the input shapes
    `named` gives, and the inputs of that run. Kernels the run does not call get none."""
    import tcc.rt
    from tcc.emit.llvm import compile_prim_funcs
    from tcc.emit.pack import pack_bytes
    from tcc.emit.vm import compile_module
    from tcc.lower.rules import schedule_module
    from tcc.rt.kernels import load_cpu_library
    from tcc.rt.tensor import random_array

    scheduled = schedule_module(lowered, target)
    kernels = compile_prim_funcs(scheduled.prim_funcs, target)
    data = pack_bytes(compile_module(scheduled), kernels, str(target), scheduled.const_values)
    fd, path = tempfile.mkstemp(suffix=".tvmpack")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        with load_cpu_library(kernels.shared_object) as library:
            recorder = _Recorder(library)
            with tcc.rt.load(path, kernel_library=recorder) as module:
                signature = module.signature(entry)
                shapes = input_shapes(signature, named)
                rng = np.random.default_rng(0)
                inputs = {spec["name"]: random_array(shapes[spec["name"]], spec["dtype"], rng)
                          for spec in signature["inputs"]}
                module[entry](inputs)
    finally:
        os.unlink(path)
    sizes = {name: bind(func, recorder.calls[name])
             for name, func in lowered.prim_funcs.items() if name in recorder.calls}
    return sizes, inputs
