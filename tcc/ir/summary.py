"""A JSON-friendly summary of an IRModule: op counts, constant bytes, signatures."""

from __future__ import annotations

from collections import Counter

from tcc.ir.graph import (
    Call,
    CallTIR,
    Function,
    If,
    Loop,
    OptionalType,
    Scan,
    SequenceType,
    TensorType,
    TupleType,
    Type,
)

# The op-count name of each graph node that is not an op call.
NODE_NAMES = {CallTIR: "call_tir", If: "if", Loop: "loop", Scan: "scan"}


def format_shape(shape) -> str:
    inner = ", ".join(str(d) for d in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def describe_type(t: Type) -> dict:
    if isinstance(t, TensorType):
        return {"shape": [d if isinstance(d, int) else str(d) for d in t.shape], "dtype": t.dtype}
    if isinstance(t, TupleType):
        return {"tuple": [describe_type(f) for f in t.fields]}
    if isinstance(t, SequenceType):
        return {"sequence": {"shape": None if t.shape is None else list(t.shape), "dtype": t.dtype}}
    if isinstance(t, OptionalType):
        return {"optional": describe_type(t.elem)}
    return {"type": str(t)}


def type_text(entry: dict) -> str:
    """A described type in one short line: `float32(n, 4)`, `sequence of float32(?, 4)`,
    `optional float32(n,)`."""
    if "shape" in entry:
        shape = entry["shape"]
        if shape is None:
            return f"{entry['dtype']}(rank unknown)"
        return f"{entry['dtype']}{format_shape(['?' if d is None else d for d in shape])}"
    if "sequence" in entry:
        return f"sequence of {type_text(entry['sequence'])}"
    if "optional" in entry:
        return f"optional {type_text(entry['optional'])}"
    if "tuple" in entry:
        return f"tuple({', '.join(type_text(f) for f in entry['tuple'])})"
    return entry.get("type", "?")


def signature(func: Function) -> dict:
    """Inputs and outputs with their public names and symbolic shapes."""
    outs = func.outputs
    names = list(func.output_names) or [f"output{i}" for i in range(len(outs))]
    from tcc.ir.graph import type_of

    return {
        "inputs": [
            {"name": n, **describe_type(p.type)} for n, p in zip(func.input_names, func.params)
        ],
        "outputs": [{"name": n, **describe_type(type_of(o))} for n, o in zip(names, outs)],
    }


def module_summary(mod) -> dict:
    functions = {}
    for name, f in sorted(mod.graph_functions.items()):
        ops = Counter()
        for b in f.bindings:
            if isinstance(b.value, Call):
                ops[b.value.op] += 1
            elif type(b.value) in NODE_NAMES:
                ops[NODE_NAMES[type(b.value)]] += 1
        functions[name] = {
            **signature(f),
            "bindings": len(f.bindings),
            "op_counts": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        }
    return {
        "functions": functions,
        "prim_funcs": sorted(mod.prim_funcs),
        "constants": len(mod.const_types),
        "constant_bytes": int(
            sum(
                v.nbytes if (v := mod.const_values.get(k)) is not None else 0
                for k in mod.const_types
            )
        ),
    }
