"""PyTorch OpInfo conformance: export each float32 sample of each op of the core ATen op set
that PyTorch's own op database (`op_db`, shipped in the torch wheel) describes, import it
with tcc's PyTorch frontend, run it, and compare with torch eager.

Usage: python tests/conformance/torch_opinfo.py [--mode compiled] [--filter SUBSTR]
                                                [--sample N] [-v] [--json FILE] [--jobs N]

An OpInfo belongs to the core ATen op set when an overload of the ATen op it tests carries
torch's `core` tag. A sample's tensors (at any depth of its arguments) become the program's
inputs; its other arguments are fixed in the program. Statuses as in harness.py, plus
`not exportable` (torch.export itself refuses the sample: a data-dependent shape, an
in-place op on an input); every sample counts in the total. Outputs match when they have
torch's shape and dtype and agree within rtol 1e-4, atol 1e-5 (NaN where torch has NaN);
the values of ops that fill memory without defined contents (empty, ...) are not compared.
Needs torch and expecttest (`make torch`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: the repository is not on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.conformance import harness  # noqa: E402
from tests.conformance.harness import Result  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
# ops whose results have no defined values to compare (shape and dtype still must match)
UNDEFINED_VALUES = frozenset({"empty", "empty_strided", "empty_like", "new_empty"})


@dataclass
class Case:
    name: str
    op: object  # the OpInfo
    sample: object  # one of its SampleInputs


def core_ops() -> list:
    """The OpInfos of op_db that test an op of the core ATen op set and support float32."""
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    def is_core(opinfo) -> bool:
        packet = getattr(torch.ops.aten, opinfo.aten_name or opinfo.name, None)
        return packet is not None and any(
            torch.Tag.core in getattr(packet, o).tags for o in packet.overloads())

    return [o for o in op_db if is_core(o) and torch.float32 in o.supported_dtypes("cpu")]


def collect(filter_: str = "", sample: int | None = None) -> list[Case]:
    """Every float32 sample of the core ops, named `op.variant[k]`, sorted by name; with
    `sample`, a deterministic subset of about that many."""
    import torch

    cases = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        for op in core_ops():
            full = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
            if filter_ not in full:
                continue
            for k, s in enumerate(op.sample_inputs("cpu", torch.float32)):
                cases.append(Case(f"{full}[{k}]", op, s))
    cases.sort(key=lambda c: c.name)
    return harness.every_kth(cases, sample)


def _flatten(sample):
    """The sample's tensors, and a function that rebuilds its (input, args, kwargs) from
    replacements for them."""
    import torch
    import torch.utils._pytree as pytree

    leaves, spec = pytree.tree_flatten((sample.input, list(sample.args), dict(sample.kwargs)))
    where = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]

    def rebuild(tensors):
        values = list(leaves)
        for i, t in zip(where, tensors):
            values[i] = t
        return pytree.tree_unflatten(values, spec)

    return [leaves[i] for i in where], rebuild


def run_case(case: Case, mode: str = "compiled") -> Result:
    start = time.perf_counter()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        result = _classify(case, mode)
    result.seconds = round(time.perf_counter() - start, 3)
    return result


def _classify(case: Case, mode: str) -> Result:
    import torch
    import torch.utils._pytree as pytree

    from tcc.frontend.torch import from_exported_program
    from tcc.ir.errors import FrontendError, TccError

    name, op = case.name, case.op
    tensors, rebuild = _flatten(case.sample)

    class Program(torch.nn.Module):
        def forward(self, *inputs):
            x, args, kwargs = rebuild(inputs)
            return op.op(x, *args, **kwargs)

    try:
        with torch.no_grad():
            want = pytree.tree_leaves(Program()(*tensors))
            ep = torch.export.export(Program(), tuple(tensors))
    except Exception as e:
        return Result(name, "not exportable", harness._first_line(e))
    if not all(isinstance(w, torch.Tensor) for w in want):
        return Result(name, "not exportable", "an output that is not a tensor")
    try:
        mod = from_exported_program(ep)
    except FrontendError as e:
        if str(e).startswith("unsupported ATen op"):
            ops = tuple(o for o, _ in _unsupported(ep))
            return Result(name, "unsupported", ", ".join(ops), ops)
        return Result(name, "import error", harness._first_line(e))
    except TccError as e:
        return Result(name, "import error", harness._first_line(e))
    except Exception as e:
        return Result(name, "crash", f"import: {harness._describe(e)}")
    try:
        execute = harness.MODES[mode](mod)
    except TccError as e:
        if "no loop program" in str(e):
            return Result(name, "unsupported", harness._first_line(e))
        return Result(name, "run error", f"prepare: {harness._first_line(e)}")
    except Exception as e:
        return Result(name, "crash", f"prepare: {harness._describe(e)}")
    try:
        got = execute([t.detach().numpy() for t in tensors])
    except TccError as e:
        return Result(name, "run error", harness._first_line(e))
    except Exception as e:
        return Result(name, "crash", f"run: {harness._describe(e)}")
    problem = _compare(got, [w.detach().numpy() for w in want],
                       compare_values=op.name not in UNDEFINED_VALUES)
    return Result(name, "wrong result", problem) if problem else Result(name, "pass")


def _unsupported(ep):
    from tcc.frontend.torch import find_unsupported
    from tcc.frontend.torch.importer import decomposed

    return find_unsupported(decomposed(ep))


def _compare(got, want, compare_values: bool) -> str | None:
    if len(got) != len(want):
        return f"{len(got)} outputs, torch has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g)
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {i}: {g.dtype}{list(g.shape)}, torch has {w.dtype}{list(w.shape)}"
        if compare_values and not np.allclose(g, w, rtol=RTOL, atol=ATOL, equal_nan=True):
            if w.dtype.kind in "fc":
                err = np.nanmax(np.abs(g.astype(np.float64) - w.astype(np.float64)))
                return f"output {i}: max abs error {err:.3g}"
            return f"output {i}: {int(np.sum(g != w))} of {w.size} elements differ"
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--mode", default="compiled", choices=sorted(harness.MODES))
    p.add_argument("--filter", default="", help="only samples whose name contains this")
    p.add_argument("--sample", type=int, help="every k-th sample by name, about N in all")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per failing sample")
    p.add_argument("--json", type=Path, help="write the summary and every result here")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=harness.CASE_TIMEOUT_S)
    args = p.parse_args(argv)
    import tcc.frontend.torch  # noqa: F401  (a broken import fails here once, not per sample)

    every = collect(args.filter)
    cases = harness.every_kth(every, args.sample)
    t0 = time.perf_counter()
    results = harness.run_cases(cases, args.mode, jobs=args.jobs, timeout=args.timeout,
                                run=run_case)
    summary = harness.summarize(results, args.mode)
    if args.verbose:
        for r in results:
            if r.status != "pass":
                print(f"{r.status:15s} {r.name}: {r.detail}")
    harness.print_summary(summary)
    print(f"{len(cases)} samples in {time.perf_counter() - t0:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({**summary, "total": len(every)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
