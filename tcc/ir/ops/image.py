"""Image ops: depth/space rearrangement, col2im, and the sampling ops roi_align,
grid_sample and affine_grid.

Layouts are channels-first (NC + spatial dims). Pure data movement (depth_to_space,
space_to_depth) is INJECTIVE; col2im and the ops that sample at data-dependent positions
are OPAQUE. Loop programs exist for all but roi_align (legalization leaves it an op call).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from tcc.ir import expr as E
from tcc.ir import te
from tcc.ir.errors import NoLoopProgram, ShapeError
from tcc.ir.expr import as_dim, fresh_var
from tcc.ir.graph import TensorType
from tcc.ir.ops._util import (
    check_rank,
    clamp_index,
    compute_dtype,
    crop_spatial,
    float_operands,
    float_position,
    no_loop,
    scatter_windows,
    spatial_params,
    unravel,
)
from tcc.ir.ops.elementwise import LOOP_DTYPES
from tcc.ir.ops.registry import REQUIRED, OpDef, Pattern, StaticForm, prod, register, tensor

# ---------------------------------------------------------------------------------------------
# depth <-> space rearrangement


def _depth_to_space_infer(args, attrs):
    x = tensor(args[0], "depth_to_space")
    check_rank("depth_to_space", x, 4)
    b = attrs["block_size"]
    if isinstance(x.shape[1], int) and x.shape[1] % (b * b):
        raise ShapeError(f"op depth_to_space: {x.shape[1]} channels are not divisible by {b}*{b}")
    n, c, h, w = x.shape
    return TensorType((n, as_dim(c // (b * b)), as_dim(h * b), as_dim(w * b)), x.dtype)


def _depth_to_space_ref(x, *, block_size, mode):
    n, c, h, w = x.shape
    b = block_size
    if mode == "DCR":
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return t.reshape(n, c // (b * b), h * b, w * b)


def _space_to_depth_infer(args, attrs):
    x = tensor(args[0], "space_to_depth")
    check_rank("space_to_depth", x, 4)
    b = attrs["block_size"]
    n, c, h, w = x.shape
    for d in (h, w):
        if isinstance(d, int) and d % b:
            raise ShapeError(f"op space_to_depth: spatial dims {h}x{w} are not divisible by {b}")
    return TensorType((n, as_dim(c * b * b), as_dim(h // b), as_dim(w // b)), x.dtype)


def _space_to_depth_ref(x, *, block_size, mode):
    n, c, h, w = x.shape
    b = block_size
    order = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    t = x.reshape(n, c, h // b, b, w // b, b).transpose(order)
    return t.reshape(n, c * b * b, h // b, w // b)


def _depth_to_space_compute(x, *, block_size, mode):
    """Each output element reads the one input element the rearrangement moves there."""
    b = block_size
    n, c, h, w = x.shape
    oc = c // (b * b)

    def at(i, ch, y, xx):
        by, bx = y % b, xx % b
        src = (by * b + bx) * oc + ch if mode == "DCR" else ch * (b * b) + by * b + bx
        return x[i, src, y // b, xx // b]

    return te.compute((n, oc, h * b, w * b), at, "depth_to_space")


def _space_to_depth_compute(x, *, block_size, mode):
    """The inverse gather: output channel -> (input channel, offset in the b x b block)."""
    b = block_size
    n, c, h, w = x.shape

    def at(i, ch, y, xx):
        if mode == "DCR":
            src, blk = ch % c, ch // c
        else:
            src, blk = ch // (b * b), ch % (b * b)
        return x[i, src, y * b + blk // b, xx * b + blk % b]

    return te.compute((n, c * b * b, h // b, w // b), at, "space_to_depth")


register(
    OpDef(
        "depth_to_space",
        _depth_to_space_infer,
        _depth_to_space_ref,
        {"block_size": REQUIRED, "mode": "DCR"},
        Pattern.INJECTIVE,
        compute=_depth_to_space_compute,
        doc="Move channel blocks into b x b spatial blocks; mode DCR (depth-column-row) or CRD.",
    )
)
register(
    OpDef(
        "space_to_depth",
        _space_to_depth_infer,
        _space_to_depth_ref,
        {"block_size": REQUIRED, "mode": "DCR"},
        Pattern.INJECTIVE,
        compute=_space_to_depth_compute,
        doc="Move b x b spatial blocks into channels (inverse of depth_to_space in the same mode).",
    )
)


# ---------------------------------------------------------------------------------------------
# col2im


def _col2im_infer(args, attrs):
    x = tensor(args[0], "col2im")
    check_rank("col2im", x, 3)
    image, block = attrs["image_shape"], attrs["block_shape"]
    if attrs["channels"] is not None:
        c = attrs["channels"]
    elif block is not None:
        ksize = prod(block)
        if isinstance(x.shape[1], int) and isinstance(ksize, int) and x.shape[1] % ksize:
            raise ShapeError(
                f"op col2im: input dim 1 ({x.shape[1]}) is not divisible by the block size {ksize}"
            )
        c = as_dim(x.shape[1] // ksize)
    else:
        c = fresh_var("col2im_c")
    nd = len(image) if image is not None else tensor(args[1], "col2im", "image_shape").shape[0]
    if not isinstance(nd, int):
        raise ShapeError("op col2im: the rank of image_shape must be known")
    dims = list(image) if image is not None else [fresh_var("col2im") for _ in range(nd)]
    return TensorType((x.shape[0], c, *dims), x.dtype)


def _col2im_ref(x, image=None, block=None, *, image_shape, block_shape, strides, padding, dilation,
                channels=None):
    image = list(image_shape) if image_shape is not None else [int(v) for v in image]
    kernel = list(block_shape) if block_shape is not None else [int(v) for v in block]
    nd = len(image)
    s, p, d = spatial_params({"strides": strides, "padding": padding, "dilation": dilation}, nd)
    padded = [image[i] + p[i] + p[nd + i] for i in range(nd)]
    blocks = [(padded[i] - d[i] * (kernel[i] - 1) - 1) // s[i] + 1 for i in range(nd)]
    n = x.shape[0]
    cols = x.reshape((n, -1, *kernel, *blocks))
    y = scatter_windows(cols, padded, s, d)
    return crop_spatial(y, p, image)


def _col2im_compute(x, image=None, block=None, *, image_shape, block_shape, strides, padding,
                    dilation, channels=None):
    """Each image pixel sums, over the block's positions k, the column entry of the block
    that covers it with position k (if one does): the reference's window-by-window sum,
    gathered per pixel, adding in the same order."""
    if image is not None or block is not None or image_shape is None or block_shape is None:
        raise no_loop("col2im", "an image or block shape not read at run time")
    if x.dtype == "bool" or x.dtype not in LOOP_DTYPES:
        raise no_loop("col2im", f"dtype {x.dtype}")
    nd = len(image_shape)
    s, p, d = spatial_params({"strides": strides, "padding": padding, "dilation": dilation}, nd)
    size = prod(block_shape)
    blocks = [(image_shape[i] + p[i] + p[nd + i] - d[i] * (block_shape[i] - 1) - 1) // s[i] + 1
              for i in range(nd)]
    c_out = channels if channels is not None else as_dim(x.shape[1] // size)

    def pixel(n, c, *at):
        k = te.reduce_axis(size, "k")
        offsets = unravel(k, block_shape)
        covered, column = None, 0
        for i in range(nd):
            t = at[i] + p[i] - offsets[i] * d[i]  # where the block's corner would be
            conds = [te.greater_equal(t, 0), te.less(t, blocks[i] * s[i])]
            if s[i] != 1:
                conds.append(te.equal(t % s[i], 0))
            for cond in conds:
                covered = cond if covered is None else te.logical_and(covered, cond)
            column = column * blocks[i] + t // s[i]
        # in range wherever `covered` holds; clamped so the bounds proof sees it
        row = clamp_index(c * size + k, x.shape[1])
        return te.sum(x[n, row, clamp_index(column, x.shape[2])], axis=[k], where=covered)

    return te.compute((x.shape[0], c_out, *image_shape), pixel, "col2im")


def _col2im_static(types, sizes, out, attrs):
    """Col2Im with its image and block shapes read at run time: sizes its kernel takes,
    checked against the columns."""
    x = types[0]
    image = list(sizes[1]) if 1 in sizes else list(attrs["image_shape"])
    block = list(sizes[2]) if 2 in sizes else list(attrs["block_shape"])
    nd = len(image)
    if len(block) != nd:
        raise ShapeError(f"op col2im: {len(block)} block dims for {nd} image dims")
    s, p, d = spatial_params(attrs, nd)
    size = prod(block)
    blocks = [(image[i] + p[i] + p[nd + i] - d[i] * (block[i] - 1) - 1) // s[i] + 1
              for i in range(nd)]
    checks = [(E.compare("ge", b, 1), f"block dim {i} is below 1") for i, b in enumerate(block)]
    checks += [(E.compare("ge", n, 1), f"the image's dim {i} and its pads hold no block")
               for i, n in enumerate(blocks)]
    checks.append((E.compare("eq", E.binop("floormod", x.shape[1], size), 0),
                   f"the columns' dim 1 ({x.shape[1]}) is not a multiple of the block size"))
    checks.append((E.compare("eq", x.shape[2], prod(blocks)),
                   "the columns' dim 2 is not the number of blocks the image holds"))
    count = x.shape[1] // size
    channels = E.fresh_var("channels")  # a plain size for the kernel, bound to the count
    static = {**attrs, "image_shape": image, "block_shape": block, "channels": channels}
    return StaticForm("col2im", (0,), static, (x.shape[0], count, *image), tuple(checks),
                      binds=((channels, count),))


register(
    OpDef(
        "col2im",
        _col2im_infer,
        _col2im_ref,
        {
            "image_shape": None,
            "block_shape": None,
            "strides": None,
            "padding": None,
            "dilation": None,
            "channels": None,
        },
        Pattern.OPAQUE,
        (1, 3),
        compute=_col2im_compute,
        doc="Sum the columns (N, C*prod(block), L) back into image blocks (N, C, *image). "
        "`image_shape`/`block_shape` attributes, or (when None) operands known at run time; "
        "`channels`, when given, is C (a size the loop program takes).",
        shape_operands=(1, 2),
        to_static=_col2im_static,
    )
)


# ---------------------------------------------------------------------------------------------
# sampling: roi_align, grid_sample, affine_grid


def _roi_align_infer(args, attrs):
    x = tensor(args[0], "roi_align")
    rois = tensor(args[1], "roi_align", "rois")
    check_rank("roi_align", x, 4)
    check_rank("roi_align", rois, 2, "rois")
    return TensorType(
        (rois.shape[0], x.shape[1], attrs["output_height"], attrs["output_width"]), x.dtype
    )


def _roi_align_ref(
    x,
    rois,
    batch_indices,
    *,
    mode,
    output_height,
    output_width,
    sampling_ratio,
    spatial_scale,
    half_pixel,
):
    """Average (or max) of bilinear samples on a regular grid in each output bin, per RoI."""
    ct = compute_dtype(x.dtype)
    _, c, h, w = x.shape
    y = np.zeros((rois.shape[0], c, output_height, output_width), dtype=ct)
    offset = 0.5 if half_pixel else 0.0
    for r, (box, b) in enumerate(zip(rois.astype(np.float64), batch_indices)):
        x0, y0, x1, y1 = box * spatial_scale - offset
        rh, rw = y1 - y0, x1 - x0
        if not half_pixel:
            rh, rw = max(rh, 1.0), max(rw, 1.0)
        bh, bw = rh / output_height, rw / output_width
        gh = sampling_ratio if sampling_ratio > 0 else math.ceil(rh / output_height)
        gw = sampling_ratio if sampling_ratio > 0 else math.ceil(rw / output_width)
        ys = y0 + (np.arange(output_height)[:, None] + (np.arange(gh)[None, :] + 0.5) / gh) * bh
        xs = x0 + (np.arange(output_width)[:, None] + (np.arange(gw)[None, :] + 0.5) / gw) * bw
        vals = _roi_bilinear(x[int(b)].astype(ct), ys.reshape(-1), xs.reshape(-1), h, w, mode)
        vals = vals.reshape(c, output_height, gh, output_width, gw)
        y[r] = vals.max(axis=(2, 4)) if mode == "max" else vals.mean(axis=(2, 4))
    return y.astype(x.dtype)


def _roi_bilinear(img, ys, xs, h, w, mode):
    """(C, len(ys), len(xs)) samples with RoiAlign's border rule: outside [-1, size] is 0,
    coordinates are clamped into the image. In max mode the four weighted corners combine
    by max instead of sum, as ONNX defines it."""

    def axis(coords, size):
        valid = (coords >= -1.0) & (coords <= size)
        c = np.clip(coords, 0, None)
        lo = np.minimum(np.floor(c).astype(np.int64), size - 1)
        hi = np.minimum(lo + 1, size - 1)
        frac = np.where(lo >= size - 1, 0.0, c - lo)
        return lo, hi, 1 - frac, frac, valid

    ylo, yhi, wy0, wy1, vy = axis(ys, h)
    xlo, xhi, wx0, wx1, vx = axis(xs, w)
    corners = [
        img[:, yi[:, None], xi[None, :]] * (wy[:, None] * wx[None, :])
        for yi, wy in ((ylo, wy0), (yhi, wy1))
        for xi, wx in ((xlo, wx0), (xhi, wx1))
    ]
    combined = np.maximum.reduce(corners) if mode == "max" else sum(corners)
    return combined * (vy[:, None] & vx[None, :])


register(
    OpDef(
        "roi_align",
        _roi_align_infer,
        _roi_align_ref,
        {
            "mode": "avg",
            "output_height": 1,
            "output_width": 1,
            "sampling_ratio": 0,
            "spatial_scale": 1.0,
            "half_pixel": True,
        },
        Pattern.OPAQUE,
        (3, 3),
        doc="RoI Align (x, rois (R, 4) as x1 y1 x2 y2, batch_indices (R,)) -> (R, C, oh, ow). "
        "`half_pixel` shifts box corners by -0.5 pixel.",
    )
)


def _grid_sample_infer(args, attrs):
    x, grid = tensor(args[0], "grid_sample"), tensor(args[1], "grid_sample", "grid")
    nd = x.ndim - 2
    check_rank("grid_sample", grid, nd + 2, "grid")
    if isinstance(grid.shape[-1], int) and grid.shape[-1] != nd:
        raise ShapeError(f"op grid_sample: grid {grid} must end in {nd} coordinates for input {x}")
    return TensorType((x.shape[0], x.shape[1], *grid.shape[1:-1]), x.dtype)


def _reflect(x, lo: float, hi: float):
    """Fold coordinates outside [lo, hi] back inside by repeated mirroring at the borders."""
    rng = hi - lo
    below, above = x < lo, x > hi
    dx = np.where(below, lo - x, x - hi)
    n = np.floor(dx / rng) if rng > 0 else np.zeros_like(dx)
    r = dx - n * rng
    even = n % 2 == 0
    return np.where(
        below, np.where(even, lo + r, hi - r), np.where(above, np.where(even, hi - r, lo + r), x)
    )


def _cubic_coeffs(t):
    """Keys cubic convolution weights (alpha = -0.75) for taps -1, 0, 1, 2 at fraction t."""
    a = -0.75
    c0 = ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a
    c1 = ((a + 2) * t - (a + 3)) * t * t + 1
    c2 = ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1
    c3 = ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a
    return [c0, c1, c2, c3]


def _grid_sample_ref(x, grid, *, mode, padding_mode, align_corners):
    """Sample x at normalized grid positions (last grid axis = x, y[, z]); every tap of the
    interpolation kernel is gathered for all output positions at once."""
    nd = x.ndim - 2
    dims = x.shape[2:]
    ct = compute_dtype(x.dtype)
    coords = []
    for i in range(nd):
        g = grid[..., nd - 1 - i].astype(np.float64)
        size = dims[i]
        c = (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2
        coords.append(c.astype(np.float32).astype(np.float64))
    lo = [0.0 if align_corners else -0.5] * nd
    hi = [d - 1.0 if align_corners else d - 0.5 for d in dims]
    if mode == "nearest":
        coords = [np.rint(c) for c in coords]
    if padding_mode == "border":
        coords = [
            np.where((c < lo[i]) | (c > hi[i]), np.clip(c, 0, dims[i] - 1), c)
            for i, c in enumerate(coords)
        ]
    elif padding_mode == "reflection":
        coords = [_reflect(c, lo[i], hi[i]) for i, c in enumerate(coords)]

    if mode == "nearest":
        taps = [[(np.trunc(c).astype(np.int64), 1.0)] for c in coords]
    else:
        taps = []
        for c in coords:
            base = np.floor(c)
            t = c - base
            if mode == "linear":
                taps.append([(base.astype(np.int64), 1 - t), (base.astype(np.int64) + 1, t)])
            else:
                taps.append(
                    [(base.astype(np.int64) + k - 1, w) for k, w in enumerate(_cubic_coeffs(t))]
                )

    n = x.shape[0]
    bidx = np.arange(n).reshape((n,) + (1,) * (grid.ndim - 2))
    out = 0
    for combo in itertools.product(*taps):
        weight, ok, index = 1.0, True, []
        for i, (idx, w) in enumerate(combo):
            weight = weight * w
            if padding_mode == "zeros":
                ok = ok & (idx >= 0) & (idx < dims[i])
                idx = np.clip(idx, 0, dims[i] - 1)
            elif padding_mode == "border":
                idx = np.clip(idx, 0, dims[i] - 1)
            else:
                idx = np.trunc(_reflect(idx.astype(np.float64), lo[i], hi[i])).astype(np.int64)
            index.append(idx)
        vals = x[(bidx, slice(None), *index)].astype(ct)  # N, *out, C
        out = out + vals * np.asarray(weight * ok, dtype=ct)[..., None]
    return np.moveaxis(np.asarray(out), -1, 1).astype(x.dtype)


def _te_reflect(x, lo, hi):
    """`_reflect` as a te expression over float64 `x` and bounds."""
    rng = hi - lo
    below, above = te.less(x, lo), te.greater(x, hi)
    dx = te.if_then_else(below, lo - x, x - hi)
    folds = te.if_then_else(te.greater(rng, 0.0), te.floor(dx / rng), te.const(0.0, "float64"))
    r = dx - folds * rng
    even = te.equal(te.fmod(folds, te.const(2.0, "float64")), 0.0)
    return te.if_then_else(below, te.if_then_else(even, lo + r, hi - r),
                           te.if_then_else(above, te.if_then_else(even, hi - r, lo + r), x))


def _grid_sample_compute(x, grid, *, mode, padding_mode, align_corners):
    """Each output gathers every tap of the interpolation kernel (1, 2 or 4 per axis) and sums
    them in the reference's order, coordinates and weights in float64 as it computes them."""
    float_operands("grid_sample", x, grid)
    nd, dims, f64 = len(x.shape) - 2, x.shape[2:], "float64"
    acc = "float32" if x.dtype == "float16" else x.dtype  # compute_dtype

    def size(d):
        return te.cast(d, f64)

    def as_index(c, d):
        return float_position(c, d, 4.0)  # a cubic tap reaches 2 past its coordinate

    lo = [te.const(0.0 if align_corners else -0.5, f64) for _ in dims]
    hi = [size(d) - (1.0 if align_corners else 0.5) for d in dims]

    def coordinate(i, g):
        c = (g + 1.0) / 2.0 * (size(dims[i]) - 1.0) if align_corners else ((g + 1.0) * size(dims[i]) - 1.0) / 2.0
        c = te.cast(te.cast(c, "float32"), f64)
        if mode == "nearest":
            c = te.nearbyint(c)
        if padding_mode == "border":
            outside = te.logical_or(te.less(c, lo[i]), te.greater(c, hi[i]))
            c = te.if_then_else(outside, te.min(te.max(c, te.const(0.0, f64)), size(dims[i]) - 1.0), c)
        elif padding_mode == "reflection":
            c = _te_reflect(c, lo[i], hi[i])
        return c

    def taps(i, c):
        """(position, weight or None) of each tap along axis i around coordinate c."""
        if mode == "nearest":
            return [(as_index(te.trunc(c), dims[i]), None)]
        base = te.floor(c)
        t, at = c - base, as_index(base, dims[i])
        if mode == "linear":
            return [(at, 1.0 - t), (at + 1, t)]
        a = -0.75  # Keys cubic convolution (_cubic_coeffs)
        s, u = t + 1.0, 1.0 - t
        v = u + 1.0
        weights = [((s * a - 5 * a) * s + 8 * a) * s - 4 * a,
                   ((t * (a + 2) - (a + 3)) * t) * t + 1.0,
                   ((u * (a + 2) - (a + 3)) * u) * u + 1.0,
                   ((v * a - 5 * a) * v + 8 * a) * v - 4 * a]
        return [(at + (k - 1), w) for k, w in enumerate(weights)]

    def tap_position(i, k):
        """Stage: where tap k along axis i reads, before clamping into the axis (reflected
        back inside with reflection padding)."""
        shape = grid.shape[:-1]
        raw = te.compute(shape, lambda *at: taps(i, coordinates[i][at])[k][0],
                         f"grid_sample_tap{i}_{k}")
        if padding_mode != "reflection":
            return raw
        return te.compute(shape, lambda *at: as_index(te.trunc(_te_reflect(
            te.cast(raw[at], f64), lo[i], hi[i])), dims[i]), f"grid_sample_reflected_tap{i}_{k}")

    # one stage per axis for the coordinates and per tap for its position: the indices of the
    # loads stay small (a reflection would otherwise repeat the coordinate's own expression)
    coordinates = [
        te.compute(grid.shape[:-1], lambda n, *out, i=i: coordinate(
            i, te.cast(grid[(n, *out, nd - 1 - i)], f64)), f"grid_sample_coordinate{i}")
        for i in range(nd)]
    count = {"nearest": 1, "linear": 2, "cubic": 4}[mode]
    positions = [[tap_position(i, k) for k in range(count)] for i in range(nd)]
    weights = [[None if mode == "nearest" else te.compute(
        grid.shape[:-1], lambda *at, i=i, k=k: taps(i, coordinates[i][at])[k][1],
        f"grid_sample_weight{i}_{k}") for k in range(count)] for i in range(nd)]

    def sample(n, ch, *out):
        at = (n, *out)
        total = te.const(0.0, acc)
        for combo in itertools.product(range(count), repeat=nd):
            weight, inside, index = te.const(1.0, f64), None, []
            for i, k in enumerate(combo):
                d, p, w = dims[i], positions[i][k][at], weights[i][k]
                weight = weight if w is None else weight * w[at]
                if padding_mode == "zeros":
                    ok = te.logical_and(te.greater_equal(p, 0), te.less(p, d))
                    inside = ok if inside is None else te.logical_and(inside, ok)
                index.append(clamp_index(p, d))
            if inside is not None:
                weight = te.if_then_else(inside, weight, te.const(0.0, f64))
            total = total + te.cast(x[(n, ch, *index)], acc) * te.cast(weight, acc)
        return te.cast(total, x.dtype)

    return te.compute((x.shape[0], x.shape[1], *grid.shape[1:-1]), sample, "grid_sample")


