/* Shape programs: checking (tcc/rt/pack.py's _verify_shape_program, with its messages) and
 * evaluating (tcc/rt/vm.py's eval_shape), in one place for the bytecode and the launch
 * specs. */
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"
#include "shape.h"
#include "tccrt_pack.h"

static int operand_ok(const int64_t *w, size_t len, size_t j, size_t slots) {
  if (j + 1 >= len) return 0;
  return w[j] == TCCRT_SHAPE_OP_PUSH_INT || (w[j + 1] >= 0 && (uint64_t)w[j + 1] < slots);
}

const char *tccrt_shape_program_problem(const int64_t *p, size_t n, size_t slots, int64_t ndim, char *why,
                                        size_t why_size) {
  size_t i = 1;
  if (n == 0 || p[0] < 0 || (ndim >= 0 && p[0] != ndim)) return "malformed shape program";
  for (int64_t d = 0; d < p[0]; d++) { /* each dimension moves i forward, so at most n of them */
    if (i >= n || p[i] < 0 || (uint64_t)p[i] > n - i - 1) return "shape program runs past its end";
    const int64_t *w = p + i + 1;
    size_t len = (size_t)p[i], depth = 0;
    i += 1 + len;
    for (size_t j = 0; j < len;) {
      int64_t op = w[j];
      if (op == TCCRT_SHAPE_OP_PUSH_INT || op == TCCRT_SHAPE_OP_PUSH_VAR) {
        if (!operand_ok(w, len, j, slots)) return "shape program pushes a bad operand";
        depth++, j += 2;
      } else if (op >= TCCRT_SHAPE_OP_ADD && op <= TCCRT_SHAPE_OP_LE && depth >= 2) {
        depth--, j++;
      } else if (op == TCCRT_SHAPE_OP_SELECT && depth >= 3) {
        depth -= 2, j++;
      } else {
        snprintf(why, why_size, "shape program has a bad token %lld", (long long)op);
        return why;
      }
    }
    if (depth != 1) {
      snprintf(why, why_size, "shape program leaves %zu values", depth);
      return why;
    }
  }
  if (i != n) return "shape program has trailing words";
  return NULL;
}

/* A value of a shape program that could not be computed: why, kept beside the value and
 * reported only if the dimension's result depends on it. A select's untaken branch may
 * overflow (`select(end < 0, end + n, end)` with end = INT64_MAX, a slice to the end) or
 * divide by zero without making the dimension wrong, as in tcc/rt/vm.py's eval_shape. */
enum { SHAPE_VALUE_OK, SHAPE_VALUE_OVERFLOW, SHAPE_VALUE_DIV_ZERO };

static tccrt_status_t shape_value_error(unsigned char why) {
  if (why == SHAPE_VALUE_DIV_ZERO)
    return tccrt_fail(TCCRT_INVALID_INPUT, "a shape computation divides by zero; check the input shapes");
  return tccrt_fail(TCCRT_INVALID_INPUT, "a shape computation overflows int64; check the input shapes");
}

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int64_t floor_mod(int64_t a, int64_t b) {
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

tccrt_status_t tccrt_shape_eval_dim(const int64_t *words, size_t n, const int64_t *slots,
                                    const unsigned char *bound, size_t *unbound, int64_t *out) {
  int64_t small[32], *stack = n <= 32 ? small : malloc(n * sizeof *stack);
  unsigned char small_bad[32], *bad = n <= 32 ? small_bad : malloc(n);
  size_t depth = 0;
  tccrt_status_t st = TCCRT_OK;
  if (!stack || !bad) {
    if (stack != small) free(stack);
    if (bad != small_bad) free(bad);
    return tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory evaluating a shape");
  }
  for (size_t i = 0; i < n && !st;) {
    int64_t op = words[i];
    if (op == TCCRT_SHAPE_OP_PUSH_INT) {
      bad[depth] = SHAPE_VALUE_OK;
      stack[depth++] = words[i + 1];
      i += 2;
      continue;
    }
    if (op == TCCRT_SHAPE_OP_PUSH_VAR) {
      size_t slot = (size_t)words[i + 1];
      if (bound && !bound[slot]) {
        *unbound = slot;
        st = TCCRT_INVALID_PACK;
      } else {
        bad[depth] = SHAPE_VALUE_OK;
        stack[depth++] = slots[slot];
      }
      i += 2;
      continue;
    }
    if (op == TCCRT_SHAPE_OP_SELECT) { /* cond, a, b -> a if cond else b */
      depth -= 2;
      size_t pick = depth - 1;
      if (!bad[pick]) pick = stack[depth - 1] ? depth : depth + 1;
      bad[depth - 1] = bad[pick];
      stack[depth - 1] = stack[pick];
      i += 1;
      continue;
    }
    int64_t b = stack[--depth], a = stack[depth - 1], r = 0;
    unsigned char why = bad[depth - 1] ? bad[depth - 1] : bad[depth];
    if (!why) {
      switch (op) {
        case TCCRT_SHAPE_OP_ADD: if (__builtin_add_overflow(a, b, &r)) why = SHAPE_VALUE_OVERFLOW; break;
        case TCCRT_SHAPE_OP_SUB: if (__builtin_sub_overflow(a, b, &r)) why = SHAPE_VALUE_OVERFLOW; break;
        case TCCRT_SHAPE_OP_MUL: if (__builtin_mul_overflow(a, b, &r)) why = SHAPE_VALUE_OVERFLOW; break;
        case TCCRT_SHAPE_OP_FLOORDIV:
        case TCCRT_SHAPE_OP_FLOORMOD:
          if (b == 0) why = SHAPE_VALUE_DIV_ZERO;
          else if (a == INT64_MIN && b == -1) why = SHAPE_VALUE_OVERFLOW;
          else r = op == TCCRT_SHAPE_OP_FLOORDIV ? floor_div(a, b) : floor_mod(a, b);
          break;
        case TCCRT_SHAPE_OP_MIN: r = a < b ? a : b; break;
        case TCCRT_SHAPE_OP_EQ: r = a == b; break;
        case TCCRT_SHAPE_OP_NE: r = a != b; break;
        case TCCRT_SHAPE_OP_LT: r = a < b; break;
        case TCCRT_SHAPE_OP_LE: r = a <= b; break;
        default: r = a > b ? a : b; break; /* MAX */
      }
    }
    bad[depth - 1] = why;
    stack[depth - 1] = r;
    i += 1;
  }
  if (!st && bad[0]) st = shape_value_error(bad[0]);
  if (!st) *out = stack[0];
  if (stack != small) free(stack);
  if (bad != small_bad) free(bad);
  return st;
}

tccrt_status_t tccrt_shape_eval(const int64_t *p, const int64_t *slots, int64_t *out, size_t capacity) {
  if ((uint64_t)p[0] > capacity) return tccrt_fail(TCCRT_INVALID_PACK, "a shape program has %lld dimensions, "
                                                   "more than %zu", (long long)p[0], capacity);
  size_t i = 1;
  for (int64_t d = 0; d < p[0]; d++) {
    size_t n = (size_t)p[i], unbound = 0;
    tccrt_status_t st = tccrt_shape_eval_dim(p + i + 1, n, slots, NULL, &unbound, &out[d]);
    if (st) return st;
    i += 1 + n;
  }
  return TCCRT_OK;
}
