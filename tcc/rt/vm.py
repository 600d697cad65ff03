"""The Python VM: runs the verified bytecode of a pack (docs/vm.md).

The executable was verified once when the pack was read (`tcc.rt.pack.verify_executable`):
every index is in range, every builtin has the arguments it needs, a backward jump only
returns to a loop head (an `if` that may leave the loop) and no function calls itself, so
the loop below indexes without checks and ends unless a loop's condition (data, as in the
model) keeps it going. What the verifier cannot know is data: the shapes and dtypes of the
inputs, checked by the entry function's `match_shape` calls, which raise RunInputError
naming the input.

With `profile=True` the machine times every kernel call and every builtin call (grouped by
category) with `time.perf_counter`, and each whole run; `Profile.rows()` turns that into a
table whose shares add up to the total, the rest being the interpreter's own time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tcc.errors import TccError
from tcc.rt.arena import ArenaPlan, plan_arena
from tcc.rt.errors import PackError, RunInputError
from tcc.rt.format import (
    INT64_MAX,
    NO_REG,
    ArgKind,
    DimMode,
    Executable,
    FuncKind,
    Op,
    ShapeOp,
)
from tcc.rt.host_pool import BIG, HostPool
from tcc.rt.tensor import aligned_empty, as_array, numpy_dtype

_UNSET = object()
_MAX_ARENA_PLANS = 64  # arena plans a machine remembers (one per set of sizes and lifetimes)
_MAX_SHAPES = 4096  # shape program results a machine remembers (by program and sizes read)


def eval_shape(prog: Sequence[int], heap: list, names: Sequence[str]) -> tuple[int, ...]:
    """Run a shape program ([ndim, then per dim: word count, postfix words])."""
    dims, i = [], 1
    for _ in range(prog[0]):
        n, i = prog[i], i + 1
        dims.append(_eval_dim(prog[i : i + n], heap, names))
        i += n
    return tuple(dims)


def read_slots(prog: Sequence[int]) -> tuple[int, ...]:
    """The heap slots a shape program reads, in order of first use."""
    slots: list[int] = []
    i = 1
    for _ in range(prog[0]):
        n, i = prog[i], i + 1
        _slots_in(prog[i : i + n], slots)
        i += n
    return tuple(slots)


def _slots_in(words: Sequence[int], slots: list[int]) -> list[int]:
    """`slots` with those one dimension's postfix `words` read appended, each once."""
    i = 0
    while i < len(words):
        if words[i] in (ShapeOp.PUSH_INT, ShapeOp.PUSH_VAR):
            if words[i] == ShapeOp.PUSH_VAR and words[i + 1] not in slots:
                slots.append(words[i + 1])
            i += 2
        else:
            i += 1
    return slots


def check_failure(message: str, words: Sequence[int], frame) -> str:
    """The error of a failed assert_shape condition: its message, then the size variables
    the condition reads in order of first use (tcc.ir.interp words it the same way)."""
    slots = _slots_in(words, [])
    values = ", ".join(f"{frame.names[s]} = {frame.heap[s]}" for s in slots)
    return f"{message} ({values})" if values else message


_INT64 = range(-(1 << 63), 1 << 63)
_OVERFLOW = "a shape computation overflows int64; check the input shapes"
_DIV_ZERO = "a shape computation divides by zero; check the input shapes"


class _Failed(str):
    """A value of a shape program that could not be computed, and why: an error only if the
    dimension depends on it, for a select's untaken branch may overflow (`select(end < 0,
    end + n, end)` with end = INT64_MAX, a slice to the end) or divide by zero without
    making the dimension wrong (runtime_c/src/shape.c does the same)."""


