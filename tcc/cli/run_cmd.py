"""`tcc run FILE.tcir --input NAME=PATH.npy ... [--inputs FILE.npz] [--output-dir DIR] [--output FILE.npz]`."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np
from rich.console import Console

from tcc.cli.arrays_io import load_inputs, write_npz, write_output_dir
from tcc.cli.loading import load_ir
from tcc.ir.interp import run


@click.command("run")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--input", "input_pairs", multiple=True, metavar="NAME=PATH.npy",
              help="An input array, by the model's input name (repeatable).")
@click.option("--inputs", "inputs_npz", type=click.Path(dir_okay=False, path_type=Path),
              help="An .npz archive of inputs keyed by input name.")
@click.option("--output-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write one NAME.npy per output here.")
@click.option("--output", "output_npz", type=click.Path(dir_okay=False, path_type=Path),
              help="Write all outputs into one .npz keyed by output name.")
@click.option("--entry", default="main", show_default=True, help="The function to run.")
def command(file, input_pairs, inputs_npz, output_dir, output_npz, entry):
    """Run an IR file with the reference interpreter.

    Output file names replace characters other than letters, digits, '-', '_' and '.'
    with '_'; the .npz keeps the exact output names.
    """
    inputs = load_inputs(input_pairs, inputs_npz)
    mod = load_ir(file)
    outputs = run(mod, inputs, name=entry)
    func = mod[entry]
    names = list(func.output_names) or [f"output{i}" for i in range(len(outputs))]
    named = dict(zip(names, outputs))
    console = Console(highlight=False)
    if output_dir is not None:
        paths = write_output_dir(output_dir, named)
        console.print(f"wrote {len(paths)} output(s) to {output_dir}")
    if output_npz is not None:
        write_npz(output_npz, named)
        console.print(f"wrote {len(named)} output(s) to {output_npz}")
    if output_dir is None and output_npz is None:
        for name, arr in named.items():
            preview = np.array2string(np.asarray(arr).ravel()[:8], precision=5, separator=", ")
            console.print(f"{name}: {arr.dtype}{list(arr.shape)} {preview}")