register(
    OpDef(
        "grid_sample",
        _grid_sample_infer,
        _grid_sample_ref,
        {"mode": "linear", "padding_mode": "zeros", "align_corners": False},
        Pattern.OPAQUE,
        (2, 2),
        compute=_grid_sample_compute,
        doc="Sample x (N, C, *spatial) at grid (N, *out, ndim) positions in [-1, 1]; mode "
        "nearest/linear/cubic, padding_mode zeros/border/reflection.",
    )
)


def _affine_grid_infer(args, attrs):
    theta = tensor(args[0], "affine_grid", "theta")
    check_rank("affine_grid", theta, 3, "theta")
    size = attrs["size"]
    if size is not None:
        spatial = list(size[2:])
    else:
        n = tensor(args[1], "affine_grid", "size").shape[0]
        if not isinstance(n, int):
            raise ShapeError("op affine_grid: the length of the size operand must be known")
        spatial = [fresh_var("grid") for _ in range(n - 2)]
    return TensorType((theta.shape[0], *spatial, len(spatial)), theta.dtype)


def _affine_grid_ref(theta, size_operand=None, *, size, align_corners):
    """theta (N, nd, nd+1) applied to the homogeneous base grid of each output position."""
    size = list(size) if size is not None else [int(v) for v in size_operand]
    spatial = size[2:]
    axes = []
    for d in spatial:
        i = np.arange(d, dtype=np.float64)
        axes.append(np.linspace(-1.0, 1.0, d) if align_corners else (2 * i + 1) / d - 1)
    mesh = np.meshgrid(*axes, indexing="ij")
    homo = np.stack([*mesh[::-1], np.ones(spatial)], axis=-1)  # *spatial, nd+1 (x first)
    grid = np.einsum("...k,njk->n...j", homo, theta.astype(np.float64))
    return grid.astype(theta.dtype)


