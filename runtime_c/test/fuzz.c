/* tccrt_fuzz: feeds mutated packs to the pack reader and checks that it never crashes,
 * hangs or trips a sanitizer, and that every pack it refuses comes with a one-line message.
 *
 *   tccrt_fuzz SEED.tvmpack... --iterations N [--seed S] [--time-limit SEC] [--open-limit SEC]
 *   tccrt_fuzz SEED.tvmpack... --seed S --iteration I [--save FILE]
 *
 * Each iteration derives its own random stream from (seed, iteration), picks a seed pack
 * and applies 1-3 mutations.  "Deep" mutations edit a member in place (bytecode words,
 * manifest characters and tokens, member data, the order and names of members) and then
 * re-seal the pack: the member's size and sha256 in the manifest, the manifest's own
 * manifest_sha256 and every tar header checksum are recomputed, so the change reaches the
 * manifest checks, the bytecode decoder and the verifier instead of stopping at a hash.
 * "Blind" mutations then work on the bytes: truncation, bit flips, extreme bytes, tar
 * header fields set to extremes, and 512-byte blocks swapped, duplicated or deleted.
 *
 * The mutant is copied into a heap buffer of exactly its size (so a sanitizer sees any
 * read past its end) and opened with tccrt_pack_open_memory.  An accepted pack is queried
 * through every table; a refused one must leave a non-empty single-line message starting
 * with "<memory>: ".  Anything else is a bug: the driver prints the iteration and how to
 * reproduce it, then aborts.  At the end it prints how many mutants were accepted and how
 * many were refused at each stage of the reader. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Under AddressSanitizer (gcc says so with __SANITIZE_ADDRESS__, clang with __has_feature)
 * the sanitizer owns SIGSEGV and reports crashes itself. */
#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_ASAN 1
#endif
#endif
#ifdef FUZZ_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#include "tcc_runtime.h"
#include "tccrt_pack.h"

#define BLOCK TCCRT_TAR_BLOCK
#define MAX_SEEDS 16
#define MAX_MEMBERS 16 /* seeds have at most 6; duplication adds a few */
#define MAX_TOKENS 8192
#define MEMORY_PREFIX "<memory>: "

/* -- failing ---------------------------------------------------------------------------- */

static uint64_t g_seed;
static volatile uint64_t g_iteration; /* read by the signal handlers */
static const char *g_seed_args = "SEEDS";

/* Setup errors: bad arguments or seed packs. */
static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("tccrt_fuzz: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(2);
}

/* A bug in the reader: say which iteration found it and abort. */
static void bug(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void bug(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "tccrt_fuzz: iteration %llu: ", (unsigned long long)g_iteration);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "; reproduce with `tccrt_fuzz %s --seed %llu --iteration %llu --save FILE`\n",
          g_seed_args, (unsigned long long)g_seed, (unsigned long long)g_iteration);
  va_end(ap);
  abort();
}

/* Only async-signal-safe calls from here: the handlers below run on a crash or a hang. */
static void write_str(const char *s) {
  ssize_t rc = write(STDERR_FILENO, s, strlen(s));
  (void)rc;
}

static void write_u64(uint64_t v) {
  char digits[24];
  size_t i = sizeof digits;
  digits[--i] = 0;
  do digits[--i] = (char)('0' + v % 10); while ((v /= 10) && i > 0);
  write_str(digits + i);
}

static void report_iteration(const char *what) {
  write_str("tccrt_fuzz: ");
  write_str(what);
  write_str(" at iteration ");
  write_u64(g_iteration);
  write_str("; reproduce with `tccrt_fuzz ");
  write_str(g_seed_args);
  write_str(" --seed ");
  write_u64(g_seed);
  write_str(" --iteration ");
  write_u64(g_iteration);
  write_str(" --save FILE`\n");
}

static void on_alarm(int sig) {
  (void)sig;
  report_iteration("one tccrt_pack_open_memory ran past the open limit (a hang)");
  abort();
}

#ifdef FUZZ_ASAN
static void on_sanitizer_death(void) { report_iteration("the sanitizer stopped the run"); }
#else
static void on_crash(int sig) {
  report_iteration(sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE"
                                                                                 : "SIGILL");
  signal(sig, SIG_DFL);
  raise(sig);
}
#endif

static void install_handlers(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);
#ifdef FUZZ_ASAN
  /* Called after the sanitizer's report, before it exits. */
  __sanitizer_set_death_callback(on_sanitizer_death);
#else
  sa.sa_handler = on_crash;
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  sigaction(SIGFPE, &sa, NULL);
  sigaction(SIGILL, &sa, NULL);
#endif
}

/* -- random numbers: splitmix64, one stream per iteration ------------------------------- */

typedef struct rng_t {
  uint64_t s;
} rng_t;

