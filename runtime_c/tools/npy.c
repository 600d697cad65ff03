/* .npy reading and writing (the format of numpy/lib/format.py): a magic string, a version,
 * a little-endian header length, a Python dict literal padded with spaces and a newline,
 * then the raw data.  The dict is parsed as numpy writes it (repr of str, bool and tuple
 * of int) with any whitespace and trailing commas, not as general Python. */
#include "npy.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tccrt's .npy code copies little-endian data as it is and needs a little-endian host"
#endif

static const char MAGIC[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
#define SAVE_HINT "save it with numpy.save"
#define MALFORMED "malformed .npy header: "

/* The dtypes a tccrt tensor holds, by the kind and size of a numpy descr ("f4"). */
static const struct {
  const char *code, *dtype;
  size_t itemsize;
} DTYPES[] = {
    {"b1", "bool", 1},   {"i1", "int8", 1},    {"i2", "int16", 2},   {"i4", "int32", 4},
    {"i8", "int64", 8},  {"u1", "uint8", 1},   {"u2", "uint16", 2},  {"u4", "uint32", 4},
    {"u8", "uint64", 8}, {"f2", "float16", 2}, {"f4", "float32", 4}, {"f8", "float64", 8},
};

static int failf(char *err, size_t err_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int failf(char *err, size_t err_size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, err_size, fmt, ap);
  va_end(ap);
  return -1;
}

/* -- the header dict ----------------------------------------------------------------- */

typedef struct cursor_t {
  const char *p, *start, *end;
  char *err;
  size_t err_size;
} cursor_t;

static void skip_space(cursor_t *c) {
  while (c->p < c->end && *c->p && strchr(" \t\n\r\f\v", *c->p)) c->p++;
}

/* A parse error at the cursor: what was expected, and where. */
static int expected(cursor_t *c, const char *what) {
  if (c->p >= c->end)
    return failf(c->err, c->err_size,
                 MALFORMED "expected %s, got the end of the header; " SAVE_HINT, what);
  unsigned char got = (unsigned char)*c->p;
  if (!isprint(got))
    return failf(c->err, c->err_size,
                 MALFORMED "expected %s at byte %zu, got byte 0x%02x; " SAVE_HINT, what,
                 (size_t)(c->p - c->start), got);
  return failf(c->err, c->err_size, MALFORMED "expected %s at byte %zu, got '%c'; " SAVE_HINT, what,
               (size_t)(c->p - c->start), got);
}

static int accept(cursor_t *c, char ch) {
  skip_space(c);
  if (c->p < c->end && *c->p == ch) {
    c->p++;
    return 1;
  }
  return 0;
}

static int accept_word(cursor_t *c, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return 0;
  c->p += n;
  return 1;
}

/* A quoted string without escapes (keys and descrs never have any). */
static int parse_string(cursor_t *c, const char **out, size_t *out_len) {
  skip_space(c);
  if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return expected(c, "a quoted string");
  char quote = *c->p++;
  const char *s = c->p;
  while (c->p < c->end && *c->p != quote && *c->p != '\\' && *c->p != '\n') c->p++;
  if (c->p >= c->end || *c->p != quote) return expected(c, "the end of a string");
  *out = s;
  *out_len = (size_t)(c->p - s);
  c->p++;
  return 0;
}

static int parse_descr(cursor_t *c, npy_header_t *h) {
  skip_space(c);
  if (c->p < c->end && *c->p == '[')
    return failf(c->err, c->err_size,
                 "holds a structured dtype (named fields), not plain numbers; save each field "
                 "as an array of its own");
  const char *s;
  size_t n;
  if (parse_string(c, &s, &n)) return -1;
  h->big_endian = n == 3 && s[0] == '>';
  if (n >= 2 && (s[1] == 'O' || s[1] == 'V'))
    return failf(c->err, c->err_size,
                 "holds Python objects or raw records ('%.*s'), not numbers; save an array of "
                 "numbers",
                 (int)n, s);
  for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++) {
    /* '|' (no byte order) is what numpy writes for one-byte types; '<' for the rest. */
    char order = DTYPES[i].itemsize == 1 ? '|' : '<';
    if (n == 3 && (s[0] == order || s[0] == '<' || s[0] == '>') && memcmp(s + 1, DTYPES[i].code, 2) == 0) {
      h->dtype = DTYPES[i].dtype;
      h->itemsize = DTYPES[i].itemsize;
      return 0;
    }
  }
  return failf(c->err, c->err_size,
               "dtype '%.*s' is not one tcc runs (bool, int8..int64, uint8..uint64, float16, "
               "float32, float64); convert it with a.astype(...) and save it again",
               (int)(n > 40 ? 40 : n), s);
}

