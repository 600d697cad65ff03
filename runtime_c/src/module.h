/* A loaded pack: its kernels and what runs them (module.c, kernels.c, vm.c). */
#ifndef TCCRT_MODULE_H_
#define TCCRT_MODULE_H_

#include "pack_internal.h"
#include "value.h"

/* The kernel ABI (docs/compile.md §3): inputs, outputs, then shape arguments as DLTensors;
 * 0 on success, else tcc_last_error() says why. */
typedef int32_t (*tccrt_kernel_fn)(tccrt_dl_tensor_t **args, int32_t count);

typedef struct tccrt_kernels_t {
  void *handle; /* dlopen handle; NULL when the pack has no kernels */
  int memfd;    /* the anonymous file the library was opened from, or -1 */
  tccrt_kernel_fn *fns; /* by kernel-table index */
  const char *(*last_error)(void);
  void (*set_num_threads)(int32_t);
} tccrt_kernels_t;

/* Open the pack's shared object and resolve every kernel of its table (kernels.c). */
tccrt_status_t tccrt_kernels_load(const tccrt_pack_t *pack, tccrt_kernels_t *out);
void tccrt_kernels_unload(tccrt_kernels_t *kernels);

/* What a profiled module gathers (tccrt_module_set_profiling): per function-table entry,
 * the calls and nanoseconds of its kernel or builtin; and the runs and their whole time. */
typedef struct tccrt_profile_t {
  int on;
  size_t n;
  uint64_t *calls, *ns;
  uint64_t runs, total_ns;
} tccrt_profile_t;

struct tccrt_module_t {
  atomic_int refs;
  tccrt_pack_t *pack;
  tccrt_kernels_t kernels;
  tccrt_cuda_t *cuda; /* the GPU the pack's CUDA kernels run on; NULL for a CPU pack */
  tccrt_host_pool_t *host_pool; /* host memory kept between calls for tensors and arenas */
  tccrt_profile_t profile;
  /* Each weight of the pack as a tensor, made once at load (NULL for a dtype the runtime
   * cannot compute with; in GPU memory when `cuda` is set): load_constant hands out a
   * reference instead of a new tensor. */
  tccrt_value_t **weights;
  struct tccrt_module_t *next_open, *prev_open; /* the list of loaded modules (module.c) */
};

/* A monotonic clock in nanoseconds. */
uint64_t tccrt_now_ns(void);

/* Run VM function `function` of the pack's program on `args` (borrowed); `*out` receives
 * a new reference to its result (vm.c). */
tccrt_status_t tccrt_vm_invoke(tccrt_module_t *module, size_t function, tccrt_value_t *const *args,
                               size_t nargs, tccrt_value_t **out);

#endif /* TCCRT_MODULE_H_ */
