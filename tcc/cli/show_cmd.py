"""`tcc show FILE [--stats] [--json]`."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from tcc.cli.loading import load_ir
from tcc.ir.summary import format_shape, module_summary


@click.command("show")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--stats", is_flag=True, help="Print a summary table instead of the IR text.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def command(file: Path, stats: bool, as_json: bool):
    """Print an IR file (.tcir, or an .onnx model imported on the fly) as text, or a
    .tvmpack: its summary (--stats/--json) or its bytecode disassembly."""
    if file.suffix == ".tvmpack":
        _show_pack(file, stats, as_json)
        return
    from tcc.ir.printer import print_module

    mod = load_ir(file)
    console = Console(highlight=False)
    if as_json:
        click.echo(json.dumps(module_summary(mod), indent=2))
    elif stats:
        _print_stats(console, module_summary(mod))
    elif console.is_terminal:
        console.print(Syntax(print_module(mod), "python", theme="ansi_dark", word_wrap=False))
    else:
        click.echo(print_module(mod), nl=False)


def _shape_text(entry: dict) -> str:
    if "shape" in entry:
        return f"{entry['dtype']}{format_shape(entry['shape'])}"
    return json.dumps(entry)


def _print_stats(console: Console, s: dict) -> None:
    for name, f in s["functions"].items():
        sig = Table(title=f"function {name}: signature", title_justify="left")
        sig.add_column("")
        sig.add_column("name")
        sig.add_column("type")
        for kind in ("inputs", "outputs"):
            for e in f[kind]:
                sig.add_row(kind[:-1], e["name"], _shape_text(e))
        console.print(sig)
        if not f["op_counts"]:
            continue
        ops = Table(title=f"function {name}: ops ({f['bindings']} bindings)", title_justify="left")
        ops.add_column("op")
        ops.add_column("count", justify="right")
        for op, n in f["op_counts"].items():
            ops.add_row(op, str(n))
        console.print(ops)
    console.print(f"constants: {s['constants']} ({s['constant_bytes']:,} bytes)")
    if s["prim_funcs"]:
        console.print(f"prim funcs: {len(s['prim_funcs'])}")


def pack_summary(contents) -> dict:
    return {
        "target": contents.target,
        "functions": contents.signatures,
        "kernels": len(contents.kernel_symbols),
        "shared_object": contents.shared_object is not None,
        "object_bytes": len(contents.object_code or b""),
        "constants": len(contents.weights),
        "constant_bytes": int(sum(w.nbytes for w in contents.weights.values())),
    }


def _show_pack(file: Path, stats: bool, as_json: bool) -> None:
    from tcc.errors import TccError
    from tcc.rt.pack import read_pack

    if not file.exists():
        raise TccError(f"{file}: no such file")
    with read_pack(file) as contents:
        if as_json:
            click.echo(json.dumps(pack_summary(contents), indent=2))
        elif stats:
            s = pack_summary(contents)
            console = Console(highlight=False)
            functions = {n: {**sig, "bindings": 0, "op_counts": {}} for n, sig in s["functions"].items()}
            _print_stats(console, {"functions": functions, "constants": s["constants"],
                                   "constant_bytes": s["constant_bytes"], "prim_funcs": []})
            console.print(f"target: {s['target']}; kernels: {s['kernels']} "
                          f"({s['object_bytes']:,} bytes of object code)")
        else:
            click.echo(contents.executable.as_text(), nl=False)
