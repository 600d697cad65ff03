/* Shape programs (docs/vm.md, "Builtins"): postfix integer programs over numbered slots,
 * one per dimension, checked once where they are read (shape.c) and then evaluated. The
 * bytecode's builtins use them over a function's heap (verify.c, vm.c), and a CUDA launch
 * spec over its kernel's size variables (manifest.c, cuda.c). */
#ifndef TCCRT_SHAPE_H_
#define TCCRT_SHAPE_H_

#include <stddef.h>
#include <stdint.h>

#include "tcc_runtime.h"

/* A whole program `p` of `n` words ([ndim, then per dimension a word count and its
 * words]) over `slots` slots, of rank `ndim` (or any, -1): NULL when it is well formed,
 * else what is wrong with it (in `why`, the words tcc/rt/pack.py uses). */
const char *tccrt_shape_program_problem(const int64_t *p, size_t n, size_t slots, int64_t ndim, char *why,
                                        size_t why_size);

/* One dimension: `n` postfix words of a checked program over `slots`. With `bound`, a
 * slot not yet bound stops it: TCCRT_INVALID_PACK with `*unbound` set and no message, for
 * the caller to say where. Overflow and division by zero are TCCRT_INVALID_INPUT. */
tccrt_status_t tccrt_shape_eval_dim(const int64_t *words, size_t n, const int64_t *slots,
                                    const unsigned char *bound, size_t *unbound, int64_t *out);

/* Every dimension of a checked program over fully bound `slots` into `out` (its rank
 * values, at most `capacity`). */
tccrt_status_t tccrt_shape_eval(const int64_t *p, const int64_t *slots, int64_t *out, size_t capacity);

#endif /* TCCRT_SHAPE_H_ */