static uint64_t next(rng_t *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static size_t below(rng_t *r, size_t n) { return n ? (size_t)(next(r) % n) : 0; }

static rng_t rng_for(uint64_t seed, uint64_t iteration) {
  rng_t r = {seed * 0x2545f4914f6cdd1dULL ^ iteration};
  next(&r);
  return r;
}

/* -- byte buffers ------------------------------------------------------------------------- */

typedef struct buf_t {
  uint8_t *p;
  size_t len, cap;
} buf_t;

static void buf_reserve(buf_t *b, size_t cap) {
  if (cap <= b->cap) return;
  size_t grown = b->cap ? b->cap : 256;
  while (grown < cap) grown *= 2;
  uint8_t *p = realloc(b->p, grown);
  if (!p) die("out of memory (%zu bytes)", grown);
  b->p = p;
  b->cap = grown;
}

/* Replace b[at, at+del) with `n` bytes of `ins` (zeros when `ins` is NULL). */
static void buf_splice(buf_t *b, size_t at, size_t del, const void *ins, size_t n) {
  buf_reserve(b, b->len - del + n);
  memmove(b->p + at + n, b->p + at + del, b->len - at - del);
  if (ins) memcpy(b->p + at, ins, n);
  else memset(b->p + at, 0, n);
  b->len = b->len - del + n;
}

static void buf_set(buf_t *b, const void *data, size_t n) {
  b->len = 0;
  buf_splice(b, 0, 0, data, n);
}

static void buf_append(buf_t *b, const void *data, size_t n) { buf_splice(b, b->len, 0, data, n); }

/* The first occurrence of `needle` in b[from, len), or SIZE_MAX. */
static size_t buf_find(const buf_t *b, size_t from, const char *needle) {
  size_t n = strlen(needle);
  for (size_t i = from; n <= b->len && i <= b->len - n; i++)
    if (memcmp(b->p + i, needle, n) == 0) return i;
  return SIZE_MAX;
}

/* -- packs as members: the seeds and the pack being mutated ------------------------------ */

typedef struct member_t {
  uint8_t hdr[BLOCK];
  buf_t data;
} member_t;

typedef struct model_t {
  member_t m[MAX_MEMBERS];
  size_t n;
  int deep; /* a deep mutation happened: re-seal the manifest */
  int changed[MAX_MEMBERS]; /* member data changed: update its manifest entry */
} model_t;

static void member_name(const member_t *m, char out[101]) {
  size_t n = strnlen((const char *)m->hdr, 100);
  memcpy(out, m->hdr, n);
  out[n] = 0;
}

static int member_find(const model_t *model, const char *name) {
  for (size_t i = 0; i < model->n; i++) {
    char have[101];
    member_name(&model->m[i], have);
    if (strcmp(have, name) == 0) return (int)i;
  }
  return -1;
}

/* The tar header checksum, written as Python's tarfile writes it: six octal digits, NUL, space. */
static void header_fix_checksum(uint8_t *hdr) {
  memset(hdr + 148, ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < BLOCK; i++) sum += hdr[i];
  char digits[16];
  snprintf(digits, sizeof digits, "%06o", sum & 0777777u);
  memcpy(hdr + 148, digits, 6);
  hdr[154] = 0;
}

static void header_set_size(uint8_t *hdr, size_t size) {
  char digits[24];
  snprintf(digits, sizeof digits, "%011llo", (unsigned long long)size & 077777777777ULL);
  memcpy(hdr + 124, digits, 11);
  hdr[135] = 0;
}

typedef struct layout_t {
  size_t hdr[MAX_MEMBERS]; /* where each member's header landed */
  size_t n;
  size_t manifest, manifest_size; /* the manifest's data, for biasing blind mutations */
} layout_t;

/* The pack as tcc writes it: members in model order, each header with its size and
 * checksum, data padded to a block, then two zero blocks. */
static void serialize(model_t *model, buf_t *out, layout_t *lay) {
  out->len = 0;
  lay->n = 0;
  lay->manifest = lay->manifest_size = 0;
  for (size_t i = 0; i < model->n; i++) {
    member_t *m = &model->m[i];
    header_set_size(m->hdr, m->data.len);
    header_fix_checksum(m->hdr);
    lay->hdr[lay->n++] = out->len;
    buf_append(out, m->hdr, BLOCK);
    if (strncmp((const char *)m->hdr, TCCRT_MANIFEST, 100) == 0) {
      lay->manifest = out->len;
      lay->manifest_size = m->data.len;
    }
    buf_append(out, m->data.p, m->data.len);
    buf_append(out, NULL, (BLOCK - m->data.len % BLOCK) % BLOCK);
  }
  buf_append(out, NULL, 2 * BLOCK);
}

static uint64_t parse_octal(const uint8_t *field, size_t width) {
  uint64_t v = 0;
  for (size_t i = 0; i < width && field[i] >= '0' && field[i] <= '7'; i++)
    v = v << 3 | (uint64_t)(field[i] - '0');
  return v;
}

static int is_zero(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

static void model_copy(model_t *dst, const model_t *src) {
  dst->n = src->n;
  dst->deep = 0;
  for (size_t i = 0; i < src->n; i++) {
    memcpy(dst->m[i].hdr, src->m[i].hdr, BLOCK);
    buf_set(&dst->m[i].data, src->m[i].data.p, src->m[i].data.len);
    dst->changed[i] = 0;
  }
}

typedef struct seed_t {
  const char *path;
  buf_t bytes;
  model_t model;
} seed_t;

static void seed_load(seed_t *s, const char *path) {
  s->path = path;
  FILE *f = fopen(path, "rb");
  if (!f) die("%s: cannot read the seed pack", path);
  uint8_t chunk[65536];
  size_t got;
  while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) buf_append(&s->bytes, chunk, got);
  fclose(f);
  tccrt_pack_t *pack;
  if (tccrt_pack_open_memory(s->bytes.p, s->bytes.len, &pack) != TCCRT_OK)
    die("%s: the seed pack must be valid: %s", path, tccrt_last_error());
  tccrt_pack_release(pack);
  size_t pos = 0;
  while (pos + BLOCK <= s->bytes.len && !is_zero(s->bytes.p + pos, BLOCK)) {
    if (s->model.n == MAX_MEMBERS) die("%s: more than %d members", path, MAX_MEMBERS);
    member_t *m = &s->model.m[s->model.n++];
    memcpy(m->hdr, s->bytes.p + pos, BLOCK);
    uint64_t size = parse_octal(m->hdr + 124, 12);
    if (size > s->bytes.len - pos - BLOCK) die("%s: member %zu runs past the end", path, s->model.n);
    buf_set(&m->data, s->bytes.p + pos + BLOCK, (size_t)size);
    pos += BLOCK + ((size_t)size + BLOCK - 1) / BLOCK * BLOCK;
  }
  if (member_find(&s->model, TCCRT_MANIFEST) < 0 || member_find(&s->model, TCCRT_BYTECODE) < 0)
    die("%s: a seed needs " TCCRT_MANIFEST " and " TCCRT_BYTECODE " members", path);
  /* Re-sealing relies on writing packs exactly as tcc does; check it on the seed. */
  buf_t again = {0};
  layout_t lay;
  serialize(&s->model, &again, &lay);
  int same = again.len == s->bytes.len && memcmp(again.p, s->bytes.p, again.len) == 0;
  free(again.p);
  if (!same) die("%s: the seed is not laid out as tcc writes packs (rewrite it with this tcc)", path);
}

/* -- re-sealing: member entries and manifest_sha256 --------------------------------------- */

static int is_hex64(const uint8_t *p) {
  for (size_t i = 0; i < 64; i++)
    if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f'))) return 0;
  return 1;
}

/* Rewrite `"name": {"sha256": "...", "size": N}` under "members" (as json.dumps with
 * indent=1 and sorted keys lays it out) for the member's new data.  A manifest whose text
 * a mutation has already broken there is left as it is. */
static void manifest_set_member(buf_t *text, const char *name, const buf_t *data) {
  char key[128];
  snprintf(key, sizeof key, "\"%s\": {", name);
  size_t at = buf_find(text, 0, "\"members\": {");
  if (at != SIZE_MAX) at = buf_find(text, at, key);
  if (at == SIZE_MAX) return;
  size_t sha = buf_find(text, at, "\"sha256\": \"");
  if (sha != SIZE_MAX && sha - at < 64 && sha + 11 + 64 <= text->len && is_hex64(text->p + sha + 11)) {
    char hex[65];
    tccrt_sha256_hex(data->p, data->len, hex);
    memcpy(text->p + sha + 11, hex, 64);
  }
  size_t size = buf_find(text, at, "\"size\": ");
  if (size == SIZE_MAX || size - at > 160) return;
  size_t lo = size + 8, hi = lo;
  while (hi < text->len && text->p[hi] >= '0' && text->p[hi] <= '9') hi++;
  char digits[24];
  int n = snprintf(digits, sizeof digits, "%zu", data->len);
  buf_splice(text, lo, hi - lo, digits, (size_t)n);
}

/* manifest_sha256 is the sha256 of the manifest with its value replaced by 64 zeros
 * (docs/tvmpack.md). */
static void manifest_set_hash(buf_t *text) {
  static const char field[] = "\"" TCCRT_MANIFEST_HASH_FIELD "\": \"";
  size_t at = buf_find(text, 0, field);
  if (at == SIZE_MAX) return;
  at += sizeof field - 1;
  if (at + 64 > text->len || !is_hex64(text->p + at)) return;
  char hex[65];
  memset(text->p + at, '0', 64);
  tccrt_sha256_hex(text->p, text->len, hex);
  memcpy(text->p + at, hex, 64);
}

static void reseal(model_t *model) {
  int mi = member_find(model, TCCRT_MANIFEST);
  if (!model->deep || mi < 0) return;
  buf_t *text = &model->m[mi].data;
  for (size_t i = 0; i < model->n; i++) {
    if (!model->changed[i] || (int)i == mi) continue;
    char name[101];
    member_name(&model->m[i], name);
    manifest_set_member(text, name, &model->m[i].data);
  }
  manifest_set_hash(text);
}

/* -- deep mutations: on members, before re-sealing ----------------------------------------- */

static uint64_t get_word(const uint8_t *p) {
  uint64_t v = 0;
  for (int b = 7; b >= 0; b--) v = v << 8 | p[b];
  return v;
}

static void put_word(uint8_t *p, uint64_t v) {
  for (int b = 0; b < 8; b++) p[b] = (uint8_t)(v >> (8 * b));
}

/* A word a corrupted count, index, kind or offset might hold.  Unsigned arithmetic: the
 * old value may be INT64_MAX. */
static uint64_t extreme_word(rng_t *r, uint64_t old, const buf_t *words) {
  switch (below(r, 12)) {
    case 0: return 0;
    case 1: return UINT64_MAX; /* -1, TCCRT_NO_REG */
    case 2: return (uint64_t)1 << 63; /* INT64_MIN */
    case 3: return ((uint64_t)1 << 63) - 1; /* INT64_MAX */
    case 4: return below(r, 17);
    case 5: return old + 1;
    case 6: return old - 1;
    case 7: return words->len >= 8 ? get_word(words->p + 8 * below(r, words->len / 8)) : 0;
    case 8: return ((uint64_t)1 << 20) + below(r, 2); /* the register limit */
    case 9: return (uint64_t)0 - 2 - below(r, 16);
    case 10: return old ^ ((uint64_t)1 << below(r, 64));
    default: return next(r);
  }
}

/* One word of bytecode.bin changed.  Half the time the word is one of a few picked that
 * holds a small value (an opcode, register, jump offset, kind or index, rather than the
 * bytes of a name), so the change more often reaches the verifier's rules. */
static int bytecode_word(model_t *model, rng_t *r) {
  int i = member_find(model, TCCRT_BYTECODE);
  if (i < 0 || model->m[i].data.len < 8) return -1;
  buf_t *bc = &model->m[i].data;
  uint8_t *w = bc->p + 8 * below(r, bc->len / 8);
  for (int tries = below(r, 2) ? 8 : 0; tries > 0; tries--) {
    uint64_t v = get_word(w);
    if (v + 64 < 128) break; /* -64 <= v < 64 */
    w = bc->p + 8 * below(r, bc->len / 8);
  }
  put_word(w, extreme_word(r, get_word(w), bc));
  return i;
}

/* Insert or delete words, or cut the code short: counts no longer match what follows. */
static int bytecode_resize(model_t *model, rng_t *r) {
  int i = member_find(model, TCCRT_BYTECODE);
  if (i < 0) return -1;
  buf_t *bc = &model->m[i].data;
  size_t words = bc->len / 8, at = 8 * below(r, words + 1);
  uint8_t w[8];
  switch (below(r, 4)) {
    case 0:
      put_word(w, extreme_word(r, 0, bc));
      buf_splice(bc, at, 0, w, 8);
      break;
    case 1: {
      size_t del = 8 * (1 + below(r, 4));
      buf_splice(bc, at, del < bc->len - at ? del : bc->len - at, NULL, 0);
      break;
    }
    case 2:
      bc->len = at;
      break;
    default:
      bc->len = bc->len - below(r, 8 < bc->len ? 8 : bc->len + 1); /* not a whole word */
  }
  return i;
}

/* A member's bytes changed (weights, kernels, even the bytecode): a few extreme bytes, or
 * the member cut short or grown; the manifest then lists the new size and sha256. */
static int member_data(model_t *model, rng_t *r) {
  int i = (int)below(r, model->n);
  if (strncmp((const char *)model->m[i].hdr, TCCRT_MANIFEST, 100) == 0) return -1;
  buf_t *d = &model->m[i].data;
  static const uint8_t extremes[] = {0x00, 0xff, 0x7f, 0x80};
  switch (below(r, 3)) {
    case 0:
      for (size_t k = 0, n = 1 + below(r, 8); k < n && d->len; k++)
        d->p[below(r, d->len)] = extremes[below(r, 4)];
      break;
    case 1:
      d->len = below(r, d->len + 1);
      break;
    default:
      buf_append(d, NULL, below(r, 2) ? TCCRT_WEIGHT_ALIGN : 1 + below(r, 200));
  }
  return i;
}

/* The lexical tokens of the manifest: strings (keys or values), numbers, literals. */
typedef struct token_t {
  size_t at, len;
  int key;
} token_t;

static size_t lex(const buf_t *t, token_t *tokens) {
  size_t n = 0, i = 0;
  while (i < t->len && n < MAX_TOKENS) {
    uint8_t c = t->p[i];
    size_t start = i;
    if (c == '"') {
      for (i++; i < t->len && t->p[i] != '"'; i++)
        if (t->p[i] == '\\') i++;
      i = i < t->len ? i + 1 : t->len;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      while (i < t->len && strchr("0123456789+-.eE", t->p[i]) && t->p[i]) i++;
    } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      while (i < t->len && ((t->p[i] | 0x20) >= 'a' && (t->p[i] | 0x20) <= 'z')) i++;
    } else {
      i++;
      continue;
    }
    size_t j = i;
    while (j < t->len && (t->p[j] == ' ' || t->p[j] == '\n')) j++;
    tokens[n++] = (token_t){start, i - start, c == '"' && j < t->len && t->p[j] == ':'};
  }
  return n;
}

