/* Opening a pack (mapped from a file or borrowed from memory), verifying it once, and
 * the queries over the verified tables. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pack_internal.h"
#include "tccrt_pack.h"

#define CHECK_ARG(cond, ...) \
  if (!(cond)) return tccrt_fail(TCCRT_INVALID_ARGUMENT, __VA_ARGS__)

const tccrt_member_t *tccrt_pack_find_member(const tccrt_pack_t *pack, const char *name) {
  for (size_t i = 0; i < pack->member_count; i++)
    if (strcmp(pack->members[i].name, name) == 0) return &pack->members[i];
  return NULL;
}

static void pack_free(tccrt_pack_t *pack) {
  if (pack->mapping) munmap(pack->mapping, pack->mapping_size);
  tccrt_arena_t arena = pack->arena;
  free(pack);
  tccrt_arena_free(&arena);
}

/* Verify `pack` (data, size and path set) and hand it out, or free it; with `key`, its
 * signature first. */
static tccrt_status_t pack_verify(tccrt_pack_t *pack, tccrt_pack_t **out_pack, const tccrt_public_key_t *key) {
  tccrt_status_t st;
  if (pack->size < 3 * TCCRT_TAR_BLOCK)
    st = tccrt_fail(TCCRT_INVALID_PACK, "%s: %zu bytes is too small to be a tvmpack", pack->path, pack->size);
  else if (!(st = tccrt_tar_members(pack)) && !(st = tccrt_signature_check(pack, key)))
    st = tccrt_manifest_load(pack);
  if (st) {
    pack_free(pack);
    return st;
  }
  *out_pack = pack;
  return TCCRT_OK;
}

static tccrt_pack_t *pack_new(const char *path) {
  tccrt_pack_t *pack = calloc(1, sizeof *pack);
  if (!pack) return NULL;
  atomic_init(&pack->refs, 1);
  pack->path = tccrt_arena_strndup(&pack->arena, path, strlen(path));
  if (!pack->path) {
    free(pack);
    return NULL;
  }
  return pack;
}

static tccrt_status_t open_file(const char *path, const tccrt_public_key_t *key, tccrt_pack_t **out_pack) {
  *out_pack = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block the open */
  if (fd < 0) return tccrt_fail(TCCRT_IO_ERROR, "%s: cannot read: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int err = errno;
    close(fd);
    return tccrt_fail(TCCRT_IO_ERROR, "%s: cannot read: %s", path, strerror(err));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    return tccrt_fail(TCCRT_IO_ERROR, "%s: cannot read: not a regular file", path);
  }
  tccrt_pack_t *pack = pack_new(path);
  if (!pack) {
    close(fd);
    return tccrt_fail(TCCRT_OUT_OF_MEMORY, "%s: out of memory", path);
  }
  pack->size = (size_t)sb.st_size;
  if (pack->size >= 3 * TCCRT_TAR_BLOCK) {
    void *p = mmap(NULL, pack->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      close(fd);
      pack_free(pack);
      return tccrt_fail(TCCRT_IO_ERROR, "%s: cannot map: %s", path, strerror(err));
    }
    pack->mapping = p;
    pack->mapping_size = pack->size;
    pack->data = p;
  }
  close(fd); /* the mapping keeps the file's pages */
  return pack_verify(pack, out_pack, key);
}

tccrt_status_t tccrt_pack_open_file(const char *path, tccrt_pack_t **out_pack) {
  CHECK_ARG(path && out_pack, "tccrt_pack_open_file: path and out_pack must not be NULL");
  return open_file(path, NULL, out_pack);
}

tccrt_status_t tccrt_pack_open_file_signed(const char *path, const char *public_key_path, tccrt_pack_t **out_pack) {
  CHECK_ARG(path && public_key_path && out_pack,
            "tccrt_pack_open_file_signed: path, public_key_path and out_pack must not be NULL");
  *out_pack = NULL;
  tccrt_public_key_t key;
  tccrt_status_t st = tccrt_public_key_load(public_key_path, &key);
  if (st) return st;
  st = open_file(path, &key, out_pack);
  tccrt_public_key_free(&key);
  return st;
}

tccrt_status_t tccrt_pack_open_memory(const void *data, size_t size, tccrt_pack_t **out_pack) {
  CHECK_ARG(out_pack && (data || !size), "tccrt_pack_open_memory: data and out_pack must not be NULL");
  *out_pack = NULL;
  tccrt_pack_t *pack = pack_new("<memory>");
  if (!pack) return tccrt_fail(TCCRT_OUT_OF_MEMORY, "<memory>: out of memory");
  pack->data = data;
  pack->size = size;
  return pack_verify(pack, out_pack, NULL);
}

void tccrt_pack_retain(tccrt_pack_t *pack) {
  if (pack) atomic_fetch_add(&pack->refs, 1);
}

void tccrt_pack_release(tccrt_pack_t *pack) {
  if (pack && atomic_fetch_sub(&pack->refs, 1) == 1) pack_free(pack);
}

tccrt_status_t tccrt_pack_target(const tccrt_pack_t *pack, const char **out_target) {
  CHECK_ARG(pack && out_target, "tccrt_pack_target: NULL argument");
  *out_target = pack->target;
  return TCCRT_OK;
}

tccrt_status_t tccrt_pack_function_count(const tccrt_pack_t *pack, size_t *out_count) {
  CHECK_ARG(pack && out_count, "tccrt_pack_function_count: NULL argument");
  *out_count = pack->function_count;
  return TCCRT_OK;
}

