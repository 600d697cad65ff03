"""Data-movement ops: reshape, transpose, concat, slice, gather, ... (injective)."""

from __future__ import annotations

import numpy as np

from tcc.ir.dtype import to_numpy
from tcc.ir.graph import TensorType
from tcc.ir.ops.registry import REQUIRED, OpDef, Pattern, register, tensor

register(
    OpDef(
        "identity",
        lambda args, attrs: tensor(args[0], "identity"),
        lambda x: np.array(x, copy=True),
        pattern=Pattern.ELEMWISE,
        doc="A copy of the input.",
    )
)

register(
    OpDef(
        "shape_to_tensor",
        lambda args, attrs: TensorType(() if attrs["scalar"] else (len(attrs["dims"]),), attrs["dtype"]),
        lambda dims, scalar, dtype: np.array(dims, dtype=to_numpy(dtype)).reshape(() if scalar else (-1,)),
        attrs={"dims": REQUIRED, "scalar": False, "dtype": "int64"},
        pattern=Pattern.INJECTIVE,
        num_args=(0, 0),
        doc="A 1-D (or scalar) integer tensor holding the (symbolic) dimensions `dims`.",
    )
)
