/* tcc's dtypes (tcc/rt/tensor.py DTYPES), in one table: the bytes a value takes in a pack's
 * weights and signatures, and, for those the CPU kernels take, the DLPack code and bits a
 * tensor of it carries (tcc/rt/format.py KERNEL_DTYPES: bfloat16 is held as float32, and
 * the 4- and 2-bit types keep their width in `bits` but take a byte each). */
#include <string.h>

#include "internal.h"
#include "value.h"

#define NOT_A_TENSOR 255 /* a DLPack code no tensor has: kernels do not take the dtype */

typedef struct {
  tccrt_dtype_t tensor; /* name, DLPack code (NOT_A_TENSOR), bits */
  unsigned itemsize;    /* bytes per element of the numpy dtype holding it (bfloat16 is held
                           as float32, sub-byte types take a byte each) */
} dtype_entry_t;

static const dtype_entry_t DTYPES[] = {
    {{"bool", 6, 8}, 1},
    {{"int8", 0, 8}, 1},
    {{"int16", 0, 16}, 2},
    {{"int32", 0, 32}, 4},
    {{"int64", 0, 64}, 8},
    {{"uint8", 1, 8}, 1},
    {{"uint16", 1, 16}, 2},
    {{"uint32", 1, 32}, 4},
    {{"uint64", 1, 64}, 8},
    {{"float16", 2, 16}, 2},
    {{"float32", 2, 32}, 4},
    {{"float64", 2, 64}, 8},
    {{"complex64", NOT_A_TENSOR, 0}, 8},
    {{"complex128", NOT_A_TENSOR, 0}, 16},
    {{"bfloat16", 2, 32}, 4},
    {{"float8_e4m3fn", 10, 8}, 1},
    {{"float8_e4m3fnuz", 11, 8}, 1},
    {{"float8_e5m2", 12, 8}, 1},
    {{"float8_e5m2fnuz", 13, 8}, 1},
    {{"float8_e8m0fnu", 14, 8}, 1},
    {{"float4_e2m1fn", 17, 4}, 1},
    {{"int4", 0, 4}, 1},
    {{"uint4", 1, 4}, 1},
    {{"int2", 0, 2}, 1},
    {{"uint2", 1, 2}, 1},
};

static const dtype_entry_t *entry(const char *name) {
  for (size_t i = 0; name && i < sizeof DTYPES / sizeof DTYPES[0]; i++)
    if (strcmp(DTYPES[i].tensor.name, name) == 0) return &DTYPES[i];
  return NULL;
}

unsigned tccrt_dtype_itemsize(const char *name) {
  const dtype_entry_t *e = entry(name);
  return e ? e->itemsize : 0;
}

int tccrt_dtype_known(const char *name) { return entry(name) != NULL; }

const tccrt_dtype_t *tccrt_dtype_find(const char *name) {
  const dtype_entry_t *e = entry(name);
  return e && e->tensor.code != NOT_A_TENSOR ? &e->tensor : NULL;
}

const tccrt_dtype_t *tccrt_dtype_of(uint8_t code, uint8_t bits) {
  for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++) /* float32 comes before bfloat16 */
    if (DTYPES[i].tensor.code == code && DTYPES[i].tensor.bits == bits) return &DTYPES[i].tensor;
  return NULL;
}

/* Bytes per element: a sub-byte value takes a whole byte. */
size_t tccrt_dtype_size(const tccrt_dtype_t *dtype) { return (dtype->bits + 7u) / 8u; }
