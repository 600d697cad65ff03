/* A stand-in for the CUDA driver (libcuda) that runs kernels on the CPU: tests only.
 *
 * tcc.rt.cuda loads it through $TCC_CUDA_DRIVER. Device memory is host memory (filled with
 * 0xff bytes, NaN as floats, so a read of what no kernel wrote shows); a module is the host
 * library $TCC_FAKE_CUDA_KERNELS, built by tests/emit/cuda_on_host.py from the pack's CUDA
 * source, whatever image the loader passes; a launch runs every block and thread one after
 * another through that library's `<function>_packed(void **params)`. The device's compute
 * capability is $TCC_FAKE_CUDA_ARCH (default 90), its count $TCC_FAKE_CUDA_DEVICES
 * (default 1). Each module load ("load cubin" / "load ptx") and launch ("launch NAME GX GY
 * GZ BX BY BZ") is appended to $TCC_FAKE_CUDA_LOG when set.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3, INVALID_IMAGE = 200,
       NOT_FOUND = 500 };

typedef void (*packed_fn)(void **);
typedef void (*set_ids_fn)(unsigned, unsigned, unsigned, unsigned, unsigned, unsigned);
struct function { char name[256]; packed_fn run; set_ids_fn set_ids; };
struct module { void *lib; };

static int started;

static void note(const char *fmt, const char *name, const unsigned *dims) {
  const char *path = getenv("TCC_FAKE_CUDA_LOG");
  if (!path) return;
  FILE *f = fopen(path, "a");
  if (!f) return;
  fprintf(f, fmt, name);
  if (dims) fprintf(f, " %u %u %u %u %u %u", dims[0], dims[1], dims[2], dims[3], dims[4], dims[5]);
  fputc('\n', f);
  fclose(f);
}

static int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  return v ? atoi(v) : fallback;
}

CUresult cuInit(unsigned flags) { (void)flags; started = 1; return OK; }
CUresult cuDriverGetVersion(int *v) { *v = 12040; return OK; }
CUresult cuDeviceGetCount(int *n) {
  if (!started) return NOT_INITIALIZED;
  *n = env_int("TCC_FAKE_CUDA_DEVICES", 1);
  return OK;
}
CUresult cuDeviceGet(int *d, int ordinal) {
  if (ordinal >= env_int("TCC_FAKE_CUDA_DEVICES", 1)) return INVALID_VALUE;
  *d = ordinal;
  return OK;
}
CUresult cuDeviceGetAttribute(int *v, int attribute, int device) {
  (void)device;
  int arch = env_int("TCC_FAKE_CUDA_ARCH", 90);
  *v = attribute == 75 ? arch / 10 : attribute == 76 ? arch % 10 : 0;
  return OK;
}
CUresult cuDevicePrimaryCtxRetain(void **ctx, int device) { (void)device; *ctx = (void *)1; return OK; }
CUresult cuDevicePrimaryCtxRelease_v2(int device) { (void)device; return OK; }
CUresult cuCtxSetCurrent(void *ctx) { (void)ctx; return OK; }

CUresult cuModuleLoadData(void **out, const void *image) {
  note("load %s", memcmp(image, "\x7f" "ELF", 4) == 0 ? "cubin" : "ptx", NULL);
  const char *path = getenv("TCC_FAKE_CUDA_KERNELS");
  void *lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!lib) return INVALID_IMAGE;
  struct module *m = malloc(sizeof *m);
  m->lib = lib;
  *out = m;
  return OK;
}
CUresult cuModuleUnload(void *module) {
  struct module *m = module;
  dlclose(m->lib);
  free(m);
  return OK;
}
CUresult cuModuleGetFunction(void **out, void *module, const char *name) {
  struct module *m = module;
  char packed[300];
  snprintf(packed, sizeof packed, "%s_packed", name);
  struct function *f = calloc(1, sizeof *f);
  f->run = (packed_fn)dlsym(m->lib, packed);
  f->set_ids = (set_ids_fn)dlsym(m->lib, "tcc_set_ids");
  if (!f->run || !f->set_ids) { free(f); return NOT_FOUND; }
  snprintf(f->name, sizeof f->name, "%s", name);
  *out = f;  /* leaked on purpose: a test process loads a handful */
  return OK;
}

CUresult cuMemAlloc_v2(uint64_t *ptr, size_t n) {
  void *p = malloc(n);
  if (!p) return OUT_OF_MEMORY;
  memset(p, 0xff, n);
  *ptr = (uint64_t)(uintptr_t)p;
  return OK;
}
CUresult cuMemFree_v2(uint64_t ptr) { free((void *)(uintptr_t)ptr); return OK; }
CUresult cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t n, void *stream) {
  (void)stream; memcpy((void *)(uintptr_t)dst, src, n); return OK;
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, uint64_t src, size_t n, void *stream) {
  (void)stream; memcpy(dst, (const void *)(uintptr_t)src, n); return OK;
}
CUresult cuStreamCreate(void **stream, unsigned flags) { (void)flags; *stream = (void *)2; return OK; }
CUresult cuStreamDestroy_v2(void *stream) { (void)stream; return OK; }
CUresult cuStreamSynchronize(void *stream) { (void)stream; return OK; }

CUresult cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, void *stream, void **params,
                        void **extra) {
  (void)shared; (void)stream; (void)extra;
  struct function *f = function;
  if (!gx || !gy || !gz || !bx || !by || !bz || bx * by * bz > 1024) return INVALID_VALUE;
  unsigned dims[6] = {gx, gy, gz, bx, by, bz};
  note("launch %s", f->name, dims);
  for (unsigned z = 0; z < gz; z++)
    for (unsigned y = 0; y < gy; y++)
      for (unsigned x = 0; x < gx; x++)
        for (unsigned tz = 0; tz < bz; tz++)
          for (unsigned ty = 0; ty < by; ty++)
            for (unsigned tx = 0; tx < bx; tx++) {
              f->set_ids(x, y, z, tx, ty, tz);
              f->run(params);
            }
  return OK;
}

CUresult cuGetErrorName(CUresult result, const char **name) {
  *name = result == OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY"
        : result == INVALID_IMAGE ? "CUDA_ERROR_INVALID_IMAGE"
        : result == NOT_FOUND ? "CUDA_ERROR_NOT_FOUND" : "CUDA_ERROR_INVALID_VALUE";
  return OK;
}