def _eval_dim(words: Sequence[int], heap: list, names: Sequence[str]) -> int:
    stack: list = []
    i = 0
    while i < len(words):
        op = words[i]
        if op == ShapeOp.PUSH_INT:
            stack.append(words[i + 1])
            i += 2
            continue
        if op == ShapeOp.PUSH_VAR:
            v = heap[words[i + 1]]
            if v is None:
                raise PackError(f"bytecode reads size variable {names[words[i + 1]]!r} before binding it")
            stack.append(v)
            i += 2
            continue
        if op == ShapeOp.SELECT:
            f, t, c = stack.pop(), stack.pop(), stack.pop()
            stack.append(c if isinstance(c, _Failed) else t if c else f)
            i += 1
            continue
        b, a = stack.pop(), stack.pop()
        if isinstance(a, _Failed) or isinstance(b, _Failed):
            stack.append(a if isinstance(a, _Failed) else b)
        elif op in (ShapeOp.FLOORDIV, ShapeOp.FLOORMOD) and b == 0:
            stack.append(_Failed(_DIV_ZERO))
        else:
            r = _SHAPE_FNS[op](a, b)
            stack.append(r if r in _INT64 else _Failed(_OVERFLOW))
        i += 1
    if isinstance(stack[0], _Failed):
        raise RunInputError(str(stack[0]))
    return stack[0]


_SHAPE_FNS = {
    ShapeOp.ADD: lambda a, b: a + b,
    ShapeOp.SUB: lambda a, b: a - b,
    ShapeOp.MUL: lambda a, b: a * b,
    ShapeOp.FLOORDIV: lambda a, b: a // b,
    ShapeOp.FLOORMOD: lambda a, b: a % b,
    ShapeOp.MIN: min,
    ShapeOp.MAX: max,
    ShapeOp.EQ: lambda a, b: int(a == b),
    ShapeOp.NE: lambda a, b: int(a != b),
    ShapeOp.LT: lambda a, b: int(a < b),
    ShapeOp.LE: lambda a, b: int(a <= b),
}


# Builtins are profiled by category: what a reader of the table can act on.
BUILTIN_CATEGORIES = {
    "alloc_tensor": "alloc",
    "alloc_arena": "alloc",
    "arena_view": "alloc",
    "reshape": "views",
    "copy": "copies",
    "match_shape": "shapes",
    "make_shape": "shapes",
    "tensor_to_shape": "shapes",
    "match_dims": "shapes",
    "assert_shape": "shapes",
    "make_sizes": "shapes",
    "load_constant": "constants",
    "make_tuple": "tuples",
    "tuple_get_item": "tuples",
    "read_bool": "control flow",
    "scalar": "control flow",
    "scalar_add": "control flow",
    "loop_continue": "control flow",
    "dim_size": "control flow",
    "stack_new": "control flow",
    "stack_push": "control flow",
    "take": "copies",
    "stack_finish": "copies",
}
INTERPRETER = "interpreter"  # the profile row of the time spent between calls


@dataclass(frozen=True)
class ProfileRow:
    """One line of a profile, per run (averaged over the profiled runs).

    `kind` is "kernel", "builtin" or "vm"; `name` the kernel symbol, the builtin category or
    "interpreter"; `origins` the graph bindings (ONNX node outputs) that call a kernel;
    `share` the fraction of the total run time (the rows' shares add up to 1)."""

    kind: str
    name: str
    origins: tuple[str, ...]
    calls: float
    total_ms: float
    mean_ms: float
    share: float


class Profile:
    """Accumulated timings of a profiling VirtualMachine."""

    def __init__(self):
        self.seconds: dict[tuple[str, str], float] = {}
        self.calls: dict[tuple[str, str], int] = {}
        self.total_seconds = 0.0
        self.runs = 0

    def add(self, key: tuple[str, str], seconds: float) -> None:
        self.seconds[key] = self.seconds.get(key, 0.0) + seconds
        self.calls[key] = self.calls.get(key, 0) + 1

    def rows(self, origins: Mapping[str, Sequence[str]] | None = None) -> list[ProfileRow]:
        """Rows sorted by share, largest first, with an "interpreter" row for the time no
        call accounts for; empty before the first run."""
        if not self.runs:
            return []
        origins = origins or {}
        runs, total = self.runs, self.total_seconds
        timed = sum(self.seconds.values())
        entries = [(k, self.seconds[k], self.calls[k]) for k in self.seconds]
        entries.append((("vm", INTERPRETER), max(total - timed, 0.0), runs))
        out = []
        for (kind, name), secs, calls in entries:
            out.append(ProfileRow(
                kind=kind,
                name=name,
                origins=tuple(origins.get(name, ())) if kind == "kernel" else (),
                calls=calls / runs,
                total_ms=secs * 1e3 / runs,
                mean_ms=secs * 1e3 / calls if calls else 0.0,
                share=secs / max(total, timed) if total > 0 else 0.0,
            ))
        out.sort(key=lambda r: (-r.share, r.kind, r.name))
        return out


