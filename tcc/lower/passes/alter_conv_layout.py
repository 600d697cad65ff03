"""alter-conv-layout: run float32 2-D (and 1-D) convolutions in the blocked NCHW{b}c layout
(CPU), or as Winograd or a batched matmul where that is faster.

May change: a `conv2d` with a float32 input of static channel counts and a constant weight
(and a constant bias, if any) that is dense (groups 1), depthwise (groups = input channels
= output channels) or grouped becomes layout_transform(x, NCHW -> NCHW{bi}c),
`conv2d_nchwc` with the weight packed at compile time into OIHW{bi}i{b}o (depthwise
OIHW1i{b}o) and the bias into (O / b, b), and a layout_transform back to NCHW. The block b
is the target's float32 vector width (16 lanes with AVX-512, 8 with AVX2, 4 otherwise) when
it divides the output channels (a group's, when grouped), else half of it (at least 4:
ShuffleNet's first conv, 3 -> 24 channels, ran 3.1 ms in NCHW on one thread and 0.14 ms on
two as NCHW8c), and for a grouped conv, or a dense one whose window is strided, else a
quarter of it (at least 4: in NCHW a strided window reads its rows at a stride, and a
3 -> 12 channel 7 x 7 stride-2 conv at 112 x 112 ran 4.97 ms there, 0.18-0.22 ms as NCHW4c,
2 threads of an AMD EPYC); otherwise the conv stays NCHW (zero padding the channels would
cost memory and a crop in every consumer). A dense conv whose output channels only a
narrower block divides, padded by at most 1/16, computes them padded to the vector instead
and crops its NCHW result (a classifier's 1000). A dense 3 x 3 stride-1 conv with at least
32 channels in and out and at least 16 output tiles of 4 x 4 (or 16 channels and 64 tiles)
runs as Winograd F(4x4, 3x3) instead (tcc.ir.ops.winograd): `winograd_input_nchwc`, a
batched `matmul` over the 36 positions of a tile and the blocks of output channels with
the weights transformed at compile time, and `winograd_output_nchwc` with the bias
(VGG-19 1.41x -> 0.87x onnxruntime, Inception v2 1.35x -> 1.15x, ResNet-50 1.50x ->
1.37x, 2 threads of an Intel Xeon, when it first came at 32 tiles; `_winograd_applies`
has today's). The input block bi is the vector width when it divides the input channels
(a group's), else the largest divisor of them below it, so a first conv on 3 colour
channels still converts (NCHW3c). On
2 cores of an Intel Xeon: AlexNet's grouped 5 x 5 conv (2 groups, 96 -> 256 channels at
27 x 27) ran 14.5 ms in NCHW, 2.8 ms as NCHW16c. A grouped 1 x 1 stride-1 conv whose
group's output channels the vector does not divide stays NCHW as a batched `matmul` of the
weights (G, O/G, I/G) and a reshape of the input, (N, G, I/G, H*W), then a reshape back and
the bias (ShuffleNet's, 4 groups: 136 channels at 28 x 28 ran 0.113 ms in NCHW, 0.029 as a
matmul; 272 at 14 x 14, 0.088 ms as NCHW4c and 0.040; 544 at 7 x 7, 0.040 as NCHW8c and
0.035), so its channel shuffles are transposes of whole planes. A float32 `conv1d` with a
constant weight whose channels would block as a conv2d's becomes that conv2d over a height
of 1: `expand_dims` of its input, the weight reshaped to (O, I, 1, K) at compile time, and
a `squeeze` of the conv2d's NCHW result (Whisper's strided conv stem: 0.27 -> 0.03 ms, 2
threads of an AMD EPYC).

Then the layout is carried through what is layout-agnostic instead of converted back: an
elementwise/broadcast op (UNARY_MATH, ACTIVATIONS, ARITHMETIC, clip) whose tensor operands,
of the full shape or per sample and channel (N, C, 1, 1), all have blocked forms and whose
other operands are constants that are scalars or per-channel (C, 1, 1)/(1, C, 1, 1)
(re-laid out at compile time into (C / b, 1, 1, b)); a channel concat of blocked operands
of one block; max/avg pool2d (as a 3-D pool over (H, W, c) with a unit window along c) and
global average/max pooling of static spatial size (the same, with the whole plane as
window), which a reduce_mean/reduce_max over H and W keeping their dims also is. So a
squeeze-and-excitation block (mean over the plane, 1 x 1 convs, sigmoid, scale) stays
blocked: RegNetY at 224 x 224 11.8-12.1 -> 11.3-11.4 ms, EfficientNet-B0 72.7-72.9 ->
66.4-67.2 ms (per-kernel profile totals, C runtime, 2 threads of an Intel Xeon). A value
asked for in a layout it already has a blocked form in is that form, so
layout_transform(layout_transform(x, A -> B), B -> A) never appears: a ResNet stays
blocked from its first conv to its global pool. Each value
keeps its NCHW binding as a transform back, and a final dead-code-elimination drops those
nobody uses along with the constants the packed ones replace.

Without a target (`run_pipeline(..., target=None)`) the layout is a choice the pass cannot
make and the module is returned unchanged. Preserves every function's parameters, returned
values (types and public names) and numerics up to float summation order (Winograd's
transforms round differently: within 1e-3 of the largest output). The input module
is not changed.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Protocol

import numpy as np

from tcc.ir import graph as G
from tcc.ir.builder import infer_call
from tcc.ir.dtype import bit_width
from tcc.ir.errors import InternalError
from tcc.ir.module import IRModule
from tcc.ir.ops.elementwise import ACTIVATIONS, ARITHMETIC, UNARY_MATH
from tcc.ir.ops.layout import layout_transform_ref
from tcc.ir.ops.winograd import ALPHA, TILE, winograd_weight
from tcc.lower.passes import register_pass
from tcc.lower.passes.dead_code_elimination import dead_code_elimination

NCHW = "NCHW"
DTYPE = "float32"
# Ops computing each output element from the elements at the same (broadcast) position.
LAYOUT_FREE = UNARY_MATH | ACTIVATIONS | ARITHMETIC | {"clip"}
WINDOW_POOLS = {"max_pool2d": "max_pool3d", "avg_pool2d": "avg_pool3d"}
GLOBAL_POOLS = {"global_max_pool": "max_pool3d", "global_avg_pool": "avg_pool3d"}
# a mean or maximum over the whole plane, keeping its dims, is a global pool (the
# squeeze-and-excitation blocks of EfficientNet and RegNetY pool with ReduceMean)
PLANE_REDUCTIONS = {"reduce_max": "max_pool3d", "reduce_mean": "avg_pool3d"}
# Winograd F(4x4, 3x3) for dense 3 x 3 stride-1 convs with at least this many 4 x 4 output
# tiles and channels in and out (the measurements are in `_winograd_applies`).
WINOGRAD_MIN_TILES = 16
WINOGRAD_MIN_CHANNELS = 32
# fewer channels (at least this many) need more tiles to pay for the transforms
WINOGRAD_FEW_CHANNELS = 16
WINOGRAD_FEW_CHANNELS_MIN_TILES = 64


class VectorTarget(Protocol):
    """What the pass needs of a target (tcc.target.Target has it)."""

    @property
    def vector_bits(self) -> int: ...


def _blocked(block: int) -> str:
    return f"NCHW{block}c"


def _largest_divisor(n: int, limit: int) -> int:
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def _value(mod: IRModule, e) -> np.ndarray | None:
    """The value of a constant operand, or None for anything else."""
    return mod.const_values.get(e.name) if isinstance(e, G.Constant) else None


class _Function:
    """The rewrite of one graph function: bindings in order, plus what is known blocked."""

    def __init__(self, mod: IRModule, block: int, packed: dict):
        self.mod, self.block = mod, block
        self.packed = packed  # (constant name, layout) -> packed constant, module-wide
        self.out: list[G.Binding] = []
        self.blocked: dict[int, tuple[G.Var, str]] = {}  # NCHW var -> (its blocked form, layout)
        self.converted: dict[tuple[int, str], G.Expr] = {}  # (var, layout) -> var in layout
        self.alias: dict[int, G.Expr] = {}  # removed variable -> the value it stood for

    # -- emitting ---------------------------------------------------------------------------

    def emit(self, op: str, args: tuple, attrs: dict, name: str) -> G.Var:
        attrs, t = infer_call(op, args, attrs)
        v = G.Var(name, t)
        self.out.append(G.Binding(v, G.Call(op, args, attrs)))
        return v

    def bind(self, var: G.Var, op: str, args: tuple, attrs: dict) -> None:
        """Bind `var` to `op(args)`, whose type is var's."""
        self.out.append(G.Binding(var, G.Call(op, args, infer_call(op, args, attrs)[0])))

    def emit_blocked(self, var: G.Var, op: str, args: tuple, attrs: dict, layout: str) -> None:
        """Bind `op(args)` in `layout`, then `var` (NCHW) as its transform back."""
        yc = self.emit(op, args, attrs, f"{var.name}_c")
        self.out.append(G.Binding(var, _transform(yc, layout, NCHW)))
        self.blocked[id(var)] = (yc, layout)

    def in_layout(self, x: G.Expr, layout: str) -> G.Expr:
        """`x` (NCHW) in `layout`: its blocked form, else one transform shared by all users."""
        known = self.blocked.get(id(x))
        if known is not None and known[1] == layout:
            return known[0]
        key = (id(x), layout)
        if key not in self.converted:
            src, frm = (known[0], known[1]) if known is not None else (x, NCHW)
            name = getattr(x, "name", "const")
            self.converted[key] = self.emit(
                "layout_transform", (src,), {"src": frm, "dst": layout}, f"{name}_{layout}"
            )
        return self.converted[key]

    def pack(self, c: G.Constant, value: np.ndarray, layout: str) -> G.Constant:
        """The constant `c` rearranged into `layout` (once per module)."""
        key = (c.name, layout)
        if key not in self.packed:
            name = self.mod.unique_constant_name(f"{c.name}_{layout}")
            self.packed[key] = self.mod.add_constant(name, value, c.type.dtype)
        return self.packed[key]

    # -- rewrites: each returns False when it does not apply --------------------------------

    def visit(self, b: G.Binding) -> None:
        value = G.substitute_vars(b.value, self.alias)
        if isinstance(value, G.Call) and any(
            rule(self, b.var, value)
            for rule in (_conv, _conv1d, _transform_pair, _layout_free, _concat, _window_pool,
                         _global_pool)
        ):
            return
        self.out.append(G.Binding(b.var, value))

    def blocked_layout(self, e) -> str | None:
        known = self.blocked.get(id(e)) if isinstance(e, G.Var) else None
        return None if known is None else known[1]


