/* The decoded, verified bytecode of a pack (docs/vm.md): what the VM interpreter runs.
 *
 * bytecode.c decodes bytecode.bin into these tables (in the pack's arena) and verify.c
 * checks them as tcc/rt/pack.py's verify_executable does, both while the pack is opened.
 * After that the interpreter may rely on every fact listed at the structs below without
 * checking it again; what it still checks is data (shapes, dtypes and values of tensors)
 * and the kind of value a register holds when read (see vm.c). */
#ifndef TCCRT_PROGRAM_H_
#define TCCRT_PROGRAM_H_

#include <stddef.h>
#include <stdint.h>

#include "tcc_runtime.h"

/* Builtins, in the order of tcc/rt/format.py BUILTINS. */
typedef enum tccrt_builtin_e {
  TCCRT_B_MATCH_SHAPE,
  TCCRT_B_MAKE_SHAPE,
  TCCRT_B_ALLOC_TENSOR,
  TCCRT_B_LOAD_CONSTANT,
  TCCRT_B_RESHAPE,
  TCCRT_B_COPY,
  TCCRT_B_MAKE_TUPLE,
  TCCRT_B_TUPLE_GET_ITEM,
  TCCRT_B_READ_BOOL,
  TCCRT_B_SCALAR,
  TCCRT_B_SCALAR_ADD,
  TCCRT_B_LOOP_CONTINUE,
  TCCRT_B_DIM_SIZE,
  TCCRT_B_TAKE,
  TCCRT_B_STACK_NEW,
  TCCRT_B_STACK_PUSH,
  TCCRT_B_STACK_FINISH,
  TCCRT_B_ALLOC_ARENA,
  TCCRT_B_ARENA_VIEW,
  TCCRT_B_TENSOR_TO_SHAPE,
  TCCRT_B_MATCH_DIMS,
  TCCRT_B_ASSERT_SHAPE,
  TCCRT_B_MAKE_SIZES,
  TCCRT_B_COUNT
} tccrt_builtin_t;

/* Name, argument kinds ("r" register, "i" immediate, "s" string constant, "n" int64-array
 * constant, "*" any number of registers) and whether it returns a value, per builtin. */
typedef struct tccrt_builtin_spec_t {
  const char *name;
  const char *args;
  int returns;
  const char *category; /* its profile row (tcc.rt.vm.BUILTIN_CATEGORIES) */
} tccrt_builtin_spec_t;
extern const tccrt_builtin_spec_t tccrt_builtin_specs[TCCRT_B_COUNT];

typedef struct tccrt_const_t {
  int64_t kind;      /* TCCRT_CONST_KIND_INTS or _STR */
  const int64_t *ints; /* kind INTS: `length` words (aligned copies) */
  const char *str;   /* kind STR: NUL-terminated UTF-8 without NUL bytes inside */
  size_t length;     /* words, or string bytes */
} tccrt_const_t;

/* One function-table entry.  Verified: a kernel is in the manifest's kernel table
 * (`index` is its position there), a builtin is known (`index` is its tccrt_builtin_t),
 * a VM function is defined (`index` is its position in tccrt_program_t.functions). */
typedef struct tccrt_entry_t {
  int64_t kind; /* TCCRT_FUNC_KIND_* */
  const char *name;
  size_t index;
} tccrt_entry_t;

typedef struct tccrt_arg_t {
  int64_t kind; /* TCCRT_ARG_KIND_* */
  int64_t value;
} tccrt_arg_t;

/* One instruction (docs/vm.md).  Verified: registers (a, b of CALL unless TCCRT_NO_REG,
 * RET's a, IF's a, register arguments) are < the function's num_regs; CALL's `a` indexes
 * the table; constant arguments index the pool with the kind the builtin needs; builtin
 * argument counts and kinds match tccrt_builtin_specs; shape programs and match patterns
 * are well formed with heap slots < heap_size; dtype constants name tcc dtypes; a
 * load_constant's weight exists (`weight` is its index in the pack's weights); kernels and
 * VM functions take registers only, a VM function as many as it has params; a jump lands
 * inside the function, forward, or for GOTO backward onto a loop head. */
typedef struct tccrt_instr_t {
  int64_t op; /* TCCRT_OP_* */
  int64_t a, b;
  size_t nargs;
  const tccrt_arg_t *args;
  size_t weight; /* load_constant only */
} tccrt_instr_t;

/* Verified: 0 <= num_params <= num_regs <= 1 << 20; at least one instruction, the last a
 * RET; no function reaches itself through calls (so calls nest at most function_count
 * deep). */
typedef struct tccrt_vm_function_t {
  const char *name;
  int64_t num_params;
  int64_t num_regs;
  size_t heap_size;
  const char **heap_names;
  size_t code_length; /* instructions */
  const tccrt_instr_t *code;
} tccrt_vm_function_t;

typedef struct tccrt_program_t {
  size_t table_size;
  const tccrt_entry_t *table;
  size_t constant_count;
  const tccrt_const_t *constants;
  size_t function_count;
  const tccrt_vm_function_t *functions;
} tccrt_program_t;

/* The index of VM function `name`, or -1. */
int64_t tccrt_program_find(const tccrt_program_t *program, const char *name);

/* What memory planning does in one VM function, from its alloc_arena calls, as
 * tcc/rt/arena.py's memory_report (for `tccrt info --json`, vm.c). */
typedef struct tccrt_memory_report_t {
  size_t tensors, arenas;
  int known; /* 0 when an arena's sizes depend on size variables: the byte counts are unknown */
  int64_t allocated_bytes, planned_bytes, lower_bound_bytes;
} tccrt_memory_report_t;
tccrt_status_t tccrt_program_memory(const tccrt_program_t *program, size_t function,
                                    tccrt_memory_report_t *out);

#endif /* TCCRT_PROGRAM_H_ */
