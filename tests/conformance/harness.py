"""ONNX backend node-test conformance: run every case through tcc and count passes.

Usage: python tests/conformance/harness.py [--mode reference] [--filter SUBSTR] [-v]
"""

from __future__ import annotations

import argparse
import collections
import sys
import warnings

import numpy as np


def collect():
    import onnx.backend.test.case.node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return node_cases.collect_testcases()


def run_case(case, mode: str = "reference") -> tuple[str, str]:
    """Returns (status, detail); status is pass | unsupported | wrong | error."""
    from tcc.frontend.onnx import from_onnx
    from tcc.ir.errors import FrontendError, TccError
    from tcc.ir.interp import run

    try:
        mod = from_onnx(case.model)
    except FrontendError as e:
        msg = str(e)
        return ("unsupported" if "unsupported" in msg else "error"), msg.splitlines()[0][:200]
    except Exception as e:
        return "error", f"import: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    for inputs, outputs in case.data_sets:
        try:
            with np.errstate(all="ignore"):
                got = run(mod, list(inputs))
        except TccError as e:
            return "error", f"run: {str(e).splitlines()[0][:200]}"
        except Exception as e:
            return "error", f"run: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        if len(got) != len(outputs):
            return "wrong", f"{len(got)} outputs, expected {len(outputs)}"
        for k, (g, want) in enumerate(zip(got, outputs)):
            want = np.asarray(want)
            if want.dtype == object or g.dtype == object:
                ok = g.shape == want.shape and all(a == b for a, b in zip(g.ravel(), want.ravel()))
            else:
                ok = g.shape == want.shape and g.dtype == want.dtype and np.allclose(
                    g.astype(np.float64) if g.dtype.kind in "fc" else g,
                    want.astype(np.float64) if want.dtype.kind in "fc" else want,
                    rtol=case.rtol, atol=case.atol, equal_nan=True)
            if not ok:
                return "wrong", f"output {k}: got {g.dtype}{list(g.shape)}, want {want.dtype}{list(want.shape)}"
    return "pass", ""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mode", default="reference", choices=["reference"])
    p.add_argument("--filter", default="")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    cases = [c for c in collect() if args.filter in c.name]
    counts = collections.Counter()
    reasons = collections.Counter()
    for case in cases:
        status, detail = run_case(case, args.mode)
        counts[status] += 1
        if status != "pass":
            reasons[(status, detail.split(":")[0] if status == "unsupported" else detail[:80])] += 1
            if args.verbose:
                print(f"{status:12s} {case.name}: {detail}")
    print(f"{counts['pass']}/{len(cases)} pass  " + "  ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    for (status, detail), n in reasons.most_common(15):
        print(f"  {n:5d} {status}: {detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
