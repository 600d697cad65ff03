"""Deterministic ONNX models for end-to-end tests: a BERT encoder and a GPT-2 decoder written
the way exporters write them (shape arithmetic, masks, decomposed normalizations), and the
nine `light_*` CNNs shipped with onnx with their placeholder weights made random.

Every builder is seeded, so the same call gives the same model; every model passes
`onnx.checker.check_model` and runs on onnxruntime.
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LIGHT_MODELS = (
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
)


class _Graph:
    """Collects nodes and initializers; every `op` call returns a fresh output name."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def _name(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def op(self, op_type: str, *inputs: str, outputs: int = 1, **attrs) -> str | list[str]:
        names = [self._name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, **attrs))
        return names[0] if outputs == 1 else names

    def const(self, value, dtype=np.float32, hint: str = "c") -> str:
        name = self._name(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def ints(self, *values: int) -> str:
        return self.const(list(values), np.int64, "shape")

    def weight(self, *shape: int, scale: float | None = None, hint: str = "w") -> str:
        """Normal weights scaled by 1/sqrt(fan_in) (the first dim), so activations stay O(1)."""
        std = 1 / math.sqrt(shape[0]) if scale is None else scale
        return self.const(self.rng.normal(0, std, shape), hint=hint)

    def norm_params(self, hidden: int) -> tuple[str, str]:
        gamma = 1 + 0.1 * self.rng.normal(size=hidden)
        return self.const(gamma, hint="gamma"), self.const(
            0.1 * self.rng.normal(size=hidden), hint="beta"
        )

    # -- layers shared by the transformer builders ------------------------------------------

    def linear(self, x: str, fan_in: int, fan_out: int) -> str:
        """MatMul + Add, as exporters write a projection of a 3-D activation."""
        y = self.op("MatMul", x, self.weight(fan_in, fan_out))
        return self.op("Add", y, self.weight(fan_out, scale=0.1, hint="b"))

    def layer_norm(self, x: str, hidden: int) -> str:
        gamma, beta = self.norm_params(hidden)
        return self.op("LayerNormalization", x, gamma, beta, axis=-1, epsilon=1e-5)

    def layer_norm_decomposed(self, x: str, hidden: int) -> str:
        """LayerNormalization as older exporters write it, one op at a time."""
        gamma, beta = self.norm_params(hidden)
        mean = self.op("ReduceMean", x, axes=[-1], keepdims=1)
        centered = self.op("Sub", x, mean)
        var = self.op("ReduceMean", self.op("Pow", centered, self.const(2.0)), axes=[-1])
        std = self.op("Sqrt", self.op("Add", var, self.const(1e-5)))
        normed = self.op("Div", centered, std)
        return self.op("Add", self.op("Mul", normed, gamma), beta)

    def dim(self, x: str, axis: int) -> str:
        """Dimension `axis` of `x` as a 1-element int64 vector (Shape -> Gather -> Unsqueeze)."""
        scalar = self.op("Gather", self.op("Shape", x), self.const(axis, np.int64), axis=0)
        return self.op("Unsqueeze", scalar, self.ints(0))

    def split_heads(self, x: str, batch: str, seq: str, heads: int, head_dim: int) -> str:
        """[b, s, h] -> [b, heads, s, head_dim] with a shape computed from the input's shape."""
        shape = self.op("Concat", batch, seq, self.ints(heads, head_dim), axis=0)
        return self.op("Transpose", self.op("Reshape", x, shape), perm=[0, 2, 1, 3])

    def merge_heads(self, x: str, batch: str, seq: str, hidden: int) -> str:
        shape = self.op("Concat", batch, seq, self.ints(hidden), axis=0)
        return self.op("Reshape", self.op("Transpose", x, perm=[0, 2, 1, 3]), shape)

    def model(self, name: str, inputs, outputs, opset: int) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8  # onnxruntime reads IR 8 with every opset used here
        onnx.checker.check_model(model, full_check=True)
        return model


def _token_input(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"])


# -- BERT -------------------------------------------------------------------------------------


def bert_encoder(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    ffn: int = 128,
    vocab: int = 100,
    opset: int = 17,
    max_positions: int = 64,
    seed: int = 0,
) -> onnx.ModelProto:
    """A BERT encoder: inputs `input_ids` and `attention_mask` (int64 [batch, seq]); outputs
    the sequence output [batch, seq, hidden] and the pooled first token [batch, hidden].

    Even layers use LayerNormalization, an additive mask and Gemm in the FFN; odd layers use
    the decomposed layer norm, a Where mask and MatMul + Add."""
    g = _Graph(seed)
    words = g.op("Gather", g.weight(vocab, hidden, scale=0.5), "input_ids", axis=0)
    batch, seq = g.dim("input_ids", 0), g.dim("input_ids", 1)
    positions = g.op(
        "Range", g.const(0, np.int64), g.op("Squeeze", seq, g.ints(0)), g.const(1, np.int64)
    )
    pos = g.op("Gather", g.weight(max_positions, hidden, scale=0.5), positions, axis=0)
    pos = g.op("Expand", g.op("Unsqueeze", pos, g.ints(0)), g.op("Shape", words))
    x = g.layer_norm(g.op("Add", words, pos), hidden)

    mask = g.op("Unsqueeze", "attention_mask", g.ints(1, 2))  # [b, 1, 1, s]
    additive = g.op(
        "Mul", g.op("Sub", g.const(1.0), g.op("Cast", mask, to=TensorProto.FLOAT)), g.const(-1e4)
    )
    keep = g.op("Cast", mask, to=TensorProto.BOOL)

    head_dim = hidden // heads
    for layer in range(layers):
        plain = layer % 2 == 0
        q, k, v = (
            g.split_heads(g.linear(x, hidden, hidden), batch, seq, heads, head_dim) for _ in "qkv"
        )
        scores = g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2]))
        scores = g.op("Div", scores, g.const(math.sqrt(head_dim)))
        if plain:
            scores = g.op("Add", scores, additive)
        else:
            scores = g.op("Where", keep, scores, g.const(-1e4))
        context = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
        attn = g.linear(g.merge_heads(context, batch, seq, hidden), hidden, hidden)
        norm = g.layer_norm if plain else g.layer_norm_decomposed
        x = norm(g.op("Add", x, attn), hidden)
        hidden_act = _gelu_erf(
            g, _ffn_gemm(g, x, hidden, ffn) if plain else g.linear(x, hidden, ffn)
        )
        x = norm(g.op("Add", x, g.linear(hidden_act, ffn, hidden)), hidden)

    first = g.op("Squeeze", g.op("Slice", x, g.ints(0), g.ints(1), g.ints(1)), g.ints(1))
    pooled = g.op(
        "Tanh", g.op("Gemm", first, g.weight(hidden, hidden), g.weight(hidden, scale=0.1))
    )
    g.nodes.append(helper.make_node("Identity", [x], ["sequence_output"]))
    g.nodes.append(helper.make_node("Identity", [pooled], ["pooled_output"]))
    return g.model(
        "bert_encoder",
        [_token_input("input_ids"), _token_input("attention_mask")],
        [
            helper.make_tensor_value_info(
                "sequence_output", TensorProto.FLOAT, ["batch", "seq", hidden]
            ),
            helper.make_tensor_value_info("pooled_output", TensorProto.FLOAT, ["batch", hidden]),
        ],
        opset,
    )


