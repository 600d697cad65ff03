/* Values and tensors (value.h), and the public tccrt_tensor_* calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "pack_internal.h"
#include "tccrt_pack.h"
#include "value.h"


const char *tccrt_format_dims(char *buf, size_t size, const int64_t *dims, size_t n) {
  size_t used = (size_t)snprintf(buf, size, "[");
  for (size_t i = 0; i < n && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "", (long long)dims[i]);
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}

/* -- values ------------------------------------------------------------------------- */

tccrt_value_t *tccrt_value_new(tccrt_value_kind_t kind, size_t n) {
  tccrt_value_t *v = calloc(1, sizeof *v);
  if (v && n) {
    v->capacity = n;
    if (kind == TCCRT_V_SHAPE) v->dims = calloc(n, sizeof *v->dims);
    else v->items = calloc(n, sizeof *v->items);
    if (!v->dims && !v->items) {
      free(v);
      v = NULL;
    }
  }
  if (!v) {
    tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory making a VM value");
    return NULL;
  }
  atomic_init(&v->refs, 1);
  v->kind = kind;
  if (kind == TCCRT_V_SHAPE) v->n = n;
  return v;
}

int tccrt_value_append(tccrt_value_t *list, tccrt_value_t *item) {
  if (list->n == list->capacity) {
    size_t cap = list->capacity ? 2 * list->capacity : 8;
    tccrt_value_t **items = realloc(list->items, cap * sizeof *items);
    if (!items) {
      tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory collecting loop outputs");
      return 0;
    }
    list->items = items;
    list->capacity = cap;
  }
  list->items[list->n++] = tccrt_value_retain(item);
  return 1;
}

tccrt_value_t *tccrt_value_retain(tccrt_value_t *v) {
  if (v) atomic_fetch_add(&v->refs, 1);
  return v;
}

static void storage_release(tccrt_storage_t *s) {
  if (!s || atomic_fetch_sub(&s->refs, 1) != 1) return;
  if (s->kind == TCCRT_STORAGE_OWNED) free(s->data);
  if (s->kind == TCCRT_STORAGE_POOLED) {
    tccrt_host_pool_give_back(s->pool, s->data, s->pool_size);
    tccrt_host_pool_release(s->pool);
  }
  if (s->kind == TCCRT_STORAGE_PACK) tccrt_pack_release(s->pack);
  if (s->kind == TCCRT_STORAGE_DEVICE) {
    if (s->data) tccrt_cuda_free(s->cuda, (uint64_t)(uintptr_t)s->data);
    tccrt_cuda_release(s->cuda);
  }
  free(s);
}

void tccrt_value_release(tccrt_value_t *v) {
  if (!v || atomic_fetch_sub(&v->refs, 1) != 1) return;
  if (v->kind == TCCRT_V_TUPLE || v->kind == TCCRT_V_STACK)
    for (size_t i = 0; i < v->n; i++) tccrt_value_release(v->items[i]);
  storage_release(v->storage);
  free(v->items);
  free(v->dims);
  free(v);
}

const char *tccrt_kind_name(tccrt_value_kind_t kind, int with_article) {
  static const char *const names[] = {"a tensor", "a tuple", "a shape", "a bool", "a stack", "an arena"};
  return with_article ? names[kind] : strchr(names[kind], ' ') + 1;
}

const char *tccrt_value_kind_name(const tccrt_value_t *v) { return tccrt_kind_name(v->kind, 0); }

/* -- tensors ------------------------------------------------------------------------ */

