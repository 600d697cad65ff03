"""ONNX backend node-test conformance: run the node test cases of the installed onnx package
through tcc (import, then execute) and count how many match the expected outputs.

Usage: python tests/conformance/harness.py [--mode reference] [--filter SUBSTR] [--sample N]
                                           [-v] [--json FILE] [--jobs N] [--timeout S]

Every case ends in one status: `pass`, `unsupported` (the importer has no converter for an
op; counted per op type), `import error` (any other import failure, grouped by message),
`wrong result`, `run error` (a tcc error while executing), `crash` (a non-tcc exception or a
dead worker: always a tcc bug) or `timeout`. Cases run in forked worker processes: a case
that overruns its time limit is interrupted by an alarm inside the worker, and a worker that
does not answer shortly after that is killed and replaced, so one hang never stalls a run.

A mode is a function `prepare(mod) -> execute(inputs) -> outputs` in MODES; adding a way of
running an imported module (e.g. compiled code) is adding one such function.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import multiprocessing.connection
import re
import signal
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

STATUSES = ("pass", "unsupported", "import error", "wrong result", "run error", "crash", "timeout",
            "not exportable")  # the last: PyTorch OpInfo samples torch.export refuses
TOTAL_CASES = 1884  # the node test cases of onnx 1.23; a different onnx may ship more or fewer
CASE_TIMEOUT_S = 30.0
KILL_GRACE_S = 10.0  # how long a worker may ignore its alarm before it is killed


@dataclass
class Result:
    """The outcome of one case; `detail` is a one-line reason, `ops` the unsupported op types."""

    name: str
    status: str
    detail: str = ""
    ops: tuple[str, ...] = ()
    seconds: float = 0.0


class CaseTimeout(BaseException):
    """Raised inside a worker by the alarm when a case overruns its time limit; a
    BaseException so that the `except Exception` of the code under test lets it through."""


# -- modes: how an imported module is executed -----------------------------------------------


def prepare_reference(mod) -> Callable[[list], list]:
    """Execute with the reference interpreter (numpy references of the op registry)."""
    from tcc.ir.interp import run

    return lambda inputs: run(mod, inputs)


def prepare_compiled(mod, runtime: str = "python") -> Callable[[list], list]:
    """Compile for the host CPU as `tcc compile` does (graph passes, legalize, default
    schedule rules, memory planning, LLVM, .tvmpack) and run the pack with the Python loader
    (or the C runtime)."""
    import os
    import tempfile

    from tcc.api import compile_to_bytes
    from tcc.rt import load

    data = compile_to_bytes(mod)
    fd, path = tempfile.mkstemp(suffix=".tvmpack")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    try:
        module = load(path) if runtime == "python" else _c_runtime().load(path)
        n_out = None if runtime == "python" else module.num_outputs("main")
    finally:
        os.unlink(path)
    if runtime == "python":
        return lambda inputs: module["main"](*inputs)
    return lambda inputs: module.run("main", inputs, n_out)


def prepare_c(mod) -> Callable[[list], list]:
    """As prepare_compiled, running the pack with the C runtime (runtime_c/, via ctypes)."""
    return prepare_compiled(mod, runtime="c")


_C_RUNTIME: list = []


def _c_runtime():
    """The C runtime's library, built once per process into runtime_c/build."""
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:  # run as a script, the repository is not on the path
        sys.path.insert(0, root)
    from tests.runtime_c.capi import RUNTIME, CRuntime, build_runtime

    if not _C_RUNTIME:
        _C_RUNTIME.append(CRuntime(build_runtime(RUNTIME / "build") / "libtccrt.so"))
    return _C_RUNTIME[0]


MODES: dict[str, Callable] = {
    "reference": prepare_reference, "compiled": prepare_compiled, "c": prepare_c,
}


# -- collecting and selecting cases ----------------------------------------------------------