class _Frame:
    __slots__ = ("regs", "heap", "names")

    def __init__(self, num_regs: int, heap_names: tuple[str, ...]):
        self.regs: list = [_UNSET] * num_regs
        self.heap: list = [None] * len(heap_names)
        self.names = heap_names


class VirtualMachine:
    """Runs the entry functions of `contents` (a PackContents, or anything with
    `.executable`, `.weights` and `.signatures`), calling kernels through
    `kernel_library.call(symbol, arrays)`. With `profile=True` every run adds its timings
    to `self.profile` (see `Profile`)."""

    def __init__(self, contents, kernel_library, profile: bool = False):
        self.exe: Executable = contents.executable
        self.weights: Mapping[str, np.ndarray] = contents.weights
        self.signatures: Mapping[str, dict] = contents.signatures
        self.lib = kernel_library
        # a GPU's kernel library is also a device: tensors the bytecode allocates, the
        # weights it loads and the inputs live in its memory (tcc.rt.cuda.DeviceArray)
        self.device = getattr(kernel_library, "device", None)
        index = {f.name: i for i, f in enumerate(self.exe.functions)}
        self._targets = []
        for kind, name in self.exe.table:
            if kind == FuncKind.BUILTIN:
                self._targets.append(getattr(self, "_b_" + name))
            else:
                self._targets.append(index[name] if kind == FuncKind.VM else name)
        self._kinds = [kind for kind, _ in self.exe.table]
        self._index = index
        self._arena_plans: dict[tuple, ArenaPlan] = {}  # (sizes, lifetimes) -> the plan
        # a constant shape program (by id: the executable keeps it) -> the slots it reads;
        # (its id, their values) -> its result
        self._shape_slots: dict[int, tuple[int, ...]] = {}
        self._shapes: dict[tuple, tuple[int, ...]] = {}
        self._pool = HostPool()  # big host tensors and arenas, kept between runs
        self.profile: Profile | None = None
        if profile:
            self.profile = Profile()
            self._keys = [("kernel", name) if kind == FuncKind.KERNEL
                          else ("builtin", BUILTIN_CATEGORIES.get(name, name))
                          for kind, name in self.exe.table]
            self._call = self._timed_call  # the plain path stays free of timing checks

    def profile_rows(self) -> list[ProfileRow]:
        """The profile so far as rows (kernels named by their origins); needs profile=True."""
        if self.profile is None:
            raise ValueError("this VirtualMachine was made without profile=True")
        return self.profile.rows(getattr(self.exe, "kernel_origins", None))

    # -- entry -----------------------------------------------------------------------------

    def run(self, name: str, args: Sequence = (), named: Mapping | None = None,
            device_outputs: bool = False) -> list[np.ndarray]:
        """Run entry function `name` on positional `args` or `named` inputs; returns the
        outputs in signature order: numpy arrays, or with `device_outputs` (a pack whose
        kernels run on a device) the device's arrays, which DLPack consumers take."""
        sig = self.signatures.get(name)
        if sig is None:
            raise RunInputError(f"no entry function {name!r}; the pack has {sorted(self.signatures)}")
        inputs = self._bind_inputs(name, sig, args, named)
        if self.device is not None:
            inputs = [a if getattr(a, "is_device_array", False) else self.device.from_host(a)
                      for a in inputs]
        t0 = time.perf_counter()
        try:
            result = self._invoke(self._index[name], inputs)
        except RecursionError:
            raise PackError(f"bytecode calls of {name!r} nest too deeply to run") from None
        finally:
            self._pool.take_back()
        outs = list(result) if len(sig["outputs"]) != 1 else [result]
        # weights are read-only views of the pack, device arrays are copied to the host
        # (np.array): hand the caller arrays it owns
        if device_outputs and self.device is not None:  # a weight is the caller's to change
            outs = [o.copy() if self.device.is_constant(o) else o for o in outs]
        else:
            outs = [o if isinstance(o, np.ndarray) and o.flags.writeable else np.array(o)
                    for o in outs]
        if self.profile is not None:
            self.profile.total_seconds += time.perf_counter() - t0
            self.profile.runs += 1
        return outs

    def _bind_inputs(self, name, sig, args, named) -> list[np.ndarray]:
        specs = sig["inputs"]
        want = [s["name"] for s in specs]
        if named is not None:
            if args:
                raise RunInputError(f"{name!r}: give the inputs by position or by name, not both")
            unknown = [k for k in named if k not in want]
            if unknown:
                raise RunInputError(f"{name!r} has no input named {unknown[0]!r}; its inputs are {want}")
            missing = [k for k in want if k not in named]
            if missing:
                raise RunInputError(f"{name!r}: input {missing[0]!r} is missing; its inputs are {want}")
            args = [named[k] for k in want]
        if len(args) != len(specs):
            raise RunInputError(f"{name!r} takes {len(specs)} inputs ({', '.join(want)}), got {len(args)}")
        arrays = []
        for spec, a in zip(specs, args):
            if self.device is not None and _on_a_gpu(a):  # stays where it is: no copy
                arrays.append(self.device.from_dlpack(a, f"input {spec['name']!r} of {name!r}"))
                continue
            try:
                arrays.append(as_array(a))
            except (TypeError, ValueError, BufferError) as e:
                raise RunInputError(f"input {spec['name']!r} of {name!r}: {e}; pass a numpy array "
                                    "or an object with __dlpack__") from None
        return arrays

    # -- the interpreter -------------------------------------------------------------------

    def _invoke(self, index: int, args: list):
        f = self.exe.functions[index]
        frame = _Frame(f.num_regs, f.heap_names)
        regs = frame.regs
        regs[: len(args)] = args
        code = f.code
        pc = 0
        while True:
            ins = code[pc]
            if ins.op == Op.CALL:
                try:
                    vals = [self._arg(regs, k, v) for k, v in ins.args]
                    result = self._call(ins.a, frame, vals)
                except TccError:
                    raise
                except (IndexError, TypeError, ValueError, AttributeError, KeyError) as e:
                    raise PackError(f"bytecode function {f.name!r} at {pc}: {e}") from None
                if ins.b != NO_REG:
                    regs[ins.b] = result
                pc += 1
            elif ins.op == Op.RET:
                return self._read(regs, ins.a)
            elif ins.op == Op.GOTO:
                pc += ins.a
            else:
                pc += 1 if self._read(regs, ins.a) else ins.b

    def _arg(self, regs, kind, value):
        if kind == ArgKind.REG:
            return self._read(regs, value)
        if kind == ArgKind.CONST:
            return self.exe.constants[value]
        return value

    @staticmethod
    def _read(regs, r):
        v = regs[r]
        if v is _UNSET:
            raise PackError(f"bytecode reads register %{r} before writing it")
        return v

    def _call(self, fi: int, frame: _Frame, vals: list):
        kind, target = self._kinds[fi], self._targets[fi]
        if kind == FuncKind.BUILTIN:
            return target(frame, *vals)
        if kind == FuncKind.VM:
            return self._invoke(target, vals)
        arrays = []
        for v in vals:
            if isinstance(v, tuple):  # a shape passes each dimension as a 0-d int64 tensor
                arrays.extend(np.array(d, np.int64) for d in v)
            else:
                arrays.append(v)
        self.lib.call(target, arrays)
        return None

    def _timed_call(self, fi: int, frame: _Frame, vals: list):
        if self._kinds[fi] == FuncKind.VM:
            return VirtualMachine._call(self, fi, frame, vals)  # its own calls are timed
        if self.device is not None and self._kinds[fi] == FuncKind.KERNEL:
            # launches return at once: a kernel's time is the GPU's, between CUDA events
            out: list = []
            seconds = self.device.gpu_seconds(
                lambda: out.append(VirtualMachine._call(self, fi, frame, vals)))
            self.profile.add(self._keys[fi], seconds)
            return out[0]
        t0 = time.perf_counter()
        try:
            return VirtualMachine._call(self, fi, frame, vals)
        finally:
            if self.device is not None:  # a builtin may have launched copies: wait for them
                self.device.synchronize()
            self.profile.add(self._keys[fi], time.perf_counter() - t0)

    # -- builtins (docs/vm.md lists each) --------------------------------------------------

    def _b_match_shape(self, frame: _Frame, x, what: str, dtype: str, pattern):
        if not _is_tensor(x):
            raise RunInputError(f"{what}: expected a {dtype} tensor, got {type(x).__name__}")
        if x.dtype != numpy_dtype(dtype):
            raise RunInputError(f"{what}: expected dtype {dtype}, got {x.dtype.name}")
        ndim = pattern[0]
        if x.ndim != ndim:
            raise RunInputError(f"{what}: expected rank {ndim}, got rank {x.ndim} (shape {list(x.shape)})")
        self._match(frame, what, "dimension", x.shape, pattern)

    def _match(self, frame: _Frame, what: str, noun: str, got, pattern) -> None:
        """Bind, check or compare each entry of `got` as the pattern says; `noun` names an
        entry in the messages (the C runtime's match_pattern words them alike)."""
        heap, names = frame.heap, frame.names
        for i in range(pattern[0]):
            mode, value, g = pattern[1 + 2 * i], pattern[2 + 2 * i], got[i]
            if mode == DimMode.STATIC and g != value:
                raise RunInputError(f"{what}: {noun} {i} must be {value}, got {g}")
            if mode == DimMode.BIND:
                heap[value] = g
            elif mode == DimMode.CHECK and heap[value] != g:
                raise RunInputError(f"{what}: {noun} {i} is {names[value]} = {heap[value]} "
                                    f"(set by an earlier {noun}), got {g}")
            elif mode == DimMode.EXPR:
                want = eval_shape(self.exe.constants[value], heap, names)[0]
                if want != g:
                    raise RunInputError(f"{what}: {noun} {i} must be {want} "
                                        f"(from the other {noun}s), got {g}")

    def _b_tensor_to_shape(self, frame: _Frame, x, what: str):
        x = _host(x)
        if not isinstance(x, np.ndarray) or x.dtype.kind not in "iu" or x.ndim > 1:
            got = f"{x.dtype.name} tensor of rank {x.ndim}" if isinstance(x, np.ndarray) else type(x).__name__
            raise RunInputError(f"{what}: expected a 0-d or 1-d integer tensor of sizes, got a {got}")
        values = [int(v) for v in x.reshape(-1)]
        if any(v > INT64_MAX for v in values):
            raise RunInputError(f"{what}: a size does not fit in int64")
        return tuple(values)

    def _b_match_dims(self, frame: _Frame, shape, what: str, pattern):
        if len(shape) != pattern[0]:
            raise RunInputError(f"{what}: expected {pattern[0]} sizes, got {len(shape)} {list(shape)}")
        self._match(frame, what, "size", shape, pattern)

    def _eval(self, prog, frame: _Frame) -> tuple[int, ...]:
        """eval_shape of a constant program, remembered by the sizes it reads: a run at sizes
        seen before evaluates none again (MPT's legacy export spent 57% of its tcc.rt run
        time evaluating a run-time Slice's size programs)."""
        slots = self._shape_slots.get(id(prog))
        if slots is None:
            slots = self._shape_slots[id(prog)] = read_slots(prog)
        heap = frame.heap
        key = (id(prog), *[heap[s] for s in slots])
        got = self._shapes.get(key)
        if got is None:
            got = eval_shape(prog, heap, frame.names)  # raises, and remembers nothing, on bad sizes
            if len(self._shapes) >= _MAX_SHAPES:
                self._shapes.clear()
            self._shapes[key] = got
        return got

    def _b_assert_shape(self, frame: _Frame, prog, message: str):
        conds = self._eval(prog, frame)
        i = 1
        for holds in conds:
            n = prog[i]
            if not holds:
                raise RunInputError(check_failure(message, prog[i + 1 : i + 1 + n], frame))
            i += 1 + n

    def _b_make_sizes(self, frame: _Frame, prog):
        return self._eval(prog, frame)

    def _b_make_shape(self, frame: _Frame, prog):
        dims = self._eval(prog, frame)
        for d in dims:
            if d < 0:
                raise RunInputError(f"a computed shape {list(dims)} has a negative dimension; "
                                    "check the input shapes")
        return dims

    def _b_alloc_tensor(self, frame: _Frame, shape, dtype: str):
        dt = numpy_dtype(dtype)
        if self.device is not None:
            return self.device.empty(shape, dt)
        nbytes = math.prod(shape) * dt.itemsize
        try:
            if nbytes < BIG:
                return np.empty(shape, dt)
            return self._pool.empty(nbytes).view(dt).reshape(shape)
        except (ValueError, MemoryError):  # as the C runtime says it (runtime_c/src/tensor.c)
            raise RunInputError(f"out of memory allocating {nbytes} bytes for a tensor") from None

    def _b_alloc_arena(self, frame: _Frame, sizes_prog, lifetimes):
        sizes = self._b_make_shape(frame, sizes_prog)
        key = (sizes, lifetimes)
        plan = self._arena_plans.get(key)
        if plan is None:  # the first run at these sizes plans; later ones look it up
            if len(self._arena_plans) >= _MAX_ARENA_PLANS:
                self._arena_plans.clear()
            pairs = [(lifetimes[2 * k], lifetimes[2 * k + 1]) for k in range(len(sizes))]
            plan = self._arena_plans[key] = plan_arena(sizes, pairs)
        return Arena(plan.size, plan.offsets, sizes, self.device, self._pool)

    def _b_arena_view(self, frame: _Frame, arena, index: int, shape, dtype: str):
        if not isinstance(arena, Arena) or not isinstance(shape, tuple):
            raise PackError("bytecode makes an arena view of something that is not an arena, or "
                            "with a shape that is not a shape")
        if index >= len(arena.offsets):
            raise PackError(f"bytecode views tensor {index} of an arena of {len(arena.offsets)}")
        dt = numpy_dtype(dtype)
        nbytes = math.prod(shape) * dt.itemsize
        if nbytes > arena.sizes[index]:
            raise PackError(f"bytecode views a {dtype}{list(shape)} tensor in a slot of "
                            f"{arena.sizes[index]} bytes")
        start = arena.offsets[index]
        if self.device is not None:
            return arena.data.view(start, shape, dt)
        return arena.data[start : start + nbytes].view(dt).reshape(shape)

    def _b_load_constant(self, frame: _Frame, name: str):
        if self.device is not None:
            return self.device.constant(name, self.weights[name])
        return self.weights[name]

    def _b_reshape(self, frame: _Frame, x, shape):
        if x.size != int(np.prod(shape)):
            raise RunInputError(f"cannot view a tensor of shape {list(x.shape)} as {list(shape)}")
        return x.reshape(shape)

    def _b_copy(self, frame: _Frame, x):
        return np.array(x, copy=True) if isinstance(x, np.ndarray) else x.copy()

    def _b_make_tuple(self, frame: _Frame, *fields):
        return tuple(fields)

    def _b_tuple_get_item(self, frame: _Frame, t, i: int):
        return t[i]

    def _b_read_bool(self, frame: _Frame, x):
        x = _host(x)
        if x.size != 1:
            raise RunInputError(f"an if_ condition must hold one element, got shape {list(x.shape)}")
        return bool(x.reshape(-1)[0])

    # Loop and Scan: counters and flags are 0-d tensors, results are stacked at the end.

    def _b_scalar(self, frame: _Frame, value: int, dtype: str):
        return _scalar(value, numpy_dtype(dtype))

    def _b_scalar_add(self, frame: _Frame, x, step: int):
        return _scalar(_one(x, "a loop counter") + step, x.dtype)

    def _b_loop_continue(self, frame: _Frame, i, limit, cond):
        return bool(_one(i, "a loop counter") < _one(limit, "a loop trip count")
                    and _one(cond, "a loop condition"))

    def _b_dim_size(self, frame: _Frame, x, axis: int):
        return np.array(x.shape[axis], np.int64)

    def _b_take(self, frame: _Frame, x, index, axis: int, reverse: int):
        x = _host(x)
        length, t = x.shape[axis], int(_one(index, "a scan index"))
        if not 0 <= t < length:
            raise RunInputError(f"a scan input has {length} elements along axis {axis}, "
                                f"fewer than the first scan input; give every one the same length")
        # np.take copies (kernels take compact row-major tensors only); a slice of a vector
        # comes back as a numpy scalar, which asarray turns into a 0-d tensor
        out = np.asarray(np.take(x, length - 1 - t if reverse else t, axis=axis))
        return out if out.flags.c_contiguous else out.copy()

    def _b_stack_new(self, frame: _Frame):
        return _Stack()

    def _b_stack_push(self, frame: _Frame, acc, x):
        if not isinstance(acc, _Stack) or not _is_tensor(x):
            raise PackError("bytecode pushes onto something that is not a stack, or pushes "
                            "something that is not a tensor")
        acc.items.append(_host(x))

    def _b_stack_finish(self, frame: _Frame, acc, axis: int, reverse: int, empty, dtype: str):
        if not isinstance(acc, _Stack) or not isinstance(empty, tuple):
            raise PackError("bytecode finishes a stack it did not make with stack_new, or "
                            "gives an empty shape that is not a shape")
        items = acc.items[::-1] if reverse else acc.items
        if not items:
            return np.zeros(empty, numpy_dtype(dtype))
        first = items[0]
        for x in items:
            if x.shape != first.shape or x.dtype != first.dtype:
                raise RunInputError(f"a scan output is {first.dtype.name}{list(first.shape)} in one "
                                    f"iteration and {x.dtype.name}{list(x.shape)} in another; every "
                                    "iteration must give the same shape")
        if not 0 <= axis <= first.ndim:
            raise PackError(f"bytecode stacks along axis {axis} of rank-{first.ndim} tensors")
        return np.stack(items, axis=axis)


