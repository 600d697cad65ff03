"""tcc/ir/verify.py: a module read from a file is refused, with the loop named, when it
breaks a rule the stages rely on."""

import pytest

from tcc.ir.irfile import load_module, write_container
from tcc.ir.parser import parse_module
from tcc.ir.verify import VerifyError, verify_module
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