def collect(filter_: str = "", sample: int | None = None) -> list:
    """The node test cases whose name contains `filter_`, sorted by name; with `sample`, every
    k-th of them (a deterministic subset of about `sample` cases)."""
    import onnx.backend.test.case.node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node_cases.collect_testcases()
    cases = sorted((c for c in cases if filter_ in c.name), key=lambda c: c.name)
    return every_kth(cases, sample)


def every_kth(cases: list, sample: int | None) -> list:
    """A deterministic subset of about `sample` of `cases` (all of them when None)."""
    if sample is not None and 0 < sample < len(cases):
        cases = cases[:: len(cases) // sample][:sample]
    return cases


# -- running one case ------------------------------------------------------------------------


def run_case(case, mode: str = "reference") -> Result:
    """Import and execute one case and classify the outcome."""
    start = time.perf_counter()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        result = _classify(case, mode)
    result.seconds = round(time.perf_counter() - start, 3)
    return result


def _classify(case, mode: str) -> Result:
    from tcc.frontend.onnx import from_onnx
    from tcc.ir.errors import FrontendError, TccError

    name = case.name
    try:
        mod = from_onnx(case.model)
    except FrontendError as e:
        if str(e).startswith("unsupported ONNX op"):
            ops = unsupported_ops(case.model)
            return Result(name, "unsupported", ", ".join(ops), ops)
        return Result(name, "import error", _first_line(e))
    except TccError as e:
        return Result(name, "import error", _first_line(e))
    except Exception as e:
        return Result(name, "crash", f"import: {_describe(e)}")
    try:
        execute = MODES[mode](mod)
    except TccError as e:
        # compiled mode: what the compiler cannot lower yet, pointing to the interpreter
        if "no loop program" in str(e) or "reference interpreter instead" in str(e):
            return Result(name, "unsupported", _first_line(e))
        return Result(name, "run error", f"prepare: {_first_line(e)}")
    except Exception as e:
        return Result(name, "crash", f"prepare: {_describe(e)}")
    for inputs, expected in case.data_sets:
        try:
            got = execute([as_numpy(x) for x in inputs])
        except TccError as e:
            return Result(name, "run error", _first_line(e))
        except Exception as e:
            return Result(name, "crash", f"run: {_describe(e)}")
        arrays = [as_numpy(x) for x in inputs]
        want = [as_numpy(x) for x in expected]
        undefined = undefined_elements(case.model, arrays, want)
        problem = compare_outputs(got, want, case.rtol, case.atol, undefined,
                                  [stored_eps(x) for x in expected])
        if problem:
            return Result(name, "wrong result", problem)
    return Result(name, "pass")


def unsupported_ops(model) -> tuple[str, ...]:
    """The op types of `model` that the importer has no converter for."""
    from onnx import inliner

    from tcc.frontend.onnx import find_unsupported

    if model.functions:
        model = inliner.inline_local_functions(model)
    return tuple(sorted(f"{d}.{op}" if d else op for d, op, _, _ in find_unsupported(model)))


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {_first_line(e)}" if str(e).strip() else type(e).__name__


# -- comparing results -----------------------------------------------------------------------


def as_numpy(value):
    """A case's input or expected output as numpy: cases hold arrays, numpy or Python scalars,
    TensorProtos (for the dtypes numpy lacks), lists (sequences) and None (empty optionals)."""
    from onnx import TensorProto, numpy_helper

    if value is None:
        return None
    if isinstance(value, list):
        return [as_numpy(v) for v in value]
    if isinstance(value, TensorProto):
        value = numpy_helper.to_array(value)
    value = np.asarray(value)
    # tcc holds bfloat16 values in float32 arrays (numpy has no bfloat16 of its own).
    return value.astype(np.float32) if value.dtype.name == "bfloat16" else value


def stored_eps(value) -> float | None:
    """The machine epsilon of the dtype an expected output is stored in, where tcc holds it
    in a wider one (bfloat16 values as float32); None otherwise."""
    from onnx import TensorProto

    if isinstance(value, TensorProto):
        bfloat16 = value.data_type == TensorProto.BFLOAT16
    else:
        bfloat16 = isinstance(value, np.ndarray) and value.dtype.name == "bfloat16"
    return 2.0**-7 if bfloat16 else None


def undefined_elements(model, inputs: Sequence, expected: Sequence) -> list:
    """Per output, a mask of the elements whose value ONNX leaves undefined, or None.

    ONNX Cast says a float cast to an integer type is undefined when out of range (NaN and
    infinities included). The node tests' expected values there are whatever the installed
    `ml_dtypes` did when the case was generated (0.6 wraps -9 to int4 as 7, 0.7 gives 0), so
    those elements of an output cast straight from a graph input are not compared.
    """
    import ml_dtypes

    graph = model.graph
    position = {vi.name: k for k, vi in enumerate(graph.input)}
    producer = {out: node for node in graph.node for out in node.output}
    masks = []
    for k, out in enumerate(graph.output):
        node, want = producer.get(out.name), expected[k] if k < len(expected) else None
        source = position.get(node.input[0]) if node is not None and node.input else None
        if node is None or node.op_type not in ("Cast", "CastLike") or source is None:
            masks.append(None)
            continue
        x = inputs[source]
        try:
            bounds = ml_dtypes.iinfo(want.dtype)
        except (ValueError, AttributeError):
            masks.append(None)  # not an integer output
            continue
        if not isinstance(x, np.ndarray) or x.dtype.kind != "f":
            masks.append(None)
            continue
        with np.errstate(invalid="ignore"):
            masks.append(~np.isfinite(x) | (x < bounds.min) | (x > bounds.max))
    return masks


def compare_outputs(
    got: Sequence, expected: Sequence, rtol: float, atol: float, undefined: Sequence = (),
    eps: Sequence = (),
) -> str:
    """'' when `got` matches `expected` (floats within rtol/atol, everything else exactly),
    else a one-line description of the first mismatch. `undefined` masks, per output, the
    elements not compared (undefined_elements)."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for k, (g, want) in enumerate(zip(got, expected)):
        skip = undefined[k] if k < len(undefined) else None
        if skip is not None and np.shape(g) == want.shape == skip.shape:
            g, want = np.asarray(g)[~skip], want[~skip]
        problem = compare_value(g, want, rtol, atol, eps[k] if k < len(eps) else None)
        if problem:
            return f"output {k}: {problem}"
    return ""


def compare_value(got, want, rtol: float, atol: float, eps: float | None = None) -> str:
    """Compare one output value (an array, or a list of arrays for sequence outputs); `eps`
    is the machine epsilon of the dtype the expected values were stored in, when not
    `want`'s own (see ROUNDING_ULPS)."""
    if want is None or isinstance(want, list):
        if type(got) is not type(want):
            return f"got {type(got).__name__}, expected {type(want).__name__}"
        if want is None:
            return ""
        if len(got) != len(want):
            return f"sequence of {len(got)}, expected {len(want)}"
        for g, w in zip(got, want):
            problem = compare_value(g, w, rtol, atol)
            if problem:
                return problem
        return ""
    got = np.asarray(got)
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"got {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    if want.dtype.kind in "OUS":
        same = all(a == b for a, b in zip(got.ravel(), want.ravel()))
        return "" if same else "strings differ"
    if want.dtype.kind in "iub":
        bad = got != want
    else:  # float, complex, and the ml_dtypes floats (bfloat16, float8...)
        bad = _float_mismatch(got, want, rtol, atol, eps)
    if not bad.any():
        return ""
    i = np.unravel_index(int(np.argmax(bad)), bad.shape) if bad.ndim else ()
    return (
        f"{int(bad.sum())}/{bad.size} elements differ, e.g. at {list(map(int, i))}: "
        f"got {got[i]!r}, expected {want[i]!r}"
    )


# Below this many units in the last place of the output's largest magnitude, a difference is
# rounding: the expected data are numpy's results in the output dtype (an FFT's float32
# noise near zero, 1.9e-7 where the largest bin is 54; bfloat16 sums accumulated in
# bfloat16), which a correct implementation that sums in another order or precision cannot
# reproduce to ONNX's atol of 1e-7 (onnxruntime misses test_dft_inverse_opset19 by that
# much as well). The unit is that of the dtype the expected values are stored in.
ROUNDING_ULPS = 4


def _float_mismatch(got: np.ndarray, want: np.ndarray, rtol: float, atol: float,
                    eps: float | None = None) -> np.ndarray:
    kind = np.complex128 if want.dtype.kind == "c" else np.float64
    g, w = got.astype(kind), want.astype(kind)
    finite = np.abs(w[np.isfinite(w)])
    if finite.size and want.dtype.kind in "fc":
        unit = eps if eps is not None else float(np.finfo(want.dtype).eps)
        atol = max(atol, ROUNDING_ULPS * unit * float(finite.max()))
    return ~np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)


