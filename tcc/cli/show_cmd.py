"""`tcc show FILE [--stats] [--json] [--size NAME=VALUE ...] [--stage scheduled]`."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from tcc.cli.loading import load_ir
from tcc.ir.summary import module_summary, type_text


@click.command("show")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--stats", is_flag=True, help="Print a summary table instead of the IR text.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--size", "sizes", multiple=True, metavar="NAME=VALUE",
              help="A size variable's value (repeatable), to evaluate symbolic byte counts of "
                   "the memory plan, e.g. --size batch=4 --size seq=128.")
@click.option("--stage", type=click.Choice(["ir", "scheduled"]), default="ir", show_default=True,
              help="'scheduled': the loop programs `tcc emit` compiles (the file's ops "
                   "legalized, every PrimFunc scheduled by the default rules for --target).")
@click.option("--target", default="llvm", show_default=True,
              help="The target whose rules --stage scheduled applies.")
def command(file: Path, stats: bool, as_json: bool, sizes: tuple[str, ...], stage: str,
            target: str):
    """Print an IR file (.tcir, or an .onnx model imported on the fly) as text, or a
    .tvmpack: its summary (--stats/--json) or its bytecode disassembly. The summary of a
    pack, or of a legalized IR file, includes the memory plan of each function: bytes of
    planned kernel outputs allocated one by one, the arena bytes they take instead and the
    lower bound (the most bytes live at once), at the sizes --size gives where they are
    symbolic."""
    env = _sizes(sizes)
    if file.suffix == ".tvmpack":
        _show_pack(file, stats, as_json, env)
        return
    from tcc.ir.printer import print_module

    mod = load_ir(file)
    console = Console(highlight=False)
    if stage == "scheduled":
        _print_text(console, _scheduled_text(mod, target))
        return
    if as_json or stats:
        summary = {**module_summary(mod), **_module_memory(mod, env)}
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    elif stats:
        _print_stats(console, summary)
    elif console.is_terminal:
        console.print(Syntax(print_module(mod), "python", theme="ansi_dark", word_wrap=False))
    else:
        click.echo(print_module(mod), nl=False)


def _scheduled_text(mod, target: str) -> str:
    """The PrimFuncs of `mod`, legalized and scheduled as `tcc emit` does, as text."""
    from tcc.api import lower
    from tcc.ir.printer import print_prim_func
    from tcc.lower.rules import schedule_module
    from tcc.target import parse_target

    scheduled = schedule_module(lower(mod), parse_target(target))
    return "\n\n".join(print_prim_func(n, f) for n, f in scheduled.prim_funcs.items())


def _print_text(console: Console, text: str) -> None:
    if console.is_terminal:
        console.print(Syntax(text, "python", theme="ansi_dark", word_wrap=False))
    else:
        click.echo(text, nl=not text.endswith("\n"))


def _print_stats(console: Console, s: dict) -> None:
    for name, f in s["functions"].items():
        sig = Table(title=f"function {name}: signature", title_justify="left")
        sig.add_column("")
        sig.add_column("name")
        sig.add_column("type")
        for kind in ("inputs", "outputs"):
            for e in f[kind]:
                sig.add_row(kind[:-1], e["name"], type_text(e))
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
    _print_memory(console, s.get("memory", {}))


def _print_memory(console: Console, memory: dict) -> None:
    if not memory:
        return
    table = Table(title="memory plan (kernel outputs the functions do not return)",
                  title_justify="left")
    for col in ("function", "tensors", "arenas", "allocated bytes", "planned bytes",
                "lower bound bytes"):
        table.add_column(col, justify="left" if col == "function" else "right")
    for name, m in memory.items():
        table.add_row(name, str(m["tensors"]), str(m["arenas"]),
                      *(_bytes_text(m[k]) for k in ("allocated_bytes", "planned_bytes",
                                                    "lower_bound_bytes")))
    console.print(table)


def _bytes_text(v: int | None) -> str:
    return "symbolic (--size)" if v is None else f"{v:,}"


def _sizes(items: tuple[str, ...]) -> dict[str, int]:
    env = {}
    for item in items:
        name, _, value = item.partition("=")
        try:
            env[name.strip()] = int(value)
        except ValueError:
            raise click.BadParameter(f"{item!r} is not NAME=INTEGER", param_hint="--size") from None
    return env


def _module_memory(mod, env: dict[str, int]) -> dict:
    """The memory plans of a legalized module's functions (none for one with ops left)."""
    from tcc.emit.vm import VIEW_OPS
    from tcc.ir.graph import Call
    from tcc.lower.passes.plan_memory import plan_module

    ops = {b.value.op for f in mod.graph_functions.values() for b in f.bindings
           if isinstance(b.value, Call)}
    if not mod.prim_funcs or not ops <= VIEW_OPS | {"identity"}:
        return {}
    plans = plan_module(mod)
    from tcc.rt.arena import memory_report

    return {"memory": {name: memory_report(p.arena_inputs(env))
                       for name, p in plans.items() if p.arenas}}


