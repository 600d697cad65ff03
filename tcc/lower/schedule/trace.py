"""Traces: the primitives a schedule applied, as data that serializes to JSON and replays.

An `Instruction` records one call of a Schedule method marked `@instruction`: its kind (the
method name), its inputs (positional arguments: handles, written as references to outputs
of earlier instructions, and literal ints or None, possibly in lists), its attributes
(keyword arguments, literal values), the names of the handles it returned, and for a
sampling instruction its decision. Handles are named `b<k>` (blocks), `l<k>` (loops) and
`v<k>` (sampled values), numbered in order of creation, so replaying a trace on a fresh
schedule of the same function records an equal trace and gives an equal function.

JSON form (docs/schedule.md): `{"format": "tcc-trace", "version": 1, "instructions":
[{"kind", "inputs", "attrs", "outputs", "decision"}, ...]}`; a string among the inputs is
always a handle reference, literal strings live in the attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from tcc.lower.schedule.state import ScheduleError

FORMAT = "tcc-trace"
VERSION = 1


@dataclass(frozen=True)
class Ref:
    """A handle that an earlier instruction returned, by its name in the trace."""

    name: str


@dataclass(frozen=True)
class Instruction:
    kind: str
    inputs: tuple = ()
    attrs: tuple[tuple[str, object], ...] = ()
    outputs: tuple[str, ...] = ()
    decision: object = None


def instruction(method: Callable) -> Callable:
    """Mark a Schedule method as replayable: a trace may call it by name."""
    method.is_instruction = True
    return method


def freeze(value):
    """Lists as tuples, recursively, so instructions are hashable and compare by value."""
    if isinstance(value, (list, tuple)):
        return tuple(freeze(x) for x in value)
    return value


def _to_json(value):
    if isinstance(value, Ref):
        return value.name
    if isinstance(value, tuple):
        return [_to_json(x) for x in value]
    return value


def _input_from_json(value, where: str):
    if isinstance(value, str):
        return Ref(value)
    if isinstance(value, list):
        return tuple(_input_from_json(x, where) for x in value)
    if value is None or isinstance(value, (int, float)):
        return value
    raise ScheduleError(f"trace: {where}: input {value!r} is neither a handle nor a number")


def _field(entry: dict, key: str, kind: type, where: str, default=None):
    value = entry.get(key, default)
    if not isinstance(value, kind):
        raise ScheduleError(f"trace: {where}: '{key}' is {value!r}, expected a {kind.__name__}")
    return value


def _instruction_from_json(entry, pos: int) -> Instruction:
    where = f"instruction {pos}"
    if not isinstance(entry, dict):
        raise ScheduleError(f"trace: {where} is {type(entry).__name__}, expected an object")
    outputs = _field(entry, "outputs", list, where, [])
    if not all(isinstance(o, str) for o in outputs):
        raise ScheduleError(f"trace: {where}: outputs {outputs!r} are not all handle names")
    attrs = _field(entry, "attrs", dict, where, {})
    return Instruction(
        kind=_field(entry, "kind", str, where),
        inputs=tuple(_input_from_json(x, where) for x in _field(entry, "inputs", list, where, [])),
        attrs=tuple((k, freeze(v)) for k, v in attrs.items()),
        outputs=tuple(outputs),
        decision=freeze(entry.get("decision")),
    )


def _flatten(result) -> list:
    if result is None:
        return []
    if isinstance(result, (list, tuple)):
        return list(result)
    return [result]


def _resolve(value, handles: dict, where: str):
    if isinstance(value, Ref):
        if value.name not in handles:
            raise ScheduleError(f"trace: {where}: uses '{value.name}' before anything makes it")
        return handles[value.name]
    if isinstance(value, tuple):
        return [_resolve(x, handles, where) for x in value]
    return value


def _text(value) -> str:
    if isinstance(value, Ref):
        return value.name
    if isinstance(value, tuple):
        return f"[{', '.join(_text(x) for x in value)}]"
    return repr(value)


@dataclass(frozen=True)
class Trace:
    """The instructions a schedule applied, in order."""

    instructions: tuple[Instruction, ...] = ()

    def as_json(self) -> dict:
        """A JSON-serializable description (see the module docstring)."""
        out = []
        for inst in self.instructions:
            entry = {
                "kind": inst.kind,
                "inputs": _to_json(inst.inputs),
                "attrs": {k: _to_json(v) for k, v in inst.attrs},
                "outputs": list(inst.outputs),
            }
            if inst.decision is not None:
                entry["decision"] = _to_json(inst.decision)
            out.append(entry)
        return {"format": FORMAT, "version": VERSION, "instructions": out}

    @staticmethod
    def from_json(data) -> Trace:
        """The trace `as_json` described; a malformed description raises ScheduleError."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ScheduleError(f"trace: not a {FORMAT} object; expected what Trace.as_json gives")
        if data.get("version") != VERSION:
            raise ScheduleError(
                f"trace: version {data.get('version')!r}, this tcc reads version {VERSION}"
            )
        entries = data.get("instructions")
        if not isinstance(entries, list):
            raise ScheduleError("trace: 'instructions' is not a list")
        return Trace(tuple(_instruction_from_json(e, k) for k, e in enumerate(entries)))

    def apply(self, sch) -> None:
        """Replay the instructions on `sch` (a fresh Schedule of the same function), with the
        recorded decisions."""
        handles: dict[str, object] = {}
        for pos, inst in enumerate(self.instructions):
            where = f"instruction {pos} ({inst.kind})"
            method = getattr(type(sch), inst.kind, None)
            if not getattr(method, "is_instruction", False):
                raise ScheduleError(f"trace: {where}: no schedule instruction has that name")
            args = [_resolve(x, handles, where) for x in inst.inputs]
            kwargs = {k: _resolve(v, handles, where) for k, v in inst.attrs}
            if inst.decision is not None:
                kwargs["decision"] = _resolve(inst.decision, handles, where)
            outputs = _flatten(method(sch, *args, **kwargs))
            if len(outputs) != len(inst.outputs):
                raise ScheduleError(
                    f"trace: {where}: returned {len(outputs)} handles where the trace has "
                    f"{len(inst.outputs)}; replay the trace on the function it was made for"
                )
            handles.update(zip(inst.outputs, outputs))

    def with_decision(self, index: int, decision) -> Trace:
        """The same trace with instruction `index` deciding `decision` instead."""
        inst = self.instructions[index]
        if inst.decision is None:
            raise ScheduleError(f"trace: instruction {index} ({inst.kind}) makes no decision")
        changed = replace(inst, decision=freeze(decision))
        return Trace((*self.instructions[:index], changed, *self.instructions[index + 1 :]))

    def __str__(self) -> str:
        lines = []
        for inst in self.instructions:
            args = [_text(x) for x in inst.inputs] + [f"{k}={_text(v)}" for k, v in inst.attrs]
            if inst.decision is not None:
                args.append(f"decision={_text(inst.decision)}")
            call = f"sch.{inst.kind}({', '.join(args)})"
            lines.append(f"{', '.join(inst.outputs)} = {call}" if inst.outputs else call)
        return "\n".join(lines)
