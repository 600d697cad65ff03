"""tcc/ir/verify.py: a module read from a file is refused, with the loop named, when it
breaks a rule the stages rely on."""

import textwrap

import pytest

from tcc.ir.irfile import load_module, write_container
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_prim_func
from tcc.ir.verify import (
    PRECONDITIONS_ATTR,
    VerifyError,
    guard_accesses,
    unproven_accesses,
    verify_module,
)
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
    monkeypatch.delenv("TCC_VERIFY", raising=False)  # the suite itself runs with it set
    assert load_module(path)["f"] is not None  # by default only the structural checks run
    monkeypatch.setenv("TCC_VERIFY", "1")
    with pytest.raises(VerifyError, match=r"index 1 \(vj \+ 100000000\) is not provably within 0\.\.4 - 1"):
        load_module(path)


_FUSED = '''\
@prim_func
def f(A: Buffer((b, h, s), "float32"), B: Buffer((b, h, s), "float32")):
    for t in serial(0, {extent}):
        with block("copy"):
            v0 = axis.spatial(b, t // (h * s))
            v1 = axis.spatial(h, t // s % h)
            v2 = axis.spatial(s, t % s)
            reads(A[v0, v1, v2])
            writes(B[v0, v1, v2])
            B[v0, v1, v2] = A[v0, v1, v2]
'''


@pytest.mark.parametrize("extent, proven", [
    ("b * h * s", True),  # a loop fused over three sizes, split back by // and %
    ("s * h * b", True),
    ("(b * h * s) * 2", False),  # twice as many iterations: v0 reaches 2 * b - 1
    ("b * h * s + 1", False),
])
def test_a_fused_loop_split_by_products_of_sizes(extent, proven):
    func = parse_module(_FUSED.format(extent=extent))["f"]
    assert (unproven_accesses(func, "f") == []) == proven


_FUSED_OVER_A_LENGTH = '''\
@prim_func
def f(A: Buffer((b, n // 4 - 1), "float32"), B: Buffer((b, n // 4 - 1), "float32")):
    for t in serial(0, {extent}):
        with block("copy"):
            v0 = axis.spatial(b, t // (n // 4 - 1))
            v1 = axis.spatial(n // 4 - 1, t % (n // 4 - 1))
            reads(A[v0, v1])
            writes(B[v0, v1])
            B[v0, v1] = A[v0, v1]
'''


@pytest.mark.parametrize("extent, proven", [
    # a loop fused over a batch and a length that may be negative for all interval arithmetic
    # knows (a strided conv's output), as the schedule writes its extent
    ("b * (n // 4) - b", True),
    ("b * (n // 4) - b + 1", False),
    ("b * (n // 4)", False),
])
def test_a_fused_loop_over_a_length_expression(extent, proven):
    func = parse_module(_FUSED_OVER_A_LENGTH.format(extent=extent))["f"]
    assert (unproven_accesses(func, "f") == []) == proven


_TILED = '''\
@prim_func
def f(A: Buffer((224,), "float32"), B: Buffer((109, 7), "float32")):
    for io in serial(0, 7):
        if 93 - io * 16 >= 0:
            for ii in serial(0, 16):
                for r in serial(0, 7):
                    with block("then"):
                        vi = axis.spatial(109, io * 16 + ii)
                        vr = axis.spatial(7, r)
                        reads(A[vi * 2 + vr])
                        writes(B[vi, vr])
                        B[vi, vr] = A[vi * 2 + vr]
        else:
            for ii in serial(0, 16):
                for r in serial(0, 7):
                    if io * 16 + ii < {limit}:
                        with block("tail"):
                            vi = axis.spatial(109, io * 16 + ii)
                            vr = axis.spatial(7, r)
                            reads(A[vi * 2 + vr])
                            writes(B[vi, vr])
                            B[vi, vr] = A[vi * 2 + vr]
'''


@pytest.mark.parametrize("limit, proven", [(109, True), (110, False)])
def test_a_split_loop_with_its_tail_condition(limit, proven):
    # a stride-2 convolution's row, split by 16: `93 - io * 16 >= 0` bounds io by 5 in the
    # full tiles; in the tail the condition on io * 16 + ii bounds twice it plus r
    func = parse_module(_TILED.format(limit=limit))["f"]
    unproven = unproven_accesses(func, "f")
    assert (unproven == []) == proven, unproven
    if not proven:
        assert all("block 'tail'" in u for u in unproven)


