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