def _affine_grid_compute(theta, size_operand=None, *, size, align_corners):
    """Each output is theta's row j applied to the base-grid point, in float64 as the
    reference computes (x coordinate first, then the homogeneous 1)."""
    if size is None or size_operand is not None:
        raise NoLoopProgram("op affine_grid: a size not read at run time has no loop program")
    spatial = list(size[2:])
    nd, f64 = len(spatial), "float64"

    def base(axis: int, i):
        """numpy's linspace(-1, 1, d)[i] (last point exact), or the pixel centre (2i+1)/d - 1."""
        d, v = spatial[axis], te.cast(i, f64)
        if not align_corners:
            return (v * 2.0 + 1.0) / te.cast(d, f64) - 1.0
        if isinstance(d, int) and d == 1:
            return te.const(-1.0, f64)
        end = te.equal(i, d - 1)
        step = 2.0 / (d - 1) if isinstance(d, int) else 2.0 / te.cast(d - 1, f64)
        inner = te.if_then_else(end, te.const(1.0, f64), v * step + -1.0)
        if isinstance(d, int):
            return inner
        return te.if_then_else(te.equal(d, 1), te.const(-1.0, f64), inner)

    def at(*i):
        n, j = i[0], i[-1]
        acc = None
        for k in range(nd):
            axis = nd - 1 - k
            term = base(axis, i[1 + axis]) * te.cast(theta[n, j, k], f64)
            acc = term if acc is None else acc + term
        last = te.cast(theta[n, j, nd], f64)
        return te.cast(last if acc is None else acc + last, theta.dtype)

    return te.compute((theta.shape[0], *spatial, nd), at, "affine_grid")