def executable_memory(exe, env: dict[str, int]) -> dict:
    """Per VM function with arenas, `tcc.rt.arena.memory_report` of its `alloc_arena` calls:
    the byte sizes their shape programs give with the size variables of `env` (None where
    one of them has no value there), the lifetimes their constants hold."""
    from tcc.rt.arena import memory_report
    from tcc.rt.errors import PackError
    from tcc.rt.format import FuncKind, Op
    from tcc.rt.vm import eval_shape

    out = {}
    for f in exe.functions:
        heap = [env.get(name) for name in f.heap_names]
        arenas = []
        for ins in f.code:
            if ins.op != Op.CALL or exe.table[ins.a] != (FuncKind.BUILTIN, "alloc_arena"):
                continue
            program, lifetimes = (exe.constants[v] for _, v in ins.args)
            try:
                sizes = list(eval_shape(program, heap, f.heap_names))
            except PackError:  # a size variable without a value
                sizes = None
            arenas.append((sizes, list(zip(lifetimes[::2], lifetimes[1::2]))))
        if arenas:
            out[f.name] = memory_report(arenas)
    return out


def pack_summary(contents, env: dict[str, int] | None = None) -> dict:
    """The summary `tcc show PACK --json` prints (and `tccrt info --json` without sizes)."""
    from tcc.rt.format import FuncKind, Op

    exe = contents.executable
    kernel_calls = sum(1 for f in exe.functions for ins in f.code
                       if ins.op == Op.CALL and exe.table[ins.a][0] == FuncKind.KERNEL)
    return {
        "target": contents.target,
        "functions": contents.signatures,
        "kernels": len(contents.kernel_symbols),
        "kernel_call_sites": kernel_calls,
        "shared_object": contents.shared_object is not None,
        "object_bytes": len(contents.object_code or b""),
        "constants": len(contents.weights),
        "constant_bytes": int(sum(w.nbytes for w in contents.weights.values())),
        "memory": executable_memory(exe, env or {}),
    }


def _show_pack(file: Path, stats: bool, as_json: bool, env: dict[str, int]) -> None:
    from tcc.errors import TccError
    from tcc.infile import not_a_file
    from tcc.rt.pack import read_pack

    why = not_a_file(file)
    if why:
        raise TccError(f"{file}: {why}")
    with read_pack(file) as contents:
        if as_json:
            click.echo(json.dumps(pack_summary(contents, env), indent=2))
        elif stats:
            s = pack_summary(contents, env)
            console = Console(highlight=False)
            functions = {n: {**sig, "bindings": 0, "op_counts": {}} for n, sig in s["functions"].items()}
            _print_stats(console, {"functions": functions, "constants": s["constants"],
                                   "constant_bytes": s["constant_bytes"], "prim_funcs": [],
                                   "memory": s["memory"]})
            console.print(f"target: {s['target']}; kernels: {s['kernels']} "
                          f"({s['object_bytes']:,} bytes of object code), "
                          f"{s['kernel_call_sites']} kernel call sites in the bytecode")
        else:
            click.echo(contents.executable.as_text(), nl=False)
