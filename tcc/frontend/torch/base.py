"""Converter registry of the PyTorch frontend: one function per ATen op overload.

A converter is `fn(ctx, node) -> value`, registered under the overloads' names as
`torch.export` writes them ("aten.add.Tensor"; Python's own operators on sizes as
"operator.mul"). It returns a graph value, a list of them for an op with several results
(None where a result is not computed), or a Python number or size expression.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from tcc.ir.errors import FrontendError

Converter = Callable[[Any, "TorchNode"], Any]
CONVERTERS: dict[str, Converter] = {}


def converter(*names: str):
    """Register the decorated function for each overload in `names`."""

    def wrap(fn: Converter) -> Converter:
        for name in names:
            if name in CONVERTERS:
                raise ValueError(f"converter for {name} registered twice")
            CONVERTERS[name] = fn
        return fn

    return wrap


def target_name(target) -> str:
    """The registry name of an FX call target: "aten.add.Tensor", "operator.mul"."""
    if hasattr(target, "_schema"):  # an OpOverload
        return str(target)
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", repr(target))
    if module in ("_operator", "operator"):
        return f"operator.{name}"
    return f"{module}.{name}" if module else name


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def _in_torch(path: str) -> bool:
    import torch

    return os.path.abspath(path).startswith(os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)


def source_line(fx_node) -> str | None:
    """Where the user's code made this node ("model.py:12: y = self.fc(x)"), from the
    innermost frame of its stack trace outside torch itself; None when it has none."""
    trace = fx_node.meta.get("stack_trace") or ""
    lines = trace.splitlines()
    found = None
    for i, line in enumerate(lines):
        m = _FRAME.search(line)
        if not m or _in_torch(m.group(1)):
            continue
        code = lines[i + 1].strip() if i + 1 < len(lines) else ""
        found = f"{m.group(1).rsplit('/', 1)[-1]}:{m.group(2)}" + (f": {code}" if code else "")
    return found


class TorchNode:
    """One call of the exported program's graph, with its converted operands at hand."""

    def __init__(self, fx_node, args: tuple, kwargs: dict):
        self.fx = fx_node
        self.name: str = fx_node.name
        self.target: str = target_name(fx_node.target)
        self.args = args
        self.kwargs = kwargs

    def arg(self, i: int, name: str, default: Any = None) -> Any:
        """Operand `i` (or keyword `name`), else `default`."""
        if i < len(self.args):
            return self.args[i]
        return self.kwargs.get(name, default)

    @property
    def val(self):
        """torch's own description of the result (a FakeTensor, a tuple of them, a SymInt)."""
        return self.fx.meta.get("val")

    def used_results(self) -> set[int]:
        """Which results of an op with several the graph reads (through getitem)."""
        return {u.args[1] for u in self.fx.users if target_name(u.target) == "operator.getitem"}

    def where(self) -> str:
        line = source_line(self.fx)
        return f"node {self.name!r} ({self.target}" + (f", at {line})" if line else ")")

    def error(self, message: str) -> FrontendError:
        return FrontendError(f"{self.where()}: {message}")