_SYMBOLIC_TAIL = '''\
@prim_func
def f(A: Buffer((n,), "float32"), B: Buffer(((n - 10) // 5 + 1, {width}), "float32")):
    for io in serial(0, ((n - 10) // 5 + 16) // 16):
        for ii in serial(0, 16):
            for r in serial(0, {width}):
                if io * 16 + ii < (n - 10) // 5 + 1:
                    with block("tail"):
                        vi = axis.spatial((n - 10) // 5 + 1, io * 16 + ii)
                        vr = axis.spatial({width}, r)
                        reads(A[vi * 5 + vr])
                        writes(B[vi, vr])
                        B[vi, vr] = A[vi * 5 + vr]
'''


@pytest.mark.parametrize("width, proven", [(10, True), (11, False)])
def test_a_strided_window_over_a_symbolic_length(width, proven):
    # a stride-5 width-10 convolution over n samples, split by 16 with its tail condition:
    # the last window ends at 5 * ((n - 10) // 5) + 9 <= n - 1, which needs
    # 5 * ((n - 10) // 5) <= n - 10; a window one wider reads past the end
    func = parse_module(_SYMBOLIC_TAIL.format(width=width))["f"]
    unproven = unproven_accesses(func, "f")
    assert (unproven == []) == proven, unproven


_CONCAT = '''\
@prim_func
def f(A: Buffer((a, 3), "float32"), B: Buffer((b, 4), "float32"), C: Buffer((a, 7), "float32")):
    for i in serial(0, a):
        for j in serial(0, 7):
            with block("concat"):
                vi = axis.spatial(a, i)
                vj = axis.spatial(7, j)
                reads(A[vi, 0:3], B[vi, 0:4])
                writes(C[vi, vj])
                C[vi, vj] = select(vj < 3, A[vi, vj], B[vi, vj - 3])
'''


def test_an_access_in_bounds_under_a_size_condition_gets_a_precondition():
    # concat of inputs whose shapes name the row count differently: B's rows are read up to a - 1
    func = parse_module(_CONCAT)["f"]
    (unmet,) = unproven_accesses(func, "f")
    assert "load B[vi, vj - 3] is in bounds only if a <= b" in unmet
    guarded, why = guard_accesses(func, "f")
    assert why == [] and guarded.body is func.body  # nothing guarded inside
    (cond,) = dict(guarded.attrs)[PRECONDITIONS_ATTR]
    assert str(cond) == "a <= b"
    assert unproven_accesses(guarded, "f") == []
    again = parse_module(print_prim_func("f", guarded))["f"]  # the attribute prints and parses back
    assert [str(c) for c in dict(again.attrs)[PRECONDITIONS_ATTR]] == ["a <= b"]
    assert unproven_accesses(again, "f") == []


@pytest.mark.parametrize("value, proven", [
    ("A[vi, select(vj < L, L - vj - 1, vj)]", True),  # ReverseSequence: each branch on its own
    ("A[vi, select(vj < L, L - vj, vj)]", False),
    ("select(vi < n - 1, A[vi + 1, vj], A[vi - n + 1, vj])", True),  # a size on both sides
])
def test_index_selects_are_proven_branch_by_branch(value, proven):
    text = _COPY.format(extent="n", value=value).replace(
        "L", 'min(max(cast("int32", A[vi, 0]), 0), 4)')
    assert (unproven_accesses(parse_module(text)["f"], "f") == []) == proven


_LAST = '''\
@prim_func
def f(A: Buffer((n,), "float32"), B: Buffer((1,), "float32")):
    for i in serial(0, {extent}):
        with block("last"):
            reads(A[n - 1])
            writes(B[0])
            B[0] = A[n - 1]
'''


@pytest.mark.parametrize("extent, proven", [
    ("n * 2", True),  # the loop runs only when n >= 1
    ("(n + 15) // 16", True),
    ("4", False),  # n may be 0: A[-1]
    ("(n - 5) * (n - 3)", False),  # 15 iterations at n = 0
])
def test_a_size_is_at_least_1_only_where_a_loop_needs_it(extent, proven):
    func = parse_module(_LAST.format(extent=extent))["f"]
    unproven = unproven_accesses(func, "f")
    assert (unproven == []) == proven, unproven
    if not proven:
        assert [str(c) for c in dict(guard_accesses(func, "f")[0].attrs)[PRECONDITIONS_ATTR]] == ["n >= 1"]