def _ffn_gemm(g: _Graph, x: str, hidden: int, ffn: int) -> str:
    """The FFN's first projection as Gemm on the flattened tokens, reshaped back."""
    flat = g.op("Reshape", x, g.ints(-1, hidden))
    y = g.op("Gemm", flat, g.weight(ffn, hidden), g.weight(ffn, scale=0.1), transB=1)
    batch_seq = g.op("Slice", g.op("Shape", x), g.ints(0), g.ints(2))
    return g.op("Reshape", y, g.op("Concat", batch_seq, g.ints(ffn), axis=0))


def _gelu_erf(g: _Graph, x: str) -> str:
    """x * 0.5 * (1 + erf(x / sqrt(2)))."""
    erf = g.op("Erf", g.op("Div", x, g.const(math.sqrt(2.0))))
    return g.op("Mul", g.op("Mul", x, g.const(0.5)), g.op("Add", erf, g.const(1.0)))


# -- GPT-2 ------------------------------------------------------------------------------------


def gpt2_decoder(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    vocab: int = 100,
    opset: int = 17,
    max_positions: int = 64,
    seed: int = 1,
) -> onnx.ModelProto:
    """A GPT-2 decoder: `input_ids` int64 [batch, seq] -> `logits` [batch, seq, vocab].

    Pre-LN blocks with a fused QKV projection split in three, a causal mask built from
    Range/Less (even layers) or Trilu (odd layers), the tanh approximation of gelu, and the
    output projection tied to the token embedding."""
    g = _Graph(seed)
    wte = g.weight(vocab, hidden, scale=0.5)
    batch, seq = g.dim("input_ids", 0), g.dim("input_ids", 1)
    seq_scalar = g.op("Squeeze", seq, g.ints(0))
    positions = g.op("Range", g.const(0, np.int64), seq_scalar, g.const(1, np.int64))
    x = g.op(
        "Add",
        g.op("Gather", wte, "input_ids", axis=0),
        g.op("Gather", g.weight(max_positions, hidden, scale=0.5), positions, axis=0),
    )
    # future[i, j] = i < j: a query may not look at later keys.
    future = g.op(
        "Less", g.op("Unsqueeze", positions, g.ints(1)), g.op("Unsqueeze", positions, g.ints(0))
    )
    ones = g.op(
        "ConstantOfShape",
        g.op("Concat", seq, seq, axis=0),
        value=numpy_helper.from_array(np.ones(1, np.float32)),
    )
    past = g.op("Cast", g.op("Trilu", ones, upper=0), to=TensorProto.BOOL)
    neg = g.const(-1e4)

    head_dim = hidden // heads
    for layer in range(layers):
        qkv = g.linear(g.layer_norm(x, hidden), hidden, 3 * hidden)
        q, k, v = (
            g.split_heads(t, batch, seq, heads, head_dim)
            for t in g.op("Split", qkv, g.ints(hidden, hidden, hidden), axis=-1, outputs=3)
        )
        scores = g.op(
            "Div",
            g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2])),
            g.const(math.sqrt(head_dim)),
        )
        if layer % 2 == 0:
            scores = g.op("Where", future, neg, scores)
        else:
            scores = g.op("Where", past, scores, neg)
        context = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
        x = g.op("Add", x, g.linear(g.merge_heads(context, batch, seq, hidden), hidden, hidden))
        mlp = g.linear(
            _gelu_tanh(g, g.linear(g.layer_norm(x, hidden), hidden, 4 * hidden)), 4 * hidden, hidden
        )
        x = g.op("Add", x, mlp)

    logits = g.op("MatMul", g.layer_norm(x, hidden), g.op("Transpose", wte, perm=[1, 0]))
    g.nodes.append(helper.make_node("Identity", [logits], ["logits"]))
    return g.model(
        "gpt2_decoder",
        [_token_input("input_ids")],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", vocab])],
        opset,
    )


