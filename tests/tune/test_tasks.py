"""Tuning tasks: each distinct kernel once, weighted by how often one run calls it."""

import numpy as np
from onnx import TensorProto as TP
from onnx import helper

from tcc.api import lower
from tcc.frontend.onnx import from_onnx
from tcc.ir.structural import structural_hash
from tcc.lower.passes import run_pipeline
from tcc.tune.tasks import extract_tasks


def test_kernels_called_several_times_are_one_task_weighted_by_their_calls():
    """Three MatMul+Relu layers of one shape share a kernel; the Softmax is another."""
    w = helper.make_tensor("w", TP.FLOAT, [8, 8], np.eye(8).ravel().tolist())
    nodes = []
    for k in range(3):
        nodes += [helper.make_node("MatMul", [f"h{k}", "w"], [f"m{k}"]),
                  helper.make_node("Relu", [f"m{k}"], [f"h{k + 1}"])]
    nodes.append(helper.make_node("Softmax", ["h3"], ["y"], axis=-1))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("h0", TP.FLOAT, ["n", 8])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    lowered = lower(run_pipeline(from_onnx(model)))
    tasks = extract_tasks(lowered)
    assert [t.weight for t in tasks] == [3, 1]
    assert sum(t.weight for t in tasks) == sum(
        type(b.value).__name__ == "CallTIR" for b in lowered["main"].bindings)
    assert all(t.workload == structural_hash(t.func) for t in tasks)
    assert len({t.workload for t in tasks}) == 2