/* Values a corrupted or hostile manifest might hold where another value stood. */
static const char *const JSON_VALUES[] = {
    "0", "1", "-1", "2", "63", "64", "65", "511", "512", "4096", "1048577",
    "9223372036854775807", "-9223372036854775808", "9223372036854775808",
    "-9223372036854775809", "18446744073709551616", "1e308", "1e999", "-0", "0.5", "1E2",
    "007", "-", "1.", "true", "false", "null", "NaN", "Infinity", "\"\"", "\"main\"",
    "\"float32\"", "\"bfloat16\"", "\"int4\"", "\"float8_e4m3fn\"", "\"complex128\"",
    "\"" TCCRT_BYTECODE "\"", "\"" TCCRT_WEIGHTS "\"", "\"" TCCRT_MANIFEST "\"",
    "\"kernels/llvm.o\"", "\"kernels/llvm.so\"", "\"n\"", "\"n * 3\"", "\"\\u0000\"",
    "\"\\ud800\"", "\"\\udc00\\ud800\"", "\"\\ud83d\\ude00\"", "\"\xc3\x28\"", "\"\xed\xa0\x80\"",
    "\"\x01\"", "\"" TCCRT_PACK_FORMAT "\"", "\"\\\"\"", "\"\\x\"", "[]", "{}", "[0]", "[-1]",
    "[\"n\", 3]", "[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]", "{\"a\": 1}", "{\"a\": 1, \"a\": 2}",
    "{\"sha256\": \"\", \"size\": 0}",
};

