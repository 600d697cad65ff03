/* A strict JSON parser for manifest.json: it accepts what Python's json.loads accepts
 * from tcc's writer and refuses NaN/Infinity, duplicate keys, control characters in
 * strings, "\u0000", lone surrogates, integers beyond int64 and nesting deeper than
 * TCCRT_JSON_MAX_DEPTH.  Recursion is bounded by that depth; every read checks the end. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct parser_t {
  tccrt_arena_t *arena;
  const char *p, *end, *start;
  char *why;
  size_t why_size;
} parser_t;

static int fail(parser_t *ps, const char *what) {
  if (!ps->why[0]) snprintf(ps->why, ps->why_size, "%s at byte %zu", what, (size_t)(ps->p - ps->start));
  return 0;
}

static void skip_ws(parser_t *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
    ps->p++;
}

int tccrt_utf8_valid(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) { i++; continue; }
    if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
    else return 0;
    if (n - i < len) return 0;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return 0;
      cp = cp << 6 | (s[i + k] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return 0;
    i += len;
  }
  return 1;
}

static int hex4(parser_t *ps, uint32_t *out) {
  if (ps->end - ps->p < 4) return fail(ps, "truncated \\u escape");
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    char c = *ps->p++;
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
    else return fail(ps, "bad \\u escape");
  }
  *out = v;
  return 1;
}

static size_t put_utf8(char *o, uint32_t cp) {
  if (cp < 0x80) { o[0] = (char)cp; return 1; }
  if (cp < 0x800) { o[0] = (char)(0xc0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
  if (cp < 0x10000) {
    o[0] = (char)(0xe0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  o[0] = (char)(0xf0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

/* A string starting at the opening quote; the decoded text is never longer than the
 * source, so one allocation of the source length holds it. */
static int parse_string(parser_t *ps, const char **out, size_t *out_len) {
  const char *q = ++ps->p;
  while (q < ps->end && *q != '"') q += (*q == '\\' && q + 1 < ps->end) ? 2 : 1;
  if (q >= ps->end) return fail(ps, "unterminated string");
  char *buf = tccrt_arena_alloc(ps->arena, (size_t)(q - ps->p) + 1);
  if (!buf) return fail(ps, "out of memory");
  size_t n = 0;
  while (*ps->p != '"') {
    unsigned char c = (unsigned char)*ps->p;
    if (c < 0x20) return fail(ps, "control character in a string");
    if (c != '\\') { buf[n++] = (char)c; ps->p++; continue; }
    ps->p++;
    char e = *ps->p++;
    switch (e) {
      case '"': buf[n++] = '"'; break;
      case '\\': buf[n++] = '\\'; break;
      case '/': buf[n++] = '/'; break;
      case 'b': buf[n++] = '\b'; break;
      case 'f': buf[n++] = '\f'; break;
      case 'n': buf[n++] = '\n'; break;
      case 'r': buf[n++] = '\r'; break;
      case 't': buf[n++] = '\t'; break;
      case 'u': {
        uint32_t cp;
        if (!hex4(ps, &cp)) return 0;
        if (cp >= 0xd800 && cp <= 0xdbff) {
          uint32_t lo;
          if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u')
            return fail(ps, "lone surrogate in a string");
          ps->p += 2;
          if (!hex4(ps, &lo)) return 0;
          if (lo < 0xdc00 || lo > 0xdfff) return fail(ps, "lone surrogate in a string");
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        } else if (cp >= 0xdc00 && cp <= 0xdfff) {
          return fail(ps, "lone surrogate in a string");
        }
        if (cp == 0) return fail(ps, "\\u0000 in a string");
        n += put_utf8(buf + n, cp);
        break;
      }
      default: return fail(ps, "bad escape in a string");
    }
    if (ps->p > q) return fail(ps, "unterminated string");
  }
  ps->p++;
  buf[n] = '\0';
  *out = buf;
  *out_len = n;
  return 1;
}

static int parse_number(parser_t *ps, tccrt_json_t *v) {
  const char *s = ps->p, *p = ps->p;
  int is_float = 0;
  if (p < ps->end && *p == '-') p++;
  if (p >= ps->end) return fail(ps, "bad number");
  if (*p == '0') p++;
  else if (*p >= '1' && *p <= '9') while (p < ps->end && *p >= '0' && *p <= '9') p++;
  else return fail(ps, "bad number");
  if (p < ps->end && *p == '.') {
    p++, is_float = 1;
    if (p >= ps->end || *p < '0' || *p > '9') return fail(ps, "bad number");
    while (p < ps->end && *p >= '0' && *p <= '9') p++;
  }
  if (p < ps->end && (*p == 'e' || *p == 'E')) {
    p++, is_float = 1;
    if (p < ps->end && (*p == '+' || *p == '-')) p++;
    if (p >= ps->end || *p < '0' || *p > '9') return fail(ps, "bad number");
    while (p < ps->end && *p >= '0' && *p <= '9') p++;
  }
  char tmp[64];
  size_t len = (size_t)(p - s);
  ps->p = p;
  if (is_float) {
    /* Only the kind matters to the manifest (floats are never valid there). */
    v->kind = TCCRT_JSON_FLOAT;
    if (len < sizeof tmp) {
      memcpy(tmp, s, len);
      tmp[len] = '\0';
      v->number = strtod(tmp, NULL);
    }
    return 1;
  }
  if (len >= sizeof tmp) return fail(ps, "integer out of range");
  memcpy(tmp, s, len);
  tmp[len] = '\0';
  errno = 0;
  long long x = strtoll(tmp, NULL, 10);
  if (errno == ERANGE) return fail(ps, "integer out of range");
  v->kind = TCCRT_JSON_INT;
  v->integer = x;
  return 1;
}

