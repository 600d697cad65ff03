/* A stand-in for the CUDA driver (libcuda) that runs kernels on the CPU: tests only.
 *
 * tcc.rt.cuda loads it through $TCC_CUDA_DRIVER. Device memory is host memory (filled with
 * 0xff bytes, NaN as floats, so a read of what no kernel wrote shows); a module is the host
 * library $TCC_FAKE_CUDA_KERNELS, built by tests/emit/cuda_on_host.py from the pack's CUDA
 * source, whatever image the loader passes; a launch runs the blocks one after another, and
 * the threads of a block as coroutines (each started with ucontext, then switched with
 * _setjmp/_longjmp) through that library's
 * `<function>_packed(void **params)`: each runs to its next `__syncthreads()` (the
 * library's `tcc_barrier` hook, set here), and when all wait, the next phase starts, as
 * on a GPU; a barrier that some threads of a block never reach fails the launch. A launch
whose `<function>_barriers` is 0 has no barrier: its threads run as plain calls, one after
another, without the coroutines' context switches. `__shared__`
 * arrays are the library's statics, one set for the block that runs. The device's compute
 * capability is $TCC_FAKE_CUDA_ARCH (default 90), its count $TCC_FAKE_CUDA_DEVICES
 * (default 1); with $TCC_FAKE_CUDA_NO_GPU set, cuInit fails as a driver without a GPU
 * does. Each module load ("load cubin" / "load ptx") and launch ("launch NAME GX GY
 * GZ BX BY BZ") and copy between host and device ("copy to-device" / "copy to-host") is
 * appended to $TCC_FAKE_CUDA_LOG when set.
 */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

typedef int CUresult;
enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3, INVALID_IMAGE = 200,
       NOT_FOUND = 500 };

typedef void (*packed_fn)(void **);
typedef void (*set_ids_fn)(unsigned, unsigned, unsigned, unsigned, unsigned, unsigned);
struct function {
  char name[256]; packed_fn run; set_ids_fn set_ids; void (**barrier)(void); int barriers;
};
struct module { void *lib; struct function **functions; int count; };  /* freed together */

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

CUresult cuInit(unsigned flags) {
  (void)flags;
  if (getenv("TCC_FAKE_CUDA_NO_GPU")) return 100;  /* CUDA_ERROR_NO_DEVICE */
  started = 1;
  return OK;
}
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
  struct module *m = calloc(1, sizeof *m);
  m->lib = lib;
  *out = m;
  return OK;
}
CUresult cuModuleUnload(void *module) {
  struct module *m = module;
  dlclose(m->lib);
  for (int i = 0; i < m->count; i++) free(m->functions[i]);
  free(m->functions);
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
  f->barrier = (void (**)(void))dlsym(m->lib, "tcc_barrier");
  if (!f->run || !f->set_ids || !f->barrier) { free(f); return NOT_FOUND; }
  snprintf(packed, sizeof packed, "%s_barriers", name);
  const int *barriers = (const int *)dlsym(m->lib, packed);
  f->barriers = barriers ? *barriers : 1;
  snprintf(f->name, sizeof f->name, "%s", name);
  struct function **grown = realloc(m->functions, sizeof *grown * (size_t)(m->count + 1));
  if (!grown) { free(f); return OUT_OF_MEMORY; }
  m->functions = grown;
  m->functions[m->count++] = f;
  *out = f;
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
  (void)stream; note("copy %s", "to-device", NULL); memcpy((void *)(uintptr_t)dst, src, n); return OK;
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, uint64_t src, size_t n, void *stream) {
  (void)stream; note("copy %s", "to-host", NULL); memcpy(dst, (const void *)(uintptr_t)src, n); return OK;
}
CUresult cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t n, void *stream) {
  (void)stream; memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n); return OK;
}
CUresult cuStreamCreate(void **stream, unsigned flags) { (void)flags; *stream = (void *)2; return OK; }
CUresult cuStreamDestroy_v2(void *stream) { (void)stream; return OK; }
CUresult cuStreamSynchronize(void *stream) { (void)stream; return OK; }

/* The threads of the block being run: one context each, and where each one stands. A
 * thread starts on a stack of its own through makecontext and swapcontext; after that every
 * switch is a _setjmp/_longjmp pair, which (unlike swapcontext) makes no signal-mask system
 * call: a barrier kernel switches twice per thread per phase. */
enum { RUNNING, WAITING, DONE };
#define STACK_BYTES (256 * 1024)
static ucontext_t scheduler, *contexts;
static jmp_buf to_scheduler, *to_thread;
static int *states, *begun, current;
static struct function *running;
static void **running_params;

