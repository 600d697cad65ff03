/* The CUDA driver API through dlopen (cuda.h): device 0, the pack's binary for it, a
 * stream, a memory pool, and kernel calls checked and launched as tcc/rt/cuda.py's. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "shape.h"
#include "value.h"

#define DRIVER_ENV "TCC_CUDA_DRIVER"
#define DRIVER_LIBRARY "libcuda.so.1"
#define NO_DEVICE 100 /* CUDA_ERROR_NO_DEVICE */
#define COMPUTE_CAPABILITY_MAJOR 75
#define COMPUTE_CAPABILITY_MINOR 76
#define ALIGN 256 /* allocations are rounded up to this, so the pool reuses them */

typedef int cu_result_t;
typedef void *cu_handle_t; /* contexts, modules, functions, streams, events */

/* Every driver function used, with its signature, in one place. */
#define DRIVER_FUNCTIONS(X)                                                                          \
  X(cuInit, (unsigned))                                                                              \
  X(cuDeviceGetCount, (int *))                                                                       \
  X(cuDeviceGet, (int *, int))                                                                       \
  X(cuDeviceGetAttribute, (int *, int, int))                                                         \
  X(cuDevicePrimaryCtxRetain, (cu_handle_t *, int))                                                  \
  X(cuDevicePrimaryCtxRelease_v2, (int))                                                             \
  X(cuCtxSetCurrent, (cu_handle_t))                                                                  \
  X(cuModuleLoadData, (cu_handle_t *, const void *))                                                 \
  X(cuModuleUnload, (cu_handle_t))                                                                   \
  X(cuModuleGetFunction, (cu_handle_t *, cu_handle_t, const char *))                                 \
  X(cuMemAlloc_v2, (uint64_t *, size_t))                                                             \
  X(cuMemFree_v2, (uint64_t))                                                                        \
  X(cuMemcpyHtoDAsync_v2, (uint64_t, const void *, size_t, cu_handle_t))                             \
  X(cuMemcpyDtoHAsync_v2, (void *, uint64_t, size_t, cu_handle_t))                                   \
  X(cuMemcpyDtoDAsync_v2, (uint64_t, uint64_t, size_t, cu_handle_t))                                 \
  X(cuStreamCreate, (cu_handle_t *, unsigned))                                                       \
  X(cuStreamDestroy_v2, (cu_handle_t))                                                               \
  X(cuStreamSynchronize, (cu_handle_t))                                                              \
  X(cuLaunchKernel, (cu_handle_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,        \
                     unsigned, cu_handle_t, void **, void **))                                       \
  X(cuGetErrorName, (cu_result_t, const char **))                                                    \
  X(cuEventCreate, (cu_handle_t *, unsigned))                                                        \
  X(cuEventRecord, (cu_handle_t, cu_handle_t))                                                       \
  X(cuEventSynchronize, (cu_handle_t))                                                               \
  X(cuEventElapsedTime, (float *, cu_handle_t, cu_handle_t))                                         \
  X(cuEventDestroy_v2, (cu_handle_t))

typedef struct driver_t {
  void *library;
#define DECLARE(name, params) cu_result_t(*name) params;
  DRIVER_FUNCTIONS(DECLARE)
#undef DECLARE
} driver_t;

typedef struct pool_entry_t {
  uint64_t ptr;
  size_t size;
  int free;
} pool_entry_t;

struct tccrt_cuda_t {
  atomic_int refs;
  const tccrt_pack_t *pack; /* not retained: the module that opened this holds the pack */
  driver_t drv;
  int device, context_retained;
  cu_handle_t context, module, stream, events[2];
  char *ptx; /* the PTX image, NUL-terminated, when that is what was loaded */
  cu_handle_t **functions; /* per kernel, per launch */
  pthread_mutex_t lock;    /* the pool */
  pool_entry_t *pool;
  size_t pool_count, pool_capacity;
};

static const char *error_name(const tccrt_cuda_t *cu, cu_result_t result, char *buf, size_t size) {
  const char *name = NULL;
  if (cu->drv.cuGetErrorName && cu->drv.cuGetErrorName(result, &name) == 0 && name) return name;
  snprintf(buf, size, "CUDA error %d", result);
  return buf;
}