static int parse_value(parser_t *ps, tccrt_json_t *v, int depth);

static int cmp_keys(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Arrays and objects collect their children in a growing heap vector, then move them
 * into the arena once the count is known. */
static int parse_container(parser_t *ps, tccrt_json_t *v, int depth, int is_object) {
  char close = is_object ? '}' : ']';
  if (depth >= TCCRT_JSON_MAX_DEPTH) return fail(ps, "nesting too deep");
  ps->p++;
  tccrt_json_t *items = NULL;
  const char **keys = NULL;
  size_t n = 0, cap = 0;
  int ok = 0;
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == close) {
    ps->p++;
    ok = 1;
    goto done;
  }
  for (;;) {
    if (n == cap) {
      cap = cap ? 2 * cap : 8;
      tccrt_json_t *ni = realloc(items, cap * sizeof *items);
      if (!ni) { fail(ps, "out of memory"); goto done; }
      items = ni;
      if (is_object) {
        const char **nk = realloc(keys, cap * sizeof *keys);
        if (!nk) { fail(ps, "out of memory"); goto done; }
        keys = nk;
      }
    }
    memset(&items[n], 0, sizeof items[n]);
    skip_ws(ps);
    if (is_object) {
      size_t klen;
      if (ps->p >= ps->end || *ps->p != '"') { fail(ps, "expected a key"); goto done; }
      if (!parse_string(ps, &keys[n], &klen)) goto done;
      skip_ws(ps);
      if (ps->p >= ps->end || *ps->p != ':') { fail(ps, "expected ':'"); goto done; }
      ps->p++;
    }
    if (!parse_value(ps, &items[n], depth + 1)) goto done;
    n++;
    skip_ws(ps);
    if (ps->p >= ps->end) { fail(ps, "unterminated array or object"); goto done; }
    if (*ps->p == close) { ps->p++; break; }
    if (*ps->p != ',') { fail(ps, "expected ',' or a closing bracket"); goto done; }
    ps->p++;
  }
  if (is_object && n > 1) {
    const char **sorted = malloc(n * sizeof *sorted);
    if (!sorted) { fail(ps, "out of memory"); goto done; }
    memcpy(sorted, keys, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_keys);
    for (size_t i = 1; i < n; i++)
      if (strcmp(sorted[i - 1], sorted[i]) == 0) {
        free(sorted);
        fail(ps, "repeated key");
        goto done;
      }
    free(sorted);
  }
  ok = 1;
done:
  if (ok) {
    v->kind = is_object ? TCCRT_JSON_OBJECT : TCCRT_JSON_ARRAY;
    v->length = n;
    v->items = tccrt_arena_alloc(ps->arena, n * sizeof *items);
    if (is_object) v->keys = tccrt_arena_alloc(ps->arena, n * sizeof *keys);
    if (!v->items || (is_object && !v->keys)) {
      ok = fail(ps, "out of memory");
    } else if (n) {
      memcpy(v->items, items, n * sizeof *items);
      if (is_object) memcpy(v->keys, keys, n * sizeof *keys);
    }
  }
  free(items);
  free(keys);
  return ok;
}

static int literal(parser_t *ps, const char *word, tccrt_json_t *v, tccrt_json_kind_t kind) {
  size_t n = strlen(word);
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) return fail(ps, "unexpected character");
  ps->p += n;
  v->kind = kind;
  return 1;
}

static int parse_value(parser_t *ps, tccrt_json_t *v, int depth) {
  skip_ws(ps);
  if (ps->p >= ps->end) return fail(ps, "unexpected end");
  switch (*ps->p) {
    case '{': return parse_container(ps, v, depth, 1);
    case '[': return parse_container(ps, v, depth, 0);
    case '"':
      v->kind = TCCRT_JSON_STRING;
      return parse_string(ps, &v->string, &v->length);
    case 't': return literal(ps, "true", v, TCCRT_JSON_TRUE);
    case 'f': return literal(ps, "false", v, TCCRT_JSON_FALSE);
    case 'n': return literal(ps, "null", v, TCCRT_JSON_NULL);
    default: return parse_number(ps, v);
  }
}

tccrt_json_t *tccrt_json_parse(tccrt_arena_t *arena, const char *text, size_t size, char *why,
                               size_t why_size) {
  parser_t ps = {arena, text, text + size, text, why, why_size};
  why[0] = '\0';
  if (!tccrt_utf8_valid((const uint8_t *)text, size)) {
    snprintf(why, why_size, "not UTF-8");
    return NULL;
  }
  tccrt_json_t *root = tccrt_arena_alloc(arena, sizeof *root);
  if (!root) {
    snprintf(why, why_size, "out of memory");
    return NULL;
  }
  if (!parse_value(&ps, root, 0)) return NULL;
  skip_ws(&ps);
  if (ps.p != ps.end) {
    fail(&ps, "trailing characters");
    return NULL;
  }
  return root;
}

const tccrt_json_t *tccrt_json_get(const tccrt_json_t *object, const char *key) {
  if (!object || object->kind != TCCRT_JSON_OBJECT) return NULL;
  for (size_t i = 0; i < object->length; i++)
    if (strcmp(object->keys[i], key) == 0) return &object->items[i];
  return NULL;
}