def test_a_max_is_at_least_its_known_operand():
    """max(0, x) * 16 >= 0 whatever x is: a loop partition's bound over a select of sizes."""
    from tcc.ir import expr as E
    from tcc.ir.verify import _lowest

    n = E.Var("n")
    unknown = E.binop("sub", 15, E.select(E.compare("ge", 3, n), n, 0))  # sub of a non-constant
    assert _lowest(unknown, set(), set()) is None
    assert _lowest(E.BinOp("max", E.IntImm(0), unknown, "int64"), set(), set()) == 0
    assert _lowest(E.BinOp("max", unknown, E.IntImm(2), "int64"), set(), set()) == 2
    assert _lowest(E.BinOp("min", E.IntImm(0), unknown, "int64"), set(), set()) is None


def test_a_branch_taken_only_for_a_size_of_at_least_1_needs_no_precondition():
    """A scatter of no updates reads none: `select(n >= 1, A[min(.., n - 1)], ...)`."""
    text = _LAST.format(extent="4").replace(
        "B[0] = A[n - 1]", "B[0] = select(n >= 1, A[min(max(i - 1, 0), n - 1)], 0.0)")
    func = parse_module(text)["f"]
    assert unproven_accesses(func, "f") == []
    assert PRECONDITIONS_ATTR not in dict(guard_accesses(func, "f")[0].attrs)


_ROW_BLOCK = """\
with block("{name}"):
    v0 = axis.spatial(2, fused // 832)
    v1 = axis.spatial(4, fused // 208 % 4)
    v2 = axis.spatial(16, fused // 13 % 16)
    v3 = axis.spatial(199, fused % 13 * 16 + lane)
    reads(A[(v0 * 12736 + v3 * 64 + v1 * 16 + v2) // 64, (v1 * 16 + v2) % 64])
    writes(B[v0, v1, v2, v3])
    B[v0, v1, v2, v3] = A[(v0 * 12736 + v3 * 64 + v1 * 16 + v2) // 64, (v1 * 16 + v2) % 64]
"""

_RESHAPED_ROW = f'''\
@prim_func
def f(A: Buffer((398, 64), "float32"), B: Buffer((2, 4, 16, 199), "float32")):
    for fused in parallel(0, 1664):
        if 183 - fused % 13 * 16 >= 0:
            for lane in serial(0, 16):
{textwrap.indent(_ROW_BLOCK.format(name="full"), " " * 16)}\
        else:
            for lane in serial(0, 16):
                if fused % 13 * 16 + lane < {{limit}}:
{textwrap.indent(_ROW_BLOCK.format(name="tail"), " " * 20)}'''


@pytest.mark.parametrize("limit, proven", [(199, True), (200, False)])
def test_a_row_of_lanes_read_through_a_reshape(limit, proven):
    """wav2vec2's attention input, vectorized by 16 over 199 frames: the full rows' `183 -
    fused % 13 * 16 >= 0` bounds fused % 13 by 11, and the tail's condition on the lane
    bounds the row read through the reshape's `// 64`."""
    unproven = unproven_accesses(parse_module(_RESHAPED_ROW.format(limit=limit))["f"], "f")
    assert (unproven == []) == proven, unproven
    if not proven:
        assert all("block 'tail'" in u for u in unproven)


_FRAMES = '''\
@prim_func{attrs}
def f(B: Buffer((b, 4, n // 20 - 1, n // 20 - 1), "float32"), n: int64):
    for fused in parallel(0, b * (n // 20) * 4 - b * 4):
        for j0 in serial(0, (n // 20 + 14) // 16):
            for j1 in serial(0, 16):
                if j0 * 16 + j1 < n // 20 - 1:
                    with block("full"):
                        v0 = axis.spatial(b, fused // (n // 20 * 4 - 4))
                        v1 = axis.spatial(4, fused // (n // 20 - 1) % 4)
                        v2 = axis.spatial(n // 20 - 1, fused % (n // 20 - 1))
                        v3 = axis.spatial(n // 20 - 1, j0 * 16 + j1)
                        writes(B[v0, v1, v2, v3])
                        B[v0, v1, v2, v3] = 0.0
'''


@pytest.mark.parametrize("least, proven", [(None, False), (20, False), (40, True), (60, True)])
def test_a_precondition_s_least_size_bounds_a_length_over_it(least, proven):
    """`fused % (n // 20 - 1)` is a row index only where the length is at least 1: a kernel
    whose preconditions (the ranges its caller checks, tcc.ir.facts) put n at 40 or more
    has that proven; n >= 20 allows a length of 0."""
    attrs = "" if least is None else f'(attrs={{"preconditions": (n >= {least},)}})'
    unproven = unproven_accesses(parse_module(_FRAMES.format(attrs=attrs))["f"], "f")
    assert (unproven == []) == proven, unproven
