"""`tcc compile MODEL.onnx|PROGRAM.pt2|IN.tcir -o OUT.tvmpack` and `tcc emit IN.tcir -o OUT.tvmpack`."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from tcc.api import StageTimes, compile_to_file
from tcc.errors import TccError
from tcc.infile import not_a_file

_STAGES = {
    "cache": "looking for the pack in the pack cache",
    "import": "importing",
    "optimize": "optimizing the graph",
    "legalize": "legalizing ops to loop programs",
    "tuning": "applying the tuning database",
    "vm": "compiling graph functions to bytecode",
    "kernels": "scheduling kernels and generating CPU code (LLVM)",
    "pack": "assembling the pack",
    "write": "writing the pack file (and the pack cache's copy)",
}


def _build(source: Path, target: str, output: Path, verbose: bool, optimize: bool = False,
           disable_passes: tuple[str, ...] = (), plan_memory: bool = True,
           schedule: bool = True, sign: Path | None = None, db: Path | None = None,
           cache: bool = True) -> None:
    why = not_a_file(source)
    if why:
        raise TccError(f"{source}: {why}")
    why = None if db is None else not_a_file(db)
    if why:
        raise TccError(f"--db {db}: {why}")
    console = Console(stderr=True, highlight=False)
    times = StageTimes()
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
        console=console, transient=True, disable=not console.is_terminal,
    ) as progress:
        task = progress.add_task("starting", total=None)
        size = compile_to_file(
            source, output, target, on_stage=lambda s: progress.update(task, description=_STAGES[s]),
            times=times, optimize=optimize, disable_passes=disable_passes,
            plan_memory=plan_memory, schedule=schedule, sign=sign, db=db, cache=cache,
        )
    for warning in times.tuning_warnings:
        console.print(f"warning: {warning}", markup=False, highlight=False, soft_wrap=True)
    if times.guarded:
        console.print(f"warning: {len(times.guarded)} buffer access(es) of {source} could not be proven "
                      f"in bounds and run guarded (first: {escape(times.guarded[0])}); TCC_VERIFY=1 "
                      "refuses them instead", highlight=False, soft_wrap=True)
    total = sum(times.seconds.values())
    Console(highlight=False).print(
        f"compiled {source} -> {output} ({size:,} bytes, target {target}"
        f"{', signed' if sign else ''}) in {total:.2f} s"
    )
    if verbose:
        for name, s in times.seconds.items():
            Console(highlight=False).print(f"  {name:9s} {s * 1000:9.1f} ms")
        if db is not None:
            kept = (f" ({times.reverted} more kept on the default schedule by its in-model "
                    "check)" if times.reverted else "")
            Console(highlight=False).print(f"  {times.tuned} kernel(s) scheduled by {db}{kept}",
                                           soft_wrap=True)
        from tcc.emit.object_cache import cache_dir

        if times.from_pack_cache:
            Console(highlight=False).print(
                f"  the pack from the pack cache ({cache_dir('packs')})", soft_wrap=True)
        elif cache and times.cacheable:
            Console(highlight=False).print(
                f"  {times.kernels_cached} of {times.kernels_cached + times.kernels_compiled} "
                f"kernel(s) from the compile cache ({cache_dir()})", soft_wrap=True)


_target = click.option(
    "--target", default="llvm", show_default=True,
    help="'llvm' (this CPU), 'llvm -mtriple=... -mcpu=... -mattr=...', or 'cuda' / "
         "'cuda -arch=sm_80,sm_90' (NVIDIA GPUs; needs tcc[cuda]; docs/target.md).",
)
_sign = click.option(
    "--sign", type=click.Path(dir_okay=False, path_type=Path), metavar="KEY",
    help="Sign the pack with this Ed25519 private key (PEM; make one with "
         "`openssl genpkey -algorithm ed25519 -out key.pem`); `tcc run --require-signature` "
         "checks it. Needs tcc[sign].",
)
_db = click.option(
    "--db", type=click.Path(dir_okay=False, path_type=Path), metavar="DB",
    help="A tuning database: each kernel it has a record for on this target gets its best "
         "record's schedule instead of the default rules (docs/tuning.md).",
)
_no_cache = click.option(
    "--no-cache", is_flag=True,
    help="Compile the model and every kernel, without reading or adding to the compile "
         "caches: whole packs by model, options and tcc ($TCC_CACHE_DIR/packs, else "
         "$XDG_CACHE_HOME/tcc/packs or ~/.cache/tcc/packs; at most $TCC_PACK_CACHE_MB, 2048 "
         "MB by default) and kernels' object code ($TCC_CACHE_DIR, else .../tcc/objects). "
         "The pack is the same either way.",
)
_no_schedule = click.option(
    "--no-schedule", is_flag=True,
    help="Compile the loop programs as legalized, without the default schedule rules "
         "(for comparison).",
)


@click.command("compile")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@_target
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="The pack to write (default: MODEL with the suffix .tvmpack).")
@click.option("-v", "--verbose", is_flag=True,
              help="Print the time of every stage, the kernels the compile cache gave, and "
                   "with --db how many kernels the database scheduled (and its in-model check "
                   "kept on the default schedule).")
@click.option("--no-optimize", is_flag=True, help="Skip the graph passes of `tcc optimize`.")
@click.option("--disable-pass", "disable_passes", multiple=True, metavar="NAME",
              help="Skip one graph pass (repeatable); see `tcc optimize --help`.")
@click.option("--no-plan-memory", is_flag=True,
              help="Allocate every kernel output on its own instead of in shared arenas.")
@_no_schedule
@_db
@_sign
@_no_cache
def compile_command(model: Path, target: str, output: Path | None, verbose: bool,
                    no_optimize: bool, disable_passes: tuple[str, ...], no_plan_memory: bool,
                    no_schedule: bool, db: Path | None, sign: Path | None, no_cache: bool):
    """Compile an ONNX model, a PyTorch program (.pt2 from torch.export.save; needs
    tcc[torch]) or a .tcir file into a .tvmpack.

    Runs the graph passes of `tcc optimize` first (unless --no-optimize), then generates
    code as `tcc emit` does."""
    _build(model, target, output or model.with_suffix(".tvmpack"), verbose,
           optimize=not no_optimize, disable_passes=disable_passes,
           plan_memory=not no_plan_memory, schedule=not no_schedule, sign=sign, db=db,
           cache=not no_cache)


@click.command("emit")
@click.argument("ir_file", type=click.Path(dir_okay=False, path_type=Path))
@_target
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="The pack to write (default: IR_FILE with the suffix .tvmpack).")
@click.option("-v", "--verbose", is_flag=True,
              help="Print the time of every stage, the kernels the compile cache gave, and "
                   "with --db how many kernels the database scheduled (and its in-model check "
                   "kept on the default schedule).")
@_no_schedule
@_db
@_sign
@_no_cache
def emit_command(ir_file: Path, target: str, output: Path | None, verbose: bool,
                 no_schedule: bool, db: Path | None, sign: Path | None, no_cache: bool):
    """Generate code for a .tcir file and write a .tvmpack (the module as it is: run
    `tcc optimize` first for the graph passes)."""
    if ir_file.suffix != ".tcir":
        raise TccError(f"{ir_file}: `tcc emit` reads a .tcir file; use `tcc compile` for ONNX models and .pt2 programs")
    _build(ir_file, target, output or ir_file.with_suffix(".tvmpack"), verbose,
           schedule=not no_schedule, sign=sign, db=db, cache=not no_cache)
