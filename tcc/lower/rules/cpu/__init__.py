"""Default CPU schedule rules (target kind `llvm`), sized by the CPU's `Machine`.

The kernel rule schedules row-wise kernels (softmax, layer norm) whole; each other stage
gets the first of the stage rules that applies: contractions (matmul, convolution) as
register-blocked micro-kernels, reductions, then everything elementwise or injective.
The driver that applies them is `tcc.lower.rules`.
"""

from __future__ import annotations

from tcc.lower.rules import RuleSet
from tcc.lower.rules.cpu.contraction import ContractionRule
from tcc.lower.rules.cpu.elementwise import ElementwiseRule
from tcc.lower.rules.cpu.machine import Machine
from tcc.lower.rules.cpu.reduction import ReductionRule
from tcc.lower.rules.cpu.rows import RowRule

__all__ = ["RULE_SET", "Machine"]

RULE_SET = RuleSet(
    kernel_rules=(RowRule(),),
    stage_rules=(ContractionRule(), ReductionRule(), ElementwiseRule()),
    machine=Machine.of,
)
