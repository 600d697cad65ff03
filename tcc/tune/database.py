"""The tuning database: one JSON record per line, each appended and flushed as it is written.

A record is one measured schedule of one workload (DESIGN.md §5):

    {"format": "tcc-tuning-record", "version": 1,
     "workload": "<structural hash of the kernel as legalized>", "target": "<target string>",
     "shapes": {"n": 1, ...}, "trace": <trace JSON (tcc.lower.schedule.trace)>,
     "seconds": [<one per repeat>], "status": "ok" | "failed", "error": "...",
     "default": <whether the trace is the untuned default schedule>, "tcc": "<tcc version>",
     "baseline": [<the default schedule's time per repeat, measured alternately with these>],
     "confirmed": <whether this is a longer second measurement of a candidate that looked best>}

A record's *relative latency* is its fastest repeat over its paired baseline's fastest (1
for the default; records without a baseline, written by earlier tcc versions, are divided by
the default record's latency at the same shapes). A pair whose baseline ran far slower than
the default usually does (`DISTURBED`) was disturbed in a way pairing does not cancel, and
the record's fastest repeat is divided by the default's usual latency instead
(`paired_ratio`). The record applied for a workload is the one of least relative latency
among the confirmed records and the default, or among all records when none is confirmed:
a screening measurement that looked fast by luck does not count once a confirmation
exists. A schedule confirmed several times counts with the median of its confirmations.

Records are keyed by workload and target: models that share a kernel share its records, and
a record from another target is never applied. Appending writes the whole line, flushes and
syncs it before returning, so a tune killed at any moment loses no finished record; a line
a kill cut short is reported when the file is read, and the next append starts a new line.
Reading never stops at a bad line: each one gives a one-line problem naming the file and
line, and the other records still load.

The file also holds the verdicts of in-model checks (tcc.tune.model_check), one line each:

    {"format": "tcc-model-check", "version": 1, "model": "<tcc.tune.tasks.model_key>",
     "target": "<target string>", "inputs": {"x": [1, 3, 224, 224], ...},
     "variants": [{"tuned": <kernels given their best record>, "ms": [<one per round>]}, ...],
     "chosen": <index of the variant kept>, "tcc": "<tcc version>",
     "reverted": {"<workload>": "<trace_digest of the best record it ran slower with>"}}

Compiling that model for that target applies the latest verdict: a reverted workload keeps
its default schedule as long as its best record is still the one the check timed.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tcc.errors import TccError

FORMAT = "tcc-tuning-record"
CHECK_FORMAT = "tcc-model-check"
VERSION = 1
STATUSES = ("ok", "failed")


class DatabaseError(TccError):
    """A tuning database that cannot be read or written at all."""


# A baseline this many times slower than the default's usual latency was disturbed.
# Pairing cancels drift that slows both schedules alike; it does not cancel load on the
# other cores, which stalls a parallel default at every fork and join (a 50 us kernel
# timed at 7 ms) while a serial candidate runs on undisturbed.
DISTURBED = 3.0


def paired_ratio(seconds, baseline, default: float | None = None) -> float | None:
    """A candidate's fastest repeat over the fastest of the default's repeats taken beside
    them (None when either is missing): another process's load adds to some repeats, and
    the fastest of each side is the least disturbed. When that baseline is more than
    DISTURBED times the default's usual latency `default`, over `default` instead."""
    if not seconds or not baseline:
        return None
    paired = max(min(baseline), 1e-12)
    if default is not None and paired > DISTURBED * default:
        paired = default
    return min(seconds) / paired


