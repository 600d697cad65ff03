"""Op families; importing this package registers every op record in `OPS`."""

from tcc.ir.ops import (  # noqa: F401
    attention,
    cast,
    conv,
    elementwise,
    flex_attention,
    generate,
    image,
    index,
    layout,
    matmul,
    norm,
    pool,
    quantize,
    reduce,
    resize,
    rnn,
    rotary,
    select,
    sequence,
    signal,
    slicing,
    softmax,
    transform,
    winograd,
)
from tcc.ir.ops.registry import OPS, REQUIRED, OpDef, Pattern, get_op, register

__all__ = ["OPS", "REQUIRED", "OpDef", "Pattern", "get_op", "register"]