static const char *const JSON_KEYS[] = {"\"\"", "\"extra\"", "\"" TCCRT_MANIFEST_HASH_FIELD "\"",
                                        "\"" TCCRT_KERNEL_ORIGINS_FIELD "\"", "\"\\u0000\"",
                                        "\"main\"", "\"size\""};

/* A string 64 levels deep and more, past the parser's nesting limit. */
static void nested(buf_t *out, size_t depth) {
  out->len = 0;
  for (size_t i = 0; i < depth; i++) buf_append(out, "[", 1);
  for (size_t i = 0; i < depth; i++) buf_append(out, "]", 1);
}

/* Replace one token of the manifest with another value (possibly of another length). */
static int json_token(model_t *model, rng_t *r) {
  static token_t tokens[MAX_TOKENS];
  static buf_t value;
  int mi = member_find(model, TCCRT_MANIFEST);
  if (mi < 0) return -1;
  buf_t *t = &model->m[mi].data;
  size_t n = lex(t, tokens);
  if (!n) return -1;
  token_t *tok = &tokens[below(r, n)];
  token_t *other = &tokens[below(r, n)];
  switch (below(r, 4)) {
    case 0: /* another token of the same manifest: a name, size or offset from elsewhere */
      buf_set(&value, t->p + other->at, other->len);
      break;
    case 1:
      if (tok->key) {
        const char *k = JSON_KEYS[below(r, sizeof JSON_KEYS / sizeof JSON_KEYS[0])];
        buf_set(&value, k, strlen(k));
      } else {
        nested(&value, 60 + below(r, 10));
      }
      break;
    default: {
      const char *v = JSON_VALUES[below(r, sizeof JSON_VALUES / sizeof JSON_VALUES[0])];
      buf_set(&value, v, strlen(v));
    }
  }
  buf_splice(t, tok->at, tok->len, value.p, value.len);
  return mi;
}

/* Same-length edits of the manifest text: a digit changed (a size, offset, version or
 * dimension), two characters swapped, or one character replaced by a JSON metacharacter
 * or an invalid UTF-8 byte. */
static int json_char(model_t *model, rng_t *r) {
  static const char metas[] = "\"{}[],:\\0123456789-+.eEtfnu \t\x80\xff\xc3\x01";
  int mi = member_find(model, TCCRT_MANIFEST);
  if (mi < 0 || model->m[mi].data.len < 2) return -1;
  buf_t *t = &model->m[mi].data;
  size_t at = below(r, t->len);
  switch (below(r, 3)) {
    case 0:
      for (size_t k = 0; k < t->len; k++, at = (at + 1) % t->len)
        if (t->p[at] >= '0' && t->p[at] <= '9') {
          t->p[at] = (uint8_t)('0' + below(r, 10));
          break;
        }
      break;
    case 1: {
      size_t b = at + 1 < t->len ? at + 1 : below(r, t->len);
      uint8_t c = t->p[at];
      t->p[at] = t->p[b];
      t->p[b] = c;
      break;
    }
    default:
      t->p[at] = (uint8_t)metas[below(r, sizeof metas - 1)];
  }
  return mi;
}

