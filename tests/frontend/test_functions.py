"""Expansion of ONNX function bodies: renaming reaches values captured by subgraphs."""

import onnx
from onnx import TensorProto as TP
from onnx import helper

from tcc.frontend.onnx.functions import expand


def test_subgraph_reading_a_formal_input_reads_the_node_operand():
    then_g = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["t_out"])], "then", [],
        [helper.make_tensor_value_info("t_out", TP.FLOAT, [2])])
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["X"], ["X_local"]), helper.make_node("Identity", ["X_local"], ["e_out"])],
        "else", [], [helper.make_tensor_value_info("e_out", TP.FLOAT, [2])])
    fp = helper.make_function(
        "custom", "Pick", ["C", "X"], ["Y"],
        [helper.make_node("If", ["C"], ["Y"], then_branch=then_g, else_branch=else_g)],
        [helper.make_opsetid("", 17)])
    node = helper.make_node("Pick", ["cond", "data"], ["result"], domain="custom")
    nodes, _ = expand(node, 17, fp)
    (if_node,) = nodes
    assert list(if_node.input) == ["cond"] and list(if_node.output) == ["result"]
    branches = {a.name: a.g for a in if_node.attribute}
    assert list(branches["then_branch"].node[0].input) == ["data"]
    # a name the subgraph defines itself is local and stays as it is
    assert [list(n.input) for n in branches["else_branch"].node] == [["data"], ["X_local"]]
    assert isinstance(if_node, onnx.NodeProto)
