"""The kernel ABI (docs/compile.md §3): the exported entry of each kernel and the shared runtime.

Each PrimFunc becomes `int32_t NAME(DLTensor **args, int32_t num_args)`. The entry checks
everything the caller could get wrong — argument count, device, rank, dtype, static
dimensions, consistent size variables, compact strides, the kernel's size preconditions
(tcc.ir.verify); each argument's own checks are one call of the runtime's shared
`tcc_check_tensor` — writes a one-line message to a per-thread buffer (`tcc_last_error()`)
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
CHECK_TENSOR = "tcc_check_tensor"  # the argument checks every kernel's entry calls (hidden too)


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
        # ptr tcc_check_tensor(ptr args, i32 index, ptr what, i32 rank, ptr kind, i32 code,
        #                      i32 bits, ptr dtype, ptr dims): see _define_check_tensor
        self.check_tensor = ir.Function(
            module, ir.FunctionType(PTR, [PTR, I32, PTR, I32, PTR, I32, I32, PTR, PTR]),
            CHECK_TENSOR)
        if part != "kernels":
            self._define_exports()
            self._define_check_tensor()
            if part == "whole":
                self.check_tensor.linkage = "internal"

    def _define_exports(self) -> None:
        fn = ir.Function(self.module, ir.FunctionType(PTR, []), "tcc_last_error")
        ir.IRBuilder(fn.append_basic_block("entry")).ret(self.error_buffer)
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [I32]), "tcc_set_num_threads")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        n = fn.args[0]
        b.store(b.select(b.icmp_signed("<", n, I32(0)), I32(0), n), self.num_threads)
        b.ret_void()

    def _define_check_tensor(self) -> None:
        """The checks of one tensor argument, shared by every kernel's entry so each entry
        stays small (DenseNet-121's 194 kernels compiled 41% faster than with the checks
        inlined in every entry): `args[index]` is not NULL, is on the CPU, has rank `rank`,
        DLPack dtype (`code`, `bits`, 1 lane) and compact strides, and each dimension `k`
        whose `dims[k]` is not -1 is that. Returns the tensor, or NULL after writing the
        message, which starts with `what` ("NAME: argument I 'PARAM'"); `kind` and
        `dtype` say what was expected."""
        fn = self.check_tensor
        args, index, what, rank, kind, code, bits, dtype, dims = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        expect = b.alloca(I64)  # the next dimension's compact stride (in the entry block)

        def fail_if(cond: ir.Value, fmt: str, *values: ir.Value) -> None:
            with b.if_then(cond, likely=False):
                self.set_error(b, "%s " + fmt, what, *values)
                b.ret(ir.Constant(PTR, None))

        def field(t: ir.Value, *path: int, typ: ir.Type) -> ir.Value:
            return b.load(b.gep(t, [I32(0)] + [I32(i) for i in path], source_etype=DLTENSOR),
                          typ=typ)

        def each_dim(body, descending: bool) -> None:
            """body(k) for every dimension k, last first when `descending`."""
            pre = b.block
            head, inner, done = (fn.append_basic_block(n) for n in ("dim", "dim_body", "dims"))
            b.branch(head)
            b.position_at_end(head)
            left = b.phi(I32)  # dimensions still to check
            left.add_incoming(rank, pre)
            b.cbranch(b.icmp_signed(">", left, I32(0)), inner, done)
            b.position_at_end(inner)
            after = b.sub(left, I32(1))
            body(after if descending else b.sub(rank, left))
            left.add_incoming(after, b.block)
            b.branch(head)
            b.position_at_end(done)

        t = b.load(b.gep(args, [b.sext(index, I64)], source_etype=PTR), typ=PTR)
        fail_if(b.icmp_unsigned("==", t, ir.Constant(PTR, None)), "is NULL")
        dev = field(t, 1, 0, typ=I32)
        fail_if(b.icmp_signed("!=", dev, I32(KDL_CPU)),
                f"is on device type %d; expected a CPU tensor (device type {KDL_CPU})", dev)
        ndim = field(t, 2, typ=I32)
        fail_if(b.icmp_signed("!=", ndim, rank), "has rank %d; expected %s", ndim, kind)
        got = [b.zext(field(t, 3, k, typ=ty), I32) for k, ty in enumerate((I8, I8, ir.IntType(16)))]
        wrong = b.or_(b.or_(b.icmp_signed("!=", got[0], code), b.icmp_signed("!=", got[1], bits)),
                      b.icmp_signed("!=", got[2], I32(1)))
        fail_if(wrong, "has dtype code %d bits %d lanes %d; expected %s", *got, dtype)
        shape = field(t, 4, typ=PTR)
        strides = field(t, 5, typ=PTR)
        b.store(I64(1), expect)

        def stride(k: ir.Value) -> None:
            k64 = b.sext(k, I64)
            dim = b.load(b.gep(shape, [k64], source_etype=I64), typ=I64)
            got = b.load(b.gep(strides, [k64], source_etype=I64), typ=I64)
            want = b.load(expect, typ=I64)
            # a dimension of size 1 may carry any stride (numpy and DLPack allow it)
            fail_if(b.and_(b.icmp_signed("!=", got, want), b.icmp_signed("!=", dim, I64(1))),
                    "is not compact: dimension %d has stride %lld, expected %lld; pass a "
                    "C-contiguous (row-major) array", k, got, want)
            b.store(b.mul(want, dim), expect)

        with b.if_then(b.icmp_unsigned("!=", strides, ir.Constant(PTR, None))):
            each_dim(stride, descending=True)

        def static(k: ir.Value) -> None:
            k64 = b.sext(k, I64)
            got = b.load(b.gep(shape, [k64], source_etype=I64), typ=I64)
            want = b.load(b.gep(dims, [k64], source_etype=I64), typ=I64)
            fail_if(b.and_(b.icmp_signed(">=", want, I64(0)), b.icmp_signed("!=", got, want)),
                    "dimension %d is %lld; expected %lld", k, got, want)

        each_dim(static, descending=False)
        b.ret(t)

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

    def i64_array(self, values: list[int]) -> ir.Value:
        """A private constant int64 array, shared by every use of the same values (NULL for
        none)."""
        if not values:
            return ir.Constant(PTR, None)
        key = ("i64", *values)
        if key not in self._strings:
            t = ir.ArrayType(I64, len(values))
            g = ir.GlobalVariable(self.module, t, f".dims.{len(self._strings)}")
            g.linkage, g.global_constant, g.unnamed_addr = "private", True, True
            g.initializer = ir.Constant(t, list(values))
            self._strings[key] = g
        return self._strings[key]

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
        """Check argument `i` against `param` (Runtime's tcc_check_tensor, which checks its
        static dimensions too); return its data pointer and its dimensions."""
        b = self.b
        shape = param.shape if isinstance(param, T.Buffer) else ()
        dtype = param.dtype
        code, bits = dl_dtype(dtype)
        kind = (f"a {len(shape)}-d {dtype} tensor" if isinstance(param, T.Buffer)
                else f"a 0-d {dtype} tensor (a scalar)")
        static = [_static(d) for d in shape]
        t = b.call(self.rt.check_tensor, [
            self.args, I32(i), self.rt.cstring(f"{self.name}: argument {i} {param.name!r}"),
            I32(len(shape)), self.rt.cstring(kind), I32(code), I32(bits),
            self.rt.cstring(f"{dtype} (code {code}, bits {bits}, lanes 1)"),
            self.rt.i64_array(static)])
        with b.if_then(b.icmp_unsigned("==", t, ir.Constant(PTR, None)), likely=False):
            b.ret(I32(-1))
        data = b.gep(self.field(t, 0, typ=PTR), [self.field(t, 6, typ=I64)], source_etype=I8)
        shape_p = self.field(t, 4, typ=PTR)
        dims = [
            b.load(b.gep(shape_p, [I64(k)], source_etype=I64), typ=I64) for k in range(len(shape))
        ]
        return data, dims

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
        if _static(d) >= 0:
            return  # checked with the tensor
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


def _static(d) -> int:
    """A dimension's static size, -1 when it is not one."""
    if isinstance(d, int):
        return d
    return d.value if isinstance(d, E.IntImm) else -1


def build_entry(
    rt: Runtime, name: str, func: T.PrimFunc, compute: ir.Function, bound: list[E.Var]
) -> None:
    """Define the exported `int32_t name(DLTensor **args, int32_t num_args)`."""
    fn = ir.Function(rt.module, ir.FunctionType(I32, [PTR, I32]), name)
    _Checker(rt, name, func, fn).build(compute, bound)
