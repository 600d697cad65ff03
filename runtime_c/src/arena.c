/* An arena for everything one pack allocates (parsed manifest, tables), so releasing a
 * pack is one walk and no error path leaks. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct tccrt_arena_block_t {
  tccrt_arena_block_t *next;
  max_align_t data[];
};

void *tccrt_arena_alloc(tccrt_arena_t *arena, size_t size) {
  if (size > SIZE_MAX - sizeof(tccrt_arena_block_t)) return NULL;
  tccrt_arena_block_t *b = calloc(1, sizeof *b + (size ? size : 1));
  if (!b) return NULL;
  b->next = arena->head;
  arena->head = b;
  return b->data;
}

char *tccrt_arena_strndup(tccrt_arena_t *arena, const char *s, size_t n) {
  if (n == SIZE_MAX) return NULL;
  char *out = tccrt_arena_alloc(arena, n + 1);
  if (out) memcpy(out, s, n);
  return out;
}

void tccrt_arena_free(tccrt_arena_t *arena) {
  while (arena->head) {
    tccrt_arena_block_t *next = arena->head->next;
    free(arena->head);
    arena->head = next;
  }
}