/* Shuffled sections: members reordered, duplicated, dropped or renamed. */
static int member_shuffle(model_t *model, rng_t *r) {
  size_t a = below(r, model->n), b = below(r, model->n);
  member_t tmp;
  switch (below(r, 4)) {
    case 0:
      tmp = model->m[a];
      model->m[a] = model->m[b];
      model->m[b] = tmp;
      int flag = model->changed[a];
      model->changed[a] = model->changed[b];
      model->changed[b] = flag;
      break;
    case 1:
      if (model->n == MAX_MEMBERS) return -1;
      /* Slot n has a buffer of its own (or none yet): the data is copied into it. */
      memcpy(model->m[model->n].hdr, model->m[a].hdr, BLOCK);
      buf_set(&model->m[model->n].data, model->m[a].data.p, model->m[a].data.len);
      model->changed[model->n++] = 0;
      break;
    case 2:
      if (model->n == 0) return -1;
      tmp = model->m[a];
      memmove(&model->m[a], &model->m[a + 1], (model->n - a - 1) * sizeof model->m[0]);
      memmove(&model->changed[a], &model->changed[a + 1], (model->n - a - 1) * sizeof model->changed[0]);
      model->m[--model->n] = tmp; /* keeps its buffer for reuse */
      break;
    default: {
      static const char *const names[] = {TCCRT_MANIFEST, TCCRT_BYTECODE, TCCRT_WEIGHTS,
                                          "kernels/llvm.so", "x", "../" TCCRT_BYTECODE};
      char name[101];
      if (below(r, 2)) member_name(&model->m[b], name);
      else snprintf(name, sizeof name, "%s", names[below(r, sizeof names / sizeof names[0])]);
      memset(model->m[a].hdr, 0, 100);
      memcpy(model->m[a].hdr, name, strlen(name));
    }
  }
  return -1;
}

/* -- blind mutations: on the serialized bytes ----------------------------------------------- */

typedef struct target_t {
  buf_t *b;
  const layout_t *lay;
} target_t;

/* A position, a third of the time in a tar header and a third in the manifest, where a
 * change reaches further than in the kernels' object code. */
static size_t pick_pos(rng_t *r, const target_t *t) {
  size_t len = t->b->len, pos;
  switch (below(r, 3)) {
    case 0: pos = t->lay->n ? t->lay->hdr[below(r, t->lay->n)] + below(r, BLOCK) : 0; break;
    case 1: pos = t->lay->manifest + below(r, t->lay->manifest_size); break;
    default: pos = below(r, len);
  }
  return pos < len ? pos : below(r, len);
}

static void truncate_bytes(rng_t *r, const target_t *t) {
  buf_t *b = t->b;
  if (!b->len) return;
  switch (below(r, 3)) {
    case 0: b->len = below(r, b->len); break;
    case 1: b->len = b->len / BLOCK ? BLOCK * below(r, b->len / BLOCK) : 0; break;
    default: b->len -= 1 + below(r, b->len < 1024 ? b->len : 1024);
  }
}

static void flip_bits(rng_t *r, const target_t *t) {
  for (size_t k = 0, n = 1 + below(r, 8); k < n && t->b->len; k++)
    t->b->p[pick_pos(r, t)] ^= (uint8_t)(1u << below(r, 8));
}

static void extreme_bytes(rng_t *r, const target_t *t) {
  static const uint8_t extremes[] = {0x00, 0xff, 0x7f, 0x80};
  if (!t->b->len) return;
  size_t at = pick_pos(r, t), run = 1 + below(r, 8);
  uint8_t v = extremes[below(r, 4)];
  for (size_t k = 0; k < run && at + k < t->b->len; k++) t->b->p[at + k] = v;
}

/* A tar header field set to an extreme (huge, negative-looking, non-octal, without its
 * NUL), with the header checksum usually fixed so the field itself is what gets read. */
static void tar_field(rng_t *r, const target_t *t) {
  static const struct {
    size_t at, width;
  } fields[] = {{124, 12}, {124, 12}, {124, 12}, {100, 8}, {148, 8}, {156, 1},
                {0, 100},  {345, 155}, {257, 6}, {108, 8}, {136, 12}};
  static const char *const values[] = {
      "77777777777", "777777777777", "99999999999", "-0000000001", "", "  ", " 1 ",
      "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", "0x10", "7777777", "00000000000",
      "\x80", "5", "2", "L", "x", "g", "ustar ", "ustar", "\xc3\x28", "manifest.json"};
  size_t h = t->lay->n ? t->lay->hdr[below(r, t->lay->n)] : 0;
  if (h + BLOCK > t->b->len) return;
  uint8_t *hdr = t->b->p + h;
  size_t f = below(r, sizeof fields / sizeof fields[0]);
  size_t at = fields[f].at, width = fields[f].width;
  if (at == 124 && below(r, 2)) {
    /* A plausible size just off the truth: the next header is then misread. */
    static const int64_t deltas[] = {1, -1, BLOCK, -BLOCK, 8, 1 << 20};
    uint64_t size = parse_octal(hdr + 124, 12) + (uint64_t)deltas[below(r, 6)];
    char digits[24];
    snprintf(digits, sizeof digits, "%011llo", (unsigned long long)(size & 077777777777ULL));
    memcpy(hdr + 124, digits, 11);
  } else {
    const char *v = values[below(r, sizeof values / sizeof values[0])];
    size_t n = strlen(v) < width ? strlen(v) : width;
    if (below(r, 2)) memset(hdr + at, below(r, 2) ? '7' : 0, width); /* no NUL when '7' */
    memcpy(hdr + at, v, n);
  }
  if (at != 148 && below(r, 4)) header_fix_checksum(hdr);
}

