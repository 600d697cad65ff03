/* Declarations shared by the runtime's sources; not installed. */
#ifndef TCCRT_INTERNAL_H_
#define TCCRT_INTERNAL_H_

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "tcc_runtime.h"

/* -- errors (status.c) -- */

/* Format the thread's last error and return `status`, so a failure is one line:
 * `return tccrt_fail(TCCRT_INVALID_PACK, "%s: ...", path);` */
tccrt_status_t tccrt_fail(tccrt_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* -- dtypes (dtype.c; tensors' dtypes in value.h) -- */

/* Whether `name` is a tcc dtype (tcc/rt/tensor.py DTYPES). */
int tccrt_dtype_known(const char *name);
/* Bytes per element of a tcc dtype as a pack stores it (0: not a tcc dtype). */
unsigned tccrt_dtype_itemsize(const char *name);

/* -- arena (arena.c): every allocation of one pack, freed at once -- */

typedef struct tccrt_arena_block_t tccrt_arena_block_t;
typedef struct tccrt_arena_t {
  tccrt_arena_block_t *head;
} tccrt_arena_t;

void *tccrt_arena_alloc(tccrt_arena_t *arena, size_t size); /* zeroed; NULL when out of memory */
char *tccrt_arena_strndup(tccrt_arena_t *arena, const char *s, size_t n);
void tccrt_arena_free(tccrt_arena_t *arena);

/* -- sha256 (sha256.c) -- */

typedef struct tccrt_sha256_t {
  uint32_t state[8];
  uint64_t length;
  uint8_t block[64];
  size_t used;
} tccrt_sha256_t;

void tccrt_sha256_init(tccrt_sha256_t *ctx);
void tccrt_sha256_update(tccrt_sha256_t *ctx, const void *data, size_t size);
void tccrt_sha256_final_hex(tccrt_sha256_t *ctx, char out_hex[65]);

/* -- JSON (json.c) -- */

typedef enum tccrt_json_kind_e {
  TCCRT_JSON_NULL,
  TCCRT_JSON_FALSE,
  TCCRT_JSON_TRUE,
  TCCRT_JSON_INT, /* an integer literal that fits int64 */
  TCCRT_JSON_FLOAT,
  TCCRT_JSON_STRING,
  TCCRT_JSON_ARRAY,
  TCCRT_JSON_OBJECT,
} tccrt_json_kind_t;

typedef struct tccrt_json_t tccrt_json_t;
struct tccrt_json_t {
  tccrt_json_kind_t kind;
  int64_t integer;
  double number;
  const char *string; /* NUL-terminated UTF-8 (JSON "\u0000" is refused) */
  size_t length;      /* string bytes, or array/object entries */
  const char **keys;  /* object keys, in document order */
  tccrt_json_t *items; /* array items or object values */
};

#define TCCRT_JSON_MAX_DEPTH 64

/* Parse `size` bytes of strict JSON (RFC 8259, UTF-8, no duplicate keys, no NaN) into
 * `arena`.  On failure returns NULL and writes a short reason to `why`. */
tccrt_json_t *tccrt_json_parse(tccrt_arena_t *arena, const char *text, size_t size,
                               char *why, size_t why_size);
const tccrt_json_t *tccrt_json_get(const tccrt_json_t *object, const char *key);
int tccrt_utf8_valid(const uint8_t *s, size_t n);

/* A name as Python's repr shows it (quotes, control characters escaped), so a message names
 * even a broken name as the Python reader does; cut after TCCRT_REPR_BYTES bytes (repr.c). */
#define TCCRT_REPR_BYTES 120
typedef struct tccrt_repr_t {
  char text[4 * TCCRT_REPR_BYTES + 32];
} tccrt_repr_t;
const char *tccrt_repr(tccrt_repr_t *out, const char *s);

#endif /* TCCRT_INTERNAL_H_ */
