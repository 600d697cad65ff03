"""Graph passes and the one pipeline `tcc optimize` runs.

Each pass is one module here with one public function `pass_name(mod) -> IRModule` that
returns a new module and never mutates its input, registered under a kebab-case name
(`dead-code-elimination` = `dead_code_elimination.py` = `dead_code_elimination()`). The
pipeline is a flat, ordered list of those names, so what runs, and in which order, is read
in one place; `--disable-pass` and `--print-after` refer to the same names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import contextmanager

import numpy as np

from tcc.errors import TccError
from tcc.ir import facts
from tcc.ir.module import IRModule
from tcc.ir.verify import verify_if_asked

Pass = Callable[..., IRModule]

PASSES: dict[str, Pass] = {}
# Passes that also take the compile target (`pass_name(mod, target)`); None when unknown.
TARGETED: set[str] = set()
# Passes that run only for some target kinds (by name: the kinds); the others run for all.
TARGET_KINDS: dict[str, tuple[str, ...]] = {}


class UnknownPassError(TccError):
    """A pass name (in --disable-pass or --print-after) that no registered pass has."""


def register_pass(name: str, needs_target: bool = False,
                  kinds: tuple[str, ...] | None = None) -> Callable[[Pass], Pass]:
    """Register the decorated pass under `name` (kebab-case, unique); with `needs_target`
    run_pipeline passes it the target as a second argument; with `kinds` it runs only for
    targets of those kinds (a CPU layout for `llvm`), so a target asks which passes apply."""

    def wrap(fn: Pass) -> Pass:
        if name in PASSES:
            raise ValueError(f"pass {name!r} registered twice")
        PASSES[name] = fn
        if needs_target:
            TARGETED.add(name)
        if kinds is not None:
            TARGET_KINDS[name] = kinds
        return fn

    return wrap


# Registration happens on import; the modules sit below the registry they use.
from tcc.lower.passes import (  # noqa: E402, F401, I001
    alter_conv_layout,
    common_subexpression_elimination,
    constant_folding,
    dead_code_elimination,
    fold_batch_norm,
    fuse_ops,
    lower_dynamic_shapes,
    lower_recurrent,
    pretranspose_weights,
    simplify_algebra,
)

# Recurrent ops first: the slices and transposes of their weights become constants below.
# Algebra next: collapsed reshape/transpose chains can leave duplicate calls for CSE to
# merge. CSE before BatchNorm folding (duplicate BNs of one conv would give the conv two
# users and keep the BN as a scale-shift) and before constant folding (identical constant
# calls fold once; folded duplicates get different constant names, which CSE could not
# merge). The weight pre-transpose after both folds (it stores the weights they made).
# DCE drops what the others left unused, along with the constants and functions nothing
# refers to any more. Dynamic shapes lowered before fusion, so the static ops they become
# fuse like any other. The conv layout after BatchNorm folding (the folded
# weights are what it packs) and DCE (it packs only live weights; it drops the NCHW ones
# itself). Fusion last, on the graph the others cleaned up: it turns groups of op calls into
# call_tir of merged loop programs.
PIPELINE: tuple[str, ...] = (
    "lower-recurrent",
    "simplify-algebra",
    "common-subexpression-elimination",
    "fold-batch-norm",
    "constant-folding",
    "pretranspose-weights",
    "dead-code-elimination",
    "lower-dynamic-shapes",
    "alter-conv-layout",
    "fuse-ops",
)


def check_pass_name(name: str, option: str = "pass name") -> str:
    """`name` if a pass has it, else an UnknownPassError listing the known names."""
    if name not in PASSES:
        raise UnknownPassError(
            f"unknown {option} {name!r}; known passes: {', '.join(PIPELINE)}"
        )
    return name


def _applies(name: str, target) -> bool:
    kinds = TARGET_KINDS.get(name)
    return kinds is None or target is None or target.kind in kinds


@contextmanager
def _small_pages():
    """numpy asks the kernel for huge pages for each big array (madvise); where the kernel
    compacts memory to find them (transparent huge pages with defrag=madvise), the weight
    copies of ResNet-50's passes took 1.06-1.16 s instead of 0.38-0.51 s with small pages.
    The passes touch each copy a few times: huge pages save them nothing."""
    toggle = getattr(np._core.multiarray, "_set_madvise_hugepage", None)
    if toggle is None:
        yield
        return
    was = toggle(False)
    try:
        yield
    finally:
        toggle(was)


def run_pipeline(
    mod: IRModule,
    disable: Iterable[str] = (),
    print_after: str | None = None,
    on_print: Callable[[str], object] = print,
    target=None,
) -> IRModule:
    """Run PIPELINE on `mod`, skipping the passes in `disable`; after the pass named
    `print_after` (or after every pass for "all") hand the module text to `on_print`.
    `target` (a tcc.target.Target, or None when not known) goes to the TARGETED passes;
    a pass kept to other target kinds (TARGET_KINDS) is skipped."""
    skip = {check_pass_name(n, "pass in --disable-pass") for n in disable}
    if print_after is not None and print_after != "all":
        check_pass_name(print_after, "pass in --print-after")
    # the sizes' ranges the functions check
    with facts.assuming(facts.module_ranges(mod)), _small_pages():
        for name in PIPELINE:
            if name in skip or not _applies(name, target):
                continue
            mod = PASSES[name](mod, target) if name in TARGETED else PASSES[name](mod)
            verify_if_asked(mod, f"pass {name}", stated=False)
            if print_after in ("all", name):
                on_print(f"# IR after {name}\n{mod}")
    return mod
