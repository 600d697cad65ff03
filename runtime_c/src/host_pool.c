/* Host memory for the VM's tensors and arenas, kept between calls (value.h, tccrt_host_pool_t).
 *
 * A call allocates its planned arenas and its other tensors afresh and frees them as it
 * ends. Where those blocks are big and their sizes vary (a model with several arenas, or
 * sizes known only at run time), the C library gives them back to the system at the end of
 * each call and maps them again in the next: MPT's legacy export took about 110 page faults
 * a call, and its softmax, writing fresh pages, ran 2.4x slower than the same kernel in the
 * dynamo export of the model, whose one arena the library kept. The pool keeps freed blocks
 * for the next call instead, as onnxruntime's arena allocator does. */
#include <pthread.h>
#include <stdlib.h>

#include "tccrt_pack.h"
#include "value.h"

#define POOL_SLOTS 32 /* free blocks kept at most */

typedef struct {
  void *data;
  size_t size;
} pool_block_t;

struct tccrt_host_pool_t {
  atomic_int refs;
  pthread_mutex_t lock;
  pool_block_t free_blocks[POOL_SLOTS];
  size_t free_count;
  size_t free_bytes; /* in free_blocks */
  size_t live_bytes; /* handed out and not back yet */
  size_t peak_bytes; /* the most live at once: the pool keeps no more than this free */
};

tccrt_host_pool_t *tccrt_host_pool_new(void) {
  tccrt_host_pool_t *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  if (pthread_mutex_init(&p->lock, NULL) != 0) {
    free(p);
    return NULL;
  }
  atomic_init(&p->refs, 1);
  return p;
}

tccrt_host_pool_t *tccrt_host_pool_retain(tccrt_host_pool_t *p) {
  if (p) atomic_fetch_add(&p->refs, 1);
  return p;
}

void tccrt_host_pool_release(tccrt_host_pool_t *p) {
  if (!p || atomic_fetch_sub(&p->refs, 1) != 1) return;
  for (size_t i = 0; i < p->free_count; i++) free(p->free_blocks[i].data);
  pthread_mutex_destroy(&p->lock);
  free(p);
}

void *tccrt_host_pool_alloc(tccrt_host_pool_t *p, size_t *block) {
  /* the smallest free block that holds `size` without wasting more than half of it */
  size_t size = *block;
  void *data = NULL;
  pthread_mutex_lock(&p->lock);
  size_t best = p->free_count;
  for (size_t i = 0; i < p->free_count; i++) {
    size_t s = p->free_blocks[i].size;
    if (s >= size && s / 2 <= size && (best == p->free_count || s < p->free_blocks[best].size)) best = i;
  }
  if (best < p->free_count) {
    data = p->free_blocks[best].data;
    size = p->free_blocks[best].size;
    p->free_bytes -= size;
    p->free_blocks[best] = p->free_blocks[--p->free_count];
  }
  pthread_mutex_unlock(&p->lock);
  if (!data && posix_memalign(&data, TCCRT_ARENA_ALIGN, size ? size : TCCRT_ARENA_ALIGN) != 0) return NULL;
  *block = size;
  pthread_mutex_lock(&p->lock);
  p->live_bytes += size;
  if (p->live_bytes > p->peak_bytes) p->peak_bytes = p->live_bytes;
  pthread_mutex_unlock(&p->lock);
  return data;
}

void tccrt_host_pool_give_back(tccrt_host_pool_t *p, void *data, size_t size) {
  pthread_mutex_lock(&p->lock);
  p->live_bytes -= size;
  int keep = p->free_count < POOL_SLOTS && p->free_bytes + size <= p->peak_bytes;
  if (keep) {
    p->free_blocks[p->free_count++] = (pool_block_t){data, size};
    p->free_bytes += size;
  }
  pthread_mutex_unlock(&p->lock);
  if (!keep) free(data);
}