/* A failed call as one line: "<lead> (<call>: <error name>)". */
static tccrt_status_t failed(const tccrt_cuda_t *cu, cu_result_t result, const char *call, const char *lead) {
  char buf[32], fallback[160];
  if (!lead) {
    snprintf(fallback, sizeof fallback, "the CUDA driver failed in %s", call);
    lead = fallback;
  }
  return tccrt_fail(TCCRT_KERNEL_ERROR, "%s (%s: %s)", lead, call, error_name(cu, result, buf, sizeof buf));
}

/* Call driver function `fn`; on failure return its one-line error. */
#define CHECK(cu, fn, args, lead) \
  do { cu_result_t r_ = (cu)->drv.fn args; if (r_) return failed(cu, r_, #fn, lead); } while (0)

static tccrt_status_t open_driver(tccrt_cuda_t *cu) {
  const char *path = getenv(DRIVER_ENV);
  if (!path || !*path) path = DRIVER_LIBRARY;
  driver_t *d = &cu->drv;
  d->library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  const char *why = d->library ? NULL : dlerror();
  void *sym;
#define RESOLVE(name, params)                                             \
  if (!why) {                                                             \
    sym = dlsym(d->library, #name);                                       \
    if (!sym) why = dlerror();                                            \
    else memcpy(&d->name, &sym, sizeof sym); /* POSIX: converts as such */ \
  }
  DRIVER_FUNCTIONS(RESOLVE)
#undef RESOLVE
  if (why) {
    tccrt_status_t st = tccrt_fail(TCCRT_KERNEL_ERROR, "no CUDA driver found: %s cannot be loaded (%s); run CUDA "
                                   "packs on a machine with an NVIDIA GPU and its driver, or compile with "
                                   "--target llvm", path, why);
    memset(d, 0, sizeof *d);
    return st;
  }
  cu_result_t r = d->cuInit(0);
  if (r == NO_DEVICE)
    return tccrt_fail(TCCRT_KERNEL_ERROR, "no CUDA device found: the driver sees no GPU (cuInit: "
                      "CUDA_ERROR_NO_DEVICE); run CUDA packs on a machine with an NVIDIA GPU, or compile with "
                      "--target llvm");
  if (r) return failed(cu, r, "cuInit", "no CUDA driver found: the driver did not start");
  return TCCRT_OK;
}

/* The binary for compute capability `arch` (90 for sm_90), as tcc.rt.cuda.pick_binary: the
 * cubin of the newest arch of the same major version at most the device's, else the newest
 * PTX no newer than the device; -1 when there is none. */
static long pick_binary(const tccrt_cuda_code_t *code, int arch) {
  long best = -1, best_ptx = -1;
  int best_arch = 0, best_ptx_arch = 0;
  for (size_t i = 0; i < code->binary_count; i++) {
    const char *name = code->binary_names[i];
    int cubin = strncmp(name, "sm_", 3) == 0, a = atoi(name + (cubin ? 3 : 8)); /* checked: digits */
    if (cubin && a / 10 == arch / 10 && a <= arch && a > best_arch) best = (long)i, best_arch = a;
    if (!cubin && a <= arch && a > best_ptx_arch) best_ptx = (long)i, best_ptx_arch = a;
  }
  return best >= 0 ? best : best_ptx;
}

static int by_name(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static tccrt_status_t no_code_for(const tccrt_cuda_code_t *code, int arch) {
  const char *names[64];
  char have[512] = "";
  size_t n = code->binary_count < 64 ? code->binary_count : 64;
  memcpy(names, code->binary_names, n * sizeof *names);
  qsort(names, n, sizeof *names, by_name);
  for (size_t i = 0; i < n && strlen(have) < sizeof have - 100; i++)
    snprintf(have + strlen(have), sizeof have - strlen(have), "%s%.40s", i ? ", " : "", names[i]);
  return tccrt_fail(TCCRT_KERNEL_ERROR, "the pack has CUDA code for %s and this GPU is sm_%d; compile again "
                    "with --target 'cuda -arch=sm_%d'", have, arch, arch);
}

static tccrt_status_t attribute(tccrt_cuda_t *cu, int which, int *out) {
  CHECK(cu, cuDeviceGetAttribute, (out, which, cu->device), NULL);
  return TCCRT_OK;
}

static tccrt_status_t load_module(tccrt_cuda_t *cu) {
  const tccrt_cuda_code_t *code = cu->pack->cuda;
  int count = 0, major, minor;
  tccrt_status_t st;
  CHECK(cu, cuDeviceGetCount, (&count), "no CUDA device found");
  if (count < 1)
    return tccrt_fail(TCCRT_KERNEL_ERROR, "no CUDA device found: the driver sees %d devices; run CUDA packs on "
                      "a machine with an NVIDIA GPU", count);
  CHECK(cu, cuDeviceGet, (&cu->device, 0), NULL);
  if ((st = attribute(cu, COMPUTE_CAPABILITY_MAJOR, &major)) || (st = attribute(cu, COMPUTE_CAPABILITY_MINOR, &minor)))
    return st;
  int arch = major * 10 + minor;
  long chosen = pick_binary(code, arch);
  if (chosen < 0) return no_code_for(code, arch);
  CHECK(cu, cuDevicePrimaryCtxRetain, (&cu->context, cu->device), NULL);
  cu->context_retained = 1;
  CHECK(cu, cuCtxSetCurrent, (cu->context), NULL);
  const tccrt_member_t *binary = code->binaries[chosen];
  const void *image = cu->pack->data + binary->offset;
  if (strncmp(code->binary_names[chosen], "compute_", 8) == 0) { /* PTX is text: the driver wants a NUL */
    cu->ptx = malloc(binary->size + 1);
    if (!cu->ptx) return tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory loading the pack's PTX");
    memcpy(cu->ptx, image, binary->size);
    cu->ptx[binary->size] = '\0';
    image = cu->ptx;
  }
  char lead[160];
  snprintf(lead, sizeof lead, "the GPU driver cannot load the pack's %s code", code->binary_names[chosen]);
  CHECK(cu, cuModuleLoadData, (&cu->module, image), lead);
  CHECK(cu, cuStreamCreate, (&cu->stream, 0), NULL);
  cu->functions = calloc(code->kernel_count + 1, sizeof *cu->functions);
  if (!cu->functions) return tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory loading the pack's CUDA kernels");
  for (size_t k = 0; k < code->kernel_count; k++) {
    const tccrt_device_kernel_t *kernel = &code->kernels[k];
    cu->functions[k] = calloc(kernel->launch_count + 1, sizeof **cu->functions);
    if (!cu->functions[k]) return tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory loading the pack's CUDA kernels");
    for (size_t l = 0; l < kernel->launch_count; l++) {
      const char *name = kernel->launches[l].function;
      snprintf(lead, sizeof lead, "the pack's CUDA code has no function '%.80s'; rebuild the pack", name);
      CHECK(cu, cuModuleGetFunction, (&cu->functions[k][l], cu->module, name), lead);
    }
  }
  return TCCRT_OK;
}

static void close_device(tccrt_cuda_t *cu) {
  driver_t *d = &cu->drv;
  if (d->library) {
    if (cu->stream) d->cuStreamSynchronize(cu->stream);
    for (size_t i = 0; i < cu->pool_count; i++) d->cuMemFree_v2(cu->pool[i].ptr);
    for (int e = 0; e < 2; e++)
      if (cu->events[e]) d->cuEventDestroy_v2(cu->events[e]);
    if (cu->stream) d->cuStreamDestroy_v2(cu->stream);
    if (cu->module) d->cuModuleUnload(cu->module);
    if (cu->context_retained) d->cuDevicePrimaryCtxRelease_v2(cu->device);
    dlclose(d->library);
  }
  for (size_t k = 0; cu->functions && k < cu->pack->cuda->kernel_count; k++) free(cu->functions[k]);
  free(cu->functions);
  free(cu->pool);
  free(cu->ptx);
  pthread_mutex_destroy(&cu->lock);
  free(cu);
}

tccrt_status_t tccrt_cuda_open(const tccrt_pack_t *pack, tccrt_cuda_t **out) {
  *out = NULL;
  tccrt_cuda_t *cu = calloc(1, sizeof *cu);
  if (!cu) return tccrt_fail(TCCRT_OUT_OF_MEMORY, "%s: out of memory opening the GPU", pack->path);
  atomic_init(&cu->refs, 1);
  cu->pack = pack;
  pthread_mutex_init(&cu->lock, NULL);
  tccrt_status_t st = open_driver(cu);
  if (!st) st = load_module(cu);
  if (st) {
    /* name the pack, as tcc.rt.load does */
    char why[1024];
    snprintf(why, sizeof why, "%s", tccrt_last_error());
    close_device(cu);
    return tccrt_fail(st, "%s: %s", pack->path, why);
  }
  *out = cu;
  return TCCRT_OK;
}

tccrt_cuda_t *tccrt_cuda_retain(tccrt_cuda_t *cuda) {
  if (cuda) atomic_fetch_add(&cuda->refs, 1);
  return cuda;
}

void tccrt_cuda_release(tccrt_cuda_t *cuda) {
  if (cuda && atomic_fetch_sub(&cuda->refs, 1) == 1) close_device(cuda);
}

tccrt_status_t tccrt_cuda_enter(tccrt_cuda_t *cu) {
  CHECK(cu, cuCtxSetCurrent, (cu->context), NULL);
  return TCCRT_OK;
}

/* -- memory ----------------------------------------------------------------------------- */

static size_t rounded(size_t nbytes) { return nbytes <= ALIGN ? ALIGN : (nbytes + ALIGN - 1) / ALIGN * ALIGN; }

tccrt_status_t tccrt_cuda_alloc(tccrt_cuda_t *cu, size_t nbytes, uint64_t *out) {
  if (nbytes > SIZE_MAX - ALIGN)
    return tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of GPU memory allocating %zu bytes", nbytes);
  size_t size = rounded(nbytes);
  pthread_mutex_lock(&cu->lock);
  for (size_t i = 0; i < cu->pool_count; i++)
    if (cu->pool[i].free && cu->pool[i].size == size) {
      cu->pool[i].free = 0;
      *out = cu->pool[i].ptr;
      pthread_mutex_unlock(&cu->lock);
      return TCCRT_OK;
    }
  tccrt_status_t st = TCCRT_OK;
  if (cu->pool_count == cu->pool_capacity) {
    size_t cap = cu->pool_capacity ? 2 * cu->pool_capacity : 64;
    pool_entry_t *grown = realloc(cu->pool, cap * sizeof *grown);
    if (grown) cu->pool = grown, cu->pool_capacity = cap;
    else st = tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory tracking GPU memory");
  }
  uint64_t ptr = 0;
  cu_result_t r = st ? 0 : cu->drv.cuMemAlloc_v2(&ptr, size);
  if (r) {
    char buf[32];
    st = tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of GPU memory allocating %zu bytes (cuMemAlloc_v2: %s)", size,
                    error_name(cu, r, buf, sizeof buf));
  } else if (!st) {
    cu->pool[cu->pool_count++] = (pool_entry_t){ptr, size, 0};
    *out = ptr;
  }
  pthread_mutex_unlock(&cu->lock);
  return st;
}

void tccrt_cuda_free(tccrt_cuda_t *cu, uint64_t ptr) {
  pthread_mutex_lock(&cu->lock);
  for (size_t i = 0; i < cu->pool_count; i++)
    if (cu->pool[i].ptr == ptr) {
      cu->pool[i].free = 1;
      break;
    }
  pthread_mutex_unlock(&cu->lock);
}

tccrt_status_t tccrt_cuda_synchronize(tccrt_cuda_t *cu) {
  CHECK(cu, cuStreamSynchronize, (cu->stream), "a kernel failed on the GPU");
  return TCCRT_OK;
}

tccrt_status_t tccrt_cuda_to_device(tccrt_cuda_t *cu, uint64_t dst, const void *src, size_t nbytes) {
  if (!nbytes) return TCCRT_OK;
  CHECK(cu, cuMemcpyHtoDAsync_v2, (dst, src, nbytes, cu->stream), NULL);
  return tccrt_cuda_synchronize(cu);
}

tccrt_status_t tccrt_cuda_to_host(tccrt_cuda_t *cu, void *dst, uint64_t src, size_t nbytes) {
  if (!nbytes) return TCCRT_OK;
  CHECK(cu, cuMemcpyDtoHAsync_v2, (dst, src, nbytes, cu->stream), NULL);
  return tccrt_cuda_synchronize(cu);
}

tccrt_status_t tccrt_cuda_copy(tccrt_cuda_t *cu, uint64_t dst, uint64_t src, size_t nbytes) {
  if (nbytes) CHECK(cu, cuMemcpyDtoDAsync_v2, (dst, src, nbytes, cu->stream), NULL);
  return TCCRT_OK;
}

/* -- kernel calls ------------------------------------------------------------------------ */

static uint64_t device_address(const tccrt_dl_tensor_t *t) { return (uint64_t)(uintptr_t)t->data + t->byte_offset; }

static size_t elements(const tccrt_dl_tensor_t *t) {
  size_t n = 1;
  for (int32_t d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d]; /* a tensor's: no overflow */
  return n;
}

static size_t tensor_bytes(const tccrt_dl_tensor_t *t) { return elements(t) * ((t->dtype.bits + 7u) / 8u); }

/* A shape as Python prints a tuple ("(2, 5)", "(5,)", "()"), as tcc.rt.cuda words it. */
static const char *tuple_text(char *buf, size_t size, const int64_t *dims, size_t n) {
  size_t used = (size_t)snprintf(buf, size, "(");
  for (size_t i = 0; i < n && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "", (long long)dims[i]);
  if (used < size) snprintf(buf + used, size - used, n == 1 ? ",)" : ")");
  return buf;
}

/* The integer value of a one-element tensor, on the host or the device. */
static tccrt_status_t scalar_value(tccrt_cuda_t *cu, const tccrt_dl_tensor_t *t, int64_t *out) {
  unsigned char bytes[8] = {0};
  size_t size = (t->dtype.bits + 7u) / 8u;
  if (size > 8) size = 8;
  tccrt_status_t st = TCCRT_OK;
  if (t->device.device_type == TCCRT_DL_CUDA) st = tccrt_cuda_to_host(cu, bytes, device_address(t), size);
  else memcpy(bytes, (const char *)t->data + t->byte_offset, size);
  if (st) return st;
  uint64_t u = 0;
  memcpy(&u, bytes, 8); /* little-endian: the low bytes hold the value */
  int is_signed = t->dtype.code == 0 && size < 8;
  if (is_signed && (u >> (8 * size - 1) & 1)) u |= ~UINT64_C(0) << (8 * size); /* sign-extend */
  memcpy(out, &u, sizeof *out);
  return TCCRT_OK;
}

typedef struct call_t {
  tccrt_cuda_t *cu;
  const tccrt_device_kernel_t *k;
  cu_handle_t *functions; /* per launch */
  tccrt_dl_tensor_t **args;
  int64_t *sizes;
  uint64_t *pointers;  /* per buffer parameter, then per workspace */
  size_t *temp_bytes;  /* parallel to pointers: > 0 for memory taken for this call only */
  void **argv;
} call_t;

/* The size variables read off the arguments, with every dtype, dimension and
 * precondition checked (a GPU kernel given the wrong shapes would read out of bounds). */
static tccrt_status_t bind_sizes(call_t *c, size_t count) {
  const tccrt_device_kernel_t *k = c->k;
  const char *symbol = k->symbol;
  tccrt_status_t st;
  if (count != k->param_count)
    return tccrt_fail(TCCRT_KERNEL_ERROR, "%s: expected %zu arguments, got %zu", symbol, k->param_count, count);
  for (size_t i = 0; i < count; i++) {
    const tccrt_launch_param_t *p = &k->params[i];
    const tccrt_dl_tensor_t *a = c->args[i];
    const tccrt_dtype_t *want = tccrt_dtype_find(p->dtype), *got = tccrt_dtype_of(a->dtype.code, a->dtype.bits);
    int64_t rank = p->scalar ? 0 : p->shape[0];
    if (!want || !got || want->code != got->code || want->bits != got->bits || a->ndim != rank)
      return tccrt_fail(TCCRT_KERNEL_ERROR, "%s: argument %zu is %s of rank %d; the kernel takes %s of rank %lld",
                        symbol, i, got ? got->name : "?", (int)a->ndim, p->dtype, (long long)rank);
  }
  for (size_t v = 0; v < k->size_var_count; v++) {
    const tccrt_dl_tensor_t *a = c->args[k->bind[v][0]];
    if (k->bind[v][1] < 0) {
      if ((st = scalar_value(c->cu, a, &c->sizes[v]))) return st;
    } else {
      c->sizes[v] = a->shape[k->bind[v][1]];
    }
  }
  for (size_t i = 0; i < count; i++) {
    const tccrt_launch_param_t *p = &k->params[i];
    if (p->scalar) continue;
    int64_t want[64];
    if ((st = tccrt_shape_eval(p->shape, c->sizes, want, 64))) return st;
    const tccrt_dl_tensor_t *a = c->args[i];
    if (memcmp(a->shape, want, (size_t)a->ndim * sizeof *want) != 0) {
      char g[160], w[160];
      return tccrt_fail(TCCRT_KERNEL_ERROR, "%s: argument %zu has shape %s; the kernel takes %s", symbol, i,
                        tuple_text(g, sizeof g, a->shape, (size_t)a->ndim),
                        tuple_text(w, sizeof w, want, (size_t)a->ndim));
    }
  }
  size_t n = (size_t)k->preconditions[0];
  int64_t small[16], *holds = n <= 16 ? small : malloc(n * sizeof *holds);
  if (!holds) return tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory checking %s's sizes", symbol);
  st = tccrt_shape_eval(k->preconditions, c->sizes, holds, n);
  size_t broken = n;
  for (size_t i = 0; !st && i < n && broken == n; i++)
    if (!holds[i]) broken = i;
  if (holds != small) free(holds);
  if (st || broken == n) return st;
  char values[512] = "";
  for (size_t v = 0; v < k->size_var_count && strlen(values) < sizeof values - 100; v++)
    snprintf(values + strlen(values), sizeof values - strlen(values), "%s%.60s = %lld", v ? ", " : "",
             k->size_vars[v], (long long)c->sizes[v]);
  return tccrt_fail(TCCRT_KERNEL_ERROR, "%s: these sizes (%s) break the kernel's precondition %zu; check the "
                    "input shapes", symbol, values, broken);
}

/* Device memory for each buffer parameter (a host tensor's copied over for the call) and
 * each workspace; `slot` counts them. */
static tccrt_status_t place_buffers(call_t *c, size_t *slot) {
  const tccrt_device_kernel_t *k = c->k;
  tccrt_status_t st;
  for (size_t i = 0; i < k->param_count; i++) {
    if (k->params[i].scalar) continue;
    const tccrt_dl_tensor_t *a = c->args[i];
    size_t at = (*slot)++, nbytes = tensor_bytes(a);
    if (a->device.device_type == TCCRT_DL_CUDA || !nbytes) {
      c->pointers[at] = nbytes ? device_address(a) : 0;
      continue;
    }
    if ((st = tccrt_cuda_alloc(c->cu, nbytes, &c->pointers[at]))) return st;
    c->temp_bytes[at] = nbytes;
    const void *host = (const char *)a->data + a->byte_offset;
    CHECK(c->cu, cuMemcpyHtoDAsync_v2, (c->pointers[at], host, nbytes, c->cu->stream), NULL);
  }
  for (size_t w = 0; w < k->workspace_count; w++) {
    const tccrt_workspace_t *ws = &k->workspaces[w];
    int64_t count;
    size_t at = (*slot)++, nbytes;
    if ((st = tccrt_shape_eval(ws->count, c->sizes, &count, 1))) return st;
    if (count < 0 || __builtin_mul_overflow((size_t)count, tccrt_dtype_size(tccrt_dtype_find(ws->dtype)), &nbytes))
      return tccrt_fail(TCCRT_INVALID_INPUT, "%s: workspace '%.80s' has %lld elements; check the input shapes",
                        k->symbol, ws->name, (long long)count);
    c->pointers[at] = 0;
    if (nbytes && (st = tccrt_cuda_alloc(c->cu, nbytes, &c->pointers[at]))) return st;
    c->temp_bytes[at] = nbytes;
  }
  return TCCRT_OK;
}

static tccrt_status_t launch(call_t *c) {
  const tccrt_device_kernel_t *k = c->k;
  tccrt_cuda_t *cu = c->cu;
  for (size_t l = 0; l < k->launch_count; l++) {
    const tccrt_launch_t *spec = &k->launches[l];
    int64_t grid[3];
    tccrt_status_t st = tccrt_shape_eval(spec->grid, c->sizes, grid, 3);
    if (st) return st;
    if (grid[0] <= 0 || grid[1] <= 0 || grid[2] <= 0) continue; /* an empty tensor: nothing to compute */
    if (grid[0] > UINT32_MAX || grid[1] > UINT32_MAX || grid[2] > UINT32_MAX)
      return tccrt_fail(TCCRT_INVALID_INPUT, "%s: %s needs a grid of %lld x %lld x %lld blocks, more than a "
                        "launch takes; check the input shapes", k->symbol, spec->function, (long long)grid[0],
                        (long long)grid[1], (long long)grid[2]);
    cu_result_t r = cu->drv.cuLaunchKernel(c->functions[l], (unsigned)grid[0], (unsigned)grid[1],
                                           (unsigned)grid[2], spec->block[0], spec->block[1], spec->block[2], 0,
                                           cu->stream, c->argv, NULL);
    if (r) { /* the message is made only when needed: launches are the hot path */
      char lead[200];
      snprintf(lead, sizeof lead, "%.80s: launching %.80s failed", k->symbol, spec->function);
      return failed(cu, r, "cuLaunchKernel", lead);
    }
  }
  return TCCRT_OK;
}

/* Host tensors the kernel wrote get their bytes back; memory taken for the call goes back
 * to the pool once the stream is done with it. */
static tccrt_status_t finish(call_t *c, size_t slots, tccrt_status_t st) {
  const tccrt_device_kernel_t *k = c->k;
  size_t slot = 0;
  int took = 0;
  for (size_t i = 0; i < k->param_count && !st; i++) {
    if (k->params[i].scalar) continue;
    size_t at = slot++;
    if (!c->temp_bytes[at] || !k->params[i].written) continue;
    tccrt_dl_tensor_t *a = c->args[i];
    cu_result_t r = c->cu->drv.cuMemcpyDtoHAsync_v2((char *)a->data + a->byte_offset, c->pointers[at],
                                                     c->temp_bytes[at], c->cu->stream);
    if (r) st = failed(c->cu, r, "cuMemcpyDtoHAsync_v2", NULL);
  }
  for (size_t at = 0; at < slots; at++) took |= c->temp_bytes[at] > 0;
  if (took) {
    tccrt_status_t sync = tccrt_cuda_synchronize(c->cu);
    if (!st) st = sync;
    for (size_t at = 0; at < slots; at++)
      if (c->temp_bytes[at]) tccrt_cuda_free(c->cu, c->pointers[at]);
  }
  return st;
}

tccrt_status_t tccrt_cuda_call(tccrt_cuda_t *cu, size_t kernel, tccrt_dl_tensor_t **args, size_t count) {
  const tccrt_device_kernel_t *k = &cu->pack->cuda->kernels[kernel];
  size_t slots = k->param_count + k->workspace_count, words = slots + k->size_var_count;
  call_t c = {cu, k, cu->functions[kernel], args, calloc(k->size_var_count + 1, sizeof(int64_t)), calloc(slots + 1, sizeof(uint64_t)),
              calloc(slots + 1, sizeof(size_t)), calloc(words + 1, sizeof(void *))};
  tccrt_status_t st = TCCRT_OK;
  size_t placed = 0;
  if (!c.sizes || !c.pointers || !c.temp_bytes || !c.argv)
    st = tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory calling kernel '%s'", k->symbol);
  if (!st) st = bind_sizes(&c, count);
  if (!st) st = place_buffers(&c, &placed);
  if (!st) {
    /* the arguments, as cuLaunchKernel takes them: a pointer to each */
    for (size_t i = 0; i < placed; i++) c.argv[i] = &c.pointers[i];
    for (size_t v = 0; v < k->size_var_count; v++) c.argv[placed + v] = &c.sizes[v];
    st = launch(&c);
  }
  if (c.temp_bytes) st = finish(&c, placed, st);
  free(c.sizes);
  free(c.pointers);
  free(c.temp_bytes);
  free(c.argv);
  return st;
}

tccrt_status_t tccrt_cuda_timed(tccrt_cuda_t *cu, tccrt_cuda_work_fn work, void *context, uint64_t *ns) {
  for (int e = 0; e < 2; e++)
    if (!cu->events[e]) CHECK(cu, cuEventCreate, (&cu->events[e], 0), NULL);
  CHECK(cu, cuEventRecord, (cu->events[0], cu->stream), NULL);
  tccrt_status_t st = work(context);
  if (st) return st;
  CHECK(cu, cuEventRecord, (cu->events[1], cu->stream), NULL);
  CHECK(cu, cuEventSynchronize, (cu->events[1]), "a kernel failed on the GPU");
  float ms = 0;
  CHECK(cu, cuEventElapsedTime, (&ms, cu->events[0], cu->events[1]), NULL);
  *ns = ms > 0 ? (uint64_t)((double)ms * 1e6) : 0;
  return TCCRT_OK;
}
