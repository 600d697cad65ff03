"""Data layout ops: `layout_transform` between blocked layouts and the NCHWc convolution.

A layout string names each axis of a tensor: an uppercase letter is a primal axis (`N`,
`C`, `H`, `W`, `O`, `I`), a number then a lowercase letter is a block of that primal axis
(`16c`: 16 consecutive channels), as in TVM. In `NCHW16c` the primal channel `C` of size 64
becomes the two axes `C` (64 / 16 = 4) and `c` (16), and element (n, C, h, w, c) is channel
C * 16 + c of NCHW. A block must divide its primal axis, whose size must then be static.

`layout_transform` is a pure index permutation (INJECTIVE: it fuses into neighbouring
elementwise chains). `conv2d_nchwc` is conv2d on NCHW{ci}c data and OIHW{ci}i{co}o weights,
returning NCHW{co}c: the weights' innermost axis is the output-channel block, so one output
row of `co` lanes is a vector multiply-add of a broadcast input value and a contiguous weight
vector (TVM's conv2d_NCHWc on x86). It covers groups 1 (input block `ci`, any divisor of the
input channels), depthwise (groups equal to the channel count, weights OIHW1i{co}o, input
and output blocked alike), and other groups G whose input channels `ci` and output channels
`co` divide (weights O(I/G)HW{ci}i{co}o: output chunk `oc` reads the input chunks of its
group, `oc // (O / co / G) * (I / G / ci)` onwards, AlexNet's grouped convs).

Loop program of `conv2d_nchwc` (axis order for schedule rules): one reduction stage
`conv2d_nchwc` over spatial axes (n, oc_chunk, oh, ow, oc_block) then reduction axes
(ic_chunk, kh, kw, ic_block) for groups 1 and grouped (ic_chunk counting within the group),
or (kh, kw) for depthwise; the innermost spatial axis `oc_block` has unit stride in the
output and in the weights, so a rule vectorizes it after moving the reductions outside a
tile of `ow`. Padded taps read under `if_then_else`. A
bias is added in a second stage `conv2d_nchwc_bias` of the same shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from tcc.ir import te
from tcc.ir.errors import ShapeError
from tcc.ir.expr import Dim
from tcc.ir.graph import TensorType
from tcc.ir.ops._util import (
    accumulate_dtype,
    check_lengths,
    check_positive,
    check_rank,
    data_op,
    float_operands,
    optional_tensor,
    spatial_params,
    te_type,
    window_out_dim,
    window_taps,
)
from tcc.ir.ops.registry import OpDef, Pattern, get_op, register, tensor

# ---------------------------------------------------------------------------------------------
# layout strings

_TOKEN = re.compile(r"(\d*)([A-Za-z])")


@dataclass(frozen=True)
class Layout:
    """A parsed layout: `axes` in order, each (letter, block); a primal axis has block 0."""

    text: str
    axes: tuple[tuple[str, int], ...]

    @property
    def primal(self) -> str:
        """The primal axes in their order (`NCHW` for `NCHW16c`)."""
        return "".join(a for a, b in self.axes if not b)

    def block(self, primal: str) -> int:
        """The block of primal axis `primal`, or 0 when it has none (`1c` is a block of 1)."""
        return next((b for a, b in self.axes if b and a == primal.lower()), 0)

    def factor(self, primal: str) -> int:
        """How many primal elements one step of axis `primal` spans."""
        return max(self.block(primal), 1)

    def position(self, axis: str) -> int:
        return next(i for i, (a, _) in enumerate(self.axes) if a == axis)


def parse_layout(text: str, op: str = "layout_transform") -> Layout:
    """`text` as a Layout; a ShapeError says what is wrong with a malformed one."""
    tokens = _TOKEN.findall(text)
    if "".join(n + a for n, a in tokens) != text or not tokens:
        raise ShapeError(f"op {op}: layout {text!r} is not of the form NCHW or NCHW16c")
    axes = []
    for num, a in tokens:
        if a.isupper() == bool(num):
            raise ShapeError(
                f"op {op}: layout {text!r}: a primal axis is one uppercase letter, a block is "
                f"a number and a lowercase letter (got {num + a!r})"
            )
        axes.append((a, int(num) if num else 0))
    letters = [a for a, _ in axes]
    primal = {a for a, b in axes if not b}
    if len(set(letters)) != len(letters) or any(b and a.upper() not in primal for a, b in axes):
        raise ShapeError(
            f"op {op}: layout {text!r} repeats an axis or blocks an axis it does not have"
        )
    if any(b < 1 for a, b in axes if a.islower()):
        raise ShapeError(f"op {op}: layout {text!r} has a block of size 0")
    return Layout(text, tuple(axes))


def _layouts(src: str, dst: str, op: str) -> tuple[Layout, Layout]:
    s, d = parse_layout(src, op), parse_layout(dst, op)
    if sorted(s.primal) != sorted(d.primal):
        raise ShapeError(f"op {op}: layouts {src!r} and {dst!r} have different primal axes")
    return s, d


def blocked_shape(primal: dict[str, Dim], layout: Layout, op: str) -> tuple[Dim, ...]:
    """The shape in `layout` of a tensor whose primal axes have the sizes `primal`."""
    shape: list[Dim] = []
    for a, b in layout.axes:
        if not b:
            size, blk = primal[a], layout.factor(a)
            if blk > 1 and (not isinstance(size, int) or size % blk):
                raise ShapeError(
                    f"op {op}: axis {a} of size {size} does not split into blocks of {blk} "
                    f"(layout {layout.text!r}); a blocked axis needs a static multiple"
                )
            shape.append(size if blk == 1 else size // blk)
        else:
            shape.append(b)
    return tuple(shape)


def primal_sizes(shape, layout: Layout) -> dict[str, Dim]:
    """The primal axis sizes of a tensor of `shape` in `layout`."""
    return {a: shape[layout.position(a)] * layout.factor(a) for a, b in layout.axes if not b}


# ---------------------------------------------------------------------------------------------
# layout_transform


def _transform_infer(args, attrs):
    op = "layout_transform"
    x = tensor(args[0], op)
    src, dst = _layouts(attrs["src"], attrs["dst"], op)
    check_rank(op, x, len(src.axes))
    return TensorType(blocked_shape(primal_sizes(x.shape, src), dst, op), x.dtype)


def _to_primal(x: np.ndarray, layout: Layout) -> np.ndarray:
    """`x` in `layout` -> the same tensor in the layout's primal order, blocks merged back."""
    perm, sizes = [], []
    for a in layout.primal:
        perm.append(layout.position(a))
        if layout.block(a):
            perm.append(layout.position(a.lower()))
        sizes.append(x.shape[layout.position(a)] * layout.factor(a))
    return x.transpose(perm).reshape(sizes)