static int parse_fortran_order(cursor_t *c) {
  skip_space(c);
  if (accept_word(c, "False")) return 0;
  if (accept_word(c, "True"))
    return failf(c->err, c->err_size,
                 "stored in Fortran order; save it with np.save(path, np.ascontiguousarray(a))");
  return expected(c, "True or False for 'fortran_order'");
}

static int parse_dim(cursor_t *c, int64_t *out) {
  skip_space(c);
  if (c->p < c->end && *c->p == '-')
    return failf(c->err, c->err_size, MALFORMED "a negative dimension in 'shape'; " SAVE_HINT);
  if (c->p >= c->end || *c->p < '0' || *c->p > '9') return expected(c, "a dimension");
  int64_t v = 0;
  for (; c->p < c->end && *c->p >= '0' && *c->p <= '9'; c->p++) {
    if (v > (INT64_MAX - (*c->p - '0')) / 10)
      return failf(c->err, c->err_size,
                   MALFORMED "a dimension in 'shape' overflows int64; " SAVE_HINT);
    v = v * 10 + (*c->p - '0');
  }
  *out = v;
  return 0;
}

/* A tuple of ints as Python writes one: "()", "(3,)", "(3, 4)" (a trailing comma allowed). */
static int parse_shape(cursor_t *c, npy_header_t *h) {
  if (!accept(c, '(')) return expected(c, "'(' to start the 'shape' tuple");
  h->rank = 0;
  if (accept(c, ')')) return 0;
  for (;;) {
    if (h->rank == NPY_MAX_RANK)
      return failf(c->err, c->err_size, "its shape has more than %d dimensions, numpy's limit",
                   NPY_MAX_RANK);
    if (parse_dim(c, &h->shape[h->rank++])) return -1;
    int comma = accept(c, ',');
    if (accept(c, ')')) {
      /* "(3)" is the int 3 in Python, not a tuple. */
      if (h->rank == 1 && !comma)
        return failf(c->err, c->err_size, MALFORMED "'shape' is (N), not a tuple (N,); " SAVE_HINT);
      return 0;
    }
    if (!comma) return expected(c, "',' or ')' in 'shape'");
  }
}

static int check_size(npy_header_t *h, char *err, size_t err_size) {
  /* The byte count must fit a size_t and an int64 (tensor shapes and file offsets). */
  uint64_t limit = SIZE_MAX < (uint64_t)INT64_MAX ? SIZE_MAX : (uint64_t)INT64_MAX;
  uint64_t n = h->itemsize;
  int zero = 0;
  for (size_t d = 0; d < h->rank; d++) zero |= h->shape[d] == 0;
  for (size_t d = 0; d < h->rank && !zero; d++) {
    if ((uint64_t)h->shape[d] > limit / n)
      return failf(err, err_size, "its shape needs more than %llu bytes, more than any "
                   "memory holds; check the file", (unsigned long long)limit);
    n *= (uint64_t)h->shape[d];
  }
  h->nbytes = zero ? 0 : (size_t)n;
  return 0;
}

int npy_parse_header(const char *text, size_t len, npy_header_t *out, char *err, size_t err_size) {
  static const char *const KEYS[] = {"descr", "fortran_order", "shape"};
  cursor_t c = {text, text, text + len, err, err_size};
  int seen[3] = {0, 0, 0};
  memset(out, 0, sizeof *out);
  if (!accept(&c, '{')) return expected(&c, "'{' to start the header dict");
  while (!accept(&c, '}')) {
    const char *key;
    size_t n;
    if (parse_string(&c, &key, &n)) return -1;
    size_t k = 0;
    while (k < 3 && !(strlen(KEYS[k]) == n && memcmp(KEYS[k], key, n) == 0)) k++;
    if (k == 3)
      return failf(err, err_size,
                   MALFORMED "unknown key '%.*s' (a .npy header has exactly 'descr', "
                   "'fortran_order' and 'shape'); " SAVE_HINT, (int)(n > 40 ? 40 : n), key);
    if (seen[k])
      return failf(err, err_size, MALFORMED "key '%s' appears twice; " SAVE_HINT, KEYS[k]);
    seen[k] = 1;
    if (!accept(&c, ':')) return expected(&c, "':' after a key");
    int rc = k == 0   ? parse_descr(&c, out)
             : k == 1 ? parse_fortran_order(&c)
                      : parse_shape(&c, out);
    if (rc) return -1;
    if (accept(&c, ',')) continue;
    skip_space(&c);
    if (c.p >= c.end || *c.p != '}') return expected(&c, "',' or '}' after a value");
  }
  skip_space(&c);
  if (c.p != c.end) return expected(&c, "only spaces after the header dict");
  for (size_t k = 0; k < 3; k++)
    if (!seen[k])
      return failf(err, err_size, MALFORMED "the key '%s' is missing; " SAVE_HINT, KEYS[k]);
  return check_size(out, err, err_size);
}