/* A tensor value of `dtype` and `shape` without storage. */
static tccrt_status_t tensor_shell(const tccrt_dtype_t *dtype, size_t rank, const int64_t *shape,
                                   tccrt_value_t **out) {
  char dims[160];
  size_t size = 1;
  for (size_t d = 0; d < rank; d++) {
    if (shape[d] < 0)
      return tccrt_fail(TCCRT_INVALID_ARGUMENT, "a tensor of shape %s has a negative dimension",
                        tccrt_format_dims(dims, sizeof dims, shape, rank));
    if (__builtin_mul_overflow(size, (size_t)shape[d], &size) || size > (SIZE_MAX >> 4))
      return tccrt_fail(TCCRT_INVALID_ARGUMENT, "a tensor of shape %s is too large to hold",
                        tccrt_format_dims(dims, sizeof dims, shape, rank));
  }
  if (rank > INT32_MAX) return tccrt_fail(TCCRT_INVALID_ARGUMENT, "a tensor of rank %zu is too large", rank);
  tccrt_value_t *v = calloc(1, sizeof *v);
  int64_t *copy = calloc(rank ? rank : 1, sizeof *copy);
  if (!v || !copy) {
    free(v);
    free(copy);
    return tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory making a tensor");
  }
  if (rank) memcpy(copy, shape, rank * sizeof *copy);
  atomic_init(&v->refs, 1);
  v->kind = TCCRT_V_TENSOR;
  v->dtype = dtype;
  v->dims = copy;
  v->n = rank;
  v->size = size;
  v->dl.device.device_type = 1; /* kDLCPU */
  v->dl.ndim = (int32_t)rank;
  v->dl.dtype.code = dtype->code;
  v->dl.dtype.bits = dtype->bits;
  v->dl.dtype.lanes = 1;
  v->dl.shape = copy;
  *out = v;
  return TCCRT_OK;
}

static tccrt_storage_t *storage_new(tccrt_storage_kind_t kind, void *data) {
  tccrt_storage_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  atomic_init(&s->refs, 1);
  s->kind = kind;
  s->data = data;
  return s;
}

/* GPU memory of `nbytes` from `cuda`'s pool; NULL with the message set when it fails. */
static tccrt_storage_t *device_storage(tccrt_cuda_t *cuda, size_t nbytes) {
  uint64_t ptr = 0;
  if (nbytes && tccrt_cuda_alloc(cuda, nbytes, &ptr)) return NULL;
  tccrt_storage_t *s = storage_new(TCCRT_STORAGE_DEVICE, (void *)(uintptr_t)ptr);
  if (!s) {
    if (nbytes) tccrt_cuda_free(cuda, ptr);
    tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory making a GPU tensor");
    return NULL;
  }
  s->cuda = tccrt_cuda_retain(cuda);
  return s;
}

/* Host memory for `nbytes`, rounded up to TCCRT_ARENA_ALIGN (at least that much): from
 * `pool` when it is not NULL, else owned; NULL when memory runs out (no message). */
static tccrt_storage_t *host_storage(tccrt_host_pool_t *pool, size_t nbytes) {
  if (nbytes > SIZE_MAX - TCCRT_ARENA_ALIGN) return NULL;
  size_t size = nbytes ? (nbytes + TCCRT_ARENA_ALIGN - 1) / TCCRT_ARENA_ALIGN * TCCRT_ARENA_ALIGN
                       : TCCRT_ARENA_ALIGN;
  void *data = NULL;
  if (pool) data = tccrt_host_pool_alloc(pool, &size);
  else if (posix_memalign(&data, TCCRT_ARENA_ALIGN, size) != 0) data = NULL;
  tccrt_storage_t *s = data ? storage_new(pool ? TCCRT_STORAGE_POOLED : TCCRT_STORAGE_OWNED, data) : NULL;
  if (!s) {
    if (pool && data) tccrt_host_pool_give_back(pool, data, size);
    else free(data);
    return NULL;
  }
  if (pool) {
    s->pool = tccrt_host_pool_retain(pool);
    s->pool_size = size;
  }
  return s;
}

int tccrt_tensor_on_device(const tccrt_value_t *x) { return x->storage && x->storage->kind == TCCRT_STORAGE_DEVICE; }

size_t tccrt_tensor_bytes(const tccrt_value_t *x) { return x->size * tccrt_dtype_size(x->dtype); }