def _from_primal(y: np.ndarray, order: str, layout: Layout) -> np.ndarray:
    """`y` with primal axes in `order` -> the same tensor in `layout`."""
    y = y.transpose([order.index(a) for a in layout.primal])
    split, names = [], []
    for a, size in zip(layout.primal, y.shape):
        blk = layout.block(a)
        split += [size // blk, blk] if blk else [size]
        names += [a, a.lower()] if blk else [a]
    return np.ascontiguousarray(y.reshape(split).transpose([names.index(a) for a, _ in layout.axes]))


def layout_transform_ref(x: np.ndarray, *, src: str, dst: str) -> np.ndarray:
    """`x` laid out in `src` rearranged into `dst` (numpy)."""
    s, d = _layouts(src, dst, "layout_transform")
    return _from_primal(_to_primal(x, s), s.primal, d)


def _transform_compute(x, *, src, dst):
    s, d = _layouts(src, dst, "layout_transform")
    shape = _transform_infer([te_type(x)], {"src": src, "dst": dst}).shape

    def body(*idx):
        at = dict(zip((a for a, _ in d.axes), idx))
        src_idx = []
        for a, b in s.axes:
            primal = a.upper()
            bs, bd = s.block(primal), d.block(primal)
            if bs == bd:  # the same blocking on both sides: copy the index
                src_idx.append(at[a])
                continue
            pos = at[primal] * bd + at[primal.lower()] if bd else at[primal]
            src_idx.append(pos if not bs else (pos % bs if b else pos // bs))
        return x[tuple(src_idx)]

    return te.compute(shape, body, "layout_transform")


register(
    OpDef(
        "layout_transform",
        _transform_infer,
        layout_transform_ref,
        {"src": "NCHW", "dst": "NCHW16c"},
        Pattern.INJECTIVE,
        compute=_transform_compute,
        doc="Rearrange a tensor from layout `src` to layout `dst` (e.g. NCHW -> NCHW16c, "
        "OIHW -> OIHW16i16o); blocks must divide their (static) axes.",
    )
)


# ---------------------------------------------------------------------------------------------
# conv2d_nchwc

_CONV = "conv2d_nchwc"


def _conv_kind(x: TensorType, w: TensorType, groups: int) -> str:
    """"dense" (groups 1), "depthwise" (groups = channels, one input channel a group) or
    "grouped"; a ShapeError for operands that fit none."""
    check_rank(_CONV, x, 5)
    check_rank(_CONV, w, 6, "weight")
    channels = x.shape[1] * x.shape[4]
    if groups == 1:
        pairs = [(x.shape[1], w.shape[1], "input channel chunks"),
                 (x.shape[4], w.shape[4], "input channel blocks")]
        kind = "dense"
    elif groups != channels or (w.shape[1], w.shape[4]) != (1, 1):
        if not isinstance(channels, int) or groups < 1 or channels % groups:
            raise ShapeError(
                f"op {_CONV}: groups must divide the channel count ({channels}), got {groups}"
            )
        if not isinstance(w.shape[0], int) or w.shape[0] % groups:
            raise ShapeError(
                f"op {_CONV}: each of the {groups} groups must hold whole output channel "
                f"blocks, got {w.shape[0]} blocks of {w.shape[5]}"
            )
        pairs = [(x.shape[1], groups * w.shape[1], "input channel chunks of all groups"),
                 (x.shape[4], w.shape[4], "input channel blocks")]
        kind = "grouped"
    else:
        pairs = [(w.shape[1], 1, "depthwise weight input chunks"),
                 (w.shape[4], 1, "depthwise weight input block"),
                 (x.shape[1], w.shape[0], "depthwise channel chunks"),
                 (x.shape[4], w.shape[5], "depthwise channel blocks")]
        kind = "depthwise"
    for a, b, what in pairs:
        if isinstance(a, int) and isinstance(b, int) and a != b:
            raise ShapeError(f"op {_CONV}: {what} must match, got {a} and {b}")
    return kind


def _conv_infer(args, attrs):
    x, w = tensor(args[0], _CONV), tensor(args[1], _CONV, "weight")
    _conv_kind(x, w, attrs["groups"])
    strides, padding, dilation = spatial_params(attrs, 2)
    check_lengths(_CONV, 2, strides, padding, dilation)
    b = optional_tensor(args, 2, _CONV, "bias")
    if b is not None and (b.ndim != 2 or b.shape != (w.shape[0], w.shape[5])):
        raise ShapeError(f"op {_CONV}: bias must be ({w.shape[0]}, {w.shape[5]}), got {b}")
    out = [
        window_out_dim(x.shape[2 + i], w.shape[2 + i], strides[i], padding[i], padding[2 + i],
                       dilation[i])
        for i in range(2)
    ]
    check_positive(_CONV, out)
    return TensorType((x.shape[0], w.shape[0], *out, w.shape[5]), x.dtype)


def _conv_ref(x, w, b=None, *, strides, padding, dilation, groups):
    """Unpack to NCHW/OIHW, run conv2d's reference, pack the result: the definition."""
    ci, co = x.shape[4], w.shape[5]
    x_nchw = layout_transform_ref(x, src=f"NCHW{ci}c", dst="NCHW")
    w_layout = f"OIHW{w.shape[4]}i{co}o"
    w_oihw = layout_transform_ref(w, src=w_layout, dst="OIHW")
    bias = None if b is None else b.reshape(-1)
    y = get_op("conv2d").ref(
        x_nchw, w_oihw, bias, strides=strides, padding=padding, dilation=dilation, groups=groups
    )
    return layout_transform_ref(y, src="NCHW", dst=f"NCHW{co}c")


def _conv_compute(x, w, b=None, *, strides, padding, dilation, groups):
    dt = float_operands(_CONV, x, w, b)
    attrs = {"strides": strides, "padding": padding, "dilation": dilation, "groups": groups}
    shape = _conv_infer([te_type(x), te_type(w), te_type(b)], attrs).shape
    kind = _conv_kind(te_type(x), te_type(w), groups)
    strides, padding, dilation = spatial_params(attrs, 2)
    acc = accumulate_dtype(dt)
    kh, kw = te.reduce_axis(w.shape[2], "kh"), te.reduce_axis(w.shape[3], "kw")
    if kind == "depthwise":
        ic, icb, axes = None, None, [kh, kw]
    else:
        ic, icb = te.reduce_axis(w.shape[1], "ic"), te.reduce_axis(w.shape[4], "icb")
        axes = [ic, kh, kw, icb]

    def body(n, oc, oh, ow, ocb):
        at, cond = window_taps(x.shape[2:4], (oh, ow), (kh, kw), strides, padding, dilation)
        if kind == "dense":
            v, wv = x[n, ic, at[0], at[1], icb], w[oc, ic, kh, kw, icb, ocb]
        elif kind == "grouped":  # the input chunks of oc's group (w.shape[0] // groups a group)
            chunk = oc // (w.shape[0] // groups) * w.shape[1] + ic
            v, wv = x[n, chunk, at[0], at[1], icb], w[oc, ic, kh, kw, icb, ocb]
        else:
            v, wv = x[n, oc, at[0], at[1], ocb], w[oc, 0, kh, kw, 0, ocb]
        v = te.cast(v, acc)
        if cond is not None:
            v = te.if_then_else(cond, v, te.const(0, acc))
        return te.sum(data_op("mul", v, te.cast(wv, acc)), axis=axes)

    y = te.compute(shape, body, _CONV)
    if b is None and acc == dt:
        return y

    def epilogue(*idx):
        v = y[idx]
        if b is not None:
            v = v + te.cast(b[idx[1], idx[4]], acc)
        return te.cast(v, dt)

    return te.compute(shape, epilogue, f"{_CONV}_bias")


register(
    OpDef(
        _CONV,
        _conv_infer,
        _conv_ref,
        {"strides": None, "padding": None, "dilation": None, "groups": 1},
        Pattern.OUT_FUSABLE,
        (2, 3),
        compute=_conv_compute,
        doc="conv2d on NCHW{ci}c data, OIHW{ci}i{co}o weights and an optional (O / co, co) "
        "bias, giving NCHW{co}c; groups 1, depthwise (weights OIHW1i{co}o, ci == co), or "
        "groups whose input and output channels the blocks divide (weights O(I/G)HW{ci}i{co}o).",
    )
)