class Arena:
    """The buffer that one call's planned tensors share (alloc_arena), ARENA_ALIGN-aligned
    as the C runtime's: tensor k is a view at `offsets[k]` of at most `sizes[k]` bytes."""

    __slots__ = ("data", "offsets", "sizes")

    def __init__(self, nbytes: int, offsets: tuple[int, ...], sizes: tuple[int, ...],
                 device=None, pool: HostPool | None = None):
        if device is not None:  # GPU memory (tcc.rt.cuda.DeviceBuffer)
            self.data, self.offsets, self.sizes = device.buffer(nbytes), offsets, sizes
            return
        try:
            self.data = aligned_empty(nbytes) if pool is None else pool.empty(nbytes)
        except (ValueError, MemoryError):
            raise RunInputError(f"out of memory allocating a {nbytes}-byte arena") from None
        self.offsets, self.sizes = offsets, sizes


class _Stack:
    """The per-iteration scan outputs of a running Loop or Scan (the one mutable value a
    register can hold; only stack_push changes it)."""

    __slots__ = ("items",)

    def __init__(self):
        self.items: list[np.ndarray] = []


def _scalar(value: int, dtype: np.dtype) -> np.ndarray:
    try:
        return np.array(value, dtype)
    except OverflowError:
        raise PackError(f"bytecode makes the value {value}, which {dtype.name} cannot hold") from None


def _on_a_gpu(x) -> bool:
    """A DLPack tensor (torch, cupy) in GPU memory: not a numpy array, and a DLPack device
    other than the CPU (1)."""
    if isinstance(x, np.ndarray) or not hasattr(x, "__dlpack_device__"):
        return False
    try:
        return int(x.__dlpack_device__()[0]) != 1
    except Exception:  # a malformed producer: as_array reports it
        return False


def _is_tensor(x) -> bool:
    """A numpy array or a device array (tcc.rt.cuda.DeviceArray)."""
    return isinstance(x, np.ndarray) or getattr(x, "is_device_array", False)


def _host(x):
    """`x` in host memory: a device array is copied over, anything else is itself."""
    return np.asarray(x) if getattr(x, "is_device_array", False) else x


def _one(x, what: str):
    """The value of a one-element tensor."""
    x = _host(x)
    if not isinstance(x, np.ndarray) or x.size != 1:
        shape = list(x.shape) if isinstance(x, np.ndarray) else type(x).__name__
        raise RunInputError(f"{what} must hold one element, got {shape}")
    return x.reshape(-1)[0].item()
