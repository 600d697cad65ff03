"""The kernel ABI (docs/compile.md §3): the exported entry of each kernel and the shared runtime.

Each PrimFunc becomes `int32_t NAME(DLTensor **args, int32_t num_args)`. The entry checks
everything the caller could get wrong — argument count, device, rank, dtype, static
dimensions, consistent size variables, compact strides, the kernel's size preconditions
(tcc.ir.verify) — writes a one-line message to a per-thread buffer (`tcc_last_error()`)
and returns -1 on the first mismatch; otherwise it calls the kernel's compute function with
plain data pointers and the size variables.

A scalar parameter of a PrimFunc (a size variable no buffer shape determines) is passed as
a 0-d tensor of its dtype in its place in `args`. Buffers must not overlap: the compute
function's pointers are `noalias`, which is what lets LLVM vectorize freely.
"""

from __future__ import annotations

from llvmlite import ir

from tcc.emit.llvm_expr import I8, I32, I64, PTR, ExprEmitter, mem_type
from tcc.emit.support import CodegenError
from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.verify import PRECONDITIONS_ATTR
from tcc.rt.format import KERNEL_DTYPES

ERROR_BUFFER_BYTES = 512
KDL_CPU = 1
# DLPack: {void *data; {i32 device_type, device_id}; i32 ndim; {u8 code, bits; u16 lanes};
#          i64 *shape; i64 *strides; u64 byte_offset}
DLTENSOR = ir.LiteralStructType(
    [
        PTR,
        ir.LiteralStructType([I32, I32]),
        I32,
        ir.LiteralStructType([I8, I8, ir.IntType(16)]),
        PTR,
        PTR,
        I64,
    ]
)
RESERVED = frozenset({"tcc_last_error", "tcc_set_num_threads", "snprintf", "malloc", "free",
                      "GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads"})  # fmt: skip


def dl_dtype(dtype: str) -> tuple[int, int]:
    """DLPack (type code, bits) a kernel expects of a `dtype` tensor (tcc.rt.format)."""
    return KERNEL_DTYPES[dtype]


def fmt_text(text: str) -> str:
    return text.replace("%", "%%")


SHARED_STATE = ("tcc_error_buffer", "tcc_num_threads")  # hidden symbols when split (`part`)


class Runtime:
    """What all kernels of a shared object share: the error buffer, the thread count,
    libc/libgomp, and the exports `tcc_last_error` and `tcc_set_num_threads`.

    `part` says which of the module's pieces this module holds: "whole" (the state and the
    exports, internal to the module, and kernels), "state" (the state and the exports,
    without kernels) or "kernels" (kernels referring to the state of a "state" module
    linked beside them). Split, the state's symbols are external, and the compiler gives
    them hidden visibility (SHARED_STATE), so they link across the objects of one shared
    object and never across two loaded packs."""

    def __init__(self, module: ir.Module, part: str = "whole"):
        self.module = module
        self._strings: dict[str, ir.GlobalVariable] = {}
        buf_t = ir.ArrayType(I8, ERROR_BUFFER_BYTES)
        self.error_buffer = ir.GlobalVariable(module, buf_t, "tcc_error_buffer")
        # One message per thread, so concurrent callers never read each other's errors.
        self.error_buffer.storage_class = "thread_local"
        self.num_threads = ir.GlobalVariable(module, I32, "tcc_num_threads")
        if part != "kernels":
            self.error_buffer.initializer = ir.Constant(buf_t, None)
            self.num_threads.initializer = I32(0)  # 0: OpenMP's default (OMP_NUM_THREADS or cores)
        if part == "whole":
            self.error_buffer.linkage = self.num_threads.linkage = "internal"
        self.snprintf = ir.Function(
            module, ir.FunctionType(I32, [PTR, I64, PTR], var_arg=True), "snprintf"
        )
        self.malloc = ir.Function(module, ir.FunctionType(PTR, [I64]), "malloc")
        self.free = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), "free")
        self.uses_openmp = False
        if part != "kernels":
            self._define_exports()

    def _define_exports(self) -> None:
        fn = ir.Function(self.module, ir.FunctionType(PTR, []), "tcc_last_error")
        ir.IRBuilder(fn.append_basic_block("entry")).ret(self.error_buffer)
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [I32]), "tcc_set_num_threads")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        n = fn.args[0]
        b.store(b.select(b.icmp_signed("<", n, I32(0)), I32(0), n), self.num_threads)
        b.ret_void()

    def gomp(self, name: str) -> ir.Function:
        self.uses_openmp = True
        if name in self.module.globals:
            return self.module.globals[name]
        if name == "GOMP_parallel":
            fnty = ir.FunctionType(ir.VoidType(), [PTR, PTR, I32, I32])
        else:
            fnty = ir.FunctionType(I32, [])
        return ir.Function(self.module, fnty, name)

    def cstring(self, text: str) -> ir.GlobalVariable:
        """A private constant C string, shared by every use of the same text."""
        if text not in self._strings:
            data = bytearray(text.encode("utf8")) + b"\0"
            t = ir.ArrayType(I8, len(data))
            g = ir.GlobalVariable(self.module, t, f".str.{len(self._strings)}")
            g.linkage, g.global_constant, g.unnamed_addr = "private", True, True
            g.initializer = ir.Constant(t, data)
            self._strings[text] = g
        return self._strings[text]

    def set_error(self, b: ir.IRBuilder, fmt: str, *args: ir.Value) -> None:
        """Write a printf-formatted message to the calling thread's error buffer."""
        b.call(
            self.snprintf, [self.error_buffer, I64(ERROR_BUFFER_BYTES), self.cstring(fmt), *args]
        )