def _gelu_tanh(g: _Graph, x: str) -> str:
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))."""
    cube = g.op("Mul", g.op("Pow", x, g.const(3.0)), g.const(0.044715))
    inner = g.op("Mul", g.op("Add", x, cube), g.const(math.sqrt(2 / math.pi)))
    return g.op("Mul", g.op("Mul", x, g.const(0.5)), g.op("Add", g.op("Tanh", inner), g.const(1.0)))


# -- the light models of the onnx package ------------------------------------------------------


def light_model(name: str) -> onnx.ModelProto:
    """`onnx/backend/test/data/light/light_<name>.onnx` with random weights.

    The shipped files hold every weight as a ConstantOfShape filled with one value, which
    makes a useless numerical test; each becomes a seeded random initializer scaled for its
    role (He-uniform for conv/gemm weights, near-identity batch-norm parameters), as does any
    float initializer whose elements are all equal."""
    if name not in LIGHT_MODELS:
        raise ValueError(f"unknown light model {name!r}; known: {', '.join(LIGHT_MODELS)}")
    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"
    model = onnx.load(str(path))
    graph = model.graph
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    arrays = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    uses = _uses(graph)

    weights: dict[str, np.ndarray] = {}
    kept = []
    for node in graph.node:
        value = _filled_weight_shape(node, arrays)
        if value is None:
            kept.append(node)
        else:
            weights[node.output[0]] = _random_weight(rng, value, _role(node.output[0], uses))
    for t in graph.initializer:
        a = arrays[t.name]
        if a.dtype.kind == "f" and a.size > 1 and np.all(a == a.flat[0]):
            weights[t.name] = _random_weight(rng, a.shape, _role(t.name, uses)).astype(a.dtype)
    used = {i for n in kept for i in n.input}
    arrays = {k: v for k, v in arrays.items() if k in used and k not in weights}
    arrays.update(weights)

    del graph.node[:]
    graph.node.extend(kept)
    del graph.initializer[:]
    for k, a in sorted(arrays.items()):
        _add_initializer(graph, k, a)
    # Weights are initializers only (IR >= 4), so the graph inputs are the real inputs.
    inputs = [vi for vi in graph.input if vi.name not in arrays and vi.name in used]
    del graph.input[:]
    graph.input.extend(inputs)
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _add_initializer(graph: onnx.GraphProto, name: str, array: np.ndarray) -> None:
    """Append `array` as raw data in place: building a TensorProto and copying it into the
    graph costs seconds for the 550 MB of vgg19."""
    t = graph.initializer.add()
    t.name = name
    t.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
    t.dims.extend(array.shape)
    t.raw_data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def _uses(graph: onnx.GraphProto) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    uses: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            uses.setdefault(name, []).append((node, i))
    return uses


def _filled_weight_shape(node: onnx.NodeProto, arrays: dict) -> tuple[int, ...] | None:
    """The shape a ConstantOfShape with a constant shape and a float value fills, else None."""
    if node.op_type != "ConstantOfShape" or node.input[0] not in arrays:
        return None
    value = next((a.t for a in node.attribute if a.name == "value"), None)
    if value is None or value.data_type not in (TensorProto.FLOAT, TensorProto.DOUBLE):
        return None
    return tuple(int(d) for d in arrays[node.input[0]])


def _role(name: str, uses) -> tuple[str, int, int, bool]:
    """(op type, operand index, transB, feeds a residual sum) of the first real consumer of a
    weight, looking through the Unsqueeze/Reshape/Identity that only reshape it."""
    while True:
        consumers = uses.get(name, [])
        if not consumers:
            return ("", 0, 0, False)
        node, index = consumers[0]
        if node.op_type not in ("Unsqueeze", "Reshape", "Identity"):
            break
        name = node.output[0]
    trans_b = any(a.name == "transB" and a.i for a in node.attribute)
    residual = any(n.op_type in ("Sum", "Add") for n, _ in uses.get(node.output[0], []))
    return (node.op_type, index, int(trans_b), residual)


def _random_weight(rng: np.random.Generator, shape: tuple[int, ...], role) -> np.ndarray:
    op, index, trans_b, residual = role
    shape = tuple(shape)
    if op in ("Conv", "Gemm", "MatMul") and index == 1:
        # He-uniform: the variance of He-normal at half the cost of drawing normals, which
        # matters for the 140M weights of vgg19.
        fan_in = int(np.prod(shape[1:])) if op == "Conv" or trans_b else shape[0]
        w = rng.random(shape, dtype=np.float32)
        w -= np.float32(0.5)
        w *= np.float32(2 * math.sqrt(6 / fan_in))
        return w
    if op == "BatchNormalization" and index == 1 and residual:
        # The last norm of a residual branch starts small, so the sums of a deep ResNet
        # do not double the activations at every block.
        return rng.uniform(0.1, 0.3, shape).astype(np.float32)
    if (op == "BatchNormalization" and index in (1, 4)) or op == "Mul":
        return rng.uniform(0.5, 1.0, shape).astype(np.float32)  # scales and variances
    return rng.normal(0, 0.05, shape).astype(np.float32)  # biases and means