@dataclass(frozen=True)
class Record:
    workload: str
    target: str
    trace: dict
    seconds: tuple[float, ...] = ()
    status: str = "ok"
    shapes: dict = field(default_factory=dict)
    error: str = ""
    tcc: str = ""
    default: bool = False
    baseline: tuple[float, ...] = ()
    confirmed: bool = False

    @property
    def latency(self) -> float | None:
        """The median of the repeats (robust to a noisy one), or None for a failed record."""
        if self.status != "ok" or not self.seconds:
            return None
        return statistics.median(self.seconds)

    @property
    def shapes_key(self) -> tuple:
        """The shapes as a hashable key: records at other shapes are other measurements."""
        return tuple(sorted(self.shapes.items()))

    def ratio(self, default: float | None = None) -> float | None:
        """Latency relative to the paired baseline (`paired_ratio`; `default` the default
        schedule's usual latency)."""
        return paired_ratio(self.seconds, self.baseline, default) if self.status == "ok" else None

    def as_json(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "workload": self.workload,
                "target": self.target, "shapes": dict(self.shapes), "trace": self.trace,
                "seconds": list(self.seconds), "status": self.status, "error": self.error,
                "default": self.default, "tcc": self.tcc, "baseline": list(self.baseline),
                "confirmed": self.confirmed}

    def line(self) -> str:
        return json.dumps(self.as_json(), sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_json(data) -> Record:
        """A record from its JSON object; ValueError saying what is wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"a record is a JSON object, got {type(data).__name__}")
        if data.get("format") != FORMAT:
            raise ValueError(f"format is {data.get('format')!r}, expected {FORMAT!r}")
        if data.get("version") != VERSION:
            raise ValueError(f"version {data.get('version')!r} is not one this tcc reads "
                             f"({VERSION})")
        for key, kind in (("workload", str), ("target", str), ("trace", dict),
                          ("seconds", list), ("status", str), ("shapes", dict)):
            if not isinstance(data.get(key), kind):
                raise ValueError(f"'{key}' is {data.get(key)!r}, expected a {kind.__name__}")
        if data["status"] not in STATUSES:
            raise ValueError(f"status {data['status']!r} is not one of {', '.join(STATUSES)}")
        seconds = data["seconds"]
        if not all(isinstance(s, (int, float)) and not isinstance(s, bool) and s >= 0
                   for s in seconds):
            raise ValueError(f"seconds {seconds!r} are not all non-negative numbers")
        shapes = data["shapes"]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in shapes.values()):
            raise ValueError(f"shapes {shapes!r} are not all integers")
        for key in ("default", "confirmed"):
            if not isinstance(data.get(key, False), bool):
                raise ValueError(f"'{key}' is {data.get(key)!r}, expected true or false")
        baseline = data.get("baseline", [])
        if not isinstance(baseline, list) or not all(
                isinstance(s, (int, float)) and not isinstance(s, bool) and s > 0
                for s in baseline):
            raise ValueError(f"baseline {baseline!r} is not a list of positive numbers")
        return Record(data["workload"], data["target"], data["trace"],
                      tuple(float(s) for s in seconds), data["status"], dict(shapes),
                      str(data.get("error", "")), str(data.get("tcc", "")),
                      data.get("default", False), tuple(float(s) for s in baseline),
                      data.get("confirmed", False))


def trace_key(trace: dict) -> str:
    """A trace as one string: records with equal keys measured the same schedule."""
    return json.dumps(trace, sort_keys=True, separators=(",", ":"))


def trace_digest(trace: dict) -> str:
    """A short hash of `trace_key`, which a verdict stores for the trace it timed."""
    return hashlib.sha256(trace_key(trace).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ModelCheck:
    """The verdict of one in-model check (module docstring)."""

    model: str
    target: str
    inputs: dict
    variants: tuple  # ({"tuned": int, "ms": [float, ...]}, ...)
    chosen: int
    reverted: dict  # workload -> trace_digest
    tcc: str = ""

    def as_json(self) -> dict:
        return {"format": CHECK_FORMAT, "version": VERSION, "model": self.model,
                "target": self.target, "inputs": dict(self.inputs),
                "variants": [dict(v) for v in self.variants], "chosen": self.chosen,
                "reverted": dict(self.reverted), "tcc": self.tcc}

    def line(self) -> str:
        return json.dumps(self.as_json(), sort_keys=True, separators=(",", ":"))

    def medians(self) -> list[float]:
        """Each variant's median time over its rounds, in ms (0 for one with no time)."""
        return [statistics.median(v["ms"]) if v["ms"] else 0.0 for v in self.variants]

    @staticmethod
    def from_json(data: dict) -> ModelCheck:
        """A verdict from its JSON object; ValueError saying what is wrong."""
        if data.get("version") != VERSION:
            raise ValueError(f"version {data.get('version')!r} is not one this tcc reads "
                             f"({VERSION})")
        for key, kind, what in (("model", str, "a string"), ("target", str, "a string"),
                                ("inputs", dict, "an object"), ("variants", list, "a list"),
                                ("chosen", int, "an integer"), ("reverted", dict, "an object")):
            if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
                raise ValueError(f"'{key}' is {data.get(key)!r}, expected {what}")
        for v in data["variants"]:
            if not (isinstance(v, dict) and isinstance(v.get("tuned"), int)
                    and isinstance(v.get("ms"), list)
                    and all(isinstance(t, (int, float)) and not isinstance(t, bool) and t >= 0
                            for t in v["ms"])):
                raise ValueError(f"variant {v!r} is not {{\"tuned\": N, \"ms\": [times]}}")
        if not 0 <= data["chosen"] < len(data["variants"]):
            raise ValueError(f"'chosen' is {data['chosen']}, but there are "
                             f"{len(data['variants'])} variants")
        if not all(isinstance(v, str) for v in data["reverted"].values()):
            raise ValueError("'reverted' maps workloads to trace digests (strings)")
        return ModelCheck(data["model"], data["target"], dict(data["inputs"]),
                          tuple({"tuned": v["tuned"], "ms": [float(t) for t in v["ms"]]}
                                for v in data["variants"]),
                          data["chosen"], dict(data["reverted"]), str(data.get("tcc", "")))


def read_records(path: Path) -> tuple[list[Record], list[ModelCheck], list[str]]:
    """The records and in-model verdicts of the database at `path`, and a one-line problem
    for each line that is neither (`FILE:LINE: what is wrong`). A missing file is an empty
    database."""
    path = Path(path)
    if not path.exists():
        return [], [], []
    if path.is_dir():
        raise DatabaseError(f"{path} is a directory, not a tuning database")
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as e:
        raise DatabaseError(f"{path}: cannot read the tuning database: {e.strerror or e}") from None
    records, checks, problems = [], [], []
    lines = text.split("\n")
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
            if isinstance(data, dict) and data.get("format") == CHECK_FORMAT:
                checks.append(ModelCheck.from_json(data))
            else:
                records.append(Record.from_json(data))
        except json.JSONDecodeError as e:  # the last line has no newline when a kill cut it
            cut = " (cut short: a tune stopped while writing it?)" if number == len(lines) else ""
            problems.append(f"{path}:{number}: not a JSON record ({e.msg}){cut}; line skipped")
        except ValueError as e:
            problems.append(f"{path}:{number}: {e}; line skipped")
    return records, checks, problems


class Database:
    """The records and verdicts of one database file, and appending to it."""

    def __init__(self, path):
        self.path = Path(path)
        self.records, self.checks, self.problems = read_records(self.path)

    def append(self, record: Record | ModelCheck) -> None:
        """Write `record` (or a verdict) as one line and make it durable before returning."""
        line = record.line() + "\n"
        try:
            with open(self.path, "a+b") as f:
                if f.seek(0, os.SEEK_END) > 0:
                    f.seek(-1, os.SEEK_END)
                    if f.read(1) != b"\n":
                        line = "\n" + line  # after a line a kill cut short
                f.write(line.encode())
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise DatabaseError(
                f"{self.path}: cannot append to the tuning database: {e.strerror or e}") from None
        (self.checks if isinstance(record, ModelCheck) else self.records).append(record)

    def for_workload(self, workload: str, target: str) -> list[Record]:
        return [r for r in self.records if r.workload == workload and r.target == target]

    def best(self, workload: str, target: str) -> Record | None:
        """The record to apply for `workload` on `target` (`best_record`)."""
        found = best_record(self.for_workload(workload, target))
        return found[0] if found else None

    def check(self, model: str, target: str) -> ModelCheck | None:
        """The latest in-model verdict on `model` for `target`."""
        return next((c for c in reversed(self.checks)
                     if c.model == model and c.target == target), None)


def relative_latencies(records: list[Record]) -> list[tuple[Record, float]]:
    """The successful records that have a relative latency, each with it (module docstring)."""
    at_shapes: dict[tuple, list[Record]] = {}
    for r in records:
        at_shapes.setdefault(r.shapes_key, []).append(r)
    usual = {key: default_latency(group) for key, group in at_shapes.items()}
    first_default = {key: next((r.latency for r in group if r.default and r.latency is not None),
                               None) for key, group in at_shapes.items()}
    out = []
    for r in records:
        if r.latency is None:
            continue
        if r.default:
            out.append((r, 1.0))
        elif r.baseline:
            out.append((r, r.ratio(usual[r.shapes_key])))
        elif first_default[r.shapes_key] is not None:
            out.append((r, r.latency / max(first_default[r.shapes_key], 1e-12)))
    return out


def default_times(records: list[Record]) -> list[float]:
    """Every time of the default schedule the records hold: its own records' repeats and the
    repeats measured beside each candidate (`baseline`)."""
    return [t for r in records if r.status == "ok" for t in (r.seconds if r.default else r.baseline)]


def default_latency(records: list[Record]) -> float | None:
    """The default schedule's latency as the tuner counts it: the median of `default_times`,
    None when there is none. One measurement taken while the machine was busy (a 2 us kernel
    timed at 8 ms, three repeats) is outvoted by the candidates' pairs."""
    times = default_times(records)
    return statistics.median(times) if times else None


def best_record(records: list[Record]) -> tuple[Record, float] | None:
    """The record of least relative latency, with it, among the confirmed ones and the
    default when any is confirmed, else among all (the first of equals); when none has a
    relative latency, the fastest (with relative latency 1). A schedule confirmed more than
    once (the tuner measures the best again beside each challenger) counts with the median
    of its confirmations, so one lucky measurement does not keep it ahead."""
    ranked = relative_latencies(records)
    confirmed = [(r, x) for r, x in ranked if r.confirmed or r.default]
    if any(r.confirmed for r, _ in confirmed):
        by_trace: dict[str, list] = {}
        for r, x in confirmed:
            by_trace.setdefault(trace_key(r.trace), []).append((r, x))
        pool = [(group[0][0], statistics.median(x for _, x in group))
                for group in by_trace.values()]
    else:
        pool = ranked
    if pool:
        return min(pool, key=lambda rx: rx[1])
    ok = [r for r in records if r.latency is not None]
    return (min(ok, key=lambda r: r.latency), 1.0) if ok else None


def merge(paths: Iterable, out) -> tuple[int, list[str]]:
    """Write the records and verdicts of every database in `paths` to `out`, each distinct
    line once, in order of first appearance (a file's records before its verdicts); returns
    how many were written and the problems read."""
    from tcc.outfile import open_output

    seen: dict[str, None] = {}
    problems: list[str] = []
    for p in paths:
        records, checks, bad = read_records(Path(p))
        problems += bad
        for r in [*records, *checks]:
            seen.setdefault(r.line(), None)
    with open_output(Path(out), f"--output {out}: cannot write the merged database") as f:
        f.write("".join(line + "\n" for line in seen).encode())
    return len(seen), problems
