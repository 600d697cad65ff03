"""tcc/ir/verify.py: a module read from a file is refused, with the loop named, when it
breaks a rule the stages rely on."""

import pytest

from tcc.ir.irfile import load_module, write_container
from tcc.ir.parser import parse_module
from tcc.ir.verify import VerifyError, unproven_accesses, verify_module
from tests.ir.test_parser import _SUM


def test_a_negative_extent_is_refused_and_named():
    mod = parse_module(_SUM.format(extent=-3, init="0.0"))  # the text parses: it prints back too
    with pytest.raises(VerifyError, match="prim_func 'f': loop 'i' has extent -3; the second argument"):
        verify_module(mod)
    verify_module(parse_module(_SUM.format(extent=0, init="0.0")))  # no iterations is fine


def test_load_module_runs_it(tmp_path):
    path = tmp_path / "m.tcir"
    write_container(path, _SUM.format(extent=-3, init="0.0"), {}, "elsewhere")
    with pytest.raises(VerifyError, match=rf"{path}: prim_func 'f': loop 'i' has extent -3"):
        load_module(path)
    write_container(path, _SUM.format(extent=4, init="0.0"), {}, "elsewhere")
    assert load_module(path)["f"] is not None


_COPY = '''\
@prim_func
def f(A: Buffer((n, 4), "float32"), B: Buffer((n, 4), "float32")):
    for i in serial(0, {extent}):
        for j in serial(0, 4):
            with block("copy"):
                vi = axis.spatial(n, i)
                vj = axis.spatial(4, j)
                reads(A[vi, vj])
                writes(B[vi, vj])
                B[vi, vj] = {value}
'''


@pytest.mark.parametrize("extent, value, proven", [
    ("n", "A[vi, vj]", True),
    ("n + 1", "A[vi, vj]", False),  # one row past the end
    ("n", "A[vi, vj + 100000000]", False),  # the crafted offset of the report
    ("n", "A[vi, vj - 1]", False),
    ("n", "select(vj >= 1, A[vi, vj - 1], 0.0)", True),  # padding: the condition guards it
    ("n", "select(vj < 3, A[vi, vj + 1], 0.0)", True),
    ("n", "select(vj < 4, A[vi, vj + 1], 0.0)", False),
    ("n", "A[vi, min(max(vj * 7 - 3, 0), 3)]", True),  # a clamped index, as gathers write it
    ("n", "A[vi, (vj * 5 + 2) % 4]", True),
    ("n", "A[min(vi, n - 1), vj]", True),
    ("n", "select(vj + 2 < 3, A[vi, vj + 2 - 1], 0.0)", True),  # concat's nested selects
    ("n", "select(vj + 2 < 6, A[vi, vj + 2 - 1], 0.0)", False),  # lets vj + 1 reach 4
    ("n", "A[vi, cast(\"int64\", A[vi, vj])]", False),  # an index read from data, unclamped
])
def test_accesses_are_proven_in_bounds_or_refused(extent, value, proven):
    mod = parse_module(_COPY.format(extent=extent, value=value))
    unproven = unproven_accesses(mod["f"], "f")
    assert (unproven == []) == proven, unproven
    if not proven:
        with pytest.raises(VerifyError, match=r"prim_func 'f', block 'copy': load A\[.*is not provably within"):
            verify_module(mod, accesses=True)


def test_tcc_verify_makes_emit_refuse_an_out_of_bounds_tcir(tmp_path, monkeypatch):
    path = tmp_path / "m.tcir"
    write_container(path, _COPY.format(extent="n", value="A[vi, vj + 100000000]"), {}, "elsewhere")
    assert load_module(path)["f"] is not None  # by default only the structural checks run
    monkeypatch.setenv("TCC_VERIFY", "1")
    with pytest.raises(VerifyError, match=r"index 1 \(vj \+ 100000000\) is not provably within 0\.\.4 - 1"):
        load_module(path)
