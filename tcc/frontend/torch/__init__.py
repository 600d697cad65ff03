"""PyTorch frontend: `from_exported_program(ep) -> IRModule`, one converter per ATen op.

torch is an optional dependency (`pip install 'tcc[torch]'`); it is imported when a
program is read, and `require_torch` says how to install it when it is missing.
"""

from tcc.frontend.torch import elementwise, nn, reduce, shape  # noqa: F401  (registers converters)
from tcc.frontend.torch.importer import (
    find_unsupported,
    format_unsupported,
    from_exported_program,
    from_graph,
    load_program,
    require_torch,
)

__all__ = ["find_unsupported", "format_unsupported", "from_exported_program", "from_graph",
           "load_program", "require_torch"]
