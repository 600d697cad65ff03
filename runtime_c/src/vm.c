/* The VM interpreter: runs the verified bytecode of a pack (docs/vm.md), as tcc/rt/vm.py
 * does, with the same messages for bad inputs.
 *
 * The program was verified when the pack was opened (program.h lists what that
 * guarantees), so indices, argument kinds and jumps are used without checks.  What is
 * checked here is data: the shapes, dtypes and values of tensors (TCCRT_INVALID_INPUT,
 * naming the input through match_shape's `what`), and the kind of value a register holds
 * when it is read (a register read before it is written, or holding a tuple where a
 * tensor belongs, is TCCRT_INVALID_PACK: only a damaged or hand-made pack does that). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "module.h"
#include "shape.h"
#include "tccrt_pack.h"

typedef struct frame_t {
  tccrt_module_t *module;
  const tccrt_program_t *program;
  const tccrt_vm_function_t *function;
  tccrt_value_t **regs;
  int64_t *heap;
  unsigned char *bound; /* heap slots written so far */
  size_t pc;
} frame_t;

#define BAD_PACK(fr, ...) bad_pack(fr, __VA_ARGS__)

static tccrt_status_t bad_pack(const frame_t *fr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static tccrt_status_t bad_pack(const frame_t *fr, const char *fmt, ...) {
  char why[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  return tccrt_fail(TCCRT_INVALID_PACK, "%s: bytecode function '%s' at %zu: %s", fr->module->pack->path,
                    fr->function->name, fr->pc, why);
}

/* -- reading arguments -------------------------------------------------------------- */

static const tccrt_instr_t *instr(const frame_t *fr) { return &fr->function->code[fr->pc]; }

static tccrt_status_t reg(const frame_t *fr, int64_t r, tccrt_value_t **out) {
  *out = fr->regs[r];
  if (!*out) return BAD_PACK(fr, "reads register %%%lld before writing it", (long long)r);
  return TCCRT_OK;
}

/* Argument `i` of the current call, a register holding a value of `kind`. */
static tccrt_status_t arg_value(const frame_t *fr, size_t i, tccrt_value_kind_t kind, tccrt_value_t **out) {
  tccrt_status_t st = reg(fr, instr(fr)->args[i].value, out);
  if (st) return st;
  if ((*out)->kind != kind) {
    return BAD_PACK(fr, "argument %zu of %s is %s, not %s", i, fr->program->table[instr(fr)->a].name,
                    tccrt_kind_name((*out)->kind, 1), tccrt_kind_name(kind, 1));
  }
  return TCCRT_OK;
}

static int64_t arg_imm(const frame_t *fr, size_t i) { return instr(fr)->args[i].value; }

static const tccrt_const_t *arg_const(const frame_t *fr, size_t i) {
  return &fr->program->constants[instr(fr)->args[i].value];
}

static const char *arg_str(const frame_t *fr, size_t i) { return arg_const(fr, i)->str; }

/* The dtype named by string-constant argument `i`, which tensors must be able to have. */
static tccrt_status_t arg_dtype(const frame_t *fr, size_t i, const tccrt_dtype_t **out) {
  *out = tccrt_dtype_find(arg_str(fr, i));
  if (!*out)
    return tccrt_fail(TCCRT_INVALID_INPUT, "%s: the C runtime cannot compute with dtype %s (the pack "
                      "needs it); run the pack with the Python runtime", fr->module->pack->path, arg_str(fr, i));
  return TCCRT_OK;
}

/* -- one-element tensors ------------------------------------------------------------ */

/* float16 bits to double, exactly (subnormals, infinities and NaN included). */
static double half_to_double(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, e = h >> 10 & 0x1f, m = h & 0x3ff, bits;
  if (e == 31) {
    bits = sign | 0x7f800000u | m << 13;
  } else if (e != 0) {
    bits = sign | (e + 112) << 23 | m << 13;
  } else if (m == 0) {
    bits = sign;
  } else { /* subnormal: normalize the mantissa */
    e = 113;
    while (!(m & 0x400)) {
      m <<= 1;
      e--;
    }
    bits = sign | e << 23 | (m & 0x3ff) << 13;
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

typedef struct number_t {
  int is_float;
  int64_t i; /* integers and bools (uint64 values above INT64_MAX saturate) */
  double f;
} number_t;

/* The value at `p` of `dtype`. */
static number_t decode(const tccrt_dtype_t *dtype, const char *p) {
  number_t n = {0, 0, 0.0};
  uint8_t code = dtype->code, bits = dtype->bits;
  if (code == 2) {
    n.is_float = 1;
    if (bits == 32) {
      float v;
      memcpy(&v, p, sizeof v);
      n.f = v;
    } else if (bits == 64) {
      memcpy(&n.f, p, sizeof n.f);
    } else {
      uint16_t h;
      memcpy(&h, p, sizeof h);
      n.f = half_to_double(h);
    }
    return n;
  }
  if (code == 0) {
    if (bits == 8) { int8_t v; memcpy(&v, p, 1); n.i = v; }
    else if (bits == 16) { int16_t v; memcpy(&v, p, 2); n.i = v; }
    else if (bits == 32) { int32_t v; memcpy(&v, p, 4); n.i = v; }
    else memcpy(&n.i, p, 8);
  } else { /* uint or bool */
    uint64_t v = 0;
    if (bits == 8) { uint8_t u; memcpy(&u, p, 1); v = u; }
    else if (bits == 16) { uint16_t u; memcpy(&u, p, 2); v = u; }
    else if (bits == 32) { uint32_t u; memcpy(&u, p, 4); v = u; }
    else memcpy(&v, p, 8);
    n.i = v > INT64_MAX ? INT64_MAX : (int64_t)v;
  }
  n.f = (double)n.i;
  return n;
}

/* Element `k` of a host tensor. */
static number_t element(const tccrt_value_t *x, size_t k) {
  return decode(x->dtype, (const char *)x->dl.data + k * tccrt_dtype_size(x->dtype));
}

/* The value of a one-element tensor (docs/vm.md: loop counters and conditions). */
static tccrt_status_t one(const tccrt_value_t *x, const char *what, number_t *out) {
  if (x->size != 1) {
    char dims[160];
    return tccrt_fail(TCCRT_INVALID_INPUT, "%s must hold one element, got %s", what,
                      tccrt_format_dims(dims, sizeof dims, x->dims, x->n));
  }
  if (!tccrt_tensor_on_device(x)) {
    *out = element(x, 0);
    return TCCRT_OK;
  }
  char bytes[8]; /* the host reads a GPU tensor's value: it comes over */
  tccrt_status_t st = tccrt_cuda_to_host(x->storage->cuda, bytes, (uint64_t)(uintptr_t)x->dl.data,
                                         tccrt_dtype_size(x->dtype));
  if (!st) *out = decode(x->dtype, bytes);
  return st;
}

static int truth(number_t n) { return n.is_float ? n.f != 0.0 : n.i != 0; }

/* A new 0-d tensor of integer or bool `dtype` holding `value`, or an error when it cannot. */
static tccrt_status_t make_scalar(const frame_t *fr, const tccrt_dtype_t *dtype, int64_t value, tccrt_value_t **out) {
  int bits = dtype->bits;
  int fits;
  if (dtype->code == 6) fits = value == 0 || value == 1;
  else if (dtype->code == 0) fits = bits == 64 || (value >= -(INT64_C(1) << (bits - 1)) && value < (INT64_C(1) << (bits - 1)));
  else if (dtype->code == 1) fits = value >= 0 && (bits == 64 || value < (INT64_C(1) << bits));
  else return BAD_PACK(fr, "makes a %s scalar; scalars are bool or integer", dtype->name);
  if (!fits) return BAD_PACK(fr, "makes the value %lld, which %s cannot hold", (long long)value, dtype->name);
  tccrt_status_t st = tccrt_tensor_alloc(dtype, 0, NULL, 0, out);
  if (st) return st;
  uint64_t u = (uint64_t)value; /* little-endian: the low bytes hold the value */
  memcpy((*out)->dl.data, &u, (size_t)bits / 8);
  return TCCRT_OK;
}

/* -- shape programs ----------------------------------------------------------------- */

/* One dimension: `n` postfix words (verified: operands in range, the stack never
 * underflows and ends with one value). */
static tccrt_status_t eval_dim(const frame_t *fr, const int64_t *words, size_t n, int64_t *out) {
  size_t slot = 0;
  tccrt_status_t st = tccrt_shape_eval_dim(words, n, fr->heap, fr->bound, &slot, out);
  if (st == TCCRT_INVALID_PACK)
    return BAD_PACK(fr, "reads size variable '%s' before binding it", fr->function->heap_names[slot]);
  return st;
}

/* A whole program: [ndim, then per dimension a word count and its words]. */
static tccrt_status_t eval_shape(const frame_t *fr, const tccrt_const_t *prog, tccrt_value_t **out) {
  const int64_t *w = prog->ints;
  tccrt_value_t *shape = tccrt_value_new(TCCRT_V_SHAPE, (size_t)w[0]);
  if (!shape) return TCCRT_OUT_OF_MEMORY;
  size_t i = 1;
  for (size_t d = 0; d < shape->n; d++) {
    size_t n = (size_t)w[i];
    tccrt_status_t st = eval_dim(fr, w + i + 1, n, &shape->dims[d]);
    if (st) {
      tccrt_value_release(shape);
      return st;
    }
    i += 1 + n;
  }
  *out = shape;
  return TCCRT_OK;
}

/* -- arena planning ----------------------------------------------------------------- */

/* tcc/rt/arena.py's plan_arena, step for step, so both runtimes place every tensor at the
 * same offset: tensors by size, largest first (ties: longer lifetime, earlier start, then lower
 * index), each
 * at the lowest aligned offset clear of every placed tensor whose lifetime overlaps its own. */

typedef struct plan_item_t {
  int64_t span, start, end, offset;
  size_t index;
} plan_item_t;

static int by_size(const void *a, const void *b) {
  const plan_item_t *x = a, *y = b;
  if (x->span != y->span) return x->span > y->span ? -1 : 1;
  if (x->end - x->start != y->end - y->start) return x->end - x->start > y->end - y->start ? -1 : 1;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return (x->index > y->index) - (x->index < y->index);
}

/* The order of tcc/rt/arena.py's `placed` list: (offset, end offset, index). */
static int placed_before(const plan_item_t *x, const plan_item_t *y) {
  if (x->offset != y->offset) return x->offset < y->offset;
  if (x->span != y->span) return x->span < y->span;
  return x->index < y->index;
}

tccrt_status_t tccrt_plan_arena(size_t n, const int64_t *sizes, const int64_t *lifetimes, int64_t *offsets,
                                int64_t *total) {
  plan_item_t *items = malloc((n ? n : 1) * sizeof *items);
  plan_item_t **placed = malloc((n ? n : 1) * sizeof *placed);
  if (!items || !placed) {
    free(items);
    free(placed);
    return tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory planning an arena");
  }
  int64_t sum = 0; /* of the spans: bounds every offset + span below */
  int overflow = 0;
  for (size_t i = 0; i < n; i++) {
    int64_t span = sizes[i] / TCCRT_ARENA_ALIGN * TCCRT_ARENA_ALIGN;
    if (span < sizes[i]) overflow |= __builtin_add_overflow(span, TCCRT_ARENA_ALIGN, &span);
    overflow |= __builtin_add_overflow(sum, span, &sum);
    items[i] = (plan_item_t){span, lifetimes[2 * i], lifetimes[2 * i + 1], 0, i};
  }
  if (overflow) {
    free(items);
    free(placed);
    return tccrt_fail(TCCRT_INVALID_INPUT, "the planned tensors of an arena take more than 2^63 bytes; "
                      "check the input shapes");
  }
  qsort(items, n, sizeof *items, by_size);
  *total = 0;
  for (size_t k = 0; k < n; k++) {
    plan_item_t *it = &items[k];
    size_t at = 0; /* where it goes in `placed` */
    for (size_t p = 0; p < k; p++) {
      const plan_item_t *other = placed[p];
      if (it->start > other->end || other->start > it->end) continue; /* lifetimes apart */
      if (other->offset >= it->offset + it->span) break; /* the gap below `other` holds it */
      if (other->offset + other->span > it->offset) it->offset = other->offset + other->span;
    }
    while (at < k && placed_before(placed[at], it)) at++;
    memmove(placed + at + 1, placed + at, (k - at) * sizeof *placed);
    placed[at] = it;
    offsets[it->index] = it->offset;
    if (it->offset + it->span > *total) *total = it->offset + it->span;
  }
  free(items);
  free(placed);
  return TCCRT_OK;
}

/* Plans already made, so that repeated runs at the same sizes do not plan again; keyed by
 * content (sizes and lifetimes), so any pack may use any entry. */
#define PLAN_CACHE_SIZE 16

typedef struct plan_entry_t {
  size_t n;
  int64_t *key; /* sizes (n words), then lifetimes (2n), then the offsets found (n) */
  int64_t total;
} plan_entry_t;

static plan_entry_t plan_cache[PLAN_CACHE_SIZE];
static size_t plan_cache_next;
static pthread_mutex_t plan_cache_lock = PTHREAD_MUTEX_INITIALIZER;

static int plan_cached(size_t n, const int64_t *sizes, const int64_t *lifetimes, int64_t *offsets, int64_t *total) {
  int found = 0;
  pthread_mutex_lock(&plan_cache_lock);
  for (size_t i = 0; i < PLAN_CACHE_SIZE && !found; i++) {
    const plan_entry_t *e = &plan_cache[i];
    found = e->key && e->n == n && memcmp(e->key, sizes, n * sizeof *sizes) == 0 &&
            memcmp(e->key + n, lifetimes, 2 * n * sizeof *lifetimes) == 0;
    if (found) {
      memcpy(offsets, e->key + 3 * n, n * sizeof *offsets);
      *total = e->total;
    }
  }
  pthread_mutex_unlock(&plan_cache_lock);
  return found;
}

/* Remember a plan; skipped when out of memory (the next run plans again). */
static void plan_remember(size_t n, const int64_t *sizes, const int64_t *lifetimes, const int64_t *offsets,
                          int64_t total) {
  int64_t *key = malloc((n ? 4 * n : 1) * sizeof *key);
  if (!key) return;
  memcpy(key, sizes, n * sizeof *key);
  memcpy(key + n, lifetimes, 2 * n * sizeof *key);
  memcpy(key + 3 * n, offsets, n * sizeof *key);
  pthread_mutex_lock(&plan_cache_lock);
  plan_entry_t *e = &plan_cache[plan_cache_next];
  plan_cache_next = (plan_cache_next + 1) % PLAN_CACHE_SIZE;
  free(e->key);
  *e = (plan_entry_t){n, key, total};
  pthread_mutex_unlock(&plan_cache_lock);
}

static tccrt_status_t planned_offsets(size_t n, const int64_t *sizes, const int64_t *lifetimes, int64_t *offsets,
                                      int64_t *total) {
  *total = 0;
  /* an empty arena (whose arrays may be NULL) needs no plan */
  if (n == 0 || plan_cached(n, sizes, lifetimes, offsets, total)) return TCCRT_OK;
  tccrt_status_t st = tccrt_plan_arena(n, sizes, lifetimes, offsets, total);
  if (!st) plan_remember(n, sizes, lifetimes, offsets, *total);
  return st;
}

/* -- builtins (docs/vm.md lists each) ----------------------------------------------- */

typedef tccrt_status_t (*builtin_fn)(frame_t *fr, tccrt_value_t **out);

/* Match `got[0 .. ndim-1]` against a match_shape pattern (already checked to have `ndim`
 * entries): bind, check or compare each; `noun` names an entry in the messages. */
static tccrt_status_t match_pattern(frame_t *fr, const char *what, const char *noun, const int64_t *got,
                                    const int64_t *pattern) {
  size_t ndim = (size_t)pattern[0];
  for (size_t i = 0; i < ndim; i++) {
    int64_t mode = pattern[1 + 2 * i], value = pattern[2 + 2 * i];
    if (mode == TCCRT_DIM_MODE_STATIC && got[i] != value)
      return tccrt_fail(TCCRT_INVALID_INPUT, "%s: %s %zu must be %lld, got %lld", what, noun, i, (long long)value,
                        (long long)got[i]);
    if (mode == TCCRT_DIM_MODE_BIND) {
      fr->heap[value] = got[i];
      fr->bound[value] = 1;
    } else if (mode == TCCRT_DIM_MODE_CHECK && (!fr->bound[value] || fr->heap[value] != got[i])) {
      if (!fr->bound[value])
        return BAD_PACK(fr, "checks size variable '%s' before binding it", fr->function->heap_names[value]);
      return tccrt_fail(TCCRT_INVALID_INPUT, "%s: %s %zu is %s = %lld (set by an earlier %s), got %lld", what, noun,
                        i, fr->function->heap_names[value], (long long)fr->heap[value], noun, (long long)got[i]);
    } else if (mode == TCCRT_DIM_MODE_EXPR) {
      const int64_t *w = fr->program->constants[value].ints; /* [1, count, words...] */
      int64_t want;
      tccrt_status_t st = eval_dim(fr, w + 2, (size_t)w[1], &want);
      if (st) return st;
      if (want != got[i])
        return tccrt_fail(TCCRT_INVALID_INPUT, "%s: %s %zu must be %lld (from the other %ss), got %lld", what, noun,
                          i, (long long)want, noun, (long long)got[i]);
    }
  }
  return TCCRT_OK;
}

static tccrt_status_t b_match_shape(frame_t *fr, tccrt_value_t **out) {
  (void)out;
  tccrt_value_t *x;
  tccrt_status_t st = reg(fr, instr(fr)->args[0].value, &x);
  if (st) return st;
  const char *what = arg_str(fr, 1), *dtype = arg_str(fr, 2);
  const int64_t *pattern = arg_const(fr, 3)->ints;
  char dims[160];
  if (x->kind != TCCRT_V_TENSOR)
    return tccrt_fail(TCCRT_INVALID_INPUT, "%s: expected a %s tensor, got a %s", what, dtype, tccrt_value_kind_name(x));
  if (strcmp(x->dtype->name, dtype) != 0)
    return tccrt_fail(TCCRT_INVALID_INPUT, "%s: expected dtype %s, got %s", what, dtype, x->dtype->name);
  size_t ndim = (size_t)pattern[0];
  if (x->n != ndim)
    return tccrt_fail(TCCRT_INVALID_INPUT, "%s: expected rank %zu, got rank %zu (shape %s)", what, ndim, x->n,
                      tccrt_format_dims(dims, sizeof dims, x->dims, x->n));
  return match_pattern(fr, what, "dimension", x->dims, pattern);
}

/* Shapes read from tensors (docs/vm.md, "Shapes from tensors"). */

static tccrt_status_t b_tensor_to_shape(frame_t *fr, tccrt_value_t **out) {
  tccrt_value_t *x;
  tccrt_status_t st = reg(fr, instr(fr)->args[0].value, &x);
  if (st) return st;
  const char *what = arg_str(fr, 1);
  if (x->kind != TCCRT_V_TENSOR || (x->dtype->code != 0 && x->dtype->code != 1) || x->n > 1) {
    if (x->kind != TCCRT_V_TENSOR)
      return tccrt_fail(TCCRT_INVALID_INPUT, "%s: expected a 0-d or 1-d integer tensor of sizes, got a %s", what,
                        tccrt_value_kind_name(x));
    return tccrt_fail(TCCRT_INVALID_INPUT,
                      "%s: expected a 0-d or 1-d integer tensor of sizes, got a %s tensor of rank %zu", what,
                      x->dtype->name, x->n);
  }
  tccrt_value_t *shape = tccrt_value_new(TCCRT_V_SHAPE, x->size);
  if (!shape) return TCCRT_OUT_OF_MEMORY;
  if ((st = tccrt_tensor_to_host(x, &x))) { /* now a reference of our own */
    tccrt_value_release(shape);
    return st;
  }
  for (size_t k = 0; k < x->size && !st; k++) {
    if (x->dtype->code == 1 && x->dtype->bits == 64) { /* uint64: above int64 is refused */
      uint64_t u;
      memcpy(&u, (const char *)x->dl.data + 8 * k, sizeof u);
      if (u > (uint64_t)INT64_MAX) st = tccrt_fail(TCCRT_INVALID_INPUT, "%s: a size does not fit in int64", what);
    }
    shape->dims[k] = element(x, k).i;
  }
  tccrt_value_release(x);
  if (st) tccrt_value_release(shape);
  else *out = shape;
  return st;
}

static tccrt_status_t b_match_dims(frame_t *fr, tccrt_value_t **out) {
  (void)out;
  tccrt_value_t *x;
  tccrt_status_t st = arg_value(fr, 0, TCCRT_V_SHAPE, &x);
  if (st) return st;
  const char *what = arg_str(fr, 1);
  const int64_t *pattern = arg_const(fr, 2)->ints;
  char dims[160];
  size_t ndim = (size_t)pattern[0];
  if (x->n != ndim)
    return tccrt_fail(TCCRT_INVALID_INPUT, "%s: expected %zu sizes, got %zu %s", what, ndim, x->n,
                      tccrt_format_dims(dims, sizeof dims, x->dims, x->n));
  return match_pattern(fr, what, "size", x->dims, pattern);
}

/* A failed condition's message, then the size variables its words read, first use first
 * (tcc.rt.vm.check_failure words it the same way). */
static tccrt_status_t check_failure(const frame_t *fr, const char *message, const int64_t *w, size_t n) {
  char values[512];
  size_t used = 0, shown = 0;
  values[0] = 0;
  for (size_t j = 0; j < n; j += (w[j] == TCCRT_SHAPE_OP_PUSH_INT || w[j] == TCCRT_SHAPE_OP_PUSH_VAR) ? 2 : 1) {
    if (w[j] != TCCRT_SHAPE_OP_PUSH_VAR) continue;
    int seen = 0;
    for (size_t k = 0; k < j; k += (w[k] == TCCRT_SHAPE_OP_PUSH_INT || w[k] == TCCRT_SHAPE_OP_PUSH_VAR) ? 2 : 1)
      seen |= w[k] == TCCRT_SHAPE_OP_PUSH_VAR && w[k + 1] == w[j + 1];
    if (seen) continue;
    int wrote = snprintf(values + used, sizeof values - used, "%s%s = %lld", shown ? ", " : "",
                         fr->function->heap_names[w[j + 1]], (long long)fr->heap[w[j + 1]]);
    if (wrote < 0 || (size_t)wrote >= sizeof values - used) break;
    used += (size_t)wrote, shown++;
  }
  if (!shown) return tccrt_fail(TCCRT_INVALID_INPUT, "%s", message);
  return tccrt_fail(TCCRT_INVALID_INPUT, "%s (%s)", message, values);
}

static tccrt_status_t b_assert_shape(frame_t *fr, tccrt_value_t **out) {
  (void)out;
  const int64_t *p = arg_const(fr, 0)->ints;
  const char *message = arg_str(fr, 1);
  size_t i = 1;
  for (int64_t d = 0; d < p[0]; d++) {
    size_t n = (size_t)p[i];
    int64_t holds;
    tccrt_status_t st = eval_dim(fr, p + i + 1, n, &holds);
    if (st) return st;
    if (!holds) return check_failure(fr, message, p + i + 1, n);
    i += 1 + n;
  }
  return TCCRT_OK;
}

static tccrt_status_t b_make_sizes(frame_t *fr, tccrt_value_t **out) { return eval_shape(fr, arg_const(fr, 0), out); }

static tccrt_status_t b_make_shape(frame_t *fr, tccrt_value_t **out) {
  tccrt_status_t st = eval_shape(fr, arg_const(fr, 0), out);
  if (st) return st;
  for (size_t d = 0; d < (*out)->n; d++)
    if ((*out)->dims[d] < 0) {
      char dims[160];
      st = tccrt_fail(TCCRT_INVALID_INPUT, "a computed shape %s has a negative dimension; check the input shapes",
                      tccrt_format_dims(dims, sizeof dims, (*out)->dims, (*out)->n));
      tccrt_value_release(*out);
      return st;
    }
  return TCCRT_OK;
}

static tccrt_status_t b_alloc_tensor(frame_t *fr, tccrt_value_t **out) {
  tccrt_value_t *shape;
  const tccrt_dtype_t *dtype;
  tccrt_status_t st;
  if ((st = arg_value(fr, 0, TCCRT_V_SHAPE, &shape)) || (st = arg_dtype(fr, 1, &dtype))) return st;
  return tccrt_tensor_alloc_on(fr->module->cuda, fr->module->host_pool, dtype, shape->n, shape->dims, out);
}

/* Memory planning (docs/vm.md "Memory planning"): a call's planned tensors share one arena. */

static tccrt_status_t b_alloc_arena(frame_t *fr, tccrt_value_t **out) {
  tccrt_value_t *sizes;
  tccrt_status_t st = b_make_shape(fr, &sizes); /* the byte sizes, one "dimension" a tensor */
  if (st) return st;
  size_t n = sizes->n;
  int64_t *offsets = malloc((n ? n : 1) * sizeof *offsets), total;
  if (!offsets) st = tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory planning an arena");
  else if (!(st = planned_offsets(n, sizes->dims, arg_const(fr, 1)->ints, offsets, &total)))
    st = tccrt_arena_value_new(fr->module->cuda, fr->module->host_pool, (size_t)total, n, offsets, sizes->dims, out);
  free(offsets);
  tccrt_value_release(sizes);
  return st;
}

static tccrt_status_t b_arena_view(frame_t *fr, tccrt_value_t **out) {
  tccrt_value_t *arena, *shape;
  const tccrt_dtype_t *dtype;
  int64_t index = arg_imm(fr, 1); /* >= 0: verified */
  tccrt_status_t st;
  if ((st = arg_value(fr, 0, TCCRT_V_ARENA, &arena)) || (st = arg_value(fr, 2, TCCRT_V_SHAPE, &shape)) ||
      (st = arg_dtype(fr, 3, &dtype)))
    return st;
  if ((uint64_t)index >= arena->n)
    return BAD_PACK(fr, "views tensor %lld of an arena of %zu", (long long)index, arena->n);
  size_t nbytes = tccrt_dtype_size(dtype);
  int fits = 1;
  for (size_t d = 0; d < shape->n && fits; d++) /* dims are >= 0: make_shape checked them */
    fits = !__builtin_mul_overflow(nbytes, (size_t)shape->dims[d], &nbytes);
  int64_t slot = arena->dims[arena->n + (size_t)index];
  if (!fits || nbytes > (uint64_t)slot) {
    char dims[160];
    return BAD_PACK(fr, "views a %s%s tensor in a slot of %lld bytes", dtype->name,
                    tccrt_format_dims(dims, sizeof dims, shape->dims, shape->n), (long long)slot);
  }
  return tccrt_tensor_in_arena(arena, (size_t)index, dtype, shape->n, shape->dims, out);
}

static tccrt_status_t b_load_constant(frame_t *fr, tccrt_value_t **out) {
  tccrt_value_t **made = fr->module->weights;
  if (made && made[instr(fr)->weight]) {
    *out = tccrt_value_retain(made[instr(fr)->weight]);
    return TCCRT_OK;
  }
  return tccrt_tensor_weight(fr->module->pack, instr(fr)->weight, out);
}

static tccrt_status_t b_reshape(frame_t *fr, tccrt_value_t **out) {
  tccrt_value_t *x, *shape;
  tccrt_status_t st;
  if ((st = arg_value(fr, 0, TCCRT_V_TENSOR, &x)) || (st = arg_value(fr, 1, TCCRT_V_SHAPE, &shape))) return st;
  return tccrt_tensor_view(x, shape->n, shape->dims, out);
}

static tccrt_status_t b_copy(frame_t *fr, tccrt_value_t **out) {
  tccrt_value_t *x;
  tccrt_status_t st = arg_value(fr, 0, TCCRT_V_TENSOR, &x);
  return st ? st : tccrt_tensor_copy(x, out);
}

static tccrt_status_t b_make_tuple(frame_t *fr, tccrt_value_t **out) {
  const tccrt_instr_t *ins = instr(fr);
  tccrt_value_t *t = tccrt_value_new(TCCRT_V_TUPLE, ins->nargs);
  if (!t) return TCCRT_OUT_OF_MEMORY;
  for (size_t i = 0; i < ins->nargs; i++) {
    tccrt_value_t *v;
    tccrt_status_t st = reg(fr, ins->args[i].value, &v);
    if (st) {
      tccrt_value_release(t);
      return st;
    }
    t->items[t->n++] = tccrt_value_retain(v);
  }
  *out = t;
  return TCCRT_OK;
}

static tccrt_status_t b_tuple_get_item(frame_t *fr, tccrt_value_t **out) {
  tccrt_value_t *t;
  tccrt_status_t st = arg_value(fr, 0, TCCRT_V_TUPLE, &t);
  if (st) return st;
  int64_t i = arg_imm(fr, 1);
  if (i < 0 || (uint64_t)i >= t->n) return BAD_PACK(fr, "takes item %lld of a tuple of %zu", (long long)i, t->n);
  *out = tccrt_value_retain(t->items[i]);
  return TCCRT_OK;
}

static tccrt_status_t bool_value(int value, tccrt_value_t **out) {
  *out = tccrt_value_new(TCCRT_V_BOOL, 0);
  if (!*out) return TCCRT_OUT_OF_MEMORY;
  (*out)->truth = value;
  return TCCRT_OK;
}

static tccrt_status_t b_read_bool(frame_t *fr, tccrt_value_t **out) {
  tccrt_value_t *x;
  number_t n;
  tccrt_status_t st;
  if ((st = arg_value(fr, 0, TCCRT_V_TENSOR, &x)) || (st = one(x, "an if_ condition", &n))) return st;
  return bool_value(truth(n), out);
}

static tccrt_status_t b_scalar(frame_t *fr, tccrt_value_t **out) {
  const tccrt_dtype_t *dtype;
  tccrt_status_t st = arg_dtype(fr, 1, &dtype);
  return st ? st : make_scalar(fr, dtype, arg_imm(fr, 0), out);
}

static tccrt_status_t b_scalar_add(frame_t *fr, tccrt_value_t **out) {
  tccrt_value_t *x;
  number_t n;
  int64_t sum;
  tccrt_status_t st;
  if ((st = arg_value(fr, 0, TCCRT_V_TENSOR, &x)) || (st = one(x, "a loop counter", &n))) return st;
  if (n.is_float) return BAD_PACK(fr, "counts with a %s tensor; loop counters are integers", x->dtype->name);
  if (__builtin_add_overflow(n.i, arg_imm(fr, 1), &sum))
    return BAD_PACK(fr, "makes a loop counter past %s's range", x->dtype->name);
  return make_scalar(fr, x->dtype, sum, out);
}

static tccrt_status_t b_loop_continue(frame_t *fr, tccrt_value_t **out) {
  tccrt_value_t *i, *limit, *cond;
  number_t a, b, c;
  tccrt_status_t st;
  if ((st = arg_value(fr, 0, TCCRT_V_TENSOR, &i)) || (st = arg_value(fr, 1, TCCRT_V_TENSOR, &limit)) ||
      (st = arg_value(fr, 2, TCCRT_V_TENSOR, &cond)) || (st = one(i, "a loop counter", &a)) ||
      (st = one(limit, "a loop trip count", &b)) || (st = one(cond, "a loop condition", &c)))
    return st;
  int below = a.is_float || b.is_float ? a.f < b.f : a.i < b.i;
  return bool_value(below && truth(c), out);
}

static tccrt_status_t axis_of(const frame_t *fr, const tccrt_value_t *x, int64_t axis, size_t extra) {
  if (axis < 0 || (uint64_t)axis >= x->n + extra)
    return BAD_PACK(fr, "uses axis %lld of a rank-%zu tensor", (long long)axis, x->n);
  return TCCRT_OK;
}

static tccrt_status_t b_dim_size(frame_t *fr, tccrt_value_t **out) {
  tccrt_value_t *x;
  int64_t axis = arg_imm(fr, 1);
  tccrt_status_t st;
  if ((st = arg_value(fr, 0, TCCRT_V_TENSOR, &x)) || (st = axis_of(fr, x, axis, 0))) return st;
  return make_scalar(fr, tccrt_dtype_find("int64"), x->dims[axis], out);
}

/* Products of dims [from, to) of `dims` (no overflow: they divide an allocated size). */
static size_t dims_product(const int64_t *dims, size_t from, size_t to) {
  size_t p = 1;
  for (size_t d = from; d < to; d++) p *= (size_t)dims[d];
  return p;
}

/* Slice `t` of host tensor `x` along `axis` (counted from the end when `reverse`). */
static tccrt_status_t take(const tccrt_value_t *x, int64_t axis, int64_t reverse, number_t t, tccrt_value_t **out) {
  tccrt_status_t st;
  int64_t length = x->dims[axis];
  if (t.is_float || t.i < 0 || t.i >= length)
    return tccrt_fail(TCCRT_INVALID_INPUT, "a scan input has %lld elements along axis %lld, fewer than the first "
                      "scan input; give every one the same length", (long long)length, (long long)axis);
  int64_t at = reverse ? length - 1 - t.i : t.i;
  int64_t *shape = malloc(x->n * sizeof *shape); /* x->n >= 1: axis is in range */
  if (!shape) return tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory taking a scan slice");
  size_t rank = 0;
  for (size_t d = 0; d < x->n; d++)
    if ((int64_t)d != axis) shape[rank++] = x->dims[d];
  st = tccrt_tensor_alloc(x->dtype, rank, shape, 0, out);
  free(shape);
  if (st) return st;
  size_t outer = dims_product(x->dims, 0, (size_t)axis);
  size_t inner = dims_product(x->dims, (size_t)axis + 1, x->n) * tccrt_dtype_size(x->dtype);
  const char *src = x->dl.data;
  char *dst = (*out)->dl.data;
  for (size_t o = 0; o < outer; o++)
    memcpy(dst + o * inner, src + (o * (size_t)length + (size_t)at) * inner, inner);
  return TCCRT_OK;
}

static tccrt_status_t b_take(frame_t *fr, tccrt_value_t **out) {
  tccrt_value_t *x, *index;
  number_t t;
  int64_t axis = arg_imm(fr, 2), reverse = arg_imm(fr, 3);
  tccrt_status_t st;
  if ((st = arg_value(fr, 0, TCCRT_V_TENSOR, &x)) || (st = arg_value(fr, 1, TCCRT_V_TENSOR, &index)) ||
      (st = axis_of(fr, x, axis, 0)) || (st = one(index, "a scan index", &t)))
    return st;
  if ((st = tccrt_tensor_to_host(x, &x))) return st; /* a reference of our own: the slice is the host's */
  st = take(x, axis, reverse, t, out);
  tccrt_value_release(x);
  return st;
}


static tccrt_status_t b_stack_new(frame_t *fr, tccrt_value_t **out) {
  (void)fr;
  *out = tccrt_value_new(TCCRT_V_STACK, 0);
  return *out ? TCCRT_OK : TCCRT_OUT_OF_MEMORY;
}

static tccrt_status_t b_stack_push(frame_t *fr, tccrt_value_t **out) {
  (void)out;
  tccrt_value_t *acc, *x;
  tccrt_status_t st;
  if ((st = arg_value(fr, 0, TCCRT_V_STACK, &acc)) || (st = arg_value(fr, 1, TCCRT_V_TENSOR, &x))) return st;
  if ((st = tccrt_tensor_to_host(x, &x))) return st; /* the stack is the host's, as in tcc.rt */
  st = tccrt_value_append(acc, x) ? TCCRT_OK : TCCRT_OUT_OF_MEMORY;
  tccrt_value_release(x);
  return st;
}

static tccrt_status_t b_stack_finish(frame_t *fr, tccrt_value_t **out) {
  tccrt_value_t *acc, *empty;
  const tccrt_dtype_t *dtype;
  int64_t axis = arg_imm(fr, 1), reverse = arg_imm(fr, 2);
  tccrt_status_t st;
  if ((st = arg_value(fr, 0, TCCRT_V_STACK, &acc)) || (st = arg_value(fr, 3, TCCRT_V_SHAPE, &empty)) ||
      (st = arg_dtype(fr, 4, &dtype)))
    return st;
  if (acc->n == 0) return tccrt_tensor_alloc(dtype, empty->n, empty->dims, 1, out);
  const tccrt_value_t *first = acc->items[0];
  for (size_t k = 0; k < acc->n; k++) {
    const tccrt_value_t *x = acc->items[k];
    if (x->dtype != first->dtype || x->n != first->n ||
        (x->n && memcmp(x->dims, first->dims, x->n * sizeof *x->dims) != 0)) {
      char a[160], b[160];
      return tccrt_fail(TCCRT_INVALID_INPUT, "a scan output is %s%s in one iteration and %s%s in another; every "
                        "iteration must give the same shape", first->dtype->name,
                        tccrt_format_dims(a, sizeof a, first->dims, first->n), x->dtype->name,
                        tccrt_format_dims(b, sizeof b, x->dims, x->n));
    }
  }
  if ((st = axis_of(fr, first, axis, 1))) return st;
  int64_t *shape = malloc((first->n + 1) * sizeof *shape);
  if (!shape) return tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory stacking scan outputs");
  for (size_t d = 0, s = 0; d <= first->n; d++)
    shape[d] = (int64_t)d == axis ? (int64_t)acc->n : first->dims[s++];
  st = tccrt_tensor_alloc(first->dtype, first->n + 1, shape, 0, out);
  free(shape);
  if (st) return st;
  size_t outer = dims_product(first->dims, 0, (size_t)axis);
  size_t inner = dims_product(first->dims, (size_t)axis, first->n) * tccrt_dtype_size(first->dtype);
  char *dst = (*out)->dl.data;
  for (size_t o = 0; o < outer; o++)
    for (size_t k = 0; k < acc->n; k++) {
      const tccrt_value_t *x = acc->items[reverse ? acc->n - 1 - k : k];
      memcpy(dst + (o * acc->n + k) * inner, (const char *)x->dl.data + o * inner, inner);
    }
  return TCCRT_OK;
}

static const builtin_fn BUILTINS[TCCRT_B_COUNT] = {
    [TCCRT_B_MATCH_SHAPE] = b_match_shape,     [TCCRT_B_MAKE_SHAPE] = b_make_shape,
    [TCCRT_B_ALLOC_TENSOR] = b_alloc_tensor,   [TCCRT_B_LOAD_CONSTANT] = b_load_constant,
    [TCCRT_B_RESHAPE] = b_reshape,             [TCCRT_B_COPY] = b_copy,
    [TCCRT_B_MAKE_TUPLE] = b_make_tuple,       [TCCRT_B_TUPLE_GET_ITEM] = b_tuple_get_item,
    [TCCRT_B_READ_BOOL] = b_read_bool,         [TCCRT_B_SCALAR] = b_scalar,
    [TCCRT_B_SCALAR_ADD] = b_scalar_add,       [TCCRT_B_LOOP_CONTINUE] = b_loop_continue,
    [TCCRT_B_DIM_SIZE] = b_dim_size,           [TCCRT_B_TAKE] = b_take,
    [TCCRT_B_STACK_NEW] = b_stack_new,         [TCCRT_B_STACK_PUSH] = b_stack_push,
    [TCCRT_B_STACK_FINISH] = b_stack_finish,   [TCCRT_B_ALLOC_ARENA] = b_alloc_arena,
    [TCCRT_B_ARENA_VIEW] = b_arena_view,
    [TCCRT_B_TENSOR_TO_SHAPE] = b_tensor_to_shape,
    [TCCRT_B_MATCH_DIMS] = b_match_dims,
    [TCCRT_B_ASSERT_SHAPE] = b_assert_shape,
    [TCCRT_B_MAKE_SIZES] = b_make_sizes,
};

/* -- kernels and VM calls ------------------------------------------------------------ */

/* Call a kernel: tensors pass as themselves, a shape as one 0-d int64 tensor per dimension
 * (how CallTIR shape arguments reach a kernel). */
static tccrt_status_t call_kernel(frame_t *fr, const tccrt_entry_t *entry) {
  const tccrt_instr_t *ins = instr(fr);
  size_t count = 0;
  tccrt_status_t st = TCCRT_OK;
  for (size_t i = 0; i < ins->nargs && !st; i++) {
    tccrt_value_t *v;
    if ((st = reg(fr, ins->args[i].value, &v))) break;
    if (v->kind == TCCRT_V_TENSOR) count += 1;
    else if (v->kind == TCCRT_V_SHAPE) count += v->n;
    else st = BAD_PACK(fr, "passes a %s to kernel '%s'", tccrt_value_kind_name(v), entry->name);
  }
  if (st) return st;
  if (count > INT32_MAX) return BAD_PACK(fr, "passes too many arguments to kernel '%s'", entry->name);
  tccrt_dl_tensor_t **args = malloc((count ? count : 1) * sizeof *args);
  tccrt_dl_tensor_t *dims = malloc((count ? count : 1) * sizeof *dims);
  if (!args || !dims) {
    free(args);
    free(dims);
    return tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory calling kernel '%s'", entry->name);
  }
  size_t k = 0, nd = 0;
  for (size_t i = 0; i < ins->nargs; i++) {
    tccrt_value_t *v = fr->regs[ins->args[i].value];
    if (v->kind == TCCRT_V_TENSOR) {
      args[k++] = &v->dl;
      continue;
    }
    for (size_t d = 0; d < v->n; d++, nd++) {
      dims[nd] = (tccrt_dl_tensor_t){.data = &v->dims[d], .device = {1, 0}, .ndim = 0, .dtype = {0, 64, 1}};
      args[k++] = &dims[nd];
    }
  }
  const tccrt_kernels_t *kernels = &fr->module->kernels;
  int64_t on_gpu = fr->module->pack->kernel_device[entry->index];
  int32_t rc = 0;
  if (on_gpu >= 0) st = tccrt_cuda_call(fr->module->cuda, (size_t)on_gpu, args, count);
  else rc = kernels->fns[entry->index](args, (int32_t)count);
  if (rc != 0) {
    const char *why = kernels->last_error ? kernels->last_error() : NULL;
    if (why && *why) st = tccrt_fail(TCCRT_KERNEL_ERROR, "%s", why);
    else st = tccrt_fail(TCCRT_KERNEL_ERROR, "%s: failed with status %d", entry->name, (int)rc);
  }
  free(args);
  free(dims);
  return st;
}

static tccrt_status_t invoke(tccrt_module_t *module, size_t function, tccrt_value_t *const *args, size_t nargs,
                             tccrt_value_t **out);

static tccrt_status_t call_vm(frame_t *fr, const tccrt_entry_t *entry, tccrt_value_t **out) {
  const tccrt_instr_t *ins = instr(fr);
  tccrt_value_t *small[16];
  tccrt_value_t **args = ins->nargs <= 16 ? small : malloc(ins->nargs * sizeof *args);
  if (!args) return tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory calling '%s'", entry->name);
  tccrt_status_t st = TCCRT_OK;
  for (size_t i = 0; i < ins->nargs && !st; i++) st = reg(fr, ins->args[i].value, &args[i]);
  if (!st) st = invoke(fr->module, entry->index, args, ins->nargs, out);
  if (args != small) free(args);
  return st;
}

typedef struct kernel_call_t {
  frame_t *fr;
  const tccrt_entry_t *entry;
} kernel_call_t;

static tccrt_status_t run_kernel_call(void *context) {
  kernel_call_t *c = context;
  return call_kernel(c->fr, c->entry);
}

static tccrt_status_t call(frame_t *fr) {
  const tccrt_instr_t *ins = instr(fr);
  const tccrt_entry_t *entry = &fr->program->table[ins->a];
  tccrt_value_t *result = NULL;
  tccrt_status_t st;
  tccrt_profile_t *profile = &fr->module->profile;
  tccrt_cuda_t *gpu = fr->module->cuda;
  /* a VM function's own calls are timed inside it */
  int timed = profile->on && entry->kind != TCCRT_FUNC_KIND_VM && (size_t)ins->a < profile->n;
  uint64_t t0 = timed ? tccrt_now_ns() : 0, gpu_ns = 0;
  int on_gpu = entry->kind == TCCRT_FUNC_KIND_KERNEL && fr->module->pack->kernel_device[entry->index] >= 0;
  if (entry->kind == TCCRT_FUNC_KIND_BUILTIN) {
    st = BUILTINS[entry->index](fr, &result);
    if (timed && gpu && !st) st = tccrt_cuda_synchronize(gpu); /* its copies count as its time */
  } else if (entry->kind == TCCRT_FUNC_KIND_VM) {
    st = call_vm(fr, entry, &result);
  } else if (timed && on_gpu) { /* launches return at once: the GPU's time, between CUDA events */
    kernel_call_t c = {fr, entry};
    st = tccrt_cuda_timed(gpu, run_kernel_call, &c, &gpu_ns);
  } else {
    st = call_kernel(fr, entry);
  }
  if (timed && !st) {
    profile->ns[ins->a] += on_gpu ? gpu_ns : tccrt_now_ns() - t0;
    profile->calls[ins->a] += 1;
  }
  if (st) return st;
  if (ins->b == TCCRT_NO_REG) {
    tccrt_value_release(result);
  } else {
    tccrt_value_release(fr->regs[ins->b]);
    fr->regs[ins->b] = result; /* NULL for a call without a result: reading it is an error */
  }
  return TCCRT_OK;
}

static tccrt_status_t run_frame(frame_t *fr, tccrt_value_t **out) {
  for (;;) {
    const tccrt_instr_t *ins = instr(fr);
    tccrt_status_t st;
    tccrt_value_t *v;
    switch (ins->op) {
      case TCCRT_OP_CALL:
        if ((st = call(fr))) return st;
        fr->pc += 1;
        break;
      case TCCRT_OP_RET:
        if ((st = reg(fr, ins->a, &v))) return st;
        *out = tccrt_value_retain(v);
        return TCCRT_OK;
      case TCCRT_OP_GOTO:
        fr->pc = (size_t)((int64_t)fr->pc + ins->a);
        break;
      default: /* TCCRT_OP_IF */
        if ((st = reg(fr, ins->a, &v))) return st;
        if (v->kind != TCCRT_V_BOOL) return BAD_PACK(fr, "tests a %s, not a bool", tccrt_value_kind_name(v));
        fr->pc = v->truth ? fr->pc + 1 : (size_t)((int64_t)fr->pc + ins->b);
        break;
    }
  }
}

static tccrt_status_t invoke(tccrt_module_t *module, size_t function, tccrt_value_t *const *args, size_t nargs,
                             tccrt_value_t **out) {
  const tccrt_program_t *program = &module->pack->program;
  const tccrt_vm_function_t *f = &program->functions[function];
  frame_t fr = {module, program, f, NULL, NULL, NULL, 0};
  size_t heap = f->heap_size ? f->heap_size : 1;
  fr.regs = calloc((size_t)f->num_regs ? (size_t)f->num_regs : 1, sizeof *fr.regs);
  fr.heap = calloc(heap, sizeof *fr.heap);
  fr.bound = calloc(heap, 1);
  tccrt_status_t st;
  if (!fr.regs || !fr.heap || !fr.bound) {
    st = tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory calling '%s'", f->name);
  } else {
    for (size_t i = 0; i < nargs; i++) fr.regs[i] = tccrt_value_retain(args[i]);
    st = run_frame(&fr, out);
  }
  for (int64_t r = 0; fr.regs && r < f->num_regs; r++) tccrt_value_release(fr.regs[r]);
  free(fr.regs);
  free(fr.heap);
  free(fr.bound);
  return st;
}

tccrt_status_t tccrt_vm_invoke(tccrt_module_t *module, size_t function, tccrt_value_t *const *args,
                               size_t nargs, tccrt_value_t **out) {
  return invoke(module, function, args, nargs, out);
}

/* -- reports ------------------------------------------------------------------------ */

/* Whether a verified shape program reads no size variable. */
static int program_is_static(const tccrt_const_t *prog) {
  const int64_t *w = prog->ints;
  for (size_t i = 1, d = 0; d < (size_t)w[0]; d++) {
    size_t end = i + 1 + (size_t)w[i];
    for (size_t j = i + 1; j < end; j += w[j] == TCCRT_SHAPE_OP_PUSH_INT ? 2 : 1)
      if (w[j] == TCCRT_SHAPE_OP_PUSH_VAR) return 0;
    i = end;
  }
  return 1;
}

typedef struct live_event_t {
  int64_t at;
  int dies; /* births count first at one instruction: lifetimes are closed */
  int64_t bytes;
} live_event_t;

static int by_time(const void *a, const void *b) {
  const live_event_t *x = a, *y = b;
  if (x->at != y->at) return x->at < y->at ? -1 : 1;
  return x->dies - y->dies;
}

/* The builtin alloc_arena call at `pc` of `f`, or NULL. */
static const tccrt_instr_t *arena_call(const tccrt_program_t *program, const tccrt_vm_function_t *f, size_t pc) {
  const tccrt_instr_t *ins = &f->code[pc];
  if (ins->op != TCCRT_OP_CALL) return NULL;
  const tccrt_entry_t *e = &program->table[ins->a];
  return e->kind == TCCRT_FUNC_KIND_BUILTIN && e->index == TCCRT_B_ALLOC_ARENA ? ins : NULL;
}

/* Plan one arena of static sizes into the report, with its tensors' birth and death events. */
static tccrt_status_t report_arena(const frame_t *fr, const tccrt_instr_t *ins, tccrt_memory_report_t *out,
                                   live_event_t *events) {
  const tccrt_program_t *program = fr->program;
  const int64_t *lifetimes = program->constants[ins->args[1].value].ints;
  tccrt_value_t *sizes;
  tccrt_status_t st = eval_shape(fr, &program->constants[ins->args[0].value], &sizes);
  if (st) return st;
  size_t n = sizes->n;
  int64_t *offsets = malloc((n ? n : 1) * sizeof *offsets), total = 0;
  int overflow = 0;
  for (size_t t = 0; t < n; t++) {
    overflow |= sizes->dims[t] < 0 || __builtin_add_overflow(out->allocated_bytes, sizes->dims[t],
                                                             &out->allocated_bytes);
    events[2 * t] = (live_event_t){lifetimes[2 * t], 0, sizes->dims[t]};
    events[2 * t + 1] = (live_event_t){lifetimes[2 * t + 1], 1, -sizes->dims[t]};
  }
  if (!offsets) st = tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory reporting the memory plan");
  else if (!overflow && !(st = tccrt_plan_arena(n, sizes->dims, lifetimes, offsets, &total)))
    overflow = __builtin_add_overflow(out->planned_bytes, total, &out->planned_bytes);
  if (!st && overflow)
    st = tccrt_fail(TCCRT_INVALID_PACK, "bytecode function '%s' at %zu: plans tensors of a negative size or of "
                    "more than 2^63 bytes in all", fr->function->name, fr->pc);
  free(offsets);
  tccrt_value_release(sizes);
  return st;
}

tccrt_status_t tccrt_program_memory(const tccrt_program_t *program, size_t function, tccrt_memory_report_t *out) {
  const tccrt_vm_function_t *f = &program->functions[function];
  *out = (tccrt_memory_report_t){0, 0, 1, 0, 0, 0};
  for (size_t pc = 0; pc < f->code_length; pc++) {
    const tccrt_instr_t *ins = arena_call(program, f, pc);
    if (!ins) continue;
    const tccrt_const_t *prog = &program->constants[ins->args[0].value];
    out->arenas += 1;
    out->tensors += (size_t)prog->ints[0];
    out->known &= program_is_static(prog);
  }
  if (!out->known || !out->tensors) return TCCRT_OK;
  live_event_t *events = malloc(2 * out->tensors * sizeof *events);
  if (!events) return tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory reporting the memory plan");
  frame_t fr = {NULL, program, f, NULL, NULL, NULL, 0}; /* static programs read no heap */
  tccrt_status_t st = TCCRT_OK;
  size_t k = 0;
  for (size_t pc = 0; pc < f->code_length && !st; pc++) {
    const tccrt_instr_t *ins = arena_call(program, f, pc);
    if (!ins) continue;
    fr.pc = pc;
    st = report_arena(&fr, ins, out, events + k);
    k += 2 * (size_t)program->constants[ins->args[0].value].ints[0];
  }
  if (!st) qsort(events, k, sizeof *events, by_time);
  for (int64_t i = 0, live = 0; !st && i < (int64_t)k; i++) { /* sums stay below allocated_bytes */
    live += events[i].bytes;
    if (live > out->lower_bound_bytes) out->lower_bound_bytes = live;
  }
  free(events);
  return st;
}