def _transform(x: G.Expr, src: str, dst: str) -> G.Call:
    attrs, _ = infer_call("layout_transform", (x,), {"src": src, "dst": dst})
    return G.Call("layout_transform", (x,), attrs)


def _is_nchw(t) -> bool:
    return isinstance(t, G.TensorType) and t.ndim == 4 and t.dtype == DTYPE


def _block_of(layout: str) -> int | None:
    """b for a layout NCHW{b}c, else None."""
    m = re.fullmatch(r"NCHW(\d+)c", layout)
    return int(m.group(1)) if m else None


# ---------------------------------------------------------------------------------------------
# convolution


def _out_block(cout: int, block: int, narrowest: int = 2) -> int | None:
    """The output channel block: a vector's lanes, else half of them, ... down to
    1/`narrowest` of them, at least 4."""
    b = block
    while b >= max(4, block // narrowest):
        if cout % b == 0:
            return b
        b //= 2
    return None


def _conv_blocks(call: G.Call, block: int) -> tuple[int, int, bool] | None:
    """(input block, output block, depthwise) for a conv2d that converts, else None."""
    x, w = G.type_of(call.args[0]), call.args[1].type
    cin, cout, groups = x.shape[1], w.shape[0], call.attrs["groups"]
    if not (isinstance(cin, int) and isinstance(cout, int)):
        return None
    if groups > 1 and groups == cin == cout and w.shape[1] == 1:
        out = _out_block(cout, block)
        return None if out is None else (out, out, True)
    # dense or grouped: the blocks divide each group's channels, input and output
    if cin % groups or cout % groups:
        return None
    # a strided window (module docstring) takes a quarter vector; at stride 1 NCHW's lanes
    # run along the row, and a 1 x 1 window reads no input twice (a 40 -> 20 channel stride-2
    # one ran 0.006 ms in NCHW, 0.019-0.026 with the two transforms of NCHW4c)
    strided_window = w.shape[-1] != 1 and any(st > 1 for st in call.attrs.get("strides") or (1,))
    out = _out_block(cout // groups, block, 4 if groups > 1 or strided_window else 2)
    if out is None:
        return None
    return _largest_divisor(cin // groups, block), out, False


def _conv(fn: _Function, var: G.Var, call: G.Call) -> bool:
    if call.op != "conv2d" or not _is_nchw(G.type_of(call.args[0])):
        return False
    weight = _value(fn.mod, call.args[1])
    bias_arg = call.args[2] if len(call.args) > 2 else None
    bias = None if bias_arg is None else _value(fn.mod, bias_arg)
    if weight is None or (bias_arg is not None and bias is None):
        return False
    blocks = _conv_blocks(call, fn.block)
    if _grouped_pointwise(fn, var, call, weight, bias, blocks):
        return True
    if blocks is None:
        return False
    bi, bo, depthwise = blocks
    if not depthwise and _winograd(fn, var, call, weight, bias, bi, bo):
        return True
    if not depthwise and _padded(fn, var, call, weight, bias, bi, bo):
        return True
    args = _blocked_operands(fn, call, weight, bias, bi, bo, depthwise)
    fn.emit_blocked(var, "conv2d_nchwc", args, dict(call.attrs), _blocked(bo))
    return True


def _conv1d(fn: _Function, var: G.Var, call: G.Call) -> bool:
    """A `conv1d` that would convert as a conv2d over a height of 1 (a speech model's
    strided conv stem) becomes one: expand_dims of the input, the conv2d converted as above
    (its weight (O, I, 1, K) at compile time), and a squeeze of its NCHW result. The 1-D loop
    program read its strided taps one lane at a time: Whisper's 64 -> 64 channel conv
    (kernel 3, stride 2) over 100 frames ran 0.27 ms, as a blocked conv2d 0.03 ms (2
    threads of an AMD EPYC, the Python loader's profile)."""
    if call.op != "conv1d":
        return False
    x_t = G.type_of(call.args[0])
    if not (isinstance(x_t, G.TensorType) and x_t.ndim == 3 and x_t.dtype == DTYPE):
        return False
    weight = _value(fn.mod, call.args[1])
    if weight is None or weight.ndim != 3:
        return False
    bias_arg = call.args[2] if len(call.args) > 2 else None
    if (bias_arg is not None and _value(fn.mod, bias_arg) is None) or _conv_blocks(
            call, fn.block) is None:  # the channels decide it, as for the conv2d
        return False
    a = call.attrs
    strides, dilation = list(a["strides"] or [1]), list(a["dilation"] or [1])
    padding = list(a["padding"] or [0, 0])
    attrs = {"strides": [1, *strides], "padding": [0, padding[0], 0, padding[1]],
             "dilation": [1, *dilation], "groups": a["groups"]}
    w4 = fn.pack(call.args[1], np.ascontiguousarray(weight[:, :, None, :]), "OI1W")
    x4 = fn.emit("expand_dims", (call.args[0],), {"axes": [2]}, f"{var.name}_rows")
    args = (x4, w4, *call.args[2:])
    attrs, t = infer_call("conv2d", args, attrs)
    y4 = G.Var(f"{var.name}_2d", t)
    if not _conv(fn, y4, G.Call("conv2d", args, attrs)):
        raise InternalError(f"alter-conv-layout: conv1d {var.name!r} as a conv2d did not convert")
    fn.bind(var, "squeeze", (y4,), {"axes": [2]})
    return True


def _blocked_operands(fn: _Function, call: G.Call, weight, bias, bi: int, bo: int,
                      depthwise: bool = False, tag: str = "") -> tuple:
    """conv2d_nchwc's operands: the input in NCHW{bi}c, the weight packed into OIHW{bi}i{bo}o
    (depthwise OIHW1i{bo}o), the bias as (O / bo, bo); `tag` names packed constants that
    differ from the plain packing of the same weight (padded ones)."""
    layout = f"OIHW1i{bo}o" if depthwise else f"OIHW{bi}i{bo}o"
    w = fn.pack(call.args[1], layout_transform_ref(weight, src="OIHW", dst=layout), layout + tag)
    args: tuple = (fn.in_layout(call.args[0], _blocked(bi)), w)
    if bias is not None:
        args += (fn.pack(call.args[2], bias.reshape(-1, bo), f"{bo}o{tag}"),)
    return args


def _padded(fn: _Function, var: G.Var, call: G.Call, weight, bias, bi: int, bo: int) -> bool:
    """A dense conv of many output channels that only a narrower block divides (a
    classifier's 1000): its output channels padded with zero weights to a multiple of the
    vector, blocked, transformed back and cropped (`strided_slice`), as onnxruntime pads
    SqueezeNet's last conv to 1008. That conv (512 -> 1000 channels, 1 x 1 at 13 x 13) ran
    0.87 ms with its ReLU as NCHW8c, 0.63 padded to NCHW16c, plus 0.09 for the transform,
    crop, ReLU and pool after it in one kernel; SqueezeNet 3.38 -> 3.16 ms (2 threads, Intel
    Xeon, AVX-512). Only where the padding adds at most 1/16 of the channels, and the output
    is not kept blocked (its consumers read the cropped NCHW value)."""
    cout = weight.shape[0]
    padded = -(-cout // fn.block) * fn.block
    if call.attrs["groups"] != 1 or bo == fn.block or 16 * (padded - cout) > cout:
        return False
    zeros = [(0, padded - cout)]
    args = _blocked_operands(
        fn, call, np.pad(weight, zeros + [(0, 0)] * (weight.ndim - 1)),
        None if bias is None else np.pad(bias, zeros), bi, fn.block, tag=str(padded))
    yc = fn.emit("conv2d_nchwc", args, dict(call.attrs), f"{var.name}_c")
    y = fn.emit("layout_transform", (yc,), {"src": _blocked(fn.block), "dst": NCHW},
                f"{var.name}_padded")
    fn.bind(var, "strided_slice", (y,), {"begin": [0], "end": [cout], "axes": [1],
                                         "strides": [1]})
    return True


def _grouped_pointwise(fn: _Function, var: G.Var, call: G.Call, weight, bias, blocks) -> bool:
    """A grouped 1 x 1 stride-1 unpadded conv whose group's output channels are not a
    multiple of the vector: a batched matmul, (G, O/G, I/G) x (N, G, I/G, H*W), between
    reshapes of the NCHW operands (views), plus the bias."""
    a = call.attrs
    groups = a["groups"]
    if groups == 1 or (blocks is not None and (blocks[2] or blocks[1] == fn.block)):
        return False
    if tuple(weight.shape[2:]) != (1, 1) or any(s != 1 for s in a["strides"] or [1, 1]):
        return False
    if any(a["padding"] or [0]):
        return False
    _, cin, h, w = G.type_of(call.args[0]).shape
    cout = weight.shape[0]
    if not all(isinstance(d, int) for d in (cin, h, w)) or cin % groups or cout % groups:
        return False
    x = fn.emit("reshape", (call.args[0],), {"shape": [-1, groups, cin // groups, h * w]},
                f"{var.name}_groups")
    wg = fn.pack(call.args[1], weight.reshape(groups, cout // groups, cin // groups), "groups")
    y = fn.emit("matmul", (wg, x), {}, f"{var.name}_mm")
    if bias is None:
        fn.bind(var, "reshape", (y,), {"shape": [-1, cout, h, w]})
        return True
    y = fn.emit("reshape", (y,), {"shape": [-1, cout, h, w]}, f"{var.name}_mmv")
    fn.bind(var, "add", (y, fn.pack(call.args[2], bias.reshape(cout, 1, 1), "C11")), {})
    return True


def _winograd_applies(call: G.Call, out: G.TensorType) -> bool:
    """A dense 3 x 3 stride-1 conv with enough output tiles and channels for Winograd.

    One conv with its ReLU, 2 threads of an Intel Xeon (AVX-512), direct NCHW16c against
    Winograd, both packs including the transforms to and from NCHW (`benchmarks/
    winograd.py`): 64 -> 64 channels at 56 x 56 (196 tiles) 0.94 -> 0.39 ms, 128 at
    28 x 28 (49 tiles) 0.94 -> 0.31, 256 at 14 x 14 (16 tiles) 0.81 -> 0.37, 512 at
    14 x 14 3.31 -> 1.45. The transformed weights are 4 times the direct ones, and inside a
    model they come from memory: there 16 tiles still win (ResNet-50 33.6 -> 32.4 ms,
    DenseNet-121 31.1 -> 29.1, Inception v2 16.3 -> 15.0, VGG-19 91.4 -> 87.3, with 16
    tiles against 32 as the threshold), but 4 (512 channels at 7 x 7: 0.83 -> 0.74 ms
    alone) made ResNet-50 slower, 30.3 -> 31.2 ms. With 16 to 31 channels it takes 64
    tiles: 16 -> 64 at 112 x 112 ran 0.95 -> 0.75 ms alone, and SqueezeNet's two 16 -> 64
    at 55 x 55 (196 tiles) took it from 3.52 to 3.21 ms, but a small ResNet export's two
    16 -> 16 at 16 x 16 (16 tiles) from 0.072 to 0.084 ms (64 lies between the two, not
    measured itself)."""
    w = call.args[1].type
    a = call.attrs
    if a["groups"] != 1 or tuple(w.shape[2:]) != (3, 3):
        return False
    if any(s != 1 for s in a["strides"] or [1, 1]) or any(d != 1 for d in a["dilation"] or [1, 1]):
        return False
    h, wd = out.shape[2], out.shape[3]
    if not (isinstance(h, int) and isinstance(wd, int)):
        return False
    tiles = -(-h // TILE) * -(-wd // TILE)
    channels = min(w.shape[0], w.shape[1])
    if channels >= WINOGRAD_MIN_CHANNELS:
        return tiles >= WINOGRAD_MIN_TILES
    return channels >= WINOGRAD_FEW_CHANNELS and tiles >= WINOGRAD_FEW_CHANNELS_MIN_TILES


def _winograd(fn: _Function, var: G.Var, call: G.Call, weight, bias, bi: int, bo: int) -> bool:
    """The conv as Winograd F(4x4, 3x3): input transform, a batched product with the
    weights transformed at compile time, output transform (with the bias)."""
    if not _winograd_applies(call, var.type):
        return False
    padding = list(call.attrs["padding"] or [0, 0, 0, 0])
    cin, cout = weight.shape[1], weight.shape[0]
    v = fn.emit("winograd_input_nchwc", (fn.in_layout(call.args[0], _blocked(bi)),),
                {"padding": padding}, f"{var.name}_wino_in")
    _, _, n, th, tw, _, _ = v.type.shape
    flat = fn.emit("reshape", (v,), {"shape": [ALPHA, ALPHA, 1, -1, cin]}, f"{var.name}_wino_v")
    u = fn.pack(call.args[1], winograd_weight(weight, bo), f"winograd{bo}o")
    m = fn.emit("matmul", (flat, u), {}, f"{var.name}_wino_m")
    tiles = fn.emit("reshape", (m,), {"shape": [ALPHA, ALPHA, cout // bo, n, th, tw, bo]},
                    f"{var.name}_wino_mt")
    args: tuple = (tiles,)
    if bias is not None:
        args += (fn.pack(call.args[2], bias.reshape(-1, bo), f"{bo}o"),)
    attrs = {"height": var.type.shape[2], "width": var.type.shape[3]}
    fn.emit_blocked(var, "winograd_output_nchwc", args, attrs, _blocked(bo))
    return True


# ---------------------------------------------------------------------------------------------
# layout-agnostic ops


def _transform_pair(fn: _Function, var: G.Var, call: G.Call) -> bool:
    """A transform into NCHW is recorded as a blocked form; one out of NCHW into a layout
    its operand has a blocked form in becomes that form."""
    if call.op != "layout_transform":
        return False
    src, dst, x = call.attrs["src"], call.attrs["dst"], call.args[0]
    if dst == NCHW and _block_of(src) and _is_nchw(var.type):
        fn.out.append(G.Binding(var, call))
        fn.blocked[id(var)] = (x, src)
        return True
    if src == NCHW and _block_of(dst) and fn.blocked_layout(x) is not None:
        fn.alias[id(var)] = fn.in_layout(x, dst)
        return True
    return False


def _relaid_constant(fn: _Function, c, channels: int, block: int):
    """A constant operand of a blocked elementwise op: itself when it is a scalar (every dim
    1), per-channel values as (C / b, 1, 1, b), else None."""
    value = _value(fn.mod, c)
    if value is None:
        return None
    if value.size == 1:
        return c
    if value.shape in ((channels, 1, 1), (1, channels, 1, 1)):
        layout = _blocked(block)
        return fn.pack(c, value.reshape(channels // block, 1, 1, block), layout)
    return None


def _layout_free(fn: _Function, var: G.Var, call: G.Call) -> bool:
    if call.op not in LAYOUT_FREE or not _is_nchw(var.type):
        return False
    layouts = {fn.blocked_layout(a) for a in call.args if isinstance(a, G.Var)}
    if len(layouts) != 1 or None in layouts:
        return False  # an operand without a blocked form, or two blockings
    layout = layouts.pop()
    block = _block_of(layout)
    args = []
    for a in call.args:
        if isinstance(a, G.Var):
            shape = G.type_of(a).shape
            if shape != var.type.shape and shape != (*var.type.shape[:2], 1, 1):
                return False  # a blocked operand that broadcasts other than per channel
            args.append(fn.blocked[id(a)][0])
        elif a is not None:
            a = _relaid_constant(fn, a, var.type.shape[1], block)
            if a is None:
                return False
            args.append(a)
        else:
            args.append(None)
    fn.emit_blocked(var, call.op, tuple(args), dict(call.attrs), layout)
    return True


def _concat(fn: _Function, var: G.Var, call: G.Call) -> bool:
    if call.op != "concat" or call.attrs["axis"] not in (1, -3):
        return False
    layouts = {fn.blocked_layout(a) for a in call.args}
    if len(layouts) != 1 or None in layouts:
        return False
    args = tuple(fn.blocked[id(a)][0] for a in call.args)
    fn.emit_blocked(var, "concat", args, {"axis": 1}, layouts.pop())
    return True


def _pool3d_attrs(kernel, strides, padding, dilation, rest: dict) -> dict:
    """Attributes of the 3-D pool over (H, W, c) with a unit, unpadded window along c."""
    return {
        "kernel": [*kernel, 1],
        "strides": [*(strides or [1, 1]), 1],
        "padding": [*(padding or [0] * 4)[:2], 0, *(padding or [0] * 4)[2:], 0],
        "dilation": [*(dilation or [1, 1]), 1],
        **rest,
    }


def _window_pool(fn: _Function, var: G.Var, call: G.Call) -> bool:
    layout = fn.blocked_layout(call.args[0]) if call.op in WINDOW_POOLS else None
    if layout is None:
        return False
    a = dict(call.attrs)
    attrs = _pool3d_attrs(
        a.pop("kernel"), a.pop("strides"), a.pop("padding"), a.pop("dilation"), a
    )
    fn.emit_blocked(var, WINDOW_POOLS[call.op], (fn.blocked[id(call.args[0])][0],), attrs, layout)
    return True


def _global_pool(fn: _Function, var: G.Var, call: G.Call) -> bool:
    pooled = GLOBAL_POOLS.get(call.op)
    if call.op in PLANE_REDUCTIONS and _over_the_plane(call):
        pooled = PLANE_REDUCTIONS[call.op]
    layout = fn.blocked_layout(call.args[0]) if pooled else None
    if layout is None:
        return False
    plane = G.type_of(call.args[0]).shape[2:]
    if not all(isinstance(d, int) for d in plane):
        return False
    attrs = _pool3d_attrs(plane, None, None, None, {})
    fn.emit_blocked(var, pooled, (fn.blocked[id(call.args[0])][0],), attrs, layout)
    return True


def _over_the_plane(call: G.Call) -> bool:
    """A reduction of an NCHW value over H and W that keeps their dims."""
    a = dict(call.attrs)
    if len(call.args) != 1 or not a.get("keepdims") or a.get("extents") is not None:
        return False
    return sorted(axis % 4 for axis in a.get("axes") or ()) == [2, 3]


# ---------------------------------------------------------------------------------------------
# the pass


def _rewrite(f: G.Function, mod: IRModule, block: int, packed: dict) -> G.Function:
    fn = _Function(mod, block, packed)
    for b in f.bindings:
        fn.visit(b)
    return dataclasses.replace(f, bindings=tuple(fn.out), ret=G.substitute_vars(f.ret, fn.alias))


@register_pass("alter-conv-layout", needs_target=True, kinds=("llvm",))
def alter_conv_layout(mod: IRModule, target: VectorTarget | None = None) -> IRModule:
    out = IRModule(dict(mod.functions), dict(mod.const_types), dict(mod.const_values))
    if target is None:
        return out
    block = max(target.vector_bits // bit_width(DTYPE), 1)  # values of one register
    packed: dict = {}
    for name, f in mod.graph_functions.items():
        out.functions[name] = _rewrite(f, out, block, packed)
    return dead_code_elimination(out)
