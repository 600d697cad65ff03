/* Loading a pack's CPU kernels: its shared object is written to a private temporary file
 * (removed as soon as it is opened) and opened with dlopen; where the temporary directory
 * cannot hold executable code (mounted noexec), an anonymous memory file is used instead,
 * kept open for the module's life.  Each load gets a fresh file, because the dynamic
 * loader would hand back an already loaded library of the same name. */
#define _GNU_SOURCE /* memfd_create */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "module.h"

static int write_all(int fd, const uint8_t *data, size_t size) {
  while (size) {
    ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 0;
    data += n;
    size -= (size_t)n;
  }
  return 1;
}

/* dlopen a copy of `data` in a temporary file; NULL with `why` set when that fails. */
static void *open_from_temp_file(const uint8_t *data, size_t size, char *why, size_t why_size) {
  const char *dir = getenv("TMPDIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/tcc-kernels-XXXXXX", dir && *dir ? dir : "/tmp");
  int fd = mkstemp(path);
  if (fd < 0) {
    snprintf(why, why_size, "cannot create a temporary file in %s: %s", dir && *dir ? dir : "/tmp", strerror(errno));
    return NULL;
  }
  void *handle = NULL;
  if (!write_all(fd, data, size)) snprintf(why, why_size, "cannot write %.300s: %s", path, strerror(errno));
  else if (!(handle = dlopen(path, RTLD_NOW | RTLD_LOCAL))) snprintf(why, why_size, "%s", dlerror());
  close(fd);
  unlink(path);
  return handle;
}

static void *open_from_memfd(const uint8_t *data, size_t size, int *out_fd, char *why, size_t why_size) {
  int fd = memfd_create("tcc-kernels", MFD_CLOEXEC);
  if (fd < 0) return NULL; /* keep the temporary file's reason */
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  void *handle = write_all(fd, data, size) ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!handle) {
    const char *err = dlerror();
    if (err) snprintf(why, why_size, "%s", err);
    close(fd);
    return NULL;
  }
  *out_fd = fd;
  return handle;
}

tccrt_status_t tccrt_kernels_load(const tccrt_pack_t *pack, tccrt_kernels_t *out) {
  memset(out, 0, sizeof *out);
  out->memfd = -1;
  const tccrt_member_t *so = pack->shared_object;
  char arch[32];
  const char *host = tccrt_host_architecture();
  if ((so || pack->cpu_kernel_count) && tccrt_triple_architecture(pack->target, arch, sizeof arch) &&
      strcmp(arch, host))
    return tccrt_fail(TCCRT_KERNEL_ERROR, "%s: the pack's kernels are built for %s, and this machine is %s; "
                      "compile the model again on this machine", pack->path, arch, host);
  if (!so) {
    if (pack->cpu_kernel_count == 0) return TCCRT_OK; /* none, or all on a GPU */
    return tccrt_fail(TCCRT_KERNEL_ERROR, "%s: the pack has no shared object for its kernels (it was emitted "
                      "where no system linker was found); compile it again on a machine with cc", pack->path);
  }
  char why[512] = "";
  out->handle = open_from_temp_file(pack->data + so->offset, so->size, why, sizeof why);
  if (!out->handle) out->handle = open_from_memfd(pack->data + so->offset, so->size, &out->memfd, why, sizeof why);
  if (!out->handle)
    return tccrt_fail(TCCRT_KERNEL_ERROR, "%s: cannot load the kernels' shared object: %s; compile the pack "
                      "again for this machine", pack->path, why);
  /* dlsym returns object pointers; POSIX guarantees they convert to function pointers. */
  void *last_error = dlsym(out->handle, "tcc_last_error");
  void *set_threads = dlsym(out->handle, "tcc_set_num_threads");
  out->fns = calloc(pack->kernel_count ? pack->kernel_count : 1, sizeof *out->fns);
  tccrt_status_t st = TCCRT_OK;
  if (!out->fns) {
    st = tccrt_fail(TCCRT_OUT_OF_MEMORY, "%s: out of memory loading kernels", pack->path);
  } else if (!last_error || !set_threads) {
    st = tccrt_fail(TCCRT_KERNEL_ERROR, "%s: the shared object has no tcc_last_error/tcc_set_num_threads; it "
                    "was not built by tcc's CPU backend", pack->path);
  } else {
    memcpy(&out->last_error, &last_error, sizeof last_error);
    memcpy(&out->set_num_threads, &set_threads, sizeof set_threads);
    for (size_t k = 0; k < pack->kernel_count && !st; k++) {
      if (pack->kernel_device[k] >= 0) continue; /* a GPU's (cuda.c) */
      void *fn = dlsym(out->handle, pack->kernels[k]);
      if (!fn)
        st = tccrt_fail(TCCRT_KERNEL_ERROR, "%s: the shared object lacks kernel '%s' of the kernel table; "
                        "compile the pack again", pack->path, pack->kernels[k]);
      else memcpy(&out->fns[k], &fn, sizeof fn);
    }
  }
  if (st) tccrt_kernels_unload(out);
  return st;
}

void tccrt_kernels_unload(tccrt_kernels_t *kernels) {
  if (kernels->handle) dlclose(kernels->handle);
  if (kernels->memfd >= 0) close(kernels->memfd);
  free(kernels->fns);
  memset(kernels, 0, sizeof *kernels);
  kernels->memfd = -1;
}
