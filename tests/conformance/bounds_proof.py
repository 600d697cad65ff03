"""How many kernels of the ONNX node tests tcc proves in bounds (tcc/ir/verify.py).

Usage: python tests/conformance/bounds_proof.py [--filter SUBSTR] [-v]

Each case is imported, optimized and legalized as `tcc compile` does; every kernel is then
guarded (`guard_accesses`): it counts as proven when no access needs a guard (accesses in
bounds under conditions on the sizes alone count, and the kernels that need such
preconditions are counted apart). The kernels are then scheduled by the default rules and
proven again. The figures in tcc/ir/verify.py's docstring come from this script.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv=None) -> int:
    from tcc.api import _legalized
    from tcc.frontend.onnx import from_onnx
    from tcc.ir import tir as T
    from tcc.ir.verify import PRECONDITIONS_ATTR, guard_accesses, unproven_accesses
    from tcc.lower.passes import run_pipeline
    from tcc.lower.rules import schedule_module
    from tcc.target import parse_target
    from tests.conformance.harness import collect

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--filter", default="", help="only cases whose name contains this")
    ap.add_argument("-v", "--verbose", action="store_true", help="name each kernel not proven")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    target = parse_target("llvm")
    total = guarded = with_preconditions = unproven_scheduled = 0
    for case in collect(args.filter):
        try:
            low, _ = _legalized(run_pipeline(from_onnx(case.model)))
        except Exception:  # a case tcc cannot import or legalize has no kernels to prove
            continue
        for name, func in list(low.functions.items()):
            if isinstance(func, T.PrimFunc):
                total += 1
                func, why = guard_accesses(func, name)
                low.functions[name] = func
                guarded += bool(why)
                with_preconditions += bool(dict(func.attrs).get(PRECONDITIONS_ATTR))
                if why and args.verbose:
                    print(f"{case.name}: guarded: {why[0]}")
        scheduled = schedule_module(low, target)
        for name, func in scheduled.functions.items():
            if isinstance(func, T.PrimFunc):
                why = unproven_accesses(func, name)
                unproven_scheduled += bool(why)
                if why and args.verbose:
                    print(f"{case.name}: after scheduling: {why[0]}")
    print(f"{total} kernels: {total - guarded} proven as legalized ({with_preconditions} of them under size "
          f"preconditions), {total - unproven_scheduled} proven after the default schedule rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
