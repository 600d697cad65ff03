"""Fused multiply-add: float `a * b + c` rounds once unless the target says -fp-contract=off.

The probe is a product that float32 cannot hold: with a = b = 1 + 2**-12 the exact a * b is
1 + 2**-11 + 2**-24, whose last term is half a unit in the last place of float32 and rounds
away (to even). Separate rounding therefore gives a * b - (1 + 2**-11) == 0, a fused
multiply-add the exact 2**-24: the result tells which instructions ran.
"""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest

from tcc.emit.llvm import build_module, compile_prim_funcs
from tcc.ir.graph import TensorType
from tcc.ir.parser import parse_module
from tcc.lower.legalize import op_prim_func
from tcc.lower.rules import schedule_prim_func
from tcc.rt.kernels import load_cpu_library
from tcc.target import TargetError, host_target, parse_target

HOST = host_target()
HAS_FMA = HOST.arch == "aarch64" or "+fma" in HOST.features.split(",")
needs_fma = pytest.mark.skipif(not HAS_FMA, reason="the host has no fused multiply-add")

KERNELS = """
@prim_func
def mul_add(A: Buffer((8,), "float32"), B: Buffer((8,), "float32"), C: Buffer((8,), "float32"), D: Buffer((8,), "float32")):
    for i in serial(0, 8):
        D[i] = A[i] * B[i] + C[i]


@prim_func
def mul_sub_lanes(A: Buffer((8,), "float32"), B: Buffer((8,), "float32"), C: Buffer((8,), "float32"), D: Buffer((8,), "float32")):
    for i in vectorized(0, 8):
        D[i] = A[i] * B[i] - C[i]


@prim_func
def sub_product(A: Buffer((8,), "float64"), B: Buffer((8,), "float64")):
    for i in serial(0, 8):
        B[i] = A[i] - A[i] * float64(3.0)


@prim_func
def integers(A: Buffer((8,), "int32"), B: Buffer((8,), "int32")):
    for i in serial(0, 8):
        B[i] = A[i] * A[i] + A[i]


@prim_func
def half(A: Buffer((8,), "float16"), B: Buffer((8,), "float16")):
    for i in serial(0, 8):
        B[i] = A[i] * A[i] + A[i]
"""


def probe(sign: float):
    a = np.full(8, 1 + 2.0**-12, np.float32)
    return a, a.copy(), np.full(8, sign * (1 + 2.0**-11), np.float32)


def compute_ir(target: str, name: str) -> str:
    text = str(build_module(parse_module(KERNELS).prim_funcs, parse_target(target))[0])
    body = text[text.index(f'@"{name}.compute"') :]
    return body[: body.index("\n}\n")]


def test_products_plus_or_minus_a_value_become_fmuladd():
    for name, vector in (("mul_add", ""), ("mul_sub_lanes", "v8"), ("sub_product", "")):
        body = compute_ir("llvm", name)
        assert " fmul " not in body and " fadd " not in body
        assert body.count(f'@"llvm.fmuladd.{vector}f') == 1
        off = compute_ir("llvm -fp-contract=off", name)
        assert " fmul " in off and "fmuladd" not in off
    assert "fneg" in compute_ir("llvm", "sub_product")  # a - a * 3 is (-a) * 3 + a


def test_integers_and_float16_keep_separate_operations():
    """float16 rounds after every operation, as numpy does; integers have no rounding."""
    for name in ("integers", "half"):
        body = compute_ir("llvm", name)
        assert "fmuladd" not in body and "mul" in body


@needs_fma
@pytest.mark.parametrize("contract", [True, False])
def test_multiply_add_rounds_once_unless_contraction_is_off(contract):
    target = "llvm" if contract else "llvm -fp-contract=off"
    cm = compile_prim_funcs(parse_module(KERNELS).prim_funcs, target)
    with load_cpu_library(cm.shared_object) as lib:
        out = {}
        for name, sign in (("mul_add", -1.0), ("mul_sub_lanes", 1.0)):
            out[name] = np.zeros(8, np.float32)
            lib.call(name, [*probe(sign), out[name]])
    a, b, c = probe(-1.0)
    separate = a * b + c  # numpy rounds the product, then the sum
    fused = (a.astype(np.float64) * b + c).astype(np.float32)  # exact in float64
    assert separate[0] == 0 and fused[0] == 2.0**-24
    for name in out:
        np.testing.assert_array_equal(out[name], fused if contract else separate)


@needs_fma
def test_scheduled_matmul_runs_on_fma_instructions():
    t = TensorType((64, 64), "float32")
    func = schedule_prim_func(op_prim_func("matmul", [t, t], {}), HOST)
    cm = compile_prim_funcs({"mm": func})
    tm = HOST.target_machine()
    asm = tm.emit_assembly(llvm.parse_assembly(cm.llvm_ir))
    assert ("vfmadd" if HOST.arch == "x86_64" else "fmla") in asm
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2))
    c = np.zeros((64, 64), np.float32)
    with load_cpu_library(cm.shared_object) as lib:
        lib.call("mm", [a, b, c])
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_fp_contract_option_round_trips():
    off = parse_target("llvm -mtriple=aarch64-linux-gnu -fp-contract=off")
    assert not off.fp_contract and str(off).endswith(" -fp-contract=off")
    assert parse_target(str(off)) == off
    on = parse_target("llvm -fp-contract=on")
    assert on == parse_target("llvm") and on.fp_contract and "fp-contract" not in str(on)


def test_fp_contract_takes_on_or_off():
    with pytest.raises(TargetError, match="-fp-contract must be on or off, got 'fast'"):
        parse_target("llvm -fp-contract=fast")
