/* Decoding bytecode.bin (docs/vm.md, "Encoding") into the pack's tccrt_program_t, with the
 * framing checked as tcc/rt/format.py's decode checks it: magic, version, every count
 * bounded by the words left before anything is allocated (so a corrupted count cannot
 * allocate or loop), every string in bounds, UTF-8 and free of NUL bytes, every
 * instruction inside its function's code, no trailing words.  What the words mean (indices,
 * jumps, builtin arguments) is verify.c's. */
#include <stdio.h>
#include <string.h>

#include "pack_internal.h"
#include "tccrt_pack.h"

typedef struct words_t {
  const uint8_t *data; /* any alignment: words are read bytewise, little-endian */
  size_t n, i;
  tccrt_arena_t *arena;
  int out_of_memory;
  char *why;
  size_t why_size;
} words_t;

static int bad(words_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(words_t *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (!r->why[0]) vsnprintf(r->why, r->why_size, fmt, ap);
  va_end(ap);
  return 0;
}

/* `n` zeroed items of `size` bytes from the arena, or NULL (out of memory is flagged so the
 * caller reports it as such, not as a malformed pack). */
static void *alloc(words_t *r, size_t n, size_t size) {
  void *p = n > SIZE_MAX / size ? NULL : tccrt_arena_alloc(r->arena, n * size);
  if (!p) r->out_of_memory = 1;
  return p;
}

static int take(words_t *r, const char *what, int64_t *out) {
  if (r->i >= r->n) return bad(r, "truncated: ran out of words reading %s", what);
  uint64_t v = 0;
  for (int b = 7; b >= 0; b--) v = v << 8 | r->data[8 * r->i + (size_t)b];
  r->i++;
  memcpy(out, &v, sizeof v);
  return 1;
}

/* A count that must fit in the words left, `words_each` words per item. */
static int count(words_t *r, const char *what, uint64_t words_each, size_t *out) {
  int64_t v;
  if (!take(r, what, &v)) return 0;
  uint64_t left = r->n - r->i;
  if (v < 0 || (uint64_t)v > left / words_each)
    return bad(r, "%s is %lld but only %llu words remain", what, (long long)v, (unsigned long long)left);
  *out = (size_t)v;
  return 1;
}

static int string(words_t *r, const char *what, const char **out) {
  int64_t n;
  char label[sizeof(tccrt_repr_t) + 128];
  snprintf(label, sizeof label, "%s length", what);
  if (!take(r, label, &n)) return 0;
  uint64_t nw = n >= 0 ? (uint64_t)n / 8 + ((uint64_t)n % 8 != 0) : 0;
  if (n < 0 || nw > r->n - r->i) return bad(r, "%s length %lld runs past the end", what, (long long)n);
  const char *bytes = (const char *)r->data + 8 * r->i;
  if (!tccrt_utf8_valid((const uint8_t *)bytes, (size_t)n)) return bad(r, "%s is not UTF-8", what);
  if (memchr(bytes, 0, (size_t)n))
    return bad(r, "%s contains a NUL byte, which tcc names and strings never hold", what);
  r->i += (size_t)nw;
  if (!(*out = tccrt_arena_strndup(r->arena, bytes, (size_t)n))) r->out_of_memory = 1;
  return *out != NULL;
}

/* Decode one instruction of function `fname`; the messages name it as tcc/rt/format.py's do. */
static int instruction(words_t *r, const char *fname, size_t end, tccrt_instr_t *ins) {
  tccrt_repr_t q;
  char where[sizeof q.text + 32], argc[sizeof where + 16];
  snprintf(where, sizeof where, "function %s instruction", tccrt_repr(&q, fname));
  snprintf(argc, sizeof argc, "%s argument count", where);
  if (!take(r, where, &ins->op)) return 0;
  if (ins->op == TCCRT_OP_CALL) {
    if (!take(r, where, &ins->a) || !take(r, where, &ins->b) || !count(r, argc, 2, &ins->nargs))
      return 0;
    /* A call without arguments (stack_new) allocates nothing. */
    tccrt_arg_t *args = ins->nargs ? alloc(r, ins->nargs, sizeof *args) : NULL;
    if (ins->nargs && !args) return 0;
    for (size_t k = 0; k < ins->nargs; k++)
      if (!take(r, where, &args[k].kind) || !take(r, where, &args[k].value)) return 0;
    ins->args = args;
  } else if (ins->op == TCCRT_OP_IF) {
    if (!take(r, where, &ins->a) || !take(r, where, &ins->b)) return 0;
  } else if (ins->op == TCCRT_OP_RET || ins->op == TCCRT_OP_GOTO) {
    if (!take(r, where, &ins->a)) return 0;
  } else {
    return bad(r, "%s %zu: unknown opcode %lld", where, r->i - 1, (long long)ins->op);
  }
  if (r->i > end) return bad(r, "function %s: an instruction runs past the code length", tccrt_repr(&q, fname));
  return 1;
}

static int table(words_t *r, tccrt_program_t *p) {
  tccrt_entry_t *entries = alloc(r, p->table_size, sizeof *entries);
  if (!entries) return 0;
  p->table = entries;
  for (size_t i = 0; i < p->table_size; i++) {
    char what[64];
    snprintf(what, sizeof what, "table entry %zu kind", i);
    if (!take(r, what, &entries[i].kind)) return 0;
    int64_t kind = entries[i].kind;
    if (kind != TCCRT_FUNC_KIND_KERNEL && kind != TCCRT_FUNC_KIND_BUILTIN && kind != TCCRT_FUNC_KIND_VM)
      return bad(r, "table entry %zu has unknown kind %lld", i, (long long)kind);
    snprintf(what, sizeof what, "table entry %zu name", i);
    if (!string(r, what, &entries[i].name)) return 0;
  }
  return 1;
}

static int constants(words_t *r, tccrt_program_t *p) {
  tccrt_const_t *consts = alloc(r, p->constant_count, sizeof *consts);
  if (!consts) return 0;
  p->constants = consts;
  for (size_t i = 0; i < p->constant_count; i++) {
    tccrt_const_t *c = &consts[i];
    char what[64];
    snprintf(what, sizeof what, "constant %zu kind", i);
    if (!take(r, what, &c->kind)) return 0;
    if (c->kind == TCCRT_CONST_KIND_STR) {
      snprintf(what, sizeof what, "constant %zu", i);
      if (!string(r, what, &c->str)) return 0;
      c->length = strlen(c->str);
    } else if (c->kind == TCCRT_CONST_KIND_INTS) {
      snprintf(what, sizeof what, "constant %zu length", i);
      if (!count(r, what, 1, &c->length)) return 0;
      int64_t *ints = alloc(r, c->length, sizeof *ints); /* aligned, unlike the file's words */
      if (!ints) return 0;
      for (size_t k = 0; k < c->length; k++)
        if (!take(r, "a constant", &ints[k])) return 0;
      c->ints = ints;
    } else {
      return bad(r, "constant %zu has unknown kind %lld", i, (long long)c->kind);
    }
  }
  return 1;
}

/* Labels "NAME heap size" and so on, with the name as it is (as tcc/rt/format.py writes them). */
static const char *label(char *buf, size_t size, const char *name, const char *what) {
  snprintf(buf, size, "%s %s", name, what);
  return buf;
}

static int function(words_t *r, size_t index, tccrt_vm_function_t *f) {
  size_t n_words;
  char what[96];
  snprintf(what, sizeof what, "function %zu name", index);
  if (!string(r, what, &f->name) || !take(r, "num_params", &f->num_params) ||
      !take(r, "num_regs", &f->num_regs) ||
      !count(r, label(what, sizeof what, f->name, "heap size"), 1, &f->heap_size))
    return 0;
  const char **heap = alloc(r, f->heap_size, sizeof *heap);
  if (!heap) return 0;
  f->heap_names = heap;
  for (size_t h = 0; h < f->heap_size; h++)
    if (!string(r, label(what, sizeof what, f->name, "heap name"), &heap[h])) return 0;
  if (!count(r, label(what, sizeof what, f->name, "instruction count"), 1, &f->code_length) ||
      !count(r, label(what, sizeof what, f->name, "code length"), 1, &n_words))
    return 0;
  tccrt_instr_t *code = alloc(r, f->code_length, sizeof *code);
  if (!code) return 0;
  f->code = code;
  size_t end = r->i + n_words;
  for (size_t k = 0; k < f->code_length; k++)
    if (!instruction(r, f->name, end, &code[k])) return 0;
  tccrt_repr_t q;
  if (r->i != end)
    return bad(r, "function %s: code length %zu does not match its instructions", tccrt_repr(&q, f->name), n_words);
  return 1;
}

static int program(words_t *r, tccrt_program_t *p) {
  int64_t magic, version;
  if (!take(r, "magic", &magic)) return 0;
  if (magic != TCCRT_BYTECODE_MAGIC) return bad(r, "bad magic (not tcc bytecode)");
  if (!take(r, "version", &version)) return 0;
  if (version != TCCRT_BYTECODE_VERSION)
    return bad(r, "bytecode version %lld, this runtime reads %d", (long long)version, TCCRT_BYTECODE_VERSION);
  if (!count(r, "table size", 1, &p->table_size) || !count(r, "constants", 1, &p->constant_count) ||
      !count(r, "functions", 1, &p->function_count))
    return 0;
  if (!table(r, p) || !constants(r, p)) return 0;
  tccrt_vm_function_t *functions = alloc(r, p->function_count, sizeof *functions);
  if (!functions) return 0;
  p->functions = functions;
  for (size_t i = 0; i < p->function_count; i++)
    if (!function(r, i, &functions[i])) return 0;
  if (r->i != r->n) return bad(r, "%zu trailing words after the last function", r->n - r->i);
  return 1;
}

tccrt_status_t tccrt_bytecode_decode(tccrt_pack_t *pack, const tccrt_member_t *member) {
  char why[sizeof(tccrt_repr_t) + 256] = "";
  if (member->size % 8)
    return tccrt_fail(TCCRT_INVALID_PACK, "%s: %s: size %zu is not a multiple of 8 bytes", pack->path,
                      member->name, member->size);
  words_t r = {pack->data + member->offset, member->size / 8, 0, &pack->arena, 0, why, sizeof why};
  if (program(&r, &pack->program)) return TCCRT_OK;
  if (r.out_of_memory)
    return tccrt_fail(TCCRT_OUT_OF_MEMORY, "%s: %s: out of memory decoding the bytecode", pack->path,
                      member->name);
  return tccrt_fail(TCCRT_INVALID_PACK, "%s: %s: %s", pack->path, member->name, why);
}
