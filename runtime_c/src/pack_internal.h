/* The pack object, shared by the reader's sources. */
#ifndef TCCRT_PACK_INTERNAL_H_
#define TCCRT_PACK_INTERNAL_H_

#include <stdatomic.h>

#include "internal.h"
#include "program.h"

typedef struct tccrt_member_t {
  const char *name;
  size_t offset; /* of the data, within the file */
  size_t size;
} tccrt_member_t;

typedef struct tccrt_function_t {
  const char *name;
  size_t counts[2]; /* TCCRT_INPUT, TCCRT_OUTPUT */
  tccrt_tensor_info_t *tensors[2];
} tccrt_function_t;

/* A CUDA kernel's launch spec (docs/tvmpack.md, "device_kernels"), checked as the manifest
 * is read: every shape program is well formed over the kernel's size variables, `bind`
 * reads a dimension a parameter has (or a scalar's value), `writes` names buffers. */
typedef struct tccrt_launch_param_t {
  const char *dtype;
  int scalar;           /* a size passed by value (a 0-d int64 tensor from the VM) */
  const int64_t *shape; /* a shape program; NULL for a scalar */
  int written;          /* copied back after the launches */
} tccrt_launch_param_t;

typedef struct tccrt_launch_t {
  const char *function;
  const int64_t *grid; /* a shape program of rank 3 */
  unsigned block[3];
} tccrt_launch_t;

typedef struct tccrt_workspace_t {
  const char *name, *dtype;
  const int64_t *count; /* a shape program of rank 1: its element count */
} tccrt_workspace_t;

typedef struct tccrt_device_kernel_t {
  const char *symbol;
  size_t param_count, size_var_count, workspace_count, launch_count;
  tccrt_launch_param_t *params;
  const char **size_vars;
  int64_t (*bind)[2]; /* per size variable: [parameter, axis], axis -1 for a scalar's value */
  const int64_t *preconditions;
  tccrt_workspace_t *workspaces;
  tccrt_launch_t *launches;
} tccrt_device_kernel_t;

/* A pack's CUDA kernels: its binaries by name (sm_XX cubins, compute_XX PTX). */
typedef struct tccrt_cuda_code_t {
  const char *target;
  size_t binary_count, kernel_count;
  const char **binary_names;
  const tccrt_member_t **binaries;
  tccrt_device_kernel_t *kernels;
} tccrt_cuda_code_t;

struct tccrt_pack_t {
  atomic_int refs; /* packs may be shared between threads */
  tccrt_arena_t arena;
  const char *path; /* for messages; "<memory>" for tccrt_pack_open_memory */
  const uint8_t *data;
  size_t size;
  void *mapping; /* munmap'ed on release; NULL for memory packs */
  size_t mapping_size;

  tccrt_member_t *members;
  size_t member_count;
  const tccrt_json_t *manifest;
  const char *target;
  tccrt_function_t *functions;
  size_t function_count;
  const char **kernels;
  size_t kernel_count;
  tccrt_cuda_code_t *cuda; /* NULL when the pack has no GPU kernels */
  int64_t *kernel_device;  /* per kernel-table entry: its index in cuda->kernels, -1 on the CPU */
  size_t cpu_kernel_count;
  const tccrt_member_t *object;
  const tccrt_member_t *shared_object;
  tccrt_weight_info_t *weights;
  size_t weight_count;
  tccrt_program_t program; /* decoded and verified bytecode.bin */
};

tccrt_status_t tccrt_tar_members(tccrt_pack_t *pack);
const tccrt_member_t *tccrt_pack_find_member(const tccrt_pack_t *pack, const char *name);

/* Check the manifest's fields, its own hash, the members and the weights index, filling
 * in the pack's tables (manifest.c). */
tccrt_status_t tccrt_manifest_load(tccrt_pack_t *pack);

/* Decode bytecode.bin into pack->program, checking its framing (bytecode.c). */
tccrt_status_t tccrt_bytecode_decode(tccrt_pack_t *pack, const tccrt_member_t *member);

/* Verify pack->program against itself, the kernel table and the weights (verify.c); runs
 * once the manifest's tables are loaded. */
tccrt_status_t tccrt_program_verify(tccrt_pack_t *pack);

/* An Ed25519 public key, loaded through the system's libcrypto (signature.c). */
typedef struct {
  void *key; /* EVP_PKEY * */
} tccrt_public_key_t;
tccrt_status_t tccrt_public_key_load(const char *key_path, tccrt_public_key_t *out);
void tccrt_public_key_free(tccrt_public_key_t *key);

/* manifest.sig: 64 bytes when present; with `key` (may be NULL), present and a signature of
 * manifest.json by it. Runs right after the tar headers (signature.c). */
tccrt_status_t tccrt_signature_check(const tccrt_pack_t *pack, const tccrt_public_key_t *key);

/* Check the kernels' shared object without loading it (elf.c); runs last. */
tccrt_status_t tccrt_elf_check(const tccrt_pack_t *pack);

/* The architecture a target string's -mtriple names, lower case, into `out` (1), or 0
 * without a triple; and the architecture this runtime was built for (elf.c). */
int tccrt_triple_architecture(const char *target, char *out, size_t out_size);
const char *tccrt_host_architecture(void);

#endif /* TCCRT_PACK_INTERNAL_H_ */
