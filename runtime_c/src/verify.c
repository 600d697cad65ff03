/* Verifying the decoded bytecode once, at load (docs/vm.md, "Verification"): a port of
 * tcc/rt/pack.py's verify_executable, with its checks in its order and its messages, so
 * the two readers refuse the same packs with the same words.  Once this passes, the
 * interpreter relies on the facts listed in program.h without checking them again.
 *
 * Names are looked up through sorted copies of the tables (kernels, weights, functions),
 * so a pack with many entries costs n log n here, never a product of two table sizes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pack_internal.h"
#include "shape.h"
#include "tccrt_pack.h"

const tccrt_builtin_spec_t tccrt_builtin_specs[TCCRT_B_COUNT] = {
    [TCCRT_B_MATCH_SHAPE] = {"match_shape", "rssn", 0, "shapes"},
    [TCCRT_B_MAKE_SHAPE] = {"make_shape", "n", 1, "shapes"},
    [TCCRT_B_ALLOC_TENSOR] = {"alloc_tensor", "rs", 1, "alloc"},
    [TCCRT_B_LOAD_CONSTANT] = {"load_constant", "s", 1, "constants"},
    [TCCRT_B_RESHAPE] = {"reshape", "rr", 1, "views"},
    [TCCRT_B_COPY] = {"copy", "r", 1, "copies"},
    [TCCRT_B_MAKE_TUPLE] = {"make_tuple", "*", 1, "tuples"},
    [TCCRT_B_TUPLE_GET_ITEM] = {"tuple_get_item", "ri", 1, "tuples"},
    [TCCRT_B_READ_BOOL] = {"read_bool", "r", 1, "control flow"},
    [TCCRT_B_SCALAR] = {"scalar", "is", 1, "control flow"},
    [TCCRT_B_SCALAR_ADD] = {"scalar_add", "ri", 1, "control flow"},
    [TCCRT_B_LOOP_CONTINUE] = {"loop_continue", "rrr", 1, "control flow"},
    [TCCRT_B_DIM_SIZE] = {"dim_size", "ri", 1, "control flow"},
    [TCCRT_B_TAKE] = {"take", "rrii", 1, "copies"},
    [TCCRT_B_STACK_NEW] = {"stack_new", "", 1, "control flow"},
    [TCCRT_B_STACK_PUSH] = {"stack_push", "rr", 0, "control flow"},
    [TCCRT_B_STACK_FINISH] = {"stack_finish", "riirs", 1, "copies"},
    [TCCRT_B_ALLOC_ARENA] = {"alloc_arena", "nn", 1, "alloc"},
    [TCCRT_B_ARENA_VIEW] = {"arena_view", "rirs", 1, "alloc"},
    [TCCRT_B_TENSOR_TO_SHAPE] = {"tensor_to_shape", "rs", 1, "shapes"},
    [TCCRT_B_MATCH_DIMS] = {"match_dims", "rsn", 0, "shapes"},
    [TCCRT_B_ASSERT_SHAPE] = {"assert_shape", "ns", 0, "shapes"},
    [TCCRT_B_MAKE_SIZES] = {"make_sizes", "n", 1, "shapes"},
};

#define MAX_REGS (1 << 20)
#define NOT_FOUND SIZE_MAX

int64_t tccrt_program_find(const tccrt_program_t *program, const char *name) {
  for (size_t i = 0; i < program->function_count; i++)
    if (strcmp(program->functions[i].name, name) == 0) return (int64_t)i;
  return -1;
}

/* -- sorted name tables -- */

typedef struct named_t {
  const char *name;
  size_t index; /* in the table it was sorted from */
} named_t;

static int cmp_named(const void *a, const void *b) {
  const named_t *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : (x->index > y->index) - (x->index < y->index);
}

/* The first index named `name` (so a repeated kernel symbol resolves to its first place). */
static size_t lookup(const named_t *sorted, size_t n, const char *name) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (strcmp(sorted[mid].name, name) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && strcmp(sorted[lo].name, name) == 0 ? sorted[lo].index : NOT_FOUND;
}

/* -- the verifier -- */