/* Shuffled sections at block granularity: two blocks swapped, one duplicated or dropped. */
static void blocks(rng_t *r, const target_t *t) {
  buf_t *b = t->b;
  size_t nb = b->len / BLOCK;
  if (nb < 2) return;
  size_t x = BLOCK * below(r, nb), y = BLOCK * below(r, nb);
  uint8_t tmp[BLOCK];
  switch (below(r, 3)) {
    case 0:
      memcpy(tmp, b->p + x, BLOCK);
      memmove(b->p + x, b->p + y, BLOCK);
      memcpy(b->p + y, tmp, BLOCK);
      break;
    case 1:
      memcpy(tmp, b->p + x, BLOCK);
      buf_splice(b, y, 0, tmp, BLOCK);
      break;
    default:
      buf_splice(b, x, BLOCK, NULL, 0);
  }
}

/* -- one iteration ---------------------------------------------------------------------------- */

typedef int (*deep_fn)(model_t *, rng_t *);
typedef void (*blind_fn)(rng_t *, const target_t *);

static const deep_fn DEEP[] = {bytecode_word, bytecode_word, bytecode_word, bytecode_resize,
                               json_token,    json_token,    json_char,     json_char,
                               member_data,   member_shuffle};
static const blind_fn BLIND[] = {truncate_bytes, flip_bits, flip_bits, extreme_bytes,
                                 tar_field,      tar_field, blocks};
#define N_DEEP (sizeof DEEP / sizeof DEEP[0])
#define N_BLIND (sizeof BLIND / sizeof BLIND[0])

typedef struct fuzzer_t {
  seed_t seeds[MAX_SEEDS];
  size_t n_seeds;
  model_t work;
  buf_t bytes;
  unsigned open_limit; /* seconds one open may take */
} fuzzer_t;

/* The mutant of `iteration` in f->bytes; returns whether every mutation was deep. */
static int mutate(fuzzer_t *f, uint64_t iteration) {
  rng_t r = rng_for(g_seed, iteration);
  model_t *model = &f->work;
  model_copy(model, &f->seeds[below(&r, f->n_seeds)].model);
  size_t n = 1 + below(&r, 3), n_deep = 0;
  int kinds[3];
  for (size_t k = 0; k < n; k++) kinds[k] = (int)below(&r, N_DEEP + N_BLIND);
  /* Deep mutations first: the blind ones would break the layout they rely on. */
  for (size_t k = 0; k < n; k++) {
    if (kinds[k] >= (int)N_DEEP) continue;
    int changed = DEEP[kinds[k]](model, &r);
    if (changed >= 0) model->changed[changed] = 1;
    model->deep = 1;
    n_deep++;
  }
  reseal(model);
  layout_t lay;
  serialize(model, &f->bytes, &lay);
  target_t t = {&f->bytes, &lay};
  for (size_t k = 0; k < n; k++)
    if (kinds[k] >= (int)N_DEEP) BLIND[kinds[k] - N_DEEP](&r, &t);
  return n_deep == n;
}

