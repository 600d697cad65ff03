"""`tcc optimize IN.tcir -o OUT.tcir [--target T] [--disable-pass NAME ...]
[--print-after NAME|all]`."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from tcc import __version__
from tcc.cli.loading import load_ir
from tcc.ir.irfile import save_module
from tcc.lower.passes import PIPELINE, run_pipeline
from tcc.target import parse_target


def _bindings(mod) -> int:
    return sum(len(f.bindings) for f in mod.graph_functions.values())


@click.command("optimize")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the optimized IR file (default: MODEL with the suffix .opt.tcir).",
)
@click.option(
    "--disable-pass", "disable", multiple=True, metavar="NAME",
    help=f"Skip this pass (repeatable). Passes, in order: {', '.join(PIPELINE)}.",
)
@click.option(
    "--print-after", metavar="NAME|all",
    help="Print the IR after this pass (or after every pass) to stdout.",
)
@click.option(
    "--target", metavar="TARGET",
    help="The machine the model will run on ('llvm' for this one); target-dependent passes "
    "(alter-conv-layout) run only when it is given.",
)
def command(
    model: Path,
    output: Path | None,
    disable: tuple[str, ...],
    print_after: str | None,
    target: str | None,
):
    """Run the graph pass pipeline on an IR file (or an ONNX model) and save the result."""
    output = output or model.with_name(model.stem + ".opt.tcir")
    parsed = None if target is None else parse_target(target)
    mod = load_ir(model)
    before = (_bindings(mod), len(mod.const_types))
    out = run_pipeline(
        mod, disable=disable, print_after=print_after, on_print=click.echo, target=parsed
    )
    save_module(output, out, producer=f"tcc {__version__}")
    Console(highlight=False, soft_wrap=True, stderr=print_after is not None).print(
        f"optimized {model} -> {output}: {before[0]} -> {_bindings(out)} bindings, "
        f"{before[1]} -> {len(out.const_types)} constants"
    )