typedef struct verifier_t {
  tccrt_pack_t *pack;
  tccrt_program_t *prog;
  named_t *kernels, *weights, *functions; /* sorted by name */
  size_t *rank;     /* of each function in name order */
  size_t *calls;    /* per function, the ranks of the VM functions it calls: sorted, distinct */
  size_t *calls_at; /* function f's calls are calls[calls_at[f] .. calls_at[f + 1]] */
  char where[sizeof(tccrt_repr_t) + 32]; /* "bytecode function 'f'" while a function is verified */
  size_t pc;
} verifier_t;

static tccrt_status_t failv(const verifier_t *v, int at_pc, const char *fmt, va_list ap) {
  char why[768];
  vsnprintf(why, sizeof why, fmt, ap);
  if (at_pc) return tccrt_fail(TCCRT_INVALID_PACK, "%s: %s at %zu: %s", v->pack->path, v->where, v->pc, why);
  return tccrt_fail(TCCRT_INVALID_PACK, "%s: %s", v->pack->path, why);
}

static tccrt_status_t fail(const verifier_t *v, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static tccrt_status_t fail(const verifier_t *v, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tccrt_status_t st = failv(v, 0, fmt, ap);
  va_end(ap);
  return st;
}

/* A failure at the current instruction: "bytecode function 'f' at 3: ...". */
static tccrt_status_t fail_at(const verifier_t *v, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static tccrt_status_t fail_at(const verifier_t *v, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tccrt_status_t st = failv(v, 1, fmt, ap);
  va_end(ap);
  return st;
}

static named_t *sorted_names(size_t n, const char *(*name_of)(const tccrt_pack_t *, size_t),
                             const tccrt_pack_t *pack) {
  named_t *out = malloc((n ? n : 1) * sizeof *out);
  if (!out) return NULL;
  for (size_t i = 0; i < n; i++) out[i] = (named_t){name_of(pack, i), i};
  qsort(out, n, sizeof *out, cmp_named);
  return out;
}

static const char *kernel_name(const tccrt_pack_t *p, size_t i) { return p->kernels[i]; }
static const char *weight_name(const tccrt_pack_t *p, size_t i) { return p->weights[i].name; }
static const char *function_name(const tccrt_pack_t *p, size_t i) { return p->program.functions[i].name; }

static size_t total_instructions(const tccrt_program_t *prog) {
  size_t n = 0; /* each instruction took a word of the member, so this cannot overflow */
  for (size_t f = 0; f < prog->function_count; f++) n += prog->functions[f].code_length;
  return n;
}

static tccrt_status_t setup(verifier_t *v) {
  const tccrt_pack_t *pack = v->pack;
  size_t nf = v->prog->function_count;
  v->kernels = sorted_names(pack->kernel_count, kernel_name, pack);
  v->weights = sorted_names(pack->weight_count, weight_name, pack);
  v->functions = sorted_names(nf, function_name, pack);
  v->rank = malloc((nf ? nf : 1) * sizeof *v->rank);
  v->calls = malloc((total_instructions(v->prog) + 1) * sizeof *v->calls);
  v->calls_at = calloc(nf + 1, sizeof *v->calls_at);
  if (!v->kernels || !v->weights || !v->functions || !v->rank || !v->calls || !v->calls_at)
    return tccrt_fail(TCCRT_OUT_OF_MEMORY, "%s: out of memory verifying the bytecode", pack->path);
  for (size_t r = 0; r < nf; r++) v->rank[v->functions[r].index] = r;
  return TCCRT_OK;
}

static void release(verifier_t *v) {
  free(v->kernels);
  free(v->weights);
  free(v->functions);
  free(v->rank);
  free(v->calls);
  free(v->calls_at);
}

/* -- the table and the entry functions -- */

static size_t builtin_id(const char *name) {
  for (size_t b = 0; b < TCCRT_B_COUNT; b++)
    if (strcmp(tccrt_builtin_specs[b].name, name) == 0) return b;
  return NOT_FOUND;
}

/* Resolve every table entry, filling its index. */
static tccrt_status_t resolve_table(verifier_t *v) {
  tccrt_entry_t *table = (tccrt_entry_t *)v->prog->table; /* the arena's own, writable memory */
  const tccrt_pack_t *pack = v->pack;
  tccrt_repr_t q;
  for (size_t i = 0; i < v->prog->table_size; i++) {
    tccrt_entry_t *e = &table[i];
    if (e->kind == TCCRT_FUNC_KIND_KERNEL) {
      e->index = lookup(v->kernels, pack->kernel_count, e->name);
      if (e->index == NOT_FOUND)
        return fail(v, "bytecode calls kernel %s, which the kernel table lacks", tccrt_repr(&q, e->name));
    } else if (e->kind == TCCRT_FUNC_KIND_BUILTIN) {
      if ((e->index = builtin_id(e->name)) == NOT_FOUND)
        return fail(v, "bytecode calls unknown builtin %s", tccrt_repr(&q, e->name));
    } else {
      e->index = lookup(v->functions, v->prog->function_count, e->name);
      if (e->index == NOT_FOUND)
        return fail(v, "bytecode calls function %s, which it does not define", tccrt_repr(&q, e->name));
    }
  }
  return TCCRT_OK;
}

static tccrt_status_t check_entries(verifier_t *v) {
  const tccrt_pack_t *pack = v->pack;
  tccrt_repr_t q;
  for (size_t i = 0; i < pack->function_count; i++) {
    const tccrt_function_t *entry = &pack->functions[i];
    size_t f = lookup(v->functions, v->prog->function_count, entry->name);
    if (f == NOT_FOUND || v->prog->functions[f].num_params != (int64_t)entry->counts[TCCRT_INPUT])
      return fail(v, "entry function %s is missing from the bytecode or takes other inputs",
                  tccrt_repr(&q, entry->name));
  }
  return TCCRT_OK;
}

/* -- builtins -- */

/* Whether the push at words[j] has its operand, for PUSH_VAR a heap slot. */
/* A shape program (docs/vm.md, "Builtins"); `ndim` is the rank it must have, or -1. */
static tccrt_status_t shape_program(const verifier_t *v, const tccrt_const_t *c, size_t heap_size,
                                    int64_t ndim) {
  char why[96];
  const char *problem = tccrt_shape_program_problem(c->ints, c->length, heap_size, ndim, why, sizeof why);
  return problem ? fail_at(v, "%s", problem) : TCCRT_OK;
}

static tccrt_status_t pattern(const verifier_t *v, const tccrt_const_t *c, size_t heap_size) {
  const int64_t *p = c->ints;
  if (c->length == 0 || p[0] < 0 || (uint64_t)c->length - 1 != 2 * (uint64_t)p[0])
    return fail_at(v, "malformed match_shape pattern");
  for (size_t k = 1; k < c->length; k += 2) {
    int64_t mode = p[k], value = p[k + 1];
    tccrt_status_t st;
    if (mode == TCCRT_DIM_MODE_BIND || mode == TCCRT_DIM_MODE_CHECK) {
      if (value < 0 || (uint64_t)value >= heap_size)
        return fail_at(v, "match_shape slot %lld is out of range", (long long)value);
    } else if (mode == TCCRT_DIM_MODE_EXPR) {
      if (value < 0 || (uint64_t)value >= v->prog->constant_count ||
          v->prog->constants[value].kind == TCCRT_CONST_KIND_STR)
        return fail_at(v, "match_shape expression %lld is out of range", (long long)value);
      if ((st = shape_program(v, &v->prog->constants[value], heap_size, 1))) return st;
    } else if (mode != TCCRT_DIM_MODE_STATIC && mode != TCCRT_DIM_MODE_ANY) {
      return fail_at(v, "unknown match_shape mode %lld", (long long)mode);
    }
  }
  return TCCRT_OK;
}

/* An arena's lifetimes: [start, end] per tensor, instruction indices of the function. */
static tccrt_status_t lifetimes(const verifier_t *v, const tccrt_const_t *c, uint64_t count, size_t code_length) {
  if (c->length / 2 != count || c->length % 2)
    return fail_at(v, "arena lifetimes have %zu words for %llu tensors", c->length, (unsigned long long)count);
  for (size_t k = 0; k < count; k++) {
    int64_t start = c->ints[2 * k], end = c->ints[2 * k + 1];
    if (start > end)
      return fail_at(v, "arena tensor %zu has lifetime [%lld, %lld], which ends before it starts", k,
                     (long long)start, (long long)end);
    if (start < 0 || (uint64_t)end >= code_length)
      return fail_at(v, "arena tensor %zu has lifetime [%lld, %lld], outside the function's %zu instructions", k,
                     (long long)start, (long long)end, code_length);
  }
  return TCCRT_OK;
}

/* Which constant argument of builtin `b` (counting constant arguments only) is a dtype. */
static int dtype_arg(size_t b) {
  switch (b) {
    case TCCRT_B_MATCH_SHAPE: return 1;
    case TCCRT_B_ALLOC_TENSOR:
    case TCCRT_B_ARENA_VIEW:
    case TCCRT_B_SCALAR:
    case TCCRT_B_STACK_FINISH: return 0;
    default: return -1;
  }
}

static int scalar_dtype(const char *name) {
  static const char *const names[] = {"bool",  "int8",   "int16",  "int32", "int64",
                                      "uint8", "uint16", "uint32", "uint64"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(name, names[i]) == 0) return 1;
  return 0;
}

/* Argument kinds per spec letter. */
static int64_t arg_kind(char letter) {
  return letter == 'r' ? TCCRT_ARG_KIND_REG : letter == 'i' ? TCCRT_ARG_KIND_IMM : TCCRT_ARG_KIND_CONST;
}

static tccrt_status_t builtin(verifier_t *v, const tccrt_vm_function_t *f, size_t b, tccrt_instr_t *ins) {
  const tccrt_builtin_spec_t *spec = &tccrt_builtin_specs[b];
  int any = strcmp(spec->args, "*") == 0;
  size_t want = any ? ins->nargs : strlen(spec->args);
  if (ins->nargs != want)
    return fail_at(v, "builtin %s takes %zu arguments, got %zu", spec->name, want, ins->nargs);
  const tccrt_const_t *consts[8]; /* no builtin takes more than a few */
  size_t nconsts = 0;
  for (size_t k = 0; k < ins->nargs; k++) {
    char letter = any ? 'r' : spec->args[k];
    if (ins->args[k].kind != arg_kind(letter))
      return fail_at(v, "builtin %s has an argument of the wrong kind", spec->name);
    if (letter == 's' || letter == 'n') {
      const tccrt_const_t *c = &v->prog->constants[ins->args[k].value]; /* in range: checked */
      if ((c->kind == TCCRT_CONST_KIND_STR) != (letter == 's'))
        return fail_at(v, "builtin %s has a constant of the wrong kind", spec->name);
      consts[nconsts++] = c;
    }
  }
  tccrt_status_t st;
  tccrt_repr_t q;
  if ((b == TCCRT_B_MAKE_SHAPE || b == TCCRT_B_MAKE_SIZES) && (st = shape_program(v, consts[0], f->heap_size, -1)))
    return st;
  if (b == TCCRT_B_ALLOC_ARENA && ((st = shape_program(v, consts[0], f->heap_size, -1)) ||
                                   (st = lifetimes(v, consts[1], (uint64_t)consts[0]->ints[0], f->code_length))))
    return st;
  if (b == TCCRT_B_ARENA_VIEW && ins->args[1].value < 0)
    return fail_at(v, "arena tensor index %lld is negative", (long long)ins->args[1].value);
  if (b == TCCRT_B_MATCH_SHAPE && (st = pattern(v, consts[2], f->heap_size))) return st;
  if (b == TCCRT_B_MATCH_DIMS && (st = pattern(v, consts[1], f->heap_size))) return st;
  if (b == TCCRT_B_ASSERT_SHAPE && (st = shape_program(v, consts[0], f->heap_size, -1))) return st;
  int d = dtype_arg(b);
  if (d >= 0 && !tccrt_dtype_known(consts[d]->str)) return fail_at(v, "unknown dtype");
  if (b == TCCRT_B_SCALAR && !scalar_dtype(consts[0]->str))
    return fail_at(v, "builtin scalar makes bool or integer tensors, not %s", consts[0]->str);
  if (b == TCCRT_B_LOAD_CONSTANT) {
    ins->weight = lookup(v->weights, v->pack->weight_count, consts[0]->str);
    if (ins->weight == NOT_FOUND) return fail_at(v, "weight %s is not in the pack", tccrt_repr(&q, consts[0]->str));
  }
  return TCCRT_OK;
}

/* -- functions -- */

static tccrt_status_t reg(const verifier_t *v, const tccrt_vm_function_t *f, int64_t r, int allow_none) {
  if ((r >= 0 && r < f->num_regs) || (allow_none && r == TCCRT_NO_REG)) return TCCRT_OK;
  return fail_at(v, "register %lld is out of range", (long long)r);
}

/* A backward goto closes a loop: it must land on the loop's head, an `if` whose false
 * target is the instruction right after the goto.  Every cycle of the code then passes
 * through a head that decides whether to go round again. */
static tccrt_status_t back_edge(const verifier_t *v, const tccrt_vm_function_t *f, size_t head) {
  const tccrt_instr_t *ins = &f->code[head];
  if (ins->op != TCCRT_OP_IF || ins->b != (int64_t)(v->pc + 1 - head))
    return fail_at(v, "jump offset %lld goes back to %zu, which is not a loop head (an if whose false "
                      "target is just after the jump)", (long long)head - (long long)v->pc, head);
  return TCCRT_OK;
}

static tccrt_status_t jump(verifier_t *v, const tccrt_vm_function_t *f, const tccrt_instr_t *ins) {
  int64_t off = ins->op == TCCRT_OP_GOTO ? ins->a : ins->b;
  tccrt_status_t st;
  if (ins->op == TCCRT_OP_IF && (st = reg(v, f, ins->a, 0))) return st;
  if (ins->op == TCCRT_OP_GOTO && off < 0 && off >= -(int64_t)v->pc)
    return back_edge(v, f, v->pc - (size_t)-off);
  if (!(off > 0 && (uint64_t)off < f->code_length - v->pc))
    return fail_at(v, "jump offset %lld leaves the function or goes back", (long long)off);
  return TCCRT_OK;
}

/* Record that the function being verified calls VM function `callee` (a function index). */
static void add_call(verifier_t *v, size_t caller, size_t callee) {
  v->calls[v->calls_at[caller + 1]++] = v->rank[callee];
}

static tccrt_status_t call(verifier_t *v, size_t fi, tccrt_instr_t *ins) {
  const tccrt_program_t *prog = v->prog;
  const tccrt_vm_function_t *f = &prog->functions[fi];
  tccrt_status_t st;
  if (ins->a < 0 || (uint64_t)ins->a >= prog->table_size)
    return fail_at(v, "function index %lld is out of range", (long long)ins->a);
  if ((st = reg(v, f, ins->b, 1))) return st;
  int registers_only = 1;
  for (size_t k = 0; k < ins->nargs; k++) {
    int64_t kind = ins->args[k].kind, value = ins->args[k].value;
    if (kind == TCCRT_ARG_KIND_REG) {
      if ((st = reg(v, f, value, 0))) return st;
    } else if (kind == TCCRT_ARG_KIND_CONST) {
      if (value < 0 || (uint64_t)value >= prog->constant_count)
        return fail_at(v, "constant %lld is out of range", (long long)value);
    } else if (kind != TCCRT_ARG_KIND_IMM) {
      return fail_at(v, "unknown argument kind %lld", (long long)kind);
    }
    registers_only &= kind == TCCRT_ARG_KIND_REG;
  }
  const tccrt_entry_t *e = &prog->table[ins->a];
  tccrt_repr_t q;
  if (e->kind == TCCRT_FUNC_KIND_BUILTIN) return builtin(v, f, e->index, ins);
  if (!registers_only) return fail_at(v, "%s takes registers only", tccrt_repr(&q, e->name));
  if (e->kind == TCCRT_FUNC_KIND_VM) {
    add_call(v, fi, e->index);
    int64_t params = prog->functions[e->index].num_params;
    if ((int64_t)ins->nargs != params)
      return fail_at(v, "%s takes %lld arguments", tccrt_repr(&q, e->name), (long long)params);
  }
  return TCCRT_OK;
}

static int cmp_size(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return (x > y) - (x < y);
}

/* Sort function fi's calls by callee name and drop repeats, as the DFS visits them. */
static void finish_calls(verifier_t *v, size_t fi) {
  size_t *c = v->calls + v->calls_at[fi], n = v->calls_at[fi + 1] - v->calls_at[fi], kept = 0;
  qsort(c, n, sizeof *c, cmp_size);
  for (size_t k = 0; k < n; k++)
    if (kept == 0 || c[k] != c[kept - 1]) c[kept++] = c[k];
  v->calls_at[fi + 1] = v->calls_at[fi] + kept;
}

/* -- registers written before they are read -- */

/* The register sets below (one bit per register, for each jump target and each `if`) may
 * hold at most this many bits in all: about 128 MiB (tcc/rt/pack.py MAX_DATAFLOW_BITS). */
#define MAX_DATAFLOW_BITS ((uint64_t)1 << 30)

typedef struct dataflow_t {
  size_t words;          /* per set */
  uint64_t **pending;    /* per pc: registers written on every path so far that jumps there */
  uint64_t **heads;      /* per pc of an `if`: the registers written when it runs */
  uint64_t kept;         /* sets held now */
} dataflow_t;

static int bit(const uint64_t *set, int64_t r) { return (int)(set[r >> 6] >> (r & 63) & 1); }

/* Intersect `bits` into table[pc] (a copy of it when new); -1 on the memory limit, -2 when
 * out of memory. */
static int keep(dataflow_t *d, uint64_t **table, size_t pc, const uint64_t *bits, int64_t regs) {
  if (table[pc]) {
    for (size_t w = 0; w < d->words; w++) table[pc][w] &= bits[w];
    return 0;
  }
  if ((d->kept + 1) * (uint64_t)regs > MAX_DATAFLOW_BITS) return -1;
  if (!(table[pc] = malloc(d->words * sizeof(uint64_t)))) return -2;
  memcpy(table[pc], bits, d->words * sizeof(uint64_t));
  d->kept++;
  return 0;
}

/* Every register an instruction reads is written first on every path from the entry, as
 * tcc/rt/pack.py's _verify_written_before_read checks it: one pass in code order, jump
 * targets getting the intersection of the paths that reach them, and a backward goto
 * bringing back every register its loop head had.  Runs after the indices are checked. */
static tccrt_status_t written_before_read(verifier_t *v, const tccrt_vm_function_t *f) {
  size_t n = f->code_length;
  int64_t regs = f->num_regs;
  dataflow_t d = {(size_t)(regs + 63) / 64 + 1, calloc(n, sizeof(uint64_t *)), calloc(n, sizeof(uint64_t *)), 0};
  uint64_t *written = calloc(d.words, sizeof(uint64_t));
  tccrt_status_t st = TCCRT_OK;
  if (!d.pending || !d.heads || !written) st = tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory verifying bytecode");
  for (int64_t r = 0; !st && r < f->num_params; r++) written[r >> 6] |= (uint64_t)1 << (r & 63);
  int reachable = 1, kept = 0;
  for (v->pc = 0; v->pc < n && !st && kept >= 0; v->pc++) {
    size_t pc = v->pc;
    const tccrt_instr_t *ins = &f->code[pc];
    if (d.pending[pc]) {
      for (size_t w = 0; w < d.words; w++) written[w] = reachable ? written[w] & d.pending[pc][w] : d.pending[pc][w];
      free(d.pending[pc]);
      d.pending[pc] = NULL;
      d.kept--;
      reachable = 1;
    }
    if (!reachable) continue;
    if (ins->op == TCCRT_OP_RET || ins->op == TCCRT_OP_IF) {
      if (!bit(written, ins->a)) {
        st = fail_at(v, "reads register %lld before anything writes it", (long long)ins->a);
        break;
      }
      if (ins->op == TCCRT_OP_RET) reachable = 0;
      else if ((kept = keep(&d, d.heads, pc, written, regs)) == 0)
        kept = keep(&d, d.pending, pc + (size_t)ins->b, written, regs);
    } else if (ins->op == TCCRT_OP_GOTO) {
      if (ins->a > 0) {
        kept = keep(&d, d.pending, pc + (size_t)ins->a, written, regs);
      } else {
        const uint64_t *head = d.heads[pc - (size_t)-ins->a];
        for (size_t w = 0; head && w < d.words && !st; w++) {
          uint64_t lost = head[w] & ~written[w];
          if (lost) {
            int64_t r = (int64_t)(w * 64) + __builtin_ctzll(lost);
            st = fail_at(v, "the loop back to %zu can arrive without register %lld written", pc - (size_t)-ins->a,
                         (long long)r);
          }
        }
      }
      reachable = 0;
    } else {
      for (size_t k = 0; k < ins->nargs && !st; k++)
        if (ins->args[k].kind == TCCRT_ARG_KIND_REG && !bit(written, ins->args[k].value))
          st = fail_at(v, "reads register %lld before anything writes it", (long long)ins->args[k].value);
      if (ins->b != TCCRT_NO_REG) written[ins->b >> 6] |= (uint64_t)1 << (ins->b & 63);
    }
  }
  if (!st && kept == -1) st = fail(v, "%s: too many branches for its %lld registers to verify", v->where, (long long)regs);
  if (!st && kept == -2) st = tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory verifying bytecode");
  for (size_t pc = 0; pc < n && d.pending && d.heads; pc++) {
    free(d.pending[pc]);
    free(d.heads[pc]);
  }
  free(d.pending);
  free(d.heads);
  free(written);
  return st;
}

static tccrt_status_t function(verifier_t *v, size_t fi) {
  const tccrt_vm_function_t *f = &v->prog->functions[fi];
  tccrt_instr_t *code = (tccrt_instr_t *)f->code; /* the arena's own, writable memory */
  tccrt_status_t st = TCCRT_OK;
  tccrt_repr_t q;
  snprintf(v->where, sizeof v->where, "bytecode function %s", tccrt_repr(&q, f->name));
  if (!(0 <= f->num_params && f->num_params <= f->num_regs && f->num_regs <= MAX_REGS))
    return fail(v, "%s: %lld params and %lld registers are out of range", v->where, (long long)f->num_params,
                (long long)f->num_regs);
  if (f->code_length == 0 || f->code[f->code_length - 1].op != TCCRT_OP_RET)
    return fail(v, "%s does not end with ret", v->where);
  v->calls_at[fi + 1] = v->calls_at[fi];
  for (v->pc = 0; v->pc < f->code_length && !st; v->pc++) {
    tccrt_instr_t *ins = &code[v->pc];
    if (ins->op == TCCRT_OP_RET) st = reg(v, f, ins->a, 0);
    else if (ins->op == TCCRT_OP_GOTO || ins->op == TCCRT_OP_IF) st = jump(v, f, ins);
    else st = call(v, fi, ins);
  }
  finish_calls(v, fi);
  if (!st) st = written_before_read(v, f);
  return st;
}

/* -- recursion -- */

/* No VM function may reach itself: with backward jumps only onto loop heads, a run then
 * ends unless a loop's condition keeps it going.  An iterative depth-first search over the
 * functions in name order, each one's callees in name order, so the function named is the
 * one the Python reader names. */
static tccrt_status_t check_acyclic(verifier_t *v) {
  size_t nf = v->prog->function_count;
  tccrt_status_t st = TCCRT_OK;
  tccrt_repr_t q;
  unsigned char *state = calloc(nf ? nf : 1, 1); /* by rank: 0 unseen, 1 on the path, 2 done */
  size_t *node = malloc((nf ? nf : 1) * sizeof *node), *next = malloc((nf ? nf : 1) * sizeof *next);
  if (!state || !node || !next)
    st = tccrt_fail(TCCRT_OUT_OF_MEMORY, "%s: out of memory verifying the bytecode", v->pack->path);
  for (size_t root = 0; root < nf && !st; root++) {
    if (state[root] == 2) continue;
    size_t depth = 1; /* the path holds distinct functions, so it never exceeds nf */
    node[0] = root, next[0] = 0, state[root] = 1;
    while (depth && !st) {
      size_t f = v->functions[node[depth - 1]].index;
      size_t at = v->calls_at[f] + next[depth - 1]++;
      if (at >= v->calls_at[f + 1]) {
        state[node[--depth]] = 2;
      } else if (state[v->calls[at]] == 1) {
        st = fail(v, "bytecode function %s calls itself (directly or not)",
                  tccrt_repr(&q, v->functions[v->calls[at]].name));
      } else if (state[v->calls[at]] == 0) {
        node[depth] = v->calls[at], next[depth] = 0, state[v->calls[at]] = 1;
        depth++;
      }
    }
  }
  free(state);
  free(node);
  free(next);
  return st;
}

/* -- the whole program -- */

static tccrt_status_t verify(verifier_t *v) {
  tccrt_status_t st;
  for (size_t r = 1; r < v->prog->function_count; r++)
    if (strcmp(v->functions[r].name, v->functions[r - 1].name) == 0)
      return fail(v, "bytecode defines a function twice");
  if ((st = resolve_table(v)) || (st = check_entries(v))) return st;
  for (size_t f = 0; f < v->prog->function_count; f++)
    if ((st = function(v, f))) return st;
  return check_acyclic(v);
}

tccrt_status_t tccrt_program_verify(tccrt_pack_t *pack) {
  verifier_t v = {.pack = pack, .prog = &pack->program};
  tccrt_status_t st = setup(&v);
  if (!st) st = verify(&v);
  release(&v);
  return st;
}
