"""common-subexpression-elimination: golden before/after modules."""

from tcc.ir.parser import parse_module
from tcc.ir.printer import print_module
from tcc.ir.structural import structural_equal
from tcc.lower.passes.common_subexpression_elimination import common_subexpression_elimination


def verify(before: str, expected: str) -> None:
    mod = parse_module(before)
    text = print_module(mod)
    got = common_subexpression_elimination(mod)
    want = parse_module(expected)
    assert structural_equal(got, want), print_module(got)
    assert print_module(mod) == text  # the input module is left alone


def test_repeated_calls_merge_and_uses_follow():
    verify(
        '''
constants = {"w": Tensor((4,), "float32")}

@function(inputs=["x"], outputs=["y", "z"])
def main(x: Tensor((n, 4), "float32")) -> Tuple(Tensor((n, 4), "float32"), Tensor((n, 4), "float32")):
    a: Tensor((n, 4), "float32") = op.add(x, const("w"))
    b: Tensor((n, 4), "float32") = op.add(x, const("w"))
    c: Tensor((n, 4), "float32") = op.relu(a)
    d: Tensor((n, 4), "float32") = op.relu(b)
    y: Tensor((n, 4), "float32") = op.mul(c, d)
    return y, d
''',
        '''
constants = {"w": Tensor((4,), "float32")}

@function(inputs=["x"], outputs=["y", "z"])
def main(x: Tensor((n, 4), "float32")) -> Tuple(Tensor((n, 4), "float32"), Tensor((n, 4), "float32")):
    a: Tensor((n, 4), "float32") = op.add(x, const("w"))
    c: Tensor((n, 4), "float32") = op.relu(a)
    y: Tensor((n, 4), "float32") = op.mul(c, c)
    return y, c
''',
    )


def test_different_attrs_operands_or_order_stay_apart():
    same = '''
constants = {"w": Tensor((4,), "float32"), "u": Tensor((4,), "float32")}

@function(inputs=["x"], outputs=["a", "b", "c", "d", "e"])
def main(x: Tensor((4,), "float32")) -> Tuple(Tensor((4,), "float32"), Tensor((4,), "float32"), Tensor((4,), "float32"), Tensor((1,), "float32"), Tensor((), "float32")):
    a: Tensor((4,), "float32") = op.sub(x, const("w"))
    b: Tensor((4,), "float32") = op.sub(const("w"), x)
    c: Tensor((4,), "float32") = op.sub(x, const("u"))
    d: Tensor((1,), "float32") = op.reduce_sum(x, axes=[0], keepdims=1)
    e: Tensor((), "float32") = op.reduce_sum(x, axes=[0], keepdims=0)
    return a, b, c, d, e
'''
    verify(same, same)


def test_equal_attrs_merge_and_functions_are_handled_separately():
    verify(
        '''
@function(inputs=["p"], outputs=["o"])
def helper(p: Tensor((4,), "float32")) -> Tensor((1,), "float32"):
    a: Tensor((1,), "float32") = op.reduce_sum(p, axes=[0], keepdims=1)
    b: Tensor((1,), "float32") = op.reduce_sum(p, axes=[0], keepdims=1)
    c: Tensor((1,), "float32") = op.add(a, b)
    return c


@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((4,), "float32")) -> Tensor((1,), "float32"):
    a: Tensor((1,), "float32") = op.reduce_sum(x, axes=[0], keepdims=1)
    return a
''',
        '''
@function(inputs=["p"], outputs=["o"])
def helper(p: Tensor((4,), "float32")) -> Tensor((1,), "float32"):
    a: Tensor((1,), "float32") = op.reduce_sum(p, axes=[0], keepdims=1)
    c: Tensor((1,), "float32") = op.add(a, a)
    return c


@function(inputs=["x"], outputs=["y"])
def main(x: Tensor((4,), "float32")) -> Tensor((1,), "float32"):
    a: Tensor((1,), "float32") = op.reduce_sum(x, axes=[0], keepdims=1)
    return a
''',
    )


def test_results_with_their_own_fresh_dimensions_stay_apart():
    # Each nonzero has a data-dependent length; merging would conflate k and j.
    same = '''
@function(inputs=["x"], outputs=["a", "b"])
def main(x: Tensor((4,), "float32")) -> Tuple(Tensor((1, k), "int64"), Tensor((1, j), "int64")):
    a: Tensor((1, k), "int64") = op.nonzero(x)
    b: Tensor((1, j), "int64") = op.nonzero(x)
    return a, b
'''
    verify(same, same)