def size_vars(func: T.PrimFunc) -> list[E.Var]:
    """The size variables the entry binds, in binding order: scalar params, then plain dims."""
    found: list[E.Var] = [p for p in func.params if isinstance(p, E.Var)]
    for buf in func.buffers:
        for d in buf.shape:
            if isinstance(d, E.Var) and all(d is not v for v in found):
                found.append(d)
    for buf in func.buffers:
        for d in buf.shape:
            if isinstance(d, E.PrimExpr):
                for v in E.free_vars(d):
                    if all(v is not f for f in found):
                        raise CodegenError(
                            f"size variable {v.name!r} in the shape of "
                            f"{buf.name!r} is not any dimension on its own, so the kernel "
                            "cannot learn it; add a parameter or buffer dimension that is exactly it"
                        )
    return found


class _Checker(ExprEmitter):
    """The entry function: checks the arguments, then calls the compute function."""

    def __init__(self, rt: Runtime, name: str, func: T.PrimFunc, fn: ir.Function):
        self.rt, self.name, self.func, self.module = rt, name, func, rt.module
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.args, self.num_args = fn.args
        self.env: dict = {}

    def fail_if(self, cond: ir.Value, fmt: str, *args: ir.Value) -> None:
        with self.b.if_then(cond, likely=False):
            self.rt.set_error(self.b, f"{fmt_text(self.name)}: {fmt}", *args)
            self.b.ret(I32(-1))

    def field(self, t: ir.Value, *path: int, typ: ir.Type) -> ir.Value:
        p = self.b.gep(t, [I32(0)] + [I32(i) for i in path], source_etype=DLTENSOR)
        return self.b.load(p, typ=typ)

    def tensor(self, i: int, param) -> tuple[ir.Value, list[ir.Value]]:
        """Check argument `i` against `param`; return its data pointer and its dimensions."""
        b = self.b
        is_buf = isinstance(param, T.Buffer)
        dtype = param.dtype
        shape = param.shape if is_buf else ()
        what = f"argument {i} {fmt_text(repr(param.name))}"
        t = b.load(b.gep(self.args, [I64(i)], source_etype=PTR), typ=PTR)
        self.fail_if(b.icmp_unsigned("==", t, ir.Constant(PTR, None)), f"{what} is NULL")
        dev = self.field(t, 1, 0, typ=I32)
        self.fail_if(
            b.icmp_signed("!=", dev, I32(KDL_CPU)),
            f"{what} is on device type %d; expected a CPU tensor (device type {KDL_CPU})",
            dev,
        )
        ndim = self.field(t, 2, typ=I32)
        kind = f"a {len(shape)}-d {dtype} tensor" if is_buf else f"a 0-d {dtype} tensor (a scalar)"
        self.fail_if(
            b.icmp_signed("!=", ndim, I32(len(shape))), f"{what} has rank %d; expected {kind}", ndim
        )
        code, bits = dl_dtype(dtype)
        got = [
            b.zext(self.field(t, 3, k, typ=ty), I32)
            for k, ty in enumerate((I8, I8, ir.IntType(16)))
        ]
        wrong = b.or_(
            b.or_(b.icmp_signed("!=", got[0], I32(code)), b.icmp_signed("!=", got[1], I32(bits))),
            b.icmp_signed("!=", got[2], I32(1)),
        )
        self.fail_if(
            wrong,
            f"{what} has dtype code %d bits %d lanes %d; expected {dtype} "
            f"(code {code}, bits {bits}, lanes 1)",
            *got,
        )
        data = b.gep(self.field(t, 0, typ=PTR), [self.field(t, 6, typ=I64)], source_etype=I8)
        shape_p = self.field(t, 4, typ=PTR)
        dims = [
            b.load(b.gep(shape_p, [I64(k)], source_etype=I64), typ=I64) for k in range(len(shape))
        ]
        if len(shape) > 1:
            self.check_strides(t, dims, what)
        return data, dims

    def check_strides(self, t: ir.Value, dims: list[ir.Value], what: str) -> None:
        b = self.b
        strides = self.field(t, 5, typ=PTR)
        with b.if_then(b.icmp_unsigned("!=", strides, ir.Constant(PTR, None))):
            expect: ir.Value = I64(1)
            for k in reversed(range(len(dims))):
                got = b.load(b.gep(strides, [I64(k)], source_etype=I64), typ=I64)
                # a dimension of size 1 may carry any stride (numpy and DLPack allow it)
                bad = b.and_(b.icmp_signed("!=", got, expect), b.icmp_signed("!=", dims[k], I64(1)))
                self.fail_if(
                    bad,
                    f"{what} is not compact: dimension {k} has stride %lld, "
                    "expected %lld; pass a C-contiguous (row-major) array",
                    got,
                    expect,
                )
                expect = b.mul(expect, dims[k])

    def build(self, compute: ir.Function, bound: list[E.Var]) -> None:
        b, params = self.b, self.func.params
        self.fail_if(
            b.icmp_signed("!=", self.num_args, I32(len(params))),
            f"expected {len(params)} arguments, got %d",
            self.num_args,
        )
        datas, dims, origin = [], {}, {}
        for i, p in enumerate(params):
            data, ds = self.tensor(i, p)
            if isinstance(p, E.Var):
                self.env[p] = self.mem_to_reg(b.load(data, typ=mem_type(p.dtype), align=1), p.dtype)
                origin[p] = (i, None, f"argument {i} {fmt_text(repr(p.name))}")
            else:
                datas.append(data)
                dims[i] = ds
        for i, p in enumerate(params):  # bind each size variable at its first plain dimension
            for k, d in enumerate(p.shape if isinstance(p, T.Buffer) else ()):
                if isinstance(d, E.Var) and d not in self.env:
                    self.env[d] = self.convert(dims[i][k], "int64", d.dtype)
                    origin[d] = (i, k, f"argument {i} {fmt_text(repr(p.name))} dimension {k}")
        for i, p in enumerate(params):
            for k, d in enumerate(p.shape if isinstance(p, T.Buffer) else ()):
                self.check_dim(i, p, k, d, dims[i][k], origin)
        for cond in dict(self.func.attrs).get(PRECONDITIONS_ATTR, ()):
            self.check_precondition(cond)
        b.ret(b.call(compute, datas + [self.env[v] for v in bound]))

    def check_precondition(self, cond: E.PrimExpr) -> None:
        """A condition on the sizes that the kernel's accesses need (tcc.ir.verify): arguments
        whose shapes break it would make the kernel read or write outside a buffer."""
        names = sorted({v.name: v for v in E.free_vars(cond)}.items())
        values = ", ".join(f"{fmt_text(n)} = %lld" for n, _ in names)
        self.fail_if(
            self.b.not_(self.expr_as(cond, "bool")),
            f"the shapes of its arguments do not fit together: it needs {fmt_text(str(cond))}, "
            f"and {values}",
            *[self.convert(self.env[v], v.dtype, "int64") for _, v in names],
        )

    def check_dim(self, i: int, p: T.Buffer, k: int, d, got: ir.Value, origin: dict) -> None:
        what = f"argument {i} {fmt_text(repr(p.name))} dimension {k} is %lld; expected"
        if isinstance(d, int) or isinstance(d, E.IntImm):
            value = d if isinstance(d, int) else d.value
            self.fail_if(self.b.icmp_signed("!=", got, I64(value)), f"{what} {value}", got)
            return
        if isinstance(d, E.Var) and origin[d][:2] == (i, k):
            return  # the dimension that binds it
        want = self.expr_as(d, "int64")
        where = f" (from {origin[d][2]})" if isinstance(d, E.Var) else ""
        self.fail_if(
            self.b.icmp_signed("!=", got, want),
            f"{what} {fmt_text(str(d))} = %lld{where}",
            got,
            want,
        )


def build_entry(
    rt: Runtime, name: str, func: T.PrimFunc, compute: ir.Function, bound: list[E.Var]
) -> None:
    """Define the exported `int32_t name(DLTensor **args, int32_t num_args)`."""
    fn = ir.Function(rt.module, ir.FunctionType(I32, [PTR, I32]), name)
    _Checker(rt, name, func, fn).build(compute, bound)