/* A query of an accepted pack with arguments in range must answer. */
#define CHECK(call)                                                                        \
  do {                                                                                     \
    if ((call) != TCCRT_OK) bug("%s on an accepted pack failed: %s", #call, tccrt_last_error()); \
  } while (0)

typedef struct span_t {
  const uint8_t *lo, *hi;
} span_t;

/* `n` bytes at `p` must lie inside the pack's buffer; reading them lets the sanitizer
 * check it too. */
static unsigned touch(span_t pack, const void *p, size_t n, const char *what) {
  const uint8_t *q = p;
  uintptr_t at = (uintptr_t)q, lo = (uintptr_t)pack.lo, hi = (uintptr_t)pack.hi;
  if (n && (!q || at < lo || at > hi || n > hi - at))
    bug("%s (%zu bytes) lies outside the pack", what, n);
  unsigned sum = 0;
  for (size_t i = 0; i < n; i++) sum += q[i];
  return sum;
}

static unsigned touch_str(const char *s) { return s ? (unsigned)strlen(s) : 0; }

static unsigned query_signatures(const tccrt_pack_t *pack) {
  size_t nf, count;
  unsigned sum = 0;
  CHECK(tccrt_pack_function_count(pack, &nf));
  for (size_t fn = 0; fn < nf; fn++) {
    const char *name;
    size_t found;
    CHECK(tccrt_pack_function_name(pack, fn, &name));
    CHECK(tccrt_pack_function_find(pack, name, &found));
    if (found != fn) bug("entry function %zu ('%s') is found at %zu", fn, name, found);
    for (int io = TCCRT_INPUT; io <= TCCRT_OUTPUT; io++) {
      CHECK(tccrt_pack_signature_count(pack, fn, (tccrt_io_t)io, &count));
      for (size_t i = 0; i < count; i++) {
        tccrt_tensor_info_t info;
        CHECK(tccrt_pack_signature_tensor(pack, fn, (tccrt_io_t)io, i, &info));
        sum += touch_str(info.name) + touch_str(info.dtype);
        for (size_t d = 0; d < info.rank; d++) {
          if (!info.dims[d].symbol && info.dims[d].value < 0)
            bug("function '%s' has dimension %lld without a symbol", name, (long long)info.dims[d].value);
          sum += touch_str(info.dims[d].symbol);
        }
      }
      tccrt_tensor_info_t past;
      if (tccrt_pack_signature_tensor(pack, fn, (tccrt_io_t)io, count, &past) != TCCRT_INVALID_ARGUMENT)
        bug("signature tensor %zu of function '%s' is past the end but was answered", count, name);
    }
  }
  return sum;
}

static unsigned query_members(const tccrt_pack_t *pack, span_t span) {
  static const char *const names[] = {TCCRT_MANIFEST, TCCRT_BYTECODE, TCCRT_WEIGHTS,
                                      "kernels/llvm.o", "kernels/llvm.so"};
  unsigned sum = 0;
  size_t nk, size;
  const void *data;
  const char *member;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (tccrt_pack_member(pack, names[i], &data, &size) == TCCRT_OK)
      sum += touch(span, data, size, names[i]);
  if (tccrt_pack_member(pack, "no/such/member", &data, &size) != TCCRT_INVALID_ARGUMENT ||
      !*tccrt_last_error())
    bug("a missing member was answered or refused without a message");
  CHECK(tccrt_pack_kernel_count(pack, &nk));
  for (size_t k = 0; k < nk; k++) {
    const char *symbol;
    CHECK(tccrt_pack_kernel_symbol(pack, k, &symbol));
    sum += touch_str(symbol);
  }
  CHECK(tccrt_pack_kernel_object(pack, &member, &data, &size));
  sum += touch(span, data, size, "the kernel object") + touch_str(member);
  CHECK(tccrt_pack_kernel_shared_object(pack, &member, &data, &size));
  sum += touch(span, data, size, "the kernel shared object") + touch_str(member);
  return sum;
}

static unsigned query_weights(const tccrt_pack_t *pack, span_t span) {
  size_t nw;
  unsigned sum = 0;
  CHECK(tccrt_pack_weight_count(pack, &nw));
  for (size_t w = 0; w < nw; w++) {
    tccrt_weight_info_t info;
    CHECK(tccrt_pack_weight(pack, w, &info));
    sum += touch_str(info.name) + touch_str(info.dtype);
    for (size_t d = 0; d < info.rank; d++) sum += (unsigned)info.shape[d];
    sum += touch(span, info.data, (size_t)info.nbytes, "a weight's data");
    /* Members start at a block boundary of the buffer, so an aligned offset is aligned in it. */
    if (info.offset % TCCRT_WEIGHT_ALIGN ||
        ((uintptr_t)info.data - (uintptr_t)span.lo) % TCCRT_WEIGHT_ALIGN)
      bug("weight '%s' at offset %llu is not %d-byte aligned", info.name,
          (unsigned long long)info.offset, TCCRT_WEIGHT_ALIGN);
  }
  return sum;
}

static volatile unsigned g_sink; /* keeps the touched bytes from being optimized away */

static void query_all(tccrt_pack_t *pack, span_t span) {
  const char *target;
  tccrt_pack_retain(pack);
  CHECK(tccrt_pack_target(pack, &target));
  g_sink += touch_str(target) + query_signatures(pack) + query_members(pack, span) +
            query_weights(pack, span);
  tccrt_pack_release(pack);
}

/* -- why a mutant was refused: the reader stage the message comes from ------------------------- */

enum { C_ACCEPTED, C_TAR, C_JSON, C_MANIFEST, C_MANIFEST_HASH, C_MEMBERS, C_MEMBER_HASH,
       C_WEIGHTS, C_BYTECODE, C_VERIFY, C_SHARED_OBJECT, C_OTHER, C_COUNT };
static const char *const CATEGORY_NAMES[C_COUNT] = {
    "accepted", "tar", "json", "manifest", "manifest-hash", "members", "member-hash",
    "weights", "bytecode", "verify", "shared-object", "other"};

/* Checked in order; `prefix` 1 matches at the start of the reason, 0 anywhere in it. */
static const struct {
  int prefix;
  const char *text;
  int category;
} REASONS[] = {
    {1, TCCRT_SIGNATURE " is ", C_MEMBERS},
    {1, "the shared object ", C_SHARED_OBJECT}, /* elf.c, before "has a malformed" below */
    {0, " ELF ", C_SHARED_OBJECT},
    {0, "(ELF type ", C_SHARED_OBJECT},
    {0, "section header table", C_SHARED_OBJECT},
    {0, "dynamic symbol table", C_SHARED_OBJECT},
    {0, "string table", C_SHARED_OBJECT},
    {1, "truncated", C_TAR},
    {1, "tar header", C_TAR},
    {0, " appears twice", C_TAR},
    {0, "too small to be a tvmpack", C_TAR},
    {1, TCCRT_MANIFEST " is not valid JSON", C_JSON},
    {0, "repeats a key", C_JSON},
    {0, "which is not JSON", C_JSON},
    {0, TCCRT_MANIFEST_HASH_FIELD, C_MANIFEST_HASH},
    {1, TCCRT_MANIFEST " is corrupted", C_MANIFEST_HASH},
    {1, "members do not match", C_MEMBERS},
    {1, "the manifest names member", C_MEMBERS},
    {0, "is corrupted (sha256 mismatch)", C_MEMBER_HASH},
    {0, "bytes but the manifest says", C_MEMBER_HASH},
    {0, "has a malformed", C_MANIFEST},
    {1, "weight ", C_WEIGHTS},
    {1, "the manifest lists weights", C_WEIGHTS},
    {1, TCCRT_BYTECODE ": ", C_BYTECODE},
    {1, "bytecode version", C_MANIFEST},
    {1, "weights alignment", C_MANIFEST},
    {1, "bytecode", C_VERIFY},
    {1, "entry function", C_VERIFY},
    {1, TCCRT_MANIFEST, C_MANIFEST},
    {1, "format", C_MANIFEST},
    {1, "a tensor of", C_MANIFEST},
    {1, "no " TCCRT_MANIFEST, C_MANIFEST},
};

static int classify(const char *reason) {
  for (size_t i = 0; i < sizeof REASONS / sizeof REASONS[0]; i++) {
    const char *t = REASONS[i].text;
    if (REASONS[i].prefix ? strncmp(reason, t, strlen(t)) == 0 : strstr(reason, t) != NULL)
      return REASONS[i].category;
  }
  /* The decoder's messages start with the bytecode member's name, which a mutated
   * manifest may have changed ("kernels/llvm.so: bad magic ..."). */
  size_t word = strcspn(reason, " ");
  if (word > 1 && reason[word - 1] == ':') return C_BYTECODE;
  return C_OTHER;
}

/* A refusal must be TCCRT_INVALID_PACK with one non-empty line naming the buffer. */
static const char *check_refusal(tccrt_status_t st) {
  const char *msg = tccrt_last_error();
  if (st != TCCRT_INVALID_PACK)
    bug("the reader refused a mutant with status %d (%s), not 'invalid pack': %s", (int)st,
        tccrt_status_string(st), msg);
  size_t n = strlen(MEMORY_PREFIX);
  if (strncmp(msg, MEMORY_PREFIX, n) != 0 || !msg[n] || strchr(msg, '\n') || strchr(msg, '\r'))
    bug("the reader refused a mutant with a message that is not one line naming '<memory>': '%s'", msg);
  return msg + n;
}

/* Open the mutant from a buffer of exactly its size; returns its category. */
static int feed(const fuzzer_t *f, const char **out_reason) {
  size_t len = f->bytes.len;
  uint8_t *copy = malloc(len ? len : 1);
  if (!copy) die("out of memory (%zu bytes)", len);
  memcpy(copy, f->bytes.p, len);
  tccrt_pack_t *pack = NULL;
  alarm(f->open_limit);
  tccrt_status_t st = tccrt_pack_open_memory(copy, len, &pack);
  alarm(0);
  int category = C_ACCEPTED;
  *out_reason = NULL;
  if (st == TCCRT_OK) {
    query_all(pack, (span_t){copy, copy + len});
    tccrt_pack_release(pack);
  } else {
    if (pack) bug("a refused open handed out a pack");
    *out_reason = check_refusal(st);
    category = classify(*out_reason);
  }
  free(copy);
  return category;
}

/* -- the driver ------------------------------------------------------------------------------ */

typedef struct options_t {
  uint64_t iterations, only, seed;
  int have_iterations, have_only;
  double time_limit;
  unsigned open_limit;
  const char *save;
} options_t;

static uint64_t parse_u64(const char *s, const char *flag) {
  char *end;
  unsigned long long v = strtoull(s ? s : "", &end, 10);
  if (!s || !*s || *end || *s == '-') die("%s needs a non-negative integer, got '%s'", flag, s ? s : "");
  return (uint64_t)v;
}

static void usage(void) {
  die("usage: tccrt_fuzz SEED.tvmpack... (--iterations N | --iteration I [--save FILE]) "
      "[--seed S] [--time-limit SEC] [--open-limit SEC]");
}

static void parse_args(int argc, char **argv, fuzzer_t *f, options_t *o) {
  static char seeds_shown[1024];
  o->seed = 1;
  o->open_limit = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--iterations") == 0) o->iterations = parse_u64(v, a), o->have_iterations = 1, i++;
    else if (strcmp(a, "--iteration") == 0) o->only = parse_u64(v, a), o->have_only = 1, i++;
    else if (strcmp(a, "--seed") == 0) o->seed = parse_u64(v, a), i++;
    else if (strcmp(a, "--time-limit") == 0) o->time_limit = (double)parse_u64(v, a), i++;
    else if (strcmp(a, "--open-limit") == 0) o->open_limit = (unsigned)parse_u64(v, a), i++;
    else if (strcmp(a, "--save") == 0 && v) o->save = v, i++;
    else if (a[0] == '-') usage();
    else if (f->n_seeds == MAX_SEEDS) die("at most %d seed packs", MAX_SEEDS);
    else {
      seed_load(&f->seeds[f->n_seeds++], a);
      snprintf(seeds_shown + strlen(seeds_shown), sizeof seeds_shown - strlen(seeds_shown), "%s%s",
               seeds_shown[0] ? " " : "", a);
    }
  }
  if (!f->n_seeds || o->have_iterations == o->have_only || o->open_limit == 0) usage();
  g_seed = o->seed;
  g_seed_args = seeds_shown;
  f->open_limit = o->open_limit;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --iteration I: rebuild one mutant, save it, say what the reader made of it. */
static int run_one(fuzzer_t *f, const options_t *o) {
  g_iteration = o->only;
  mutate(f, o->only);
  if (o->save) {
    FILE *out = fopen(o->save, "wb");
    if (!out || fwrite(f->bytes.p, 1, f->bytes.len, out) != f->bytes.len || fclose(out) != 0)
      die("%s: cannot write the mutant", o->save);
  }
  const char *reason;
  int category = feed(f, &reason);
  printf("iteration %llu: %zu bytes, %s%s%s\n", (unsigned long long)o->only, f->bytes.len,
         CATEGORY_NAMES[category], reason ? ": " : "", reason ? reason : "");
  return 0;
}

static int run_many(fuzzer_t *f, const options_t *o) {
  uint64_t counts[C_COUNT] = {0}, deep_counts[C_COUNT] = {0}, done = 0;
  char others[3][200] = {{0}};
  size_t n_others = 0;
  double start = now();
  int timed_out = 0;
  for (uint64_t i = 0; i < o->iterations; i++, done++) {
    if (o->time_limit > 0 && i % 256 == 0 && now() - start > o->time_limit) {
      timed_out = 1;
      break;
    }
    g_iteration = i;
    int deep = mutate(f, i);
    const char *reason;
    int category = feed(f, &reason);
    counts[category]++;
    if (deep) deep_counts[category]++;
    if (category == C_OTHER && n_others < 3) snprintf(others[n_others++], sizeof others[0], "%s", reason);
  }
  double secs = now() - start;
  printf("tccrt_fuzz: %llu iterations in %.1f s (%.0f/s), seed %llu, %zu seed packs%s\n",
         (unsigned long long)done, secs, secs > 0 ? (double)done / secs : 0.0,
         (unsigned long long)o->seed, f->n_seeds, timed_out ? ", stopped by --time-limit" : "");
  printf("%-16s %10s %10s\n", "outcome", "all", "deep-only");
  for (int c = 0; c < C_COUNT; c++)
    printf("%-16s %10llu %10llu\n", c == C_ACCEPTED ? "accepted" : CATEGORY_NAMES[c],
           (unsigned long long)counts[c], (unsigned long long)deep_counts[c]);
  for (size_t k = 0; k < n_others; k++) printf("other, e.g.: %s\n", others[k]);
  return 0;
}

int main(int argc, char **argv) {
  static fuzzer_t f; /* large: seeds and buffers */
  options_t o = {0};
  parse_args(argc, argv, &f, &o);
  install_handlers();
  return o.have_only ? run_one(&f, &o) : run_many(&f, &o);
}
