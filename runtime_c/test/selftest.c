/* Unit checks of the runtime's internals that a pack cannot reach directly: SHA-256
 * against the FIPS 180-4 vectors, the JSON parser on accepted and refused texts, and the
 * host memory pool's reuse of blocks.
 * `tccrt_selftest` runs them (exit 0 when all pass); `tccrt_selftest sha256 FILE` prints
 * the file's digest, so the tests can compare it with hashlib at many lengths. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "tccrt_pack.h"
#include "value.h"

static int failures;

#define EXPECT(cond, ...)                   \
  do {                                      \
    if (!(cond)) {                          \
      fprintf(stderr, "FAIL: " __VA_ARGS__); \
      fputc('\n', stderr);                  \
      failures++;                           \
    }                                       \
  } while (0)

static void sha_vector(const char *msg, size_t repeat, const char *want) {
  tccrt_sha256_t ctx;
  char hex[65];
  tccrt_sha256_init(&ctx);
  for (size_t i = 0; i < repeat; i++) tccrt_sha256_update(&ctx, msg, strlen(msg));
  tccrt_sha256_final_hex(&ctx, hex);
  EXPECT(strcmp(hex, want) == 0, "sha256(%.20s x%zu) = %s, want %s", msg, repeat, hex, want);
}

static void test_sha256(void) {
  sha_vector("", 1, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  sha_vector("abc", 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  sha_vector("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1,
             "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  sha_vector("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
             1, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  sha_vector("a", 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static int parses(const char *text) {
  tccrt_arena_t arena = {0};
  char why[128];
  int ok = tccrt_json_parse(&arena, text, strlen(text), why, sizeof why) != NULL;
  tccrt_arena_free(&arena);
  return ok;
}

static void test_json(void) {
  static const char *good[] = {
      "{}", "[]", "0", "-0", "1.5e3", "true", "false", "null", " {\"a\": [1, 2, {\"b\": null}]} ",
      "\"\\u00e9\\ud83d\\ude00\\n\\\"\\\\\\/\"", "\"\xc3\xa9\"", "9223372036854775807",
      "-9223372036854775808", "{\"a\": 1, \"b\": 1}",
  };
  static const char *bad[] = {
      "", "{", "[1,]", "{\"a\":1,}", "01", "1.", ".5", "1e", "+1", "NaN", "Infinity", "-Infinity",
      "tru", "{\"a\" 1}", "{a: 1}", "\"\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\udc00\"",
      "\"\\u0000\"", "\"a\nb\"", "\"\xff\"", "\"\xc3\"", "{\"a\": 1, \"a\": 2}", "[1] [2]",
      "9223372036854775808", "\"unterminated", "\"\\", "'a'",
  };
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) EXPECT(parses(good[i]), "refused %s", good[i]);
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) EXPECT(!parses(bad[i]), "accepted %s", bad[i]);

  char deep[2 * TCCRT_JSON_MAX_DEPTH + 8];
  size_t n = TCCRT_JSON_MAX_DEPTH;
  memset(deep, '[', n);
  memset(deep + n, ']', n);
  deep[2 * n] = '\0';
  EXPECT(parses(deep), "refused nesting of %zu", n);
  n++;
  memset(deep, '[', n);
  memset(deep + n, ']', n);
  deep[2 * n] = '\0';
  EXPECT(!parses(deep), "accepted nesting of %zu", n);

  tccrt_arena_t arena = {0};
  char why[128];
  const char *text = "{\"k\": \"a\\u00e9\", \"n\": -42}";
  tccrt_json_t *v = tccrt_json_parse(&arena, text, strlen(text), why, sizeof why);
  EXPECT(v && strcmp(tccrt_json_get(v, "k")->string, "a\xc3\xa9") == 0, "decoded string");
  EXPECT(v && tccrt_json_get(v, "n")->kind == TCCRT_JSON_INT && tccrt_json_get(v, "n")->integer == -42,
         "decoded integer");
  tccrt_arena_free(&arena);
}

static void test_host_pool(void) {
  tccrt_host_pool_t *pool = tccrt_host_pool_new();
  EXPECT(pool, "made a pool");
  if (!pool) return;
  size_t a_size = 4096, b_size = 1000;
  char *a = tccrt_host_pool_alloc(pool, &a_size), *b = tccrt_host_pool_alloc(pool, &b_size);
  EXPECT(a && b && a_size == 4096 && b_size == 1000, "two fresh blocks of their sizes");
  EXPECT((uintptr_t)a % TCCRT_ARENA_ALIGN == 0 && (uintptr_t)b % TCCRT_ARENA_ALIGN == 0, "aligned");
  memset(a, 1, a_size);
  tccrt_host_pool_give_back(pool, a, a_size);
  tccrt_host_pool_give_back(pool, b, b_size);
  size_t size = 3000; /* fits the 4096-byte block, wasting under half of it */
  char *c = tccrt_host_pool_alloc(pool, &size);
  EXPECT(c == a && size == 4096, "reused the freed 4096-byte block for 3000 bytes (got %zu)", size);
  size = 400; /* the 1000-byte block is more than twice that: a fresh one */
  char *d = tccrt_host_pool_alloc(pool, &size);
  EXPECT(d && d != b && size == 400, "a fresh block rather than one more than twice the size");
  size = 900;
  char *e = tccrt_host_pool_alloc(pool, &size);
  EXPECT(e == b && size == 1000, "reused the 1000-byte block for 900 bytes");
  tccrt_host_pool_give_back(pool, c, 4096);
  tccrt_host_pool_give_back(pool, d, 400);
  tccrt_host_pool_give_back(pool, e, 1000);
  size = 1 << 20; /* given back while the others are free: more than the pool keeps (the peak
                    * live), so it is freed; ASan and valgrind check the free and the release */
  char *big = tccrt_host_pool_alloc(pool, &size);
  EXPECT(big, "a big block");
  tccrt_host_pool_give_back(pool, big, size);
  size = 1 << 20;
  char *again = tccrt_host_pool_alloc(pool, &size);
  EXPECT(again, "the big block again");
  tccrt_host_pool_give_back(pool, again, size);
  tccrt_host_pool_release(pool); /* frees what it keeps: ASan and valgrind see no leak */
}

static int sha_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 2;
  tccrt_sha256_t ctx;
  char buf[4096], hex[65];
  size_t n;
  tccrt_sha256_init(&ctx);
  /* Odd chunk sizes exercise the partial-block path. */
  while ((n = fread(buf, 1, 37, f)) > 0) tccrt_sha256_update(&ctx, buf, n);
  fclose(f);
  tccrt_sha256_final_hex(&ctx, hex);
  printf("%s\n", hex);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "sha256") == 0) return sha_file(argv[2]);
  test_sha256();
  test_json();
  test_host_pool();
  if (failures) {
    fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  printf("selftest: ok\n");
  return 0;
}
