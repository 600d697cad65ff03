"""`tcc import MODEL.onnx|PROGRAM.pt2 -o OUT.tcir`."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from tcc import __version__
from tcc.ir.irfile import save_module
from tcc.ir.summary import module_summary


@click.command("import")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the IR file (default: MODEL with the suffix .tcir).",
)
def command(model: Path, output: Path | None):
    """Import an ONNX model, or a PyTorch program saved by torch.export.save (.pt2; needs
    tcc[torch]), into tcc's IR and save it as a .tcir file."""
    output = output or model.with_suffix(".tcir")
    if model.suffix == ".pt2":
        from tcc.frontend.torch import from_exported_program

        mod = from_exported_program(model)
    else:
        from tcc.frontend.onnx import from_onnx  # its converters take 0.27 s to import

        mod = from_onnx(model)
    save_module(output, mod, producer=f"tcc {__version__}")
    s = module_summary(mod)
    main = s["functions"].get("main", {})
    Console(highlight=False).print(
        f"imported {model} -> {output}: {main.get('bindings', 0)} bindings, "
        f"{s['constants']} constants ({s['constant_bytes']:,} bytes)"
    )
