"""`tcc check MODEL.onnx|PROGRAM.pt2 [--json]`: a pre-flight report for CI."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from tcc.api import WORKAROUND, calls_without_loop_program
from tcc.ir.errors import TccError
from tcc.ir.summary import signature, type_text


@click.command("check")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--compile", "for_compile", is_flag=True,
              help="Also require every op to have a loop program (so `tcc compile` works).")
def command(model: Path, as_json: bool, for_compile: bool):
    """Report whether tcc can import MODEL (an ONNX model, or a PyTorch program saved by
    torch.export.save as .pt2): unsupported ops, inputs and outputs, and the
    ops `tcc compile` cannot lower yet, each with its node, why, and the way around it.

    Exits 1 when any op is unsupported or the import fails (with --compile: or an op has
    no loop program), 0 otherwise.
    """
    source, unsupported, importer = _unsupported_ops(model)
    report: dict = {"model": str(model), "unsupported": unsupported, "import_error": None}
    if not unsupported:
        try:
            mod = importer(source)
            report.update(signature(mod["main"]))
            calls = calls_without_loop_program(mod)
            ops = sorted({c["op"] for c in calls})
            report["no_loop_program"] = {op: sum(c["op"] == op for c in calls) for op in ops}
            report["no_loop_program_calls"] = calls
        except TccError as e:
            report["import_error"] = str(e)
    ok = not unsupported and report["import_error"] is None
    if for_compile:
        ok = ok and not report.get("no_loop_program")
    report["ok"] = ok
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        _print_report(Console(highlight=False), report)
    sys.exit(0 if ok else 1)


def _unsupported_ops(model: Path):
    """The model as read, its unsupported ops, and the function that imports it."""
    if model.suffix == ".pt2":
        from tcc.frontend.torch import find_unsupported, from_exported_program, load_program
        from tcc.frontend.torch.importer import decomposed

        program = decomposed(load_program(model))
        return program, [
            {"op_type": op, "domain": "", "opset": None, "nodes": where}
            for op, where in find_unsupported(program)
        ], from_exported_program
    from tcc.frontend.onnx import find_unsupported, from_onnx, load_model  # 0.27 s to import

    proto = load_model(model)
    return proto, [
        {"op_type": op, "domain": domain, "opset": opset, "nodes": names}
        for domain, op, opset, names in find_unsupported(proto)
    ], from_onnx


def _print_report(console: Console, r: dict) -> None:
    if r["unsupported"]:
        t = Table(title=f"{r['model']}: unsupported ops", title_justify="left")
        for col in ("op", "opset", "nodes"):
            t.add_column(col)
        for u in r["unsupported"]:
            op = f"{u['domain']}.{u['op_type']}" if u["domain"] else u["op_type"]
            names = ", ".join(u["nodes"][:5]) + (f" (+{len(u['nodes']) - 5} more)" if len(u["nodes"]) > 5 else "")
            t.add_row(op, "" if u["opset"] is None else str(u["opset"]), names)
        console.print(t)
    if r["import_error"]:
        console.print(f"[red]import fails:[/] {r['import_error']}")
    if "inputs" in r:
        t = Table(title=f"{r['model']}: signature", title_justify="left")
        for col in ("", "name", "type"):
            t.add_column(col)
        for kind in ("inputs", "outputs"):
            for e in r[kind]:
                t.add_row(kind[:-1], e["name"], type_text(e))
        console.print(t)
    if r.get("no_loop_program"):
        t = Table(title=f"{r['model']}: no loop program yet (tcc compile refuses)",
                  title_justify="left")
        for col in ("node", "op", "why"):
            t.add_column(col)
        for c in r["no_loop_program_calls"]:
            t.add_row(c["node"], c["op"], c["reason"])
        console.print(t)
        console.print(f"[yellow]workaround:[/] {WORKAROUND}")
    elif "no_loop_program" in r:
        console.print("every op has a loop program: `tcc compile` can build it")
    console.print("[green]ok: every op is supported[/]" if r["ok"] else "[red]not supported[/]")