/* tccrt_tensor_alloc's tensor, in memory from `pool` when it is not NULL. */
static tccrt_status_t host_tensor(tccrt_host_pool_t *pool, const tccrt_dtype_t *dtype, size_t rank,
                                  const int64_t *shape, int zero, tccrt_value_t **out) {
  tccrt_value_t *v;
  tccrt_status_t st = tensor_shell(dtype, rank, shape, &v);
  if (st) return st;
  size_t nbytes = tccrt_tensor_bytes(v);
  v->storage = host_storage(pool, nbytes);
  if (!v->storage) {
    tccrt_value_release(v);
    return tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory allocating %zu bytes for a tensor", nbytes);
  }
  if (zero) memset(v->storage->data, 0, nbytes);
  v->dl.data = v->storage->data;
  *out = v;
  return TCCRT_OK;
}

tccrt_status_t tccrt_tensor_alloc(const tccrt_dtype_t *dtype, size_t rank, const int64_t *shape,
                                  int zero, tccrt_value_t **out) {
  return host_tensor(NULL, dtype, rank, shape, zero, out);
}

tccrt_status_t tccrt_tensor_alloc_on(tccrt_cuda_t *cuda, tccrt_host_pool_t *pool, const tccrt_dtype_t *dtype,
                                     size_t rank, const int64_t *shape, tccrt_value_t **out) {
  if (!cuda) return host_tensor(pool, dtype, rank, shape, 0, out);
  tccrt_value_t *v;
  tccrt_status_t st = tensor_shell(dtype, rank, shape, &v);
  if (st) return st;
  v->storage = device_storage(cuda, tccrt_tensor_bytes(v));
  if (!v->storage) {
    tccrt_value_release(v);
    return TCCRT_OUT_OF_MEMORY;
  }
  v->dl.data = v->storage->data;
  v->dl.device.device_type = TCCRT_DL_CUDA; /* device 0 */
  *out = v;
  return TCCRT_OK;
}

tccrt_status_t tccrt_tensor_to_host(tccrt_value_t *x, tccrt_value_t **out) {
  if (!tccrt_tensor_on_device(x)) {
    *out = tccrt_value_retain(x);
    return TCCRT_OK;
  }
  tccrt_status_t st = tccrt_tensor_alloc(x->dtype, x->n, x->dims, 0, out);
  if (!st) st = tccrt_cuda_to_host(x->storage->cuda, (*out)->dl.data, (uint64_t)(uintptr_t)x->dl.data,
                                   tccrt_tensor_bytes(x));
  if (st) {
    tccrt_value_release(*out);
    *out = NULL;
  }
  return st;
}

tccrt_status_t tccrt_tensor_to_device(tccrt_cuda_t *cuda, tccrt_value_t *x, tccrt_value_t **out) {
  if (tccrt_tensor_on_device(x)) {
    *out = tccrt_value_retain(x);
    return TCCRT_OK;
  }
  tccrt_status_t st = tccrt_tensor_alloc_on(cuda, NULL, x->dtype, x->n, x->dims, out);
  if (!st) st = tccrt_cuda_to_device(cuda, (uint64_t)(uintptr_t)(*out)->dl.data, x->dl.data, tccrt_tensor_bytes(x));
  if (st) {
    tccrt_value_release(*out);
    *out = NULL;
  }
  return st;
}

tccrt_status_t tccrt_tensor_view(tccrt_value_t *base, size_t rank, const int64_t *shape,
                                 tccrt_value_t **out) {
  tccrt_value_t *v;
  tccrt_status_t st = tensor_shell(base->dtype, rank, shape, &v);
  if (st) return st;
  if (v->size != base->size) {
    char a[160], b[160];
    tccrt_fail(TCCRT_INVALID_INPUT, "cannot view a tensor of shape %s as %s",
               tccrt_format_dims(a, sizeof a, base->dims, base->n), tccrt_format_dims(b, sizeof b, shape, rank));
    tccrt_value_release(v);
    return TCCRT_INVALID_INPUT;
  }
  v->storage = base->storage;
  atomic_fetch_add(&v->storage->refs, 1);
  v->dl.data = base->dl.data;
  v->dl.device = base->dl.device;
  *out = v;
  return TCCRT_OK;
}

