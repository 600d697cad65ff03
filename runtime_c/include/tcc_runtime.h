/* tcc_runtime.h: the C runtime of tcc, for running a .tvmpack without Python.
 *
 * This increment opens and verifies a pack and answers questions about it: its target,
 * entry functions and their signatures, kernel table and weights.  Every call returns a
 * tccrt_status_t; on failure tccrt_last_error() holds a one-line message saying what is
 * wrong and where (for a pack, starting with its path).  Handles are opaque and counted:
 * tccrt_pack_retain adds a reference, tccrt_pack_release drops one and frees the pack
 * with the last.  Strings and arrays returned by queries belong to the pack and live as
 * long as it does.
 *
 * Opening verifies the whole pack once (tar headers, manifest fields, every member's
 * sha256 and the manifest's own, the weights index), so later queries need no checks.
 * The file is mapped read-only and weights point into the mapping: they are not copied.
 */
#ifndef TCC_RUNTIME_H_
#define TCC_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; only what this header declares is exported. */
#if defined(__GNUC__)
#define TCCRT_API __attribute__((visibility("default")))
#else
#define TCCRT_API
#endif

typedef enum tccrt_status_e {
  TCCRT_OK = 0,
  TCCRT_INVALID_ARGUMENT = 1, /* a NULL handle, an index out of range, an unknown name */
  TCCRT_IO_ERROR = 2,         /* the file cannot be opened, sized or mapped */
  TCCRT_INVALID_PACK = 3,     /* the bytes are not a well-formed pack of this version */
  TCCRT_OUT_OF_MEMORY = 4,
} tccrt_status_t;

/* The message of the last failed call on this thread ("" when none has failed). */
TCCRT_API const char *tccrt_last_error(void);

/* A short name of a status ("ok", "invalid pack", ...). */
TCCRT_API const char *tccrt_status_string(tccrt_status_t status);

typedef struct tccrt_pack_t tccrt_pack_t;

/* Map the file at `path` read-only and verify it. */
TCCRT_API tccrt_status_t tccrt_pack_open_file(const char *path, tccrt_pack_t **out_pack);

/* Verify a pack held in memory.  The bytes are not copied: they must stay valid and
 * unchanged until the pack is released. */
TCCRT_API tccrt_status_t tccrt_pack_open_memory(const void *data, size_t size, tccrt_pack_t **out_pack);

TCCRT_API void tccrt_pack_retain(tccrt_pack_t *pack);
TCCRT_API void tccrt_pack_release(tccrt_pack_t *pack); /* NULL is allowed */

/* The target string the kernels were compiled for (e.g. "llvm -mtriple=..."). */
TCCRT_API tccrt_status_t tccrt_pack_target(const tccrt_pack_t *pack, const char **out_target);

/* -- entry functions and signatures ------------------------------------------------- */

TCCRT_API tccrt_status_t tccrt_pack_function_count(const tccrt_pack_t *pack, size_t *out_count);
/* Functions are in the manifest's order (sorted by name). */
TCCRT_API tccrt_status_t tccrt_pack_function_name(const tccrt_pack_t *pack, size_t function,
                                        const char **out_name);
TCCRT_API tccrt_status_t tccrt_pack_function_find(const tccrt_pack_t *pack, const char *name,
                                        size_t *out_function);

typedef enum tccrt_io_e {
  TCCRT_INPUT = 0,
  TCCRT_OUTPUT = 1,
} tccrt_io_t;

/* One dimension of a signature: a fixed size (symbol == NULL, value >= 0) or a symbolic
 * one (value == -1, symbol the size variable's name such as "batch", or an expression
 * over them such as "n * 3"). */
typedef struct tccrt_dim_t {
  int64_t value;
  const char *symbol;
} tccrt_dim_t;

typedef struct tccrt_tensor_info_t {
  const char *name;
  const char *dtype; /* a tcc dtype name: "float32", "int64", "bfloat16", ... */
  size_t rank;
  const tccrt_dim_t *dims; /* rank entries */
} tccrt_tensor_info_t;

TCCRT_API tccrt_status_t tccrt_pack_signature_count(const tccrt_pack_t *pack, size_t function,
                                          tccrt_io_t io, size_t *out_count);
TCCRT_API tccrt_status_t tccrt_pack_signature_tensor(const tccrt_pack_t *pack, size_t function,
                                           tccrt_io_t io, size_t index,
                                           tccrt_tensor_info_t *out_info);

/* -- kernels ------------------------------------------------------------------------ */

/* The kernel table: the only kernel symbols the bytecode may call. */
TCCRT_API tccrt_status_t tccrt_pack_kernel_count(const tccrt_pack_t *pack, size_t *out_count);
TCCRT_API tccrt_status_t tccrt_pack_kernel_symbol(const tccrt_pack_t *pack, size_t kernel,
                                        const char **out_symbol);

/* The bytes of a member ("bytecode.bin", "kernels/llvm.so", ...), inside the mapping.
 * TCCRT_INVALID_ARGUMENT when the pack has no such member. */
TCCRT_API tccrt_status_t tccrt_pack_member(const tccrt_pack_t *pack, const char *name,
                                 const void **out_data, size_t *out_size);

/* The kernel object and shared object members named by the manifest; NULL (and size 0)
 * where the pack has none. */
TCCRT_API tccrt_status_t tccrt_pack_kernel_object(const tccrt_pack_t *pack, const char **out_member,
                                        const void **out_data, size_t *out_size);
TCCRT_API tccrt_status_t tccrt_pack_kernel_shared_object(const tccrt_pack_t *pack,
                                               const char **out_member,
                                               const void **out_data, size_t *out_size);

/* -- weights ------------------------------------------------------------------------ */

typedef struct tccrt_weight_info_t {
  const char *name;
  const char *dtype;
  size_t rank;
  const int64_t *shape; /* rank entries */
  uint64_t offset;      /* within weights.bin; a multiple of 64 */
  uint64_t nbytes;
  const void *data;     /* little-endian C-order bytes inside the mapping, 64-byte aligned */
} tccrt_weight_info_t;

/* Weights are sorted by name. */
TCCRT_API tccrt_status_t tccrt_pack_weight_count(const tccrt_pack_t *pack, size_t *out_count);
TCCRT_API tccrt_status_t tccrt_pack_weight(const tccrt_pack_t *pack, size_t weight,
                                 tccrt_weight_info_t *out_info);

/* -- hashing ------------------------------------------------------------------------ */

/* The sha256 of `size` bytes as 64 lowercase hex digits and a NUL (the digest the pack
 * records for its members). */
TCCRT_API void tccrt_sha256_hex(const void *data, size_t size, char out_hex[65]);

#ifdef __cplusplus
}
#endif

#endif /* TCC_RUNTIME_H_ */