# -- running many cases ----------------------------------------------------------------------


def run_cases(
    cases: Sequence,
    mode: str = "reference",
    jobs: int = 2,
    timeout: float = CASE_TIMEOUT_S,
    on_result: Callable[[Result], None] | None = None,
    run: Callable | None = None,
) -> list[Result]:
    """Run `cases` on `jobs` forked workers; results come back in the order of `cases`.
    `run(case, mode) -> Result` runs one case (default: an ONNX node test, run_case)."""
    import tcc.frontend.onnx  # noqa: F401  (a broken import fails here once, not per case)

    results: list[Result | None] = [None] * len(cases)
    pending = collections.deque(range(len(cases)))
    ctx = multiprocessing.get_context("fork")
    run = run or run_case
    workers = [_Worker(ctx, cases, mode, timeout, run)
               for _ in range(max(1, min(jobs, len(cases))))]
    try:
        for w in workers:
            w.assign(pending)
        while any(w.busy is not None for w in workers):
            busy = [w for w in workers if w.busy is not None]
            multiprocessing.connection.wait([w.conn for w in busy], timeout=1.0)
            for w in busy:
                result = w.poll(time.monotonic())
                if result is None:
                    continue
                results[result[0]] = result[1]
                if on_result:
                    on_result(result[1])
                w.assign(pending)
    finally:
        for w in workers:
            w.close()
    return [r for r in results if r is not None]