tccrt_status_t tccrt_tensor_weight(tccrt_pack_t *pack, size_t weight, tccrt_value_t **out) {
  const tccrt_weight_info_t *w = &pack->weights[weight];
  const tccrt_dtype_t *dtype = tccrt_dtype_find(w->dtype);
  if (!dtype)
    return tccrt_fail(TCCRT_INVALID_PACK, "%s: weight '%s' has dtype %s, which the C runtime cannot "
                      "compute with", pack->path, w->name, w->dtype);
  tccrt_value_t *v;
  tccrt_status_t st = tensor_shell(dtype, w->rank, w->shape, &v);
  if (st) return st;
  v->storage = storage_new(TCCRT_STORAGE_PACK, (void *)w->data);
  if (!v->storage) {
    tccrt_value_release(v);
    return tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory loading weight '%s'", w->name);
  }
  tccrt_pack_retain(pack);
  v->storage->pack = pack;
  v->dl.data = (void *)w->data;
  *out = v;
  return TCCRT_OK;
}

tccrt_status_t tccrt_arena_value_new(tccrt_cuda_t *cuda, tccrt_host_pool_t *pool, size_t nbytes, size_t n,
                                     const int64_t *offsets, const int64_t *sizes, tccrt_value_t **out) {
  tccrt_value_t *v = tccrt_value_new(TCCRT_V_ARENA, 0);
  if (!v) return TCCRT_OUT_OF_MEMORY;
  size_t padded = (nbytes + TCCRT_ARENA_ALIGN - 1) / TCCRT_ARENA_ALIGN * TCCRT_ARENA_ALIGN;
  int fits = nbytes <= SIZE_MAX - TCCRT_ARENA_ALIGN && n <= SIZE_MAX / (2 * sizeof *v->dims);
  if (!fits) v->storage = NULL;
  else if (cuda) v->storage = device_storage(cuda, padded); /* aligned to more than TCCRT_ARENA_ALIGN */
  else v->storage = host_storage(pool, nbytes);
  v->dims = v->storage ? malloc((n ? 2 * n : 1) * sizeof *v->dims) : NULL;
  if (!v->dims) {
    int gpu_said = cuda && fits && !v->storage; /* the pool's message names the GPU */
    tccrt_value_release(v);
    if (gpu_said) return TCCRT_OUT_OF_MEMORY;
    return tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory allocating a %zu-byte arena", nbytes);
  }
  if (n) {
    memcpy(v->dims, offsets, n * sizeof *v->dims);
    memcpy(v->dims + n, sizes, n * sizeof *v->dims);
  }
  v->n = n;
  v->size = nbytes;
  *out = v;
  return TCCRT_OK;
}

tccrt_status_t tccrt_tensor_in_arena(tccrt_value_t *arena, size_t index, const tccrt_dtype_t *dtype, size_t rank,
                                     const int64_t *shape, tccrt_value_t **out) {
  tccrt_value_t *v;
  tccrt_status_t st = tensor_shell(dtype, rank, shape, &v);
  if (st) return st;
  v->storage = arena->storage;
  atomic_fetch_add(&v->storage->refs, 1);
  v->dl.data = (char *)v->storage->data + arena->dims[index];
  if (tccrt_tensor_on_device(v)) v->dl.device.device_type = TCCRT_DL_CUDA;
  *out = v;
  return TCCRT_OK;
}

