/* Values of the VM (docs/vm.md "The machine"): tensors, tuples, shapes, bools, the stacks a
 * running Loop fills and the arenas planned tensors share.  Every value is one reference-counted object; the public
 * tccrt_tensor_t is a value of kind TCCRT_V_TENSOR.
 *
 * A tensor's bytes live in a storage, shared by the views (reshape) of one tensor: owned
 * memory (64-byte aligned, freed with the last view), the caller's memory (tccrt_tensor_wrap;
 * never freed or written by the runtime) or a weight inside a pack's mapping (the storage
 * holds a reference to the pack). */
#ifndef TCCRT_VALUE_H_
#define TCCRT_VALUE_H_

#include <stdatomic.h>

#include "internal.h"

typedef enum tccrt_value_kind_e {
  TCCRT_V_TENSOR,
  TCCRT_V_TUPLE,
  TCCRT_V_SHAPE,
  TCCRT_V_BOOL,
  TCCRT_V_STACK,
  TCCRT_V_ARENA, /* one call's planned tensors (docs/vm.md "Memory planning") */
} tccrt_value_kind_t;

typedef enum tccrt_storage_kind_e {
  TCCRT_STORAGE_OWNED,
  TCCRT_STORAGE_BORROWED, /* the caller's memory */
  TCCRT_STORAGE_PACK,     /* a weight in a pack's mapping (read-only) */
  TCCRT_STORAGE_DEVICE,   /* GPU memory from the device's pool (cuda.h): `data` is its address */
  TCCRT_STORAGE_POOLED,   /* owned, from a module's host pool, to which it goes back */
} tccrt_storage_kind_t;

typedef struct tccrt_cuda_t tccrt_cuda_t;

/* Host memory a module keeps between its calls (host_pool.c): blocks of freed tensors and
 * arenas, handed out again to later ones, TCCRT_ARENA_ALIGN-aligned. Thread-safe;
 * reference-counted, so a tensor that outlives its module still has a pool to go back to. */
typedef struct tccrt_host_pool_t tccrt_host_pool_t;
tccrt_host_pool_t *tccrt_host_pool_new(void);
tccrt_host_pool_t *tccrt_host_pool_retain(tccrt_host_pool_t *pool);
void tccrt_host_pool_release(tccrt_host_pool_t *pool);
/* A block of at least `*size` bytes (`*size` becomes its size), or NULL when memory runs out. */
void *tccrt_host_pool_alloc(tccrt_host_pool_t *pool, size_t *size);
/* A block tccrt_host_pool_alloc gave, of its `size`: kept for a later call, or freed. */
void tccrt_host_pool_give_back(tccrt_host_pool_t *pool, void *data, size_t size);

typedef struct tccrt_storage_t {
  atomic_int refs;
  tccrt_storage_kind_t kind;
  void *data;
  tccrt_pack_t *pack; /* TCCRT_STORAGE_PACK: the reference that keeps the mapping */
  tccrt_cuda_t *cuda; /* TCCRT_STORAGE_DEVICE: the device (a reference) */
  tccrt_host_pool_t *pool; /* TCCRT_STORAGE_POOLED: the pool (a reference) */
  size_t pool_size;        /* TCCRT_STORAGE_POOLED: the block's size */
} tccrt_storage_t;

#define TCCRT_DL_CUDA 2 /* DLPack's device type of a tensor in GPU memory (kDLCUDA) */

/* The dtypes tensors may have (those the CPU kernels take), with their DLPack codes. */
typedef struct tccrt_dtype_t {
  const char *name;
  uint8_t code; /* DLPack type code */
  uint8_t bits;
} tccrt_dtype_t;

typedef tccrt_tensor_t tccrt_value_t;

struct tccrt_tensor_t {
  atomic_int refs;
  tccrt_value_kind_t kind;
  /* TCCRT_V_TENSOR */
  tccrt_storage_t *storage;
  const tccrt_dtype_t *dtype;
  tccrt_dl_tensor_t dl; /* dl.shape points at dims */
  size_t size;          /* elements */
  /* TCCRT_V_SHAPE and tensors: the dimensions; TCCRT_V_TUPLE and _STACK: the items;
   * TCCRT_V_ARENA: `n` tensors, offsets dims[0 .. n-1] and byte sizes dims[n .. 2n-1] into
   * the buffer `storage` (of `size` bytes) */
  size_t n, capacity;
  int64_t *dims;
  tccrt_value_t **items;
  int truth; /* TCCRT_V_BOOL */
};

