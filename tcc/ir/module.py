"""IRModule: graph functions and PrimFuncs by global name, plus the module's constants.

Constant *types* are part of the IR (they print in the text); constant *values* (weights)
are held beside it as numpy arrays and stored outside the text in a .tcir file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from tcc.ir.dtype import from_numpy
from tcc.ir.fields import field_names
from tcc.ir.graph import Constant, Function, TensorType
from tcc.ir.tir import PrimFunc


@dataclass
class IRModule:
    functions: dict[str, Function | PrimFunc] = field(default_factory=dict)
    const_types: dict[str, TensorType] = field(default_factory=dict)
    const_values: dict[str, np.ndarray] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Function | PrimFunc:
        return self.functions[name]

    def __contains__(self, name: str) -> bool:
        return name in self.functions

    def add_constant(self, name: str, value: np.ndarray, dtype: str | None = None) -> Constant:
        """Store `value` under `name` (which must be new) and return a reference to it.

        `dtype` names the IR dtype when numpy has no exact one (bfloat16 held as float32).
        """
        if name in self.const_types:
            raise ValueError(f"constant {name!r} already exists")
        value = np.asarray(value)
        ttype = TensorType(value.shape, dtype or from_numpy(value.dtype))
        self.const_types[name] = ttype
        self.const_values[name] = value
        return Constant(name, ttype)

    def unique_constant_name(self, hint: str) -> str:
        name, k = hint, 1
        while name in self.const_types:
            name, k = f"{hint}_{k}", k + 1
        return name

    @property
    def graph_functions(self) -> dict[str, Function]:
        return {k: f for k, f in self.functions.items() if isinstance(f, Function)}

    @property
    def prim_funcs(self) -> dict[str, PrimFunc]:
        return {k: f for k, f in self.functions.items() if isinstance(f, PrimFunc)}

    def referenced_constants(self) -> set[str]:
        """Names of the constants some graph function refers to."""
        found: set[str] = set()
        seen: set[int] = set()

        def walk(x):
            if isinstance(x, Constant):
                found.add(x.name)
            elif isinstance(x, (list, tuple)):
                for y in x:
                    walk(y)
            elif isinstance(x, dict):
                for y in x.values():
                    walk(y)
            elif dataclasses.is_dataclass(x) and not isinstance(x, type) and id(x) not in seen:
                seen.add(id(x))
                for fname in field_names(x):
                    walk(getattr(x, fname))

        for f in self.graph_functions.values():
            walk(f.bindings)
            walk(f.ret)
        return found

    def prune_constants(self) -> None:
        """Drop the constants no graph function refers to."""
        keep = self.referenced_constants()
        for name in [n for n in self.const_types if n not in keep]:
            del self.const_types[name]
            self.const_values.pop(name, None)

    def constant_bytes(self) -> int:
        return int(sum(v.nbytes for v in self.const_values.values()))

    def __str__(self) -> str:
        from tcc.ir.printer import print_module

        return print_module(self)