tccrt_status_t tccrt_pack_function_name(const tccrt_pack_t *pack, size_t function,
                                        const char **out_name) {
  CHECK_ARG(pack && out_name, "tccrt_pack_function_name: NULL argument");
  CHECK_ARG(function < pack->function_count, "%s: function %zu is out of range (the pack has %zu)",
            pack->path, function, pack->function_count);
  *out_name = pack->functions[function].name;
  return TCCRT_OK;
}

tccrt_status_t tccrt_pack_function_find(const tccrt_pack_t *pack, const char *name,
                                        size_t *out_function) {
  CHECK_ARG(pack && name && out_function, "tccrt_pack_function_find: NULL argument");
  for (size_t i = 0; i < pack->function_count; i++)
    if (strcmp(pack->functions[i].name, name) == 0) {
      *out_function = i;
      return TCCRT_OK;
    }
  return tccrt_fail(TCCRT_INVALID_ARGUMENT, "%s: no entry function '%s' (see `tccrt info %s`)",
                    pack->path, name, pack->path);
}

tccrt_status_t tccrt_pack_signature_count(const tccrt_pack_t *pack, size_t function,
                                          tccrt_io_t io, size_t *out_count) {
  CHECK_ARG(pack && out_count, "tccrt_pack_signature_count: NULL argument");
  CHECK_ARG(function < pack->function_count && (io == TCCRT_INPUT || io == TCCRT_OUTPUT),
            "%s: function %zu or io %d is out of range", pack->path, function, (int)io);
  *out_count = pack->functions[function].counts[io];
  return TCCRT_OK;
}

tccrt_status_t tccrt_pack_signature_tensor(const tccrt_pack_t *pack, size_t function,
                                           tccrt_io_t io, size_t index,
                                           tccrt_tensor_info_t *out_info) {
  CHECK_ARG(pack && out_info, "tccrt_pack_signature_tensor: NULL argument");
  CHECK_ARG(function < pack->function_count && (io == TCCRT_INPUT || io == TCCRT_OUTPUT) &&
                index < pack->functions[function].counts[io],
            "%s: function %zu, io %d or index %zu is out of range", pack->path, function, (int)io, index);
  *out_info = pack->functions[function].tensors[io][index];
  return TCCRT_OK;
}

tccrt_status_t tccrt_pack_kernel_count(const tccrt_pack_t *pack, size_t *out_count) {
  CHECK_ARG(pack && out_count, "tccrt_pack_kernel_count: NULL argument");
  *out_count = pack->kernel_count;
  return TCCRT_OK;
}

tccrt_status_t tccrt_pack_kernel_symbol(const tccrt_pack_t *pack, size_t kernel,
                                        const char **out_symbol) {
  CHECK_ARG(pack && out_symbol, "tccrt_pack_kernel_symbol: NULL argument");
  CHECK_ARG(kernel < pack->kernel_count, "%s: kernel %zu is out of range (the pack has %zu)",
            pack->path, kernel, pack->kernel_count);
  *out_symbol = pack->kernels[kernel];
  return TCCRT_OK;
}

tccrt_status_t tccrt_pack_member(const tccrt_pack_t *pack, const char *name,
                                 const void **out_data, size_t *out_size) {
  CHECK_ARG(pack && name && out_data && out_size, "tccrt_pack_member: NULL argument");
  const tccrt_member_t *m = tccrt_pack_find_member(pack, name);
  CHECK_ARG(m, "%s: no member '%s'", pack->path, name);
  *out_data = pack->data + m->offset;
  *out_size = m->size;
  return TCCRT_OK;
}

static tccrt_status_t member_out(const tccrt_pack_t *pack, const tccrt_member_t *m,
                                 const char **out_member, const void **out_data, size_t *out_size) {
  CHECK_ARG(pack && out_member && out_data && out_size, "tccrt_pack_kernel_*: NULL argument");
  *out_member = m ? m->name : NULL;
  *out_data = m ? pack->data + m->offset : NULL;
  *out_size = m ? m->size : 0;
  return TCCRT_OK;
}

tccrt_status_t tccrt_pack_kernel_object(const tccrt_pack_t *pack, const char **out_member,
                                        const void **out_data, size_t *out_size) {
  return member_out(pack, pack ? pack->object : NULL, out_member, out_data, out_size);
}

tccrt_status_t tccrt_pack_kernel_shared_object(const tccrt_pack_t *pack, const char **out_member,
                                               const void **out_data, size_t *out_size) {
  return member_out(pack, pack ? pack->shared_object : NULL, out_member, out_data, out_size);
}

tccrt_status_t tccrt_pack_weight_count(const tccrt_pack_t *pack, size_t *out_count) {
  CHECK_ARG(pack && out_count, "tccrt_pack_weight_count: NULL argument");
  *out_count = pack->weight_count;
  return TCCRT_OK;
}

tccrt_status_t tccrt_pack_weight(const tccrt_pack_t *pack, size_t weight,
                                 tccrt_weight_info_t *out_info) {
  CHECK_ARG(pack && out_info, "tccrt_pack_weight: NULL argument");
  CHECK_ARG(weight < pack->weight_count, "%s: weight %zu is out of range (the pack has %zu)",
            pack->path, weight, pack->weight_count);
  *out_info = pack->weights[weight];
  return TCCRT_OK;
}