/* -- reading ------------------------------------------------------------------------- */

/* The header's bytes, after checking the magic and version; the caller frees them. */
static char *read_header(FILE *f, const char *path, size_t *out_len, char *err, size_t err_size) {
  unsigned char pre[12];
  size_t got = fread(pre, 1, 8, f);
  if (got >= 4 && memcmp(pre, "PK\x03\x04", 4) == 0) {
    failf(err, err_size, "%s is an .npz archive, not an .npy file; save each input with numpy.save",
          path);
    return NULL;
  }
  if (got < 8 || memcmp(pre, MAGIC, sizeof MAGIC) != 0) {
    failf(err, err_size, "%s is not an .npy file (it does not start with \\x93NUMPY); " SAVE_HINT,
          path);
    return NULL;
  }
  int major = pre[6], minor = pre[7];
  if (minor != 0 || major < 1 || major > 3) {
    failf(err, err_size, "%s: .npy format version %d.%d is not supported (1.0, 2.0 and 3.0 are); "
          SAVE_HINT, path, major, minor);
    return NULL;
  }
  size_t width = major == 1 ? 2 : 4;
  if (fread(pre + 8, 1, width, f) != width) {
    failf(err, err_size, "%s: the file ends inside the .npy header; " SAVE_HINT, path);
    return NULL;
  }
  size_t len = pre[8] | (size_t)pre[9] << 8;
  if (width == 4) len |= (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
  if (len > NPY_MAX_HEADER) {
    failf(err, err_size,
          "%s: the .npy header is %zu bytes, more than the %d numpy reads; " SAVE_HINT, path, len,
          NPY_MAX_HEADER);
    return NULL;
  }
  char *text = malloc(len + 1);
  if (!text) {
    failf(err, err_size, "%s: out of memory reading the .npy header", path);
    return NULL;
  }
  if (fread(text, 1, len, f) != len) {
    free(text);
    failf(err, err_size, "%s: the file ends inside the .npy header; " SAVE_HINT, path);
    return NULL;
  }
  *out_len = len;
  return text;
}

static void format_shape(const npy_header_t *h, char *buf, size_t size) {
  size_t used = (size_t)snprintf(buf, size, "(");
  for (size_t d = 0; d < h->rank && used < size; d++)
    used += (size_t)snprintf(buf + used, size - used, "%s%lld", d ? ", " : "",
                             (long long)h->shape[d]);
  if (used < size) snprintf(buf + used, size - used, h->rank == 1 ? ",)" : ")");
}

/* Read the data section into a new tensor; it must be exactly h->nbytes long. */
static int read_data(FILE *f, const char *path, const npy_header_t *h, long long available,
                     tccrt_tensor_t **out, char *err, size_t err_size) {
  char shape[128];
  format_shape(h, shape, sizeof shape);
  /* A regular file's size is known: refuse a wrong one before allocating the tensor. */
  if (available >= 0 && (unsigned long long)available != h->nbytes)
    return failf(err, err_size, "%s: the data is %lld bytes but %s%s needs %zu (%s); " SAVE_HINT,
                 path, available, h->dtype, shape, h->nbytes,
                 (unsigned long long)available < h->nbytes ? "truncated" : "trailing bytes");
  tccrt_tensor_t *t;
  if (tccrt_tensor_new(h->dtype, h->rank, h->shape, &t) != TCCRT_OK)
    return failf(err, err_size, "%s: %s", path, tccrt_last_error());
  size_t got = h->nbytes ? fread(tccrt_tensor_data(t), 1, h->nbytes, f) : 0;
  int extra = got == h->nbytes && fgetc(f) != EOF;
  if (got != h->nbytes || extra || ferror(f)) {
    tccrt_tensor_release(t);
    if (ferror(f)) return failf(err, err_size, "%s: cannot read: %s", path, strerror(errno));
    return failf(err, err_size, "%s: %s%s needs %zu data bytes but the file %s; " SAVE_HINT, path,
                 h->dtype, shape, h->nbytes, extra ? "has more" : "ends early");
  }
  if (h->big_endian && h->itemsize > 1) { /* numpy reads it as numbers; so does tccrt */
    uint8_t *p = tccrt_tensor_data(t);
    for (size_t i = 0; i < h->nbytes; i += h->itemsize)
      for (size_t a = 0, b = h->itemsize - 1; a < b; a++, b--) {
        uint8_t tmp = p[i + a];
        p[i + a] = p[i + b];
        p[i + b] = tmp;
      }
  }
  *out = t;
  return 0;
}

int npy_read(const char *path, tccrt_tensor_t **out_tensor, char *err, size_t err_size) {
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) /* a FIFO would block */
    return failf(err, err_size, "%s: is %s, not a regular file; give the path of a file", path,
                 S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISCHR(st.st_mode) ? "a character device"
                 : S_ISBLK(st.st_mode) ? "a block device" : S_ISSOCK(st.st_mode) ? "a socket" : "not a regular file");
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (errno == ENOENT) return failf(err, err_size, "%s: no such file", path);
    return failf(err, err_size, "%s: cannot open: %s", path, strerror(errno));
  }
  if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
    fclose(f);
    return failf(err, err_size, "%s is a directory, not an .npy file", path);
  }
  size_t len = 0;
  char *text = read_header(f, path, &len, err, err_size);
  int rc = -1;
  if (text) {
    npy_header_t h;
    char why[400];
    if (npy_parse_header(text, len, &h, why, sizeof why)) {
      failf(err, err_size, "%s: %s", path, why);
    } else {
      long long available = -1;
      long offset = ftell(f);
      if (S_ISREG(st.st_mode) && offset >= 0) available = (long long)st.st_size - offset;
      rc = read_data(f, path, &h, available, out_tensor, err, err_size);
    }
    free(text);
  }
  fclose(f);
  return rc;
}

