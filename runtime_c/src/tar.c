/* The ustar container of a pack, parsed as tcc/rt/pack.py's tar_members does: every
 * header's checksum, magic, type, octal fields and sizes are checked against the file's
 * length, each step moves forward by at least one block (so a corrupted size cannot make
 * it loop), and the archive must end with exactly two zero blocks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "pack_internal.h"
#include "tccrt_pack.h"

static int is_zero(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

/* An octal field: optional leading spaces, digits, then NULs/spaces (Python's
 * `rstrip(b"\0 ").lstrip(b" ")` followed by int(text, 8)). */
static int octal(const uint8_t *field, size_t width, uint64_t *out) {
  size_t lo = 0, hi = width;
  while (hi > 0 && (field[hi - 1] == 0 || field[hi - 1] == ' ')) hi--;
  while (lo < hi && field[lo] == ' ') lo++;
  if (lo == hi) return 0;
  uint64_t v = 0;
  for (size_t i = lo; i < hi; i++) {
    if (field[i] < '0' || field[i] > '7') return 0;
    v = v << 3 | (uint64_t)(field[i] - '0'); /* at most 12 digits: no overflow */
  }
  *out = v;
  return 1;
}

static size_t field_len(const uint8_t *p, size_t width) {
  const uint8_t *nul = memchr(p, 0, width);
  return nul ? (size_t)(nul - p) : width;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Duplicates are found by sorting, so a pack of many tiny members costs n log n. */
static tccrt_status_t check_unique(tccrt_pack_t *pack) {
  size_t n = pack->member_count;
  if (n < 2) return TCCRT_OK;
  const char **names = tccrt_arena_alloc(&pack->arena, n * sizeof *names);
  if (!names) return tccrt_fail(TCCRT_OUT_OF_MEMORY, "%s: out of memory reading the tar index", pack->path);
  for (size_t i = 0; i < n; i++) names[i] = pack->members[i].name;
  qsort(names, n, sizeof *names, cmp_names);
  for (size_t i = 1; i < n; i++)
    if (strcmp(names[i - 1], names[i]) == 0)
      return tccrt_fail(TCCRT_INVALID_PACK, "%s: member %s appears twice", pack->path, names[i]);
  return TCCRT_OK;
}

tccrt_status_t tccrt_tar_members(tccrt_pack_t *pack) {
  const uint8_t *buf = pack->data;
  size_t n = pack->size, pos = 0, cap = 0;
  const char *path = pack->path;
  for (;;) {
    if (pos > n || n - pos < TCCRT_TAR_BLOCK)
      return tccrt_fail(TCCRT_INVALID_PACK,
                        "%s: truncated: tar header at byte %zu runs past the end (%zu bytes)",
                        path, pos, n);
    const uint8_t *hdr = buf + pos;
    if (is_zero(hdr, TCCRT_TAR_BLOCK)) {
      if (n - pos != 2 * TCCRT_TAR_BLOCK || !is_zero(hdr, 2 * TCCRT_TAR_BLOCK))
        return tccrt_fail(TCCRT_INVALID_PACK,
                          "%s: truncated or padded: the archive must end with two zero blocks "
                          "at byte %zu (file is %zu bytes)", path, pos, n);
      return check_unique(pack);
    }
    uint64_t stored, sum = 8 * 32, size;
    if (!octal(hdr + 148, 8, &stored))
      return tccrt_fail(TCCRT_INVALID_PACK, "%s: tar header at byte %zu has a malformed checksum field", path, pos);
    for (size_t i = 0; i < TCCRT_TAR_BLOCK; i++)
      if (i < 148 || i >= 156) sum += hdr[i];
    if (stored != sum)
      return tccrt_fail(TCCRT_INVALID_PACK, "%s: tar header at byte %zu is corrupted (checksum mismatch)", path, pos);
    if (memcmp(hdr + 257, "ustar\0", 6) != 0)
      return tccrt_fail(TCCRT_INVALID_PACK, "%s: tar header at byte %zu is not POSIX ustar", path, pos);
    if (hdr[156] != '0' && hdr[156] != 0)
      return tccrt_fail(TCCRT_INVALID_PACK, "%s: tar header at byte %zu is not a regular file (type 0x%02x)",
                        path, pos, hdr[156]);
    size_t name_len = field_len(hdr, 100), prefix_len = field_len(hdr + 345, 155);
    if (!tccrt_utf8_valid(hdr, name_len) || !tccrt_utf8_valid(hdr + 345, prefix_len))
      return tccrt_fail(TCCRT_INVALID_PACK, "%s: tar header at byte %zu has a name that is not UTF-8", path, pos);
    char name[257];
    if (prefix_len)
      snprintf(name, sizeof name, "%.*s/%.*s", (int)prefix_len, (const char *)hdr + 345,
               (int)name_len, (const char *)hdr);
    else
      snprintf(name, sizeof name, "%.*s", (int)name_len, (const char *)hdr);
    if (!octal(hdr + 124, 12, &size))
      return tccrt_fail(TCCRT_INVALID_PACK, "%s: tar header at byte %zu has a malformed size field", path, pos);
    size_t data = pos + TCCRT_TAR_BLOCK;
    if (size > n - data)
      return tccrt_fail(TCCRT_INVALID_PACK, "%s: truncated: member %s needs %llu bytes at byte %zu, file has %zu",
                        path, name, (unsigned long long)size, data, n);
    if (pack->member_count == cap) {
      /* Each member takes at least a block, so the count is bounded by the file size. */
      size_t new_cap = cap ? 2 * cap : 8;
      tccrt_member_t *grown = tccrt_arena_alloc(&pack->arena, new_cap * sizeof *grown);
      if (!grown) return tccrt_fail(TCCRT_OUT_OF_MEMORY, "%s: out of memory reading the tar index", path);
      if (cap) memcpy(grown, pack->members, cap * sizeof *grown);
      pack->members = grown;
      cap = new_cap;
    }
    tccrt_member_t *m = &pack->members[pack->member_count++];
    m->name = tccrt_arena_strndup(&pack->arena, name, strlen(name));
    if (!m->name) return tccrt_fail(TCCRT_OUT_OF_MEMORY, "%s: out of memory reading the tar index", path);
    m->offset = data;
    m->size = (size_t)size;
    size_t padded = (size_t)size + (TCCRT_TAR_BLOCK - 1 - ((size_t)size + TCCRT_TAR_BLOCK - 1) % TCCRT_TAR_BLOCK);
    pos = data + padded;
  }
}
