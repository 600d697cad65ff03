"""runtime_c/include/tccrt_pack.h mirrors tcc/rt/format.py, and the C reader's dtype table
mirrors tcc/rt/tensor.py: parse the C text and compare every value, both ways, so a change
on one side that is not made on the other fails here (DESIGN §2)."""

from __future__ import annotations

import enum
import re
from pathlib import Path

import pytest

from tcc.rt import format as fmt
from tcc.rt.format import KERNEL_DTYPES
from tcc.rt.tensor import DTYPES, numpy_dtype

RUNTIME = Path(__file__).resolve().parents[2] / "runtime_c"
ENUMS = {"OP": fmt.Op, "ARG_KIND": fmt.ArgKind, "FUNC_KIND": fmt.FuncKind, "CONST_KIND": fmt.ConstKind,
         "SHAPE_OP": fmt.ShapeOp, "DIM_MODE": fmt.DimMode}
_NUMBER = re.compile(r"[0-9a-fA-FxX()<<\- ]+\Z")


def _value(text: str):
    text = re.sub(r"/\*.*?\*/", "", text).strip()
    if text.startswith('"'):
        return text[1:-1]
    text = re.sub(r"(?<=[0-9a-fA-F])LL\b", "", text)
    assert _NUMBER.match(text), f"unexpected #define value {text!r}"
    return eval(text, {"__builtins__": {}})  # digits, parentheses and shifts only


def header_constants() -> dict[str, object]:
    text = (RUNTIME / "include" / "tccrt_pack.h").read_text()
    return {m[1]: _value(m[2]) for m in re.finditer(r"^#define TCCRT_(\w+) (.+)$", text, re.M)}


def python_constants() -> dict[str, object]:
    """Every constant of format.py under the header's name for it."""
    out = {name: value for name, value in vars(fmt).items()
           if name.isupper() and isinstance(value, (int, str)) and not isinstance(value, enum.Enum)}
    for prefix, cls in ENUMS.items():
        out.update({f"{prefix}_{m.name}": int(m) for m in cls})
    return out


def test_header_has_every_format_constant_with_its_value():
    header, python = header_constants(), python_constants()
    assert sorted(set(python) - set(header)) == [], "constants missing from tccrt_pack.h"
    assert sorted(set(header) - set(python)) == [], "tccrt_pack.h defines constants format.py lacks"
    for name, value in python.items():
        assert header[name] == value, f"TCCRT_{name} is {header[name]!r}, format.py says {value!r}"


def test_dtype_table_matches_the_python_runtime():
    """src/dtype.c: every tcc dtype with the numpy itemsize tcc.rt stores it with, and the
    kernel dtypes with the DLPack code and bits tcc.rt's kernel calls pass."""
    from tcc.rt.kernels import dl_dtype

    text = (RUNTIME / "src" / "dtype.c").read_text()
    rows = re.findall(r'\{\{"(\w+)", (\w+), (\d+)\}, (\d+)\}', text)
    table = {name: (code, int(bits), int(size)) for name, code, bits, size in rows}
    assert set(table) == DTYPES
    kernel_dtypes = {n for n, (code, _, _) in table.items() if code != "NOT_A_TENSOR"}
    assert kernel_dtypes == set(KERNEL_DTYPES)
    for name, (code, bits, itemsize) in table.items():
        try:
            assert itemsize == numpy_dtype(name).itemsize, name
        except ImportError:  # ml_dtypes absent: the low-precision types cannot be checked
            pytest.importorskip("ml_dtypes")
        if name in kernel_dtypes:
            assert (int(code), bits) == KERNEL_DTYPES[name], name
            if name != "bfloat16":  # its arrays are float32 ones
                assert (int(code), bits) == dl_dtype(numpy_dtype(name)), name