/* -- writing ------------------------------------------------------------------------- */

int npy_write(FILE *f, const tccrt_tensor_t *tensor) {
  const char *dtype = tccrt_tensor_dtype(tensor);
  size_t rank = tccrt_tensor_rank(tensor);
  const int64_t *shape = tccrt_tensor_shape(tensor);
  char descr[4] = "";
  for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
    if (strcmp(DTYPES[i].dtype, dtype) == 0)
      snprintf(descr, sizeof descr, "%c%s", DTYPES[i].itemsize == 1 ? '|' : '<', DTYPES[i].code);
  if (!descr[0] || rank > NPY_MAX_RANK) {
    errno = EINVAL;
    return -1;
  }
  /* The header numpy.save writes: the dict, room for the first dimension to grow to 21
   * digits, then spaces and a newline up to a multiple of 64 bytes. */
  char header[2048];
  size_t n = (size_t)snprintf(header, sizeof header,
                              "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (size_t d = 0; d < rank; d++)
    n += (size_t)snprintf(header + n, sizeof header - n, "%s%lld", d ? ", " : "",
                          (long long)shape[d]);
  n += (size_t)snprintf(header + n, sizeof header - n, "%s), }", rank == 1 ? "," : "");
  if (rank > 0) {
    int digits = snprintf(NULL, 0, "%lld", (long long)shape[0]);
    for (int i = digits; i < 21; i++) header[n++] = ' ';
  }
  size_t pad = 64 - (sizeof MAGIC + 4 + n + 1) % 64;
  memset(header + n, ' ', pad);
  n += pad;
  header[n++] = '\n';
  unsigned char prefix[10];
  memcpy(prefix, MAGIC, sizeof MAGIC);
  prefix[6] = 1;
  prefix[7] = 0;
  prefix[8] = (unsigned char)(n & 0xff);
  prefix[9] = (unsigned char)(n >> 8);
  size_t nbytes = tccrt_tensor_nbytes(tensor);
  if (fwrite(prefix, 1, sizeof prefix, f) != sizeof prefix || fwrite(header, 1, n, f) != n ||
      (nbytes && fwrite(tccrt_tensor_data(tensor), 1, nbytes, f) != nbytes) || fflush(f) != 0)
    return -1;
  return 0;
}