static void thread_main(void) {
  running->run(running_params);
  states[current] = DONE;
  _longjmp(to_scheduler, 1); /* never returns: its stack is abandoned */
}

static void barrier(void) {
  states[current] = WAITING;
  if (!_setjmp(to_thread[current])) _longjmp(to_scheduler, 1);
}

static void no_barrier(void) {  /* a launch said to have none reached one */
  fprintf(stderr, "fake libcuda: a barrier in %s, whose _barriers is 0\n", running->name);
  abort();
}

CUresult cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, void *stream, void **params,
                        void **extra) {
  (void)shared; (void)stream; (void)extra;
  struct function *f = function;
  if (!gx || !gy || !gz || !bx || !by || !bz || bx * by * bz > 1024) return INVALID_VALUE;
  unsigned dims[6] = {gx, gy, gz, bx, by, bz};
  note("launch %s", f->name, dims);
  int n = (int)(bx * by * bz);
  if (!f->barriers) {
    running = f;
    *f->barrier = no_barrier;
    for (unsigned z = 0; z < gz; z++)
      for (unsigned y = 0; y < gy; y++)
        for (unsigned x = 0; x < gx; x++)
          for (int i = 0; i < n; i++) {
            f->set_ids(x, y, z, (unsigned)i % bx, (unsigned)i / bx % by, (unsigned)i / (bx * by));
            f->run(params);
          }
    return OK;
  }
  char *stacks = malloc((size_t)n * STACK_BYTES);
  contexts = malloc(sizeof *contexts * (size_t)n);
  to_thread = malloc(sizeof *to_thread * (size_t)n);
  states = malloc(sizeof *states * (size_t)n);
  begun = malloc(sizeof *begun * (size_t)n);
  if (!stacks || !contexts || !to_thread || !states || !begun) return OUT_OF_MEMORY;
  running = f;
  running_params = params;
  *f->barrier = barrier;
  CUresult status = OK;
  for (unsigned z = 0; z < gz && status == OK; z++)
    for (unsigned y = 0; y < gy && status == OK; y++)
      for (unsigned x = 0; x < gx && status == OK; x++) {
        for (int i = 0; i < n; i++) {
          getcontext(&contexts[i]);
          contexts[i].uc_stack.ss_sp = stacks + (size_t)i * STACK_BYTES;
          contexts[i].uc_stack.ss_size = STACK_BYTES;
          contexts[i].uc_link = &scheduler;
          makecontext(&contexts[i], thread_main, 0);
          states[i] = RUNNING;
          begun[i] = 0;
        }
        for (;;) {  /* one phase: every live thread runs to its next barrier or its end */
          int waiting = 0, done = 0;
          for (int i = 0; i < n; i++) {
            if (states[i] == DONE) { done++; continue; }
            current = i;
            states[i] = RUNNING;
            f->set_ids(x, y, z, (unsigned)i % bx, (unsigned)i / bx % by, (unsigned)i / (bx * by));
            if (!_setjmp(to_scheduler)) { /* back here when the thread waits or ends */
              if (begun[i]) _longjmp(to_thread[i], 1);
              begun[i] = 1;
              swapcontext(&scheduler, &contexts[i]);
            }
            if (states[i] == WAITING) waiting++; else done++;
          }
          if (!waiting) break;
          if (done) {  /* some threads finished while others wait at a barrier */
            note("barrier not reached by every thread in %s", f->name, NULL);
            status = INVALID_VALUE;
            break;
          }
        }
      }
  free(stacks);
  free(contexts);
  free(to_thread);
  free(states);
  free(begun);
  return status;
}

/* Events: the host's clock when recorded (everything runs at once here). */
CUresult cuEventCreate(void **event, unsigned flags) {
  (void)flags;
  *event = calloc(1, sizeof(double));
  return *event ? OK : OUT_OF_MEMORY;
}
CUresult cuEventRecord(void *event, void *stream) {
  (void)stream;
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  *(double *)event = t.tv_sec * 1e3 + t.tv_nsec / 1e6;
  return OK;
}
CUresult cuEventSynchronize(void *event) { (void)event; return OK; }
CUresult cuEventElapsedTime(float *ms, void *start, void *end) {
  *ms = (float)(*(double *)end - *(double *)start);
  return OK;
}
CUresult cuEventDestroy_v2(void *event) { free(event); return OK; }

CUresult cuGetErrorName(CUresult result, const char **name) {
  *name = result == OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY"
        : result == INVALID_IMAGE ? "CUDA_ERROR_INVALID_IMAGE"
        : result == NOT_FOUND ? "CUDA_ERROR_NOT_FOUND" : "CUDA_ERROR_INVALID_VALUE";
  return OK;
}
