/* The framing of bytecode.bin (docs/vm.md, "Encoding"), checked as tcc/rt/format.py's
 * decode checks it: magic, version, every count bounded by the words left (so a corrupted
 * count cannot allocate or loop), every string in bounds and UTF-8, every instruction
 * inside its function's code, no trailing words.  The deeper verifier (indices, jumps,
 * builtin arguments) belongs with the VM interpreter. */
#include <stdio.h>
#include <string.h>

#include "pack_internal.h"
#include "tccrt_pack.h"

typedef struct words_t {
  const uint8_t *data; /* any alignment: words are read bytewise, little-endian */
  size_t n, i;
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

static int take(words_t *r, const char *what, int64_t *out) {
  if (r->i >= r->n) return bad(r, "truncated: ran out of words reading %s", what);
  uint64_t v = 0;
  for (int b = 7; b >= 0; b--) v = v << 8 | r->data[8 * r->i + (size_t)b];
  r->i++;
  memcpy(out, &v, sizeof v);
  return 1;
}

static int count(words_t *r, const char *what, uint64_t words_each, int64_t *out) {
  if (!take(r, what, out)) return 0;
  uint64_t left = r->n - r->i;
  if (*out < 0 || (uint64_t)*out > left / words_each)
    return bad(r, "%s is %lld but only %llu words remain", what, (long long)*out, (unsigned long long)left);
  return 1;
}

static int string(words_t *r, const char *what) {
  int64_t n;
  char label[96];
  snprintf(label, sizeof label, "%s length", what);
  if (!take(r, label, &n)) return 0;
  uint64_t nw = n >= 0 ? (uint64_t)n / 8 + ((uint64_t)n % 8 != 0) : 0;
  if (n < 0 || nw > r->n - r->i) return bad(r, "%s length %lld runs past the end", what, (long long)n);
  if (!tccrt_utf8_valid(r->data + 8 * r->i, (size_t)n)) return bad(r, "%s is not UTF-8", what);
  r->i += (size_t)nw;
  return 1;
}

static int instruction(words_t *r, size_t end) {
  int64_t op, x;
  const char *where = "an instruction";
  if (!take(r, where, &op)) return 0;
  if (op == TCCRT_OP_CALL) {
    if (!take(r, where, &x) || !take(r, where, &x) || !count(r, "an instruction's argument count", 2, &x))
      return 0;
    for (int64_t k = 0; k < 2 * x; k++)
      if (!take(r, where, &op)) return 0;
  } else if (op == TCCRT_OP_IF) {
    if (!take(r, where, &x) || !take(r, where, &x)) return 0;
  } else if (op == TCCRT_OP_RET || op == TCCRT_OP_GOTO) {
    if (!take(r, where, &x)) return 0;
  } else {
    return bad(r, "instruction %zu: unknown opcode %lld", r->i - 1, (long long)op);
  }
  if (r->i > end) return bad(r, "an instruction runs past the code length");
  return 1;
}

static int frame(words_t *r) {
  int64_t magic, version, n_table, n_consts, n_funcs, kind, x, n;
  if (!take(r, "magic", &magic)) return 0;
  if (magic != TCCRT_BYTECODE_MAGIC) return bad(r, "bad magic (not tcc bytecode)");
  if (!take(r, "version", &version)) return 0;
  if (version != TCCRT_BYTECODE_VERSION)
    return bad(r, "bytecode version %lld, this runtime reads %d", (long long)version, TCCRT_BYTECODE_VERSION);
  if (!count(r, "table size", 1, &n_table) || !count(r, "constants", 1, &n_consts) ||
      !count(r, "functions", 1, &n_funcs))
    return 0;
  for (int64_t i = 0; i < n_table; i++) {
    if (!take(r, "a table entry kind", &kind)) return 0;
    if (kind != TCCRT_FUNC_KIND_KERNEL && kind != TCCRT_FUNC_KIND_BUILTIN && kind != TCCRT_FUNC_KIND_VM)
      return bad(r, "table entry %lld has unknown kind %lld", (long long)i, (long long)kind);
    if (!string(r, "a table entry name")) return 0;
  }
  for (int64_t i = 0; i < n_consts; i++) {
    if (!take(r, "a constant kind", &kind)) return 0;
    if (kind == TCCRT_CONST_KIND_STR) {
      if (!string(r, "a constant")) return 0;
    } else if (kind == TCCRT_CONST_KIND_INTS) {
      if (!count(r, "a constant length", 1, &n)) return 0;
      r->i += (size_t)n;
    } else {
      return bad(r, "constant %lld has unknown kind %lld", (long long)i, (long long)kind);
    }
  }
  for (int64_t i = 0; i < n_funcs; i++) {
    int64_t n_instrs, n_words;
    if (!string(r, "a function name") || !take(r, "num_params", &x) || !take(r, "num_regs", &x) ||
        !count(r, "a heap size", 1, &n))
      return 0;
    for (int64_t h = 0; h < n; h++)
      if (!string(r, "a heap name")) return 0;
    if (!count(r, "an instruction count", 1, &n_instrs) || !count(r, "a code length", 1, &n_words))
      return 0;
    size_t end = r->i + (size_t)n_words;
    for (int64_t k = 0; k < n_instrs; k++)
      if (!instruction(r, end)) return 0;
    if (r->i != end)
      return bad(r, "function %lld: code length %lld does not match its instructions", (long long)i,
                 (long long)n_words);
  }
  if (r->i != r->n) return bad(r, "%zu trailing words after the last function", r->n - r->i);
  return 1;
}

tccrt_status_t tccrt_bytecode_check(const tccrt_pack_t *pack, const tccrt_member_t *member) {
  char why[160] = "";
  if (member->size % 8)
    return tccrt_fail(TCCRT_INVALID_PACK, "%s: %s: size %zu is not a multiple of 8 bytes", pack->path,
                      member->name, member->size);
  words_t r = {pack->data + member->offset, member->size / 8, 0, why, sizeof why};
  if (!frame(&r)) return tccrt_fail(TCCRT_INVALID_PACK, "%s: %s: %s", pack->path, member->name, why);
  return TCCRT_OK;
}
