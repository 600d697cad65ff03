"""Default CUDA schedule rules (target kind `cuda`), sized by the `CUDATarget`'s limits.

Every stage must end up bound to GPU blocks and threads: a stage left to run serially
would run on one thread of one block, so the last rule, `ThreadPerOutputRule`, applies to
every canonical stage. Before it, `MatmulTilingRule` takes contractions with many rows and
columns (tiles in shared memory and registers), `ConvTilingRule` convolutions (the input's
window and the weights in shared memory) and `CrossThreadReductionRule` reductions of
many values into few outputs. Before any rule, `inline_elementwise` folds the elementwise stages
between others into the stages that read them, so that a fused kernel runs as few
launches as its reductions need. The driver that applies them is `tcc.lower.rules`.
"""

from __future__ import annotations

from tcc.lower.rules import RuleSet
from tcc.lower.rules.cuda.conv import ConvTilingRule
from tcc.lower.rules.cuda.cross_thread import CrossThreadReductionRule
from tcc.lower.rules.cuda.inline import inline_elementwise
from tcc.lower.rules.cuda.matmul import MatmulTilingRule
from tcc.lower.rules.cuda.thread_per_output import ThreadPerOutputRule

__all__ = ["RULE_SET"]


def _machine(target):
    """The rules read the CUDATarget itself (archs, threads and shared memory a block)."""
    return target


RULE_SET = RuleSet(
    kernel_rules=(),
    stage_rules=(MatmulTilingRule(), ConvTilingRule(), CrossThreadReductionRule(),
                 ThreadPerOutputRule()),
    machine=_machine,
    prepare=inline_elementwise,
)