class _Worker:
    """One forked process running cases by index; replaced when it dies or hangs."""

    def __init__(self, ctx, cases: Sequence, mode: str, timeout: float, run: Callable):
        self.ctx, self.cases, self.mode, self.timeout, self.run = ctx, cases, mode, timeout, run
        self.busy: int | None = None
        self.deadline = 0.0
        self._start()

    def _start(self) -> None:
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(
            target=_worker_main, args=(child, self.cases, self.mode, self.timeout, self.run),
            daemon=True
        )
        self.proc.start()
        child.close()

    def assign(self, pending: collections.deque) -> None:
        self.busy = pending.popleft() if pending else None
        if self.busy is not None:
            self.deadline = time.monotonic() + self.timeout + KILL_GRACE_S
            self.conn.send(self.busy)

    def poll(self, now: float) -> tuple[int, Result] | None:
        """The finished (index, result), or None while the case still runs within its time."""
        index, name = self.busy, self.cases[self.busy].name
        try:
            if self.conn.poll():
                return index, self.conn.recv()
        except (EOFError, OSError):
            pass
        if self.proc.is_alive() and now < self.deadline:
            return None
        if self.proc.is_alive():
            result = Result(name, "timeout", f"no answer after {self.timeout + KILL_GRACE_S:.0f} s")
        else:
            result = Result(name, "crash", f"worker died (exit code {self.proc.exitcode})")
        self.close()
        self._start()
        return index, result

    def close(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
        self.conn.close()


def _worker_main(conn, cases: Sequence, mode: str, timeout: float, run: Callable) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles ^C and kills workers
    signal.signal(signal.SIGALRM, _raise_timeout)
    np.seterr(all="ignore")
    warnings.simplefilter("ignore")
    while True:
        try:
            index = conn.recv()
        except EOFError:
            return
        case = cases[index]
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            result = run(case, mode)
        except CaseTimeout:
            result = Result(case.name, "timeout", f"over {timeout:.0f} s")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        conn.send(result)


def _raise_timeout(signum, frame) -> None:
    raise CaseTimeout()


# -- reporting -------------------------------------------------------------------------------


def summarize(results: Sequence[Result], mode: str) -> dict:
    """Counts per status, unsupported cases per op type, and failure groups by message."""
    counts = collections.Counter(r.status for r in results)
    by_op = collections.Counter(op for r in results for op in r.ops)
    groups = collections.Counter(
        (r.status, _message_key(r.detail))
        for r in results
        if r.status not in ("pass", "unsupported")
    )
    return {
        "mode": mode,
        "cases": len(results),
        "pass": counts["pass"],
        "counts": {s: counts[s] for s in STATUSES if counts[s]},
        "unsupported_ops": dict(by_op.most_common()),
        "failure_groups": [
            {"status": s, "message": m, "cases": n} for (s, m), n in groups.most_common()
        ],
        "results": [asdict(r) for r in results],
    }


def _message_key(detail: str) -> str:
    """A grouping key for a failure message: the op type instead of the node name, and no
    quoted names, numbers or shapes, so the same problem in many cases groups together."""
    m = re.match(r"node '.*?' \((\S+), opset \d+\): (.*)", detail)
    if m:
        detail = f"{m.group(1)}: {m.group(2)}"
    detail = re.sub(r"'[^']*'", "'…'", detail)
    detail = re.sub(r"\[[^\]]*\]|\([\d, ]*\)", "[…]", detail)
    detail = re.sub(r"(?<![\w.])-?\d+(\.\d+)?(e[-+]?\d+)?(?!\w)", "N", detail)
    return detail[:90]


def print_summary(summary: dict, top: int = 25) -> None:
    counts = summary["counts"]
    print(
        f"{summary['pass']}/{summary['cases']} pass  ({summary['mode']})  "
        + "  ".join(f"{s}={n}" for s, n in counts.items() if s != "pass")
    )
    if summary["unsupported_ops"]:
        ops = list(summary["unsupported_ops"].items())
        shown = ", ".join(f"{op} {n}" for op, n in ops[:top])
        more = f", ... ({len(ops) - top} more ops)" if len(ops) > top else ""
        print(f"  unsupported ops (cases): {shown}{more}")
    for g in summary["failure_groups"][:top]:
        print(f"  {g['cases']:5d} {g['status']}: {g['message']}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--mode", default="reference", choices=sorted(MODES))
    p.add_argument("--filter", default="", help="only cases whose name contains this")
    p.add_argument("--sample", type=int, help="every k-th case by name, about N in all")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per failing case")
    p.add_argument("--json", metavar="FILE", help="write the summary as JSON ('-' for stdout)")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--timeout", type=float, default=CASE_TIMEOUT_S, help="seconds per case")
    args = p.parse_args(argv)

    cases = collect(args.filter, args.sample)

    def report(r: Result) -> None:
        if args.verbose and r.status != "pass":
            print(f"{r.status:12s} {r.name}: {r.detail}", flush=True)

    results = run_cases(cases, args.mode, args.jobs, args.timeout, on_result=report)
    summary = summarize(results, args.mode)
    if args.json == "-":
        json.dump(summary, sys.stdout, indent=1)
        print()
    else:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(summary, f, indent=1)
        print_summary(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
