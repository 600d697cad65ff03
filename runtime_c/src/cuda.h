/* A pack's CUDA kernels on device 0, through the CUDA driver API (libcuda, opened with
 * dlopen at run time, never linked): tcc/rt/cuda.py's CudaLibrary, with its messages.
 *
 * The VM keeps its tensors in GPU memory (value.h's TCCRT_STORAGE_DEVICE), so a kernel call
 * only binds the size variables from the arguments' shapes (the shape work stays on the
 * host), checks them, evaluates each launch's grid and launches on one stream. A host
 * tensor given to a kernel (a scalar the VM made, a scan's slice) is copied over for the
 * call, and back when the kernel writes it. Device memory comes from a pool by size, so
 * runs after the first allocate nothing. $TCC_CUDA_DRIVER names the driver library
 * instead of libcuda.so.1 (the tests' stand-in runs kernels on the CPU). */
#ifndef TCCRT_CUDA_H_
#define TCCRT_CUDA_H_

#include <stddef.h>
#include <stdint.h>

#include "pack_internal.h"

typedef struct tccrt_cuda_t tccrt_cuda_t;

/* Open device 0 for `pack`'s CUDA code: the driver, the cubin for the device's arch (or
 * the PTX), a stream, every launch's function. No driver, no device, or a device the pack
 * has no code for is TCCRT_KERNEL_ERROR with a one-line message naming the pack. */
tccrt_status_t tccrt_cuda_open(const tccrt_pack_t *pack, tccrt_cuda_t **out);
/* The device is closed with its last reference (each device tensor holds one). */
tccrt_cuda_t *tccrt_cuda_retain(tccrt_cuda_t *cuda);
void tccrt_cuda_release(tccrt_cuda_t *cuda);
/* Make the device's context current on the calling thread (the driver's state is per
 * thread); a module does so at the start of each run. */
tccrt_status_t tccrt_cuda_enter(tccrt_cuda_t *cuda);

/* Device memory of at least `nbytes` (> 0) from the pool, and back to it. */
tccrt_status_t tccrt_cuda_alloc(tccrt_cuda_t *cuda, size_t nbytes, uint64_t *out);
void tccrt_cuda_free(tccrt_cuda_t *cuda, uint64_t ptr);

/* Copies on the stream. To the device and to the host wait for the copy (the host memory
 * may go right after); device to device does not. */
tccrt_status_t tccrt_cuda_to_device(tccrt_cuda_t *cuda, uint64_t dst, const void *src, size_t nbytes);
tccrt_status_t tccrt_cuda_to_host(tccrt_cuda_t *cuda, void *dst, uint64_t src, size_t nbytes);
tccrt_status_t tccrt_cuda_copy(tccrt_cuda_t *cuda, uint64_t dst, uint64_t src, size_t nbytes);
/* Wait for everything launched so far; a kernel that failed on the GPU says so here. */
tccrt_status_t tccrt_cuda_synchronize(tccrt_cuda_t *cuda);

/* Run the pack's CUDA kernel `kernel` (an index into pack->cuda->kernels) on `args` (the
 * kernel ABI's: inputs, outputs, then sizes as 0-d int64 tensors), each on the device
 * (device_type 2) or the host. Wrong dtypes, ranks, shapes or preconditions are
 * TCCRT_KERNEL_ERROR before anything launches. */
tccrt_status_t tccrt_cuda_call(tccrt_cuda_t *cuda, size_t kernel, tccrt_dl_tensor_t **args, size_t count);

/* The GPU's time of `work` (a kernel call), between two CUDA events on the stream: a
 * profile's kernel row. */
typedef tccrt_status_t (*tccrt_cuda_work_fn)(void *context);
tccrt_status_t tccrt_cuda_timed(tccrt_cuda_t *cuda, tccrt_cuda_work_fn work, void *context, uint64_t *ns);

#endif /* TCCRT_CUDA_H_ */