/* The dtype called `name`, or NULL when tensors cannot have it. */
const tccrt_dtype_t *tccrt_dtype_find(const char *name);
size_t tccrt_dtype_size(const tccrt_dtype_t *dtype);
/* The dtype of a DLPack code and bits, as numpy names it (float32 for bfloat16's), or NULL. */
const tccrt_dtype_t *tccrt_dtype_of(uint8_t code, uint8_t bits);

/* A tensor of `dtype` and `shape` over fresh owned memory (zeroed when `zero`); fails
 * with a message when the size overflows or memory runs out. */
tccrt_status_t tccrt_tensor_alloc(const tccrt_dtype_t *dtype, size_t rank, const int64_t *shape,
                                  int zero, tccrt_value_t **out);
/* The same on the GPU `cuda` when it is not NULL (uninitialized; dl.device is CUDA's), else
from the host `pool` when it is not NULL. */
tccrt_status_t tccrt_tensor_alloc_on(tccrt_cuda_t *cuda, tccrt_host_pool_t *pool, const tccrt_dtype_t *dtype,
                                     size_t rank, const int64_t *shape, tccrt_value_t **out);
/* Whether a tensor's bytes are in GPU memory. */
int tccrt_tensor_on_device(const tccrt_value_t *x);
/* `x` in host memory: itself (a new reference), or a copy of a GPU tensor's bytes. */
tccrt_status_t tccrt_tensor_to_host(tccrt_value_t *x, tccrt_value_t **out);
/* `x` in the GPU memory of `cuda`: itself (a new reference) when it is there, else a copy. */
tccrt_status_t tccrt_tensor_to_device(tccrt_cuda_t *cuda, tccrt_value_t *x, tccrt_value_t **out);
/* A view of `base`'s storage with another shape of the same element count. */
tccrt_status_t tccrt_tensor_view(tccrt_value_t *base, size_t rank, const int64_t *shape,
                                 tccrt_value_t **out);
/* A tensor over a pack's weight (the storage retains the pack). */
tccrt_status_t tccrt_tensor_weight(tccrt_pack_t *pack, size_t weight, tccrt_value_t **out);
/* Where `n` tensors of `sizes` bytes (each >= 0), live over `lifetimes` ([start, end] pairs),
 * go in an arena: greedy by size, as tcc/rt/arena.py's plan_arena (vm.c).  Fills `offsets` and
 * `*total` (the arena's bytes); fails when the sizes add up past int64. */
tccrt_status_t tccrt_plan_arena(size_t n, const int64_t *sizes, const int64_t *lifetimes, int64_t *offsets,
                                int64_t *total);
/* An arena value: `nbytes` fresh owned bytes, TCCRT_ARENA_ALIGN-aligned (on the GPU `cuda`
 * when it is not NULL, else from the host `pool` when it is not NULL), holding `n` tensors at
 * `offsets` of at most `sizes` bytes (both copied). */
tccrt_status_t tccrt_arena_value_new(tccrt_cuda_t *cuda, tccrt_host_pool_t *pool, size_t nbytes, size_t n,
                                     const int64_t *offsets, const int64_t *sizes, tccrt_value_t **out);
/* A tensor of `dtype` and `shape` at tensor `index`'s offset in `arena`, which the caller has
 * checked holds it there. */
tccrt_status_t tccrt_tensor_in_arena(tccrt_value_t *arena, size_t index, const tccrt_dtype_t *dtype, size_t rank,
                                     const int64_t *shape, tccrt_value_t **out);
/* An owned copy of tensor `x`, where `x` is (host or GPU). */
tccrt_status_t tccrt_tensor_copy(const tccrt_value_t *x, tccrt_value_t **out);
size_t tccrt_tensor_bytes(const tccrt_value_t *x);

/* Non-tensor values; NULL when out of memory (the message is set). */
tccrt_value_t *tccrt_value_new(tccrt_value_kind_t kind, size_t n);
/* Append `item` (a new reference is taken) to a tuple or stack; 0 when out of memory. */
int tccrt_value_append(tccrt_value_t *list, tccrt_value_t *item);
tccrt_value_t *tccrt_value_retain(tccrt_value_t *v);
void tccrt_value_release(tccrt_value_t *v);
/* A value kind's name for messages ("tuple"), with its article ("a tuple", "an arena"). */
const char *tccrt_kind_name(tccrt_value_kind_t kind, int with_article);
const char *tccrt_value_kind_name(const tccrt_value_t *v);

/* "[2, 3]" into buf (truncated to fit), for messages. */
const char *tccrt_format_dims(char *buf, size_t size, const int64_t *dims, size_t n);

#endif /* TCCRT_VALUE_H_ */