tccrt_status_t tccrt_tensor_copy(const tccrt_value_t *x, tccrt_value_t **out) {
  tccrt_cuda_t *cuda = tccrt_tensor_on_device(x) ? x->storage->cuda : NULL;
  tccrt_status_t st = tccrt_tensor_alloc_on(cuda, NULL, x->dtype, x->n, x->dims, out);
  if (st || !x->size) return st;
  if (!cuda) {
    memcpy((*out)->dl.data, x->dl.data, tccrt_tensor_bytes(x));
    return TCCRT_OK;
  }
  st = tccrt_cuda_copy(cuda, (uint64_t)(uintptr_t)(*out)->dl.data, (uint64_t)(uintptr_t)x->dl.data,
                       tccrt_tensor_bytes(x));
  if (st) {
    tccrt_value_release(*out);
    *out = NULL;
  }
  return st;
}

/* -- the public calls ---------------------------------------------------------------- */

static tccrt_status_t public_dtype(const char *name, const char *call, const tccrt_dtype_t **out) {
  *out = tccrt_dtype_find(name);
  if (!*out)
    return tccrt_fail(TCCRT_INVALID_ARGUMENT,
                      "%s: dtype '%s' is not one the C runtime computes with (bool, int8..int64, "
                      "uint8..uint64, float16, float32, float64, bfloat16, float8_*, float4_e2m1fn, "
                      "int4, uint4, int2, uint2)", call, name ? name : "(null)");
  return TCCRT_OK;
}

tccrt_status_t tccrt_tensor_new(const char *dtype, size_t rank, const int64_t *shape,
                                tccrt_tensor_t **out_tensor) {
  const tccrt_dtype_t *dt;
  if (!out_tensor || (rank && !shape))
    return tccrt_fail(TCCRT_INVALID_ARGUMENT, "tccrt_tensor_new: NULL argument");
  tccrt_status_t st = public_dtype(dtype, "tccrt_tensor_new", &dt);
  return st ? st : tccrt_tensor_alloc(dt, rank, shape, 1, out_tensor);
}

tccrt_status_t tccrt_tensor_wrap(void *data, const char *dtype, size_t rank, const int64_t *shape,
                                 tccrt_tensor_t **out_tensor) {
  const tccrt_dtype_t *dt;
  if (!out_tensor || (rank && !shape))
    return tccrt_fail(TCCRT_INVALID_ARGUMENT, "tccrt_tensor_wrap: NULL argument");
  tccrt_status_t st = public_dtype(dtype, "tccrt_tensor_wrap", &dt);
  tccrt_value_t *v;
  if (st || (st = tensor_shell(dt, rank, shape, &v))) return st;
  if (!data && v->size) {
    tccrt_value_release(v);
    return tccrt_fail(TCCRT_INVALID_ARGUMENT, "tccrt_tensor_wrap: data is NULL for a non-empty tensor");
  }
  v->storage = storage_new(TCCRT_STORAGE_BORROWED, data);
  if (!v->storage) {
    tccrt_value_release(v);
    return tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory wrapping a tensor");
  }
  v->dl.data = data;
  *out_tensor = v;
  return TCCRT_OK;
}

void tccrt_tensor_retain(tccrt_tensor_t *tensor) { tccrt_value_retain(tensor); }
void tccrt_tensor_release(tccrt_tensor_t *tensor) { tccrt_value_release(tensor); }
const tccrt_dl_tensor_t *tccrt_tensor_dl(const tccrt_tensor_t *tensor) { return tensor ? &tensor->dl : NULL; }
const char *tccrt_tensor_dtype(const tccrt_tensor_t *tensor) { return tensor ? tensor->dtype->name : NULL; }
size_t tccrt_tensor_rank(const tccrt_tensor_t *tensor) { return tensor ? tensor->n : 0; }
const int64_t *tccrt_tensor_shape(const tccrt_tensor_t *tensor) { return tensor ? tensor->dims : NULL; }
void *tccrt_tensor_data(const tccrt_tensor_t *tensor) { return tensor ? tensor->dl.data : NULL; }
size_t tccrt_tensor_nbytes(const tccrt_tensor_t *tensor) { return tensor ? tccrt_tensor_bytes(tensor) : 0; }
