/* The .tvmpack format constants (docs/tvmpack.md, docs/vm.md), mirrored from
 * tcc/rt/format.py, which is their one definition.  tests/runtime_c/test_header.py parses
 * this file and checks every value against the Python module, so the two cannot drift:
 * change a value there, then here. */
#ifndef TCCRT_PACK_H_
#define TCCRT_PACK_H_

/* -- the pack -- */
#define TCCRT_PACK_FORMAT "tvmpack"
#define TCCRT_PACK_VERSION 1
#define TCCRT_MANIFEST "manifest.json"
#define TCCRT_BYTECODE "bytecode.bin"
#define TCCRT_WEIGHTS "weights.bin"
#define TCCRT_KERNELS_DIR "kernels/"
#define TCCRT_OBJECT_SUFFIX ".o"
#define TCCRT_SHARED_SUFFIX ".so"
#define TCCRT_WEIGHT_ALIGN 64
#define TCCRT_TAR_BLOCK 512
#define TCCRT_MANIFEST_HASH_FIELD "manifest_sha256"
#define TCCRT_MAX_MANIFEST_BYTES (16 << 20)
#define TCCRT_KERNEL_ORIGINS_FIELD "kernel_origins"
#define TCCRT_DEVICE_KERNELS_FIELD "device_kernels" /* optional: GPU kernel libraries by kind */
#define TCCRT_SIGNATURE "manifest.sig" /* optional: the Ed25519 signature of manifest.json */
#define TCCRT_SIGNATURE_BYTES 64

/* -- the bytecode -- */
#define TCCRT_BYTECODE_MAGIC 0x0043424d56434354LL /* "TCCVMBC\0" read as little-endian */
#define TCCRT_BYTECODE_VERSION 1
#define TCCRT_NO_REG (-1)
#define TCCRT_INT64_MAX 0x7fffffffffffffffLL

/* Op */
#define TCCRT_OP_CALL 1
#define TCCRT_OP_RET 2
#define TCCRT_OP_GOTO 3
#define TCCRT_OP_IF 4

/* ArgKind */
#define TCCRT_ARG_KIND_REG 0
#define TCCRT_ARG_KIND_IMM 1
#define TCCRT_ARG_KIND_CONST 2

/* FuncKind */
#define TCCRT_FUNC_KIND_KERNEL 0
#define TCCRT_FUNC_KIND_BUILTIN 1
#define TCCRT_FUNC_KIND_VM 2

/* ConstKind */
#define TCCRT_CONST_KIND_INTS 0
#define TCCRT_CONST_KIND_STR 1

/* ShapeOp */
#define TCCRT_SHAPE_OP_PUSH_INT 0
#define TCCRT_SHAPE_OP_PUSH_VAR 1
#define TCCRT_SHAPE_OP_ADD 2
#define TCCRT_SHAPE_OP_SUB 3
#define TCCRT_SHAPE_OP_MUL 4
#define TCCRT_SHAPE_OP_FLOORDIV 5
#define TCCRT_SHAPE_OP_FLOORMOD 6
#define TCCRT_SHAPE_OP_MIN 7
#define TCCRT_SHAPE_OP_MAX 8
#define TCCRT_SHAPE_OP_EQ 9
#define TCCRT_SHAPE_OP_NE 10
#define TCCRT_SHAPE_OP_LT 11
#define TCCRT_SHAPE_OP_LE 12
#define TCCRT_SHAPE_OP_SELECT 13

/* DimMode */
#define TCCRT_DIM_MODE_STATIC 0
#define TCCRT_DIM_MODE_BIND 1
#define TCCRT_DIM_MODE_CHECK 2
#define TCCRT_DIM_MODE_EXPR 3
#define TCCRT_DIM_MODE_ANY 4

/* Memory planning: an arena's start and every offset planned inside it (bytes) */
#define TCCRT_ARENA_ALIGN 64
#define TCCRT_THREADS_PER_CORE 8 /* thread counts: at most this many per online core, */
#define TCCRT_MAX_THREADS 1024   /* and never above this */

#endif /* TCCRT_PACK_H_ */
