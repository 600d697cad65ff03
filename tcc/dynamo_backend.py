"""`torch.compile(model, backend="tcc")`: tcc as a backend of TorchDynamo.

Registered through torch's `torch_dynamo_backends` entry point (pyproject.toml). Each FX
graph Dynamo captures goes through AOT autograd with torch's core ATen decompositions (the
op set the PyTorch frontend converts, scaled dot-product attention kept whole as for
torch.export); its forward graph is imported (tcc.frontend.torch.from_graph), compiled for
the CPU, and run by tcc's Python loader. Tensors go in and out through DLPack, without
copies where they are contiguous.

Dynamo decides when to compile: it guards on what the graph assumed (dtypes, static sizes,
grad mode) and recompiles when a guard fails, marking a size dynamic after it changed once;
a dynamic size is a size variable of the pack, so one pack serves every size. The module's
parameters and buffers are read once, when the graph is compiled, and become the pack's
constants: the backend is for inference.

A graph tcc cannot take (an unsupported op, a graph that needs gradients, a failure of
tcc's own) runs eagerly instead: the reason is logged on the "tcc.dynamo" logger and the
user's model never sees an exception from tcc.
"""

from __future__ import annotations

import logging
import os
import tempfile

log = logging.getLogger("tcc.dynamo")


class Unsupported(Exception):
    """Why the backend leaves a graph to eager mode."""


def _reason(e: BaseException) -> str:
    from tcc.frontend.torch.importer import first_line

    return first_line(e)


def tcc_backend(gm, example_inputs, **_options):
    """The Dynamo backend: a compiled function for `gm`, or `gm.forward` with the reason
    logged when tcc cannot take it."""
    try:
        import torch
        from torch._decomp import core_aten_decompositions
        from torch._dynamo.backends.common import aot_autograd

        from tcc.frontend.torch.importer import KEPT_WHOLE, overload

        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        roles = [_role(n, ex) for n, ex in zip(placeholders, example_inputs)]
        if torch.is_grad_enabled() and any(
                isinstance(ex, torch.Tensor) and ex.requires_grad for ex in example_inputs):
            raise Unsupported("the graph needs gradients; tcc compiles inference graphs (run "
                              "the model under torch.no_grad() or torch.inference_mode())")
        table = core_aten_decompositions()
        for name in KEPT_WHOLE:
            table.pop(overload(torch, name), None)

        def forward_compiler(forward, _inputs):
            from torch._subclasses.fake_tensor import unset_fake_temporarily

            try:
                with unset_fake_temporarily():  # the weights are real tensors, read here
                    return _compiled(forward, roles)
            except Exception as e:  # noqa: BLE001  (every failure: the model keeps running)
                log.warning("tcc runs this graph eagerly: %s", _reason(e))
                return forward

        return aot_autograd(fw_compiler=forward_compiler, decompositions=table)(
            _views_as_reshapes(gm), example_inputs)
    except Exception as e:  # noqa: BLE001
        log.warning("tcc runs this graph eagerly: %s", _reason(e))
        return gm.forward


def _views_as_reshapes(gm):
    """`gm` with its views of a new shape as reshapes, in a graph of its own (the caller's
    `gm` is what runs eagerly on a fallback): AOT autograd traces with fake tensors, whose
    strides can differ from the real ones (scaled dot-product attention's output, which
    GPT-2 views), so a view that works on the real tensor fails in the trace.
    tcc's tensors have no strides and a reshape gives the view's values. A graph that writes
    in place is left as it is: there a view's aliasing is part of what it computes."""
    import copy

    import torch

    view, reshape = torch.ops.aten.view.default, torch.ops.aten.reshape.default
    nodes = list(gm.graph.nodes)
    if not any(n.op == "call_function" and n.target is view for n in nodes) or any(
            _writes_in_place(n) for n in nodes):
        return gm
    graph = copy.deepcopy(gm.graph)
    for n in graph.nodes:
        if n.op == "call_function" and n.target is view:
            n.target = reshape
    return torch.fx.GraphModule(gm, graph)


def _writes_in_place(node) -> bool:
    if node.op == "call_method":
        return node.target.endswith("_") and not node.target.startswith("_")
    if node.op != "call_function":
        return False
    schema = getattr(node.target, "_schema", None)
    if schema is not None:
        return schema.is_mutable
    return getattr(node.target, "__name__", "").endswith("_")


def _role(node, example) -> tuple[str, object]:
    """What a graph input is: ("constant", tensor) for a parameter or buffer of the module,
    ("input", None) for a tensor the caller passes, ("size", None) for a size Dynamo passes
    beside the tensor it measures (the pack reads sizes from the tensors themselves)."""
    import torch

    source = getattr(node.meta.get("grapharg"), "source", None)
    name = getattr(source, "name", "") or ""
    if isinstance(example, torch.Tensor):
        if "._parameters[" in name or "._buffers[" in name:
            return "constant", example
        return "input", None
    if isinstance(example, (torch.SymInt, int)):
        return "size", None
    raise Unsupported(f"graph input {node.name!r} is a {type(example).__name__}, not a tensor "
                      "or a size")


def _compiled(forward, roles):
    """The pack of AOT autograd's forward graph, as a function of the graph's inputs."""
    import torch

    from tcc.frontend.torch import from_graph

    placeholders = [n for n in forward.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(roles):
        raise Unsupported(f"the forward graph has {len(placeholders)} inputs, Dynamo's "
                          f"{len(roles)}")
    constants = {n.name: value for n, (kind, value) in zip(placeholders, roles)
                 if kind == "constant"}
    positions = [i for i, (kind, _) in enumerate(roles) if kind == "input"]
    module = _loaded(from_graph(forward.graph, constants))
    main = module["main"]
    failed: list[str] = []

    def run(*args):
        if not failed:
            try:
                outputs = main(*[_to_numpy(args[i]) for i in positions])
                outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
                return [torch.from_dlpack(o) if o.flags.writeable else torch.from_numpy(o.copy())
                        for o in outputs]
            except Exception as e:  # noqa: BLE001  (the model must keep running)
                failed.append(_reason(e))
                log.warning("tcc runs this graph eagerly from now on: %s", failed[0])
        return forward(*args)

    run.module = module  # keeps the pack loaded as long as the function lives
    return run


def _loaded(mod):
    from tcc.api import compile_to_bytes
    from tcc.rt import load

    data = compile_to_bytes(mod)
    with tempfile.NamedTemporaryFile(suffix=".tvmpack", delete=False) as f:
        f.write(data)
    try:
        return load(f.name)
    finally:
        os.unlink(f.name)  # the pack is memory-mapped: the mapping outlives the name


def _to_numpy(t):
    import numpy as np

    t = t.detach()
    if t.device.type != "cpu":
        raise Unsupported(f"a {t.device.type} tensor: tcc's packs run on the CPU")
    if not t.is_contiguous():
        t = t.contiguous()
    return np.from_dlpack(t)