def _affine_grid_static(types, sizes, out, attrs):
    """AffineGrid with its size operand read at run time (N, C, *spatial): sizes the kernel
    takes, the batch checked against theta's."""
    theta, size = types[0], list(sizes[1])
    nd = len(size) - 2
    static = all(isinstance(d, int) for d in theta.shape[1:])
    if nd < 1 or (static and theta.shape[1:] != (nd, nd + 1)):
        raise ShapeError(f"op affine_grid: a size of {len(size)} values for theta {theta}")
    checks = [(E.compare("eq", size[0], theta.shape[0]),
               f"the size's batch is not theta's ({theta.shape[0]})")]
    checks += [(E.compare("ge", d, 0), f"size {2 + i} is negative") for i, d in enumerate(size[2:])]
    return StaticForm("affine_grid", (0,), {**attrs, "size": size},
                      (theta.shape[0], *size[2:], nd), tuple(checks))


register(
    OpDef(
        "affine_grid",
        _affine_grid_infer,
        _affine_grid_ref,
        {"size": None, "align_corners": False},
        Pattern.OPAQUE,
        (1, 2),
        compute=_affine_grid_compute,
        shape_operands=(1,),
        to_static=_affine_grid_static,
        doc="Sampling grid (N, *spatial, nd) of the affine maps theta (N, nd, nd+1) for an "
        "output of shape `size` (N, C, *spatial) (attribute, or run-time operand when None).",
    )
)
