/* manifest.json, checked field by field as tcc/rt/pack.py's check_manifest does, then the
 * members against it (exact set, sizes, sha256) and the weights index against weights.bin.
 * Nothing the manifest says is used before it has been checked here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pack_internal.h"
#include "shape.h"
#include "tccrt_pack.h"

#define BAD(...) tccrt_fail(TCCRT_INVALID_PACK, __VA_ARGS__)
#define NOMEM() tccrt_fail(TCCRT_OUT_OF_MEMORY, "%s: out of memory reading the manifest", pack->path)

/* Kind masks for expect(). */
enum {
  K_NULL = 1 << TCCRT_JSON_NULL,
  K_INT = 1 << TCCRT_JSON_INT,
  K_STR = 1 << TCCRT_JSON_STRING,
  K_LIST = 1 << TCCRT_JSON_ARRAY,
  K_DICT = 1 << TCCRT_JSON_OBJECT,
  K_BOOL = (1 << TCCRT_JSON_FALSE) | (1 << TCCRT_JSON_TRUE),
};

static unsigned dtype_itemsize(const tccrt_json_t *v) {
  return v->kind == TCCRT_JSON_STRING ? tccrt_dtype_itemsize(v->string) : 0;
}

static const char *type_name(const tccrt_json_t *v) {
  switch (v->kind) {
    case TCCRT_JSON_NULL: return "NoneType";
    case TCCRT_JSON_FALSE:
    case TCCRT_JSON_TRUE: return "bool";
    case TCCRT_JSON_INT: return "int";
    case TCCRT_JSON_FLOAT: return "float";
    case TCCRT_JSON_STRING: return "str";
    case TCCRT_JSON_ARRAY: return "list";
    case TCCRT_JSON_OBJECT: return "dict";
  }
  return "?";
}

static tccrt_status_t expect(const tccrt_pack_t *pack, const tccrt_json_t *v, unsigned kinds,
                             const char *what) {
  if (!((1u << v->kind) & kinds))
    return BAD("%s: " TCCRT_MANIFEST ": %s has the wrong type (%s)", pack->path, what, type_name(v));
  return TCCRT_OK;
}

typedef struct field_t {
  const char *key;
  unsigned kinds;
} field_t;

/* `d` must be an object with exactly the fields of `spec`, each of its kinds. */
static tccrt_status_t fields(const tccrt_pack_t *pack, const tccrt_json_t *d, const field_t *spec,
                             size_t n, const char *what) {
  tccrt_status_t st = expect(pack, d, K_DICT, what);
  if (st) return st;
  int exact = d->length == n;
  for (size_t i = 0; exact && i < n; i++) exact = tccrt_json_get(d, spec[i].key) != NULL;
  if (!exact) {
    /* Listed in sorted order, as the Python reader lists them. */
    char names[256] = "";
    const char *last = "";
    for (size_t k = 0; k < n; k++) {
      const char *next = NULL;
      for (size_t i = 0; i < n; i++)
        if (strcmp(spec[i].key, last) > 0 && (!next || strcmp(spec[i].key, next) < 0)) next = spec[i].key;
      snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", k ? ", " : "", next);
      last = next;
    }
    return BAD("%s: " TCCRT_MANIFEST ": %s must have exactly the fields [%s]", pack->path, what, names);
  }
  for (size_t i = 0; i < n; i++) {
    char sub[320];
    snprintf(sub, sizeof sub, "%s.%s", what, spec[i].key);
    if ((st = expect(pack, tccrt_json_get(d, spec[i].key), spec[i].kinds, sub))) return st;
  }
  return TCCRT_OK;
}

#define FIELDS(pack, d, spec, what) fields(pack, d, spec, sizeof(spec) / sizeof(spec[0]), what)

static int is_sha(const tccrt_json_t *v) {
  if (v->kind != TCCRT_JSON_STRING || v->length != 64) return 0;
  for (size_t i = 0; i < 64; i++) {
    char c = v->string[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return 0;
  }
  return 1;
}

/* Names in messages are quoted and cut short: a corrupted name may be long. */
#define Q "'%.80s'"

static const char *const KNOWN[] = {"bytecode", "entry_functions", "format", "format_version",
                                    "kernels", TCCRT_MANIFEST_HASH_FIELD, "members", "target",
                                    "weights"};

static tccrt_status_t check_top_fields(const tccrt_pack_t *pack, const tccrt_json_t *m) {
  char missing[256] = "", unknown[256] = "";
  size_t nk = sizeof KNOWN / sizeof KNOWN[0];
  for (size_t i = 0; i < nk; i++)
    if (!tccrt_json_get(m, KNOWN[i]))
      snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s'%s'",
               missing[0] ? ", " : "", KNOWN[i]);
  for (size_t i = 0; i < m->length; i++) {
    int known = strcmp(m->keys[i], TCCRT_KERNEL_ORIGINS_FIELD) == 0 ||
                strcmp(m->keys[i], TCCRT_DEVICE_KERNELS_FIELD) == 0;
    for (size_t k = 0; !known && k < nk; k++) known = strcmp(m->keys[i], KNOWN[k]) == 0;
    if (!known)
      snprintf(unknown + strlen(unknown), sizeof unknown - strlen(unknown), "%s" Q,
               unknown[0] ? ", " : "", m->keys[i]);
  }
  if (missing[0] || unknown[0])
    return BAD("%s: " TCCRT_MANIFEST " fields are wrong (missing: [%s], unknown: [%s])", pack->path,
               missing, unknown);
  return TCCRT_OK;
}

/* manifest_sha256 is the sha256 of the manifest with that value replaced by 64 zeros; the
 * value must occur exactly once, so the replacement is unambiguous. */
static tccrt_status_t check_own_hash(const tccrt_pack_t *pack, const tccrt_json_t *digest,
                                     const uint8_t *raw, size_t size) {
  if (!is_sha(digest))
    return BAD("%s: " TCCRT_MANIFEST " has a malformed " TCCRT_MANIFEST_HASH_FIELD, pack->path);
  size_t found = 0, at = 0;
  for (size_t i = 0; i + 64 <= size; i++)
    if (raw[i] == (uint8_t)digest->string[0] && memcmp(raw + i, digest->string, 64) == 0) {
      if (found++ == 0) at = i;
      i += 63; /* occurrences are counted without overlap, as bytes.count does */
    }
  if (found != 1)
    return BAD("%s: " TCCRT_MANIFEST " has a malformed " TCCRT_MANIFEST_HASH_FIELD, pack->path);
  static const char zeros[64] = "0000000000000000000000000000000000000000000000000000000000000000";
  tccrt_sha256_t ctx;
  char hex[65];
  tccrt_sha256_init(&ctx);
  tccrt_sha256_update(&ctx, raw, at);
  tccrt_sha256_update(&ctx, zeros, 64);
  tccrt_sha256_update(&ctx, raw + at + 64, size - at - 64);
  tccrt_sha256_final_hex(&ctx, hex);
  if (memcmp(hex, digest->string, 64) != 0)
    return BAD("%s: " TCCRT_MANIFEST " is corrupted (sha256 mismatch)", pack->path);
  return TCCRT_OK;
}

static tccrt_status_t check_tensor_list(const tccrt_pack_t *pack, const tccrt_json_t *list,
                                        const char *fname) {
  static const field_t spec[] = {{"name", K_STR}, {"dtype", K_STR}, {"shape", K_LIST}};
  char what[160];
  snprintf(what, sizeof what, "a tensor of " Q, fname);
  for (size_t i = 0; i < list->length; i++) {
    const tccrt_json_t *t = &list->items[i];
    tccrt_status_t st = FIELDS(pack, t, spec, what);
    if (st) return st;
    const tccrt_json_t *shape = tccrt_json_get(t, "shape");
    int ok = dtype_itemsize(tccrt_json_get(t, "dtype")) != 0;
    for (size_t d = 0; ok && d < shape->length; d++) {
      const tccrt_json_t *dim = &shape->items[d];
      ok = (dim->kind == TCCRT_JSON_INT && dim->integer >= 0) || dim->kind == TCCRT_JSON_STRING;
    }
    if (!ok) return BAD("%s: a tensor of " Q " has a malformed dtype or shape", pack->path, fname);
  }
  return TCCRT_OK;
}


/* -- device_kernels (tcc/rt/pack.py _check_device_kernels, in its order and words) -- */

static const char *const DEVICE_KINDS[] = {"cuda"};
#define MAX_THREADS_PER_BLOCK 1024

static int all_ints(const tccrt_json_t *list) {
  for (size_t i = 0; i < list->length; i++)
    if (list->items[i].kind != TCCRT_JSON_INT) return 0;
  return 1;
}

/* A launch spec's shape program over `slots` size variables, of rank `ndim` (or any: -1). */
static tccrt_status_t launch_program(const tccrt_pack_t *pack, const tccrt_json_t *prog, size_t slots,
                                     const char *where, int64_t ndim) {
  if (!all_ints(prog)) return BAD("%s: " TCCRT_MANIFEST ": %s: malformed shape program", pack->path, where);
  int64_t small[64] = {0}, *words = prog->length <= 64 ? small : malloc(prog->length * sizeof *words);
  if (!words) return NOMEM();
  for (size_t i = 0; i < prog->length; i++) words[i] = prog->items[i].integer;
  char why[96];
  const char *problem = tccrt_shape_program_problem(words, prog->length, slots, ndim, why, sizeof why);
  if (words != small) free(words);
  return problem ? BAD("%s: " TCCRT_MANIFEST ": %s: %s", pack->path, where, problem) : TCCRT_OK;
}

static int c_identifier(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > 255 || !((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
    return 0;
  for (size_t i = 1; i < n; i++)
    if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
          s[i] == '_'))
      return 0;
  return 1;
}

/* sm_XX or compute_XX, XX from 10 to 999 without a leading zero. */
static int binary_name(const char *s) {
  const char *digits = !strncmp(s, "sm_", 3) ? s + 3 : !strncmp(s, "compute_", 8) ? s + 8 : NULL;
  size_t n = digits ? strlen(digits) : 0;
  if (n < 2 || n > 3 || digits[0] < '1' || digits[0] > '9') return 0;
  for (size_t i = 1; i < n; i++)
    if (digits[i] < '0' || digits[i] > '9') return 0;
  return 1;
}

/* An int or a list of ints as Python's repr shows it (cut short), else its JSON type:
 * tcc/rt/pack.py's _shown, for messages. */
static const char *shown(const tccrt_json_t *v, char *out, size_t size) {
  if (v->kind == TCCRT_JSON_INT) {
    snprintf(out, size, "%lld", (long long)v->integer);
    return out;
  }
  if (v->kind != TCCRT_JSON_ARRAY || !all_ints(v)) {
    snprintf(out, size, "(a %s)", type_name(v));
    return out;
  }
  size_t used = (size_t)snprintf(out, size, "[");
  for (size_t i = 0; i < v->length && used < size; i++)
    used += (size_t)snprintf(out + used, size - used, "%s%lld", i ? ", " : "", (long long)v->items[i].integer);
  if (used < size) snprintf(out + used, size - used, "]");
  return out;
}

static tccrt_status_t check_launch_spec(const tccrt_pack_t *pack, const tccrt_json_t *spec, const char *where) {
  static const field_t fields_spec[] = {{"params", K_LIST}, {"size_vars", K_LIST}, {"bind", K_LIST},
                                        {"writes", K_LIST}, {"preconditions", K_LIST},
                                        {"workspaces", K_LIST}, {"launches", K_LIST}};
  static const field_t scalar_spec[] = {{"dtype", K_STR}, {"scalar", K_BOOL}};
  static const field_t buffer_spec[] = {{"dtype", K_STR}, {"shape", K_LIST}};
  static const field_t ws_spec[] = {{"name", K_STR}, {"dtype", K_STR}, {"count", K_LIST}};
  static const field_t launch_spec[] = {{"function", K_STR}, {"grid", K_LIST}, {"block", K_LIST}};
  tccrt_status_t st;
  char what[512];
  if ((st = FIELDS(pack, spec, fields_spec, where))) return st;
  const tccrt_json_t *names = tccrt_json_get(spec, "size_vars"), *params = tccrt_json_get(spec, "params");
  snprintf(what, sizeof what, "%s: a size variable", where);
  for (size_t i = 0; i < names->length; i++)
    if ((st = expect(pack, &names->items[i], K_STR, what))) return st;
  for (size_t i = 0; i < params->length; i++) {
    const tccrt_json_t *p = &params->items[i];
    int scalar = p->kind == TCCRT_JSON_OBJECT && tccrt_json_get(p, "scalar");
    snprintf(what, sizeof what, "%s parameter %zu", where, i);
    if ((st = scalar ? FIELDS(pack, p, scalar_spec, what) : FIELDS(pack, p, buffer_spec, what))) return st;
    if (!tccrt_dtype_known(tccrt_json_get(p, "dtype")->string) ||
        (scalar && tccrt_json_get(p, "scalar")->kind != TCCRT_JSON_TRUE))
      return BAD("%s: " TCCRT_MANIFEST ": %s has a malformed dtype", pack->path, what);
    if (!scalar && (st = launch_program(pack, tccrt_json_get(p, "shape"), names->length, what, -1))) return st;
  }
  const tccrt_json_t *bind = tccrt_json_get(spec, "bind");
  if (bind->length != names->length)
    return BAD("%s: " TCCRT_MANIFEST ": %s binds %zu of %zu size variables", pack->path, where, bind->length,
               names->length);
  for (size_t i = 0; i < bind->length; i++) {
    const tccrt_json_t *b = &bind->items[i];
    int ok = b->kind == TCCRT_JSON_ARRAY && b->length == 2 && all_ints(b) && b->items[0].integer >= 0 &&
             (uint64_t)b->items[0].integer < params->length;
    if (ok) {
      const tccrt_json_t *p = &params->items[b->items[0].integer];
      int64_t axis = b->items[1].integer;
      if (tccrt_json_get(p, "scalar")) ok = axis == -1;
      else ok = axis >= 0 && axis < tccrt_json_get(p, "shape")->items[0].integer;
    }
    char text[96];
    if (!ok)
      return BAD("%s: " TCCRT_MANIFEST ": %s reads a size variable from a bad place %s", pack->path, where,
                 shown(b, text, sizeof text));
  }
  const tccrt_json_t *writes = tccrt_json_get(spec, "writes");
  for (size_t i = 0; i < writes->length; i++) {
    const tccrt_json_t *w = &writes->items[i];
    char text[96];
    if (w->kind != TCCRT_JSON_INT || w->integer < 0 || (uint64_t)w->integer >= params->length ||
        tccrt_json_get(&params->items[w->integer], "scalar"))
      return BAD("%s: " TCCRT_MANIFEST ": %s writes a bad parameter %s", pack->path, where,
                 shown(w, text, sizeof text));
  }
  snprintf(what, sizeof what, "%s preconditions", where);
  if ((st = launch_program(pack, tccrt_json_get(spec, "preconditions"), names->length, what, -1))) return st;
  const tccrt_json_t *workspaces = tccrt_json_get(spec, "workspaces");
  for (size_t i = 0; i < workspaces->length; i++) {
    const tccrt_json_t *w = &workspaces->items[i];
    snprintf(what, sizeof what, "%s workspace", where);
    if ((st = FIELDS(pack, w, ws_spec, what))) return st;
    snprintf(what, sizeof what, "%s workspace " Q, where, tccrt_json_get(w, "name")->string);
    if (!tccrt_dtype_known(tccrt_json_get(w, "dtype")->string))
      return BAD("%s: " TCCRT_MANIFEST ": %s has a malformed dtype", pack->path, what);
    if ((st = launch_program(pack, tccrt_json_get(w, "count"), names->length, what, 1))) return st;
  }
  const tccrt_json_t *launches = tccrt_json_get(spec, "launches");
  if (launches->length == 0) return BAD("%s: " TCCRT_MANIFEST ": %s has no launches", pack->path, where);
  for (size_t i = 0; i < launches->length; i++) {
    const tccrt_json_t *l = &launches->items[i];
    snprintf(what, sizeof what, "%s launch", where);
    if ((st = FIELDS(pack, l, launch_spec, what))) return st;
    if (!c_identifier(tccrt_json_get(l, "function")->string))
      return BAD("%s: " TCCRT_MANIFEST ": %s launches a function with a malformed name", pack->path, where);
    snprintf(what, sizeof what, "%s grid", where);
    if ((st = launch_program(pack, tccrt_json_get(l, "grid"), names->length, what, 3))) return st;
    const tccrt_json_t *block = tccrt_json_get(l, "block");
    int ok = block->length == 3 && all_ints(block);
    int64_t threads = 1;
    for (size_t d = 0; ok && d < 3; d++) {
      int64_t b = block->items[d].integer;
      ok = b >= 1 && b <= MAX_THREADS_PER_BLOCK;
      threads *= ok ? b : 1;
    }
    char text[96];
    if (!ok || threads > MAX_THREADS_PER_BLOCK)
      return BAD("%s: " TCCRT_MANIFEST ": %s has a malformed block %s", pack->path, where,
                 shown(block, text, sizeof text));
  }
  return TCCRT_OK;
}

static tccrt_status_t check_device_kernels(const tccrt_pack_t *pack, const tccrt_json_t *libraries,
                                           const tccrt_json_t *symbols) {
  static const field_t lib_spec[] = {{"target", K_STR}, {"binaries", K_DICT}, {"source", K_STR},
                                     {"kernels", K_DICT}};
  tccrt_status_t st = expect(pack, libraries, K_DICT, TCCRT_DEVICE_KERNELS_FIELD);
  for (size_t k = 0; !st && k < libraries->length; k++) {
    char what[200], sub[320];
    const char *kind = libraries->keys[k];
    snprintf(what, sizeof what, TCCRT_DEVICE_KERNELS_FIELD ".%.80s", kind);
    int known = 0;
    for (size_t i = 0; i < sizeof DEVICE_KINDS / sizeof *DEVICE_KINDS; i++) known |= !strcmp(kind, DEVICE_KINDS[i]);
    if (!known)
      return BAD("%s: " TCCRT_MANIFEST ": %s: this runtime runs no kernels for device " Q " (it knows cuda); "
                 "use a newer tcc", pack->path, what, kind);
    const tccrt_json_t *lib = &libraries->items[k];
    if ((st = FIELDS(pack, lib, lib_spec, what))) return st;
    const tccrt_json_t *binaries = tccrt_json_get(lib, "binaries"), *kernels = tccrt_json_get(lib, "kernels");
    if (binaries->length == 0) return BAD("%s: " TCCRT_MANIFEST ": %s has no binaries", pack->path, what);
    for (size_t i = 0; i < binaries->length; i++) {
      if (!binary_name(binaries->keys[i]))
        return BAD("%s: " TCCRT_MANIFEST ": %s has a binary named " Q "; expected sm_XX or compute_XX",
                   pack->path, what, binaries->keys[i]);
      snprintf(sub, sizeof sub, "%s.binaries.%.80s", what, binaries->keys[i]);
      if ((st = expect(pack, &binaries->items[i], K_STR, sub))) return st;
    }
    for (size_t i = 0; i < kernels->length; i++) {
      int listed = 0;
      for (size_t s = 0; !listed && s < symbols->length; s++) listed = !strcmp(symbols->items[s].string, kernels->keys[i]);
      if (!listed)
        return BAD("%s: " TCCRT_MANIFEST ": %s has kernel " Q ", which the kernel table lacks", pack->path, what,
                   kernels->keys[i]);
      snprintf(sub, sizeof sub, "%s kernel " Q, what, kernels->keys[i]);
      if ((st = check_launch_spec(pack, &kernels->items[i], sub))) return st;
    }
  }
  return st;
}

/* The field checks of check_manifest, in its order. */
static tccrt_status_t check_fields(const tccrt_pack_t *pack, const tccrt_json_t *m,
                                   const uint8_t *raw, size_t size) {
  tccrt_status_t st;
  const char *path = pack->path;
  if ((st = expect(pack, m, K_DICT, "the manifest")) || (st = check_top_fields(pack, m))) return st;
  const tccrt_json_t *format = tccrt_json_get(m, "format");
  if (format->kind != TCCRT_JSON_STRING || strcmp(format->string, TCCRT_PACK_FORMAT) != 0 ||
      format->length != strlen(TCCRT_PACK_FORMAT)) {
    if (format->kind == TCCRT_JSON_STRING)
      return BAD("%s: format is " Q ", not '" TCCRT_PACK_FORMAT "'", path, format->string);
    return BAD("%s: format is a %s, not '" TCCRT_PACK_FORMAT "'", path, type_name(format));
  }
  const tccrt_json_t *version = tccrt_json_get(m, "format_version");
  if (version->kind != TCCRT_JSON_INT || version->integer != TCCRT_PACK_VERSION) {
    char shown[32];
    if (version->kind == TCCRT_JSON_INT) snprintf(shown, sizeof shown, "%lld", (long long)version->integer);
    else snprintf(shown, sizeof shown, "of type %s", type_name(version));
    return BAD("%s: format version %s is not supported (this runtime reads version %d); rebuild "
               "the pack with this tcc", path, shown, TCCRT_PACK_VERSION);
  }
  if ((st = check_own_hash(pack, tccrt_json_get(m, TCCRT_MANIFEST_HASH_FIELD), raw, size))) return st;
  if ((st = expect(pack, tccrt_json_get(m, "target"), K_STR, "target"))) return st;

  static const field_t bc_spec[] = {{"member", K_STR}, {"version", K_INT}};
  const tccrt_json_t *bc = tccrt_json_get(m, "bytecode");
  if ((st = FIELDS(pack, bc, bc_spec, "bytecode"))) return st;
  int64_t bc_version = tccrt_json_get(bc, "version")->integer;
  if (bc_version != TCCRT_BYTECODE_VERSION)
    return BAD("%s: bytecode version %lld is not supported (this runtime reads %d); rebuild the "
               "pack with this tcc", path, (long long)bc_version, TCCRT_BYTECODE_VERSION);

  static const field_t k_spec[] = {
      {"object", K_STR | K_NULL}, {"shared_object", K_STR | K_NULL}, {"symbols", K_LIST}};
  const tccrt_json_t *k = tccrt_json_get(m, "kernels");
  if ((st = FIELDS(pack, k, k_spec, "kernels"))) return st;
  const tccrt_json_t *symbols = tccrt_json_get(k, "symbols");
  for (size_t i = 0; i < symbols->length; i++)
    if ((st = expect(pack, &symbols->items[i], K_STR, "a kernel symbol"))) return st;

  const tccrt_json_t *origins = tccrt_json_get(m, TCCRT_KERNEL_ORIGINS_FIELD);
  if (origins) {
    if ((st = expect(pack, origins, K_DICT, TCCRT_KERNEL_ORIGINS_FIELD))) return st;
    for (size_t i = 0; i < origins->length; i++) {
      char what[160];
      snprintf(what, sizeof what, TCCRT_KERNEL_ORIGINS_FIELD " of " Q, origins->keys[i]);
      const tccrt_json_t *names = &origins->items[i];
      if ((st = expect(pack, names, K_LIST, what))) return st;
      snprintf(what, sizeof what, "an origin of " Q, origins->keys[i]);
      for (size_t j = 0; j < names->length; j++)
        if ((st = expect(pack, &names->items[j], K_STR, what))) return st;
    }
  }

  const tccrt_json_t *devices = tccrt_json_get(m, TCCRT_DEVICE_KERNELS_FIELD);
  if (devices && (st = check_device_kernels(pack, devices, symbols))) return st;

  static const field_t w_spec[] = {
      {"member", K_STR | K_NULL}, {"alignment", K_INT}, {"arrays", K_DICT}};
  static const field_t a_spec[] = {
      {"dtype", K_STR}, {"shape", K_LIST}, {"offset", K_INT}, {"nbytes", K_INT}};
  const tccrt_json_t *w = tccrt_json_get(m, "weights");
  if ((st = FIELDS(pack, w, w_spec, "weights"))) return st;
  int64_t alignment = tccrt_json_get(w, "alignment")->integer;
  if (alignment != TCCRT_WEIGHT_ALIGN)
    return BAD("%s: weights alignment is %lld, expected %d", path, (long long)alignment, TCCRT_WEIGHT_ALIGN);
  const tccrt_json_t *arrays = tccrt_json_get(w, "arrays");
  for (size_t i = 0; i < arrays->length; i++) {
    char what[160];
    snprintf(what, sizeof what, "weight " Q, arrays->keys[i]);
    const tccrt_json_t *a = &arrays->items[i];
    if ((st = FIELDS(pack, a, a_spec, what))) return st;
    const tccrt_json_t *shape = tccrt_json_get(a, "shape");
    int ok = dtype_itemsize(tccrt_json_get(a, "dtype")) != 0;
    for (size_t d = 0; ok && d < shape->length; d++)
      ok = shape->items[d].kind == TCCRT_JSON_INT && shape->items[d].integer >= 0;
    if (!ok) return BAD("%s: weight " Q " has a malformed dtype or shape", path, arrays->keys[i]);
  }

  const tccrt_json_t *entries = tccrt_json_get(m, "entry_functions");
  if ((st = expect(pack, entries, K_DICT, "entry_functions"))) return st;
  static const field_t sig_spec[] = {{"inputs", K_LIST}, {"outputs", K_LIST}};
  for (size_t i = 0; i < entries->length; i++) {
    char what[160];
    snprintf(what, sizeof what, "signature of " Q, entries->keys[i]);
    const tccrt_json_t *sig = &entries->items[i];
    if ((st = FIELDS(pack, sig, sig_spec, what)) ||
        (st = check_tensor_list(pack, tccrt_json_get(sig, "inputs"), entries->keys[i])) ||
        (st = check_tensor_list(pack, tccrt_json_get(sig, "outputs"), entries->keys[i])))
      return st;
  }

  const tccrt_json_t *members = tccrt_json_get(m, "members");
  if ((st = expect(pack, members, K_DICT, "members"))) return st;
  static const field_t m_spec[] = {{"size", K_INT}, {"sha256", K_STR}};
  for (size_t i = 0; i < members->length; i++) {
    char what[160];
    snprintf(what, sizeof what, "member " Q, members->keys[i]);
    const tccrt_json_t *info = &members->items[i];
    if ((st = FIELDS(pack, info, m_spec, what))) return st;
    if (!is_sha(tccrt_json_get(info, "sha256")) || tccrt_json_get(info, "size")->integer < 0)
      return BAD("%s: member " Q " has a malformed size or sha256", path, members->keys[i]);
  }
  return TCCRT_OK;
}

/* The members present (but the manifest) must be exactly those listed, each with the
 * listed size and sha256. */
static tccrt_status_t check_members(const tccrt_pack_t *pack, const tccrt_json_t *listed) {
  const char *path = pack->path;
  for (size_t i = 0; i < pack->member_count; i++) {
    const char *name = pack->members[i].name;
    if (strcmp(name, TCCRT_MANIFEST) != 0 && strcmp(name, TCCRT_SIGNATURE) != 0 && !tccrt_json_get(listed, name))
      return BAD("%s: members do not match the manifest (unlisted: " Q ")", path, name);
  }
  for (size_t i = 0; i < listed->length; i++) {
    const char *name = listed->keys[i];
    int unlistable = !strcmp(name, TCCRT_MANIFEST) || !strcmp(name, TCCRT_SIGNATURE);
    const tccrt_member_t *mem = unlistable ? NULL : tccrt_pack_find_member(pack, name);
    if (!mem) return BAD("%s: members do not match the manifest (missing: " Q ")", path, name);
  }
  /* Sizes and hashes in name order, as the Python reader checks them. */
  const char **names = malloc((listed->length ? listed->length : 1) * sizeof *names);
  if (!names) return NOMEM();
  for (size_t i = 0; i < listed->length; i++) names[i] = listed->keys[i];
  tccrt_status_t st = TCCRT_OK;
  for (size_t i = 0; i < listed->length && !st; i++) {
    size_t best = i; /* selection sort: members are a handful */
    for (size_t j = i + 1; j < listed->length; j++)
      if (strcmp(names[j], names[best]) < 0) best = j;
    const char *tmp = names[i];
    names[i] = names[best];
    names[best] = tmp;
    const tccrt_json_t *info = tccrt_json_get(listed, names[i]);
    const tccrt_member_t *mem = tccrt_pack_find_member(pack, names[i]);
    int64_t want = tccrt_json_get(info, "size")->integer;
    char hex[65];
    if ((uint64_t)want != mem->size) {
      st = BAD("%s: member %s is %zu bytes but the manifest says %lld", path, names[i], mem->size,
               (long long)want);
    } else {
      tccrt_sha256_hex(pack->data + mem->offset, mem->size, hex);
      if (memcmp(hex, tccrt_json_get(info, "sha256")->string, 64) != 0)
        st = BAD("%s: member %s is corrupted (sha256 mismatch)", path, names[i]);
    }
  }
  free(names);
  return st;
}

static tccrt_status_t named_member(tccrt_pack_t *pack, const tccrt_json_t *name,
                                   const tccrt_member_t **out) {
  *out = NULL;
  if (name->kind == TCCRT_JSON_NULL) return TCCRT_OK;
  *out = tccrt_pack_find_member(pack, name->string);
  if (!*out || strcmp(name->string, TCCRT_MANIFEST) == 0)
    return BAD("%s: the manifest names member " Q ", which the pack lacks", pack->path, name->string);
  return TCCRT_OK;
}

static int cmp_weights(const void *a, const void *b) {
  return strcmp(((const tccrt_weight_info_t *)a)->name, ((const tccrt_weight_info_t *)b)->name);
}

static tccrt_status_t load_weights(tccrt_pack_t *pack, const tccrt_json_t *w) {
  const tccrt_json_t *arrays = tccrt_json_get(w, "arrays");
  const tccrt_member_t *member;
  tccrt_status_t st = named_member(pack, tccrt_json_get(w, "member"), &member);
  if (st) return st;
  if (!member) {
    if (arrays->length) return BAD("%s: the manifest lists weights but names no weights member", pack->path);
    return TCCRT_OK;
  }
  pack->weight_count = arrays->length;
  pack->weights = tccrt_arena_alloc(&pack->arena, (arrays->length + 1) * sizeof *pack->weights);
  if (!pack->weights) return NOMEM();
  for (size_t i = 0; i < arrays->length; i++) {
    const tccrt_json_t *a = &arrays->items[i];
    const tccrt_json_t *shape = tccrt_json_get(a, "shape");
    tccrt_weight_info_t *info = &pack->weights[i];
    int64_t *dims = tccrt_arena_alloc(&pack->arena, (shape->length + 1) * sizeof *dims);
    if (!dims) return NOMEM();
    /* The element count saturates: a product past 2^63 cannot equal any nbytes. */
    uint64_t bytes = dtype_itemsize(tccrt_json_get(a, "dtype"));
    int overflow = 0;
    for (size_t d = 0; d < shape->length; d++) {
      dims[d] = shape->items[d].integer;
      if (dims[d] == 0) bytes = 0, overflow = 0;
      else if (!overflow && bytes > (uint64_t)INT64_MAX / (uint64_t)dims[d]) overflow = 1;
      else if (!overflow) bytes *= (uint64_t)dims[d];
    }
    int64_t off = tccrt_json_get(a, "offset")->integer, nbytes = tccrt_json_get(a, "nbytes")->integer;
    if (overflow || nbytes < 0 || bytes != (uint64_t)nbytes) {
      char shown[128] = "";
      for (size_t d = 0; d < shape->length && strlen(shown) < 100; d++)
        snprintf(shown + strlen(shown), sizeof shown - strlen(shown), "%s%lld", d ? ", " : "",
                 (long long)dims[d]);
      return BAD("%s: weight " Q ": %lld bytes do not hold shape [%s] of %s", pack->path,
                 arrays->keys[i], (long long)nbytes, shown, tccrt_json_get(a, "dtype")->string);
    }
    if (off < 0 || off % TCCRT_WEIGHT_ALIGN || (uint64_t)off > member->size ||
        (uint64_t)nbytes > member->size - (uint64_t)off)
      return BAD("%s: weight " Q ": offset %lld (+%lld) is misaligned or out of bounds", pack->path,
                 arrays->keys[i], (long long)off, (long long)nbytes);
    info->name = arrays->keys[i];
    info->dtype = tccrt_json_get(a, "dtype")->string;
    info->rank = shape->length;
    info->shape = dims;
    info->offset = (uint64_t)off;
    info->nbytes = (uint64_t)nbytes;
    info->data = pack->data + member->offset + (size_t)off;
  }
  qsort(pack->weights, pack->weight_count, sizeof *pack->weights, cmp_weights);
  return TCCRT_OK;
}

/* A checked shape program, as words in the pack's arena. */
static tccrt_status_t load_program(tccrt_pack_t *pack, const tccrt_json_t *prog, const int64_t **out) {
  int64_t *words = tccrt_arena_alloc(&pack->arena, (prog->length + 1) * sizeof *words);
  if (!words) return NOMEM();
  for (size_t i = 0; i < prog->length; i++) words[i] = prog->items[i].integer;
  *out = words;
  return TCCRT_OK;
}

static tccrt_status_t load_launch_spec(tccrt_pack_t *pack, const char *symbol, const tccrt_json_t *spec,
                                       tccrt_device_kernel_t *k) {
  const tccrt_json_t *params = tccrt_json_get(spec, "params"), *names = tccrt_json_get(spec, "size_vars");
  const tccrt_json_t *bind = tccrt_json_get(spec, "bind"), *writes = tccrt_json_get(spec, "writes");
  const tccrt_json_t *workspaces = tccrt_json_get(spec, "workspaces"), *launches = tccrt_json_get(spec, "launches");
  tccrt_status_t st;
  k->symbol = symbol;
  k->param_count = params->length;
  k->size_var_count = names->length;
  k->workspace_count = workspaces->length;
  k->launch_count = launches->length;
  k->params = tccrt_arena_alloc(&pack->arena, (params->length + 1) * sizeof *k->params);
  k->size_vars = tccrt_arena_alloc(&pack->arena, (names->length + 1) * sizeof *k->size_vars);
  k->bind = tccrt_arena_alloc(&pack->arena, (bind->length + 1) * sizeof *k->bind);
  k->workspaces = tccrt_arena_alloc(&pack->arena, (workspaces->length + 1) * sizeof *k->workspaces);
  k->launches = tccrt_arena_alloc(&pack->arena, (launches->length + 1) * sizeof *k->launches);
  if (!k->params || !k->size_vars || !k->bind || !k->workspaces || !k->launches) return NOMEM();
  for (size_t i = 0; i < params->length; i++) {
    const tccrt_json_t *p = &params->items[i];
    k->params[i].dtype = tccrt_json_get(p, "dtype")->string;
    k->params[i].scalar = tccrt_json_get(p, "scalar") != NULL;
    if (!k->params[i].scalar && (st = load_program(pack, tccrt_json_get(p, "shape"), &k->params[i].shape)))
      return st;
  }
  for (size_t i = 0; i < writes->length; i++) k->params[writes->items[i].integer].written = 1;
  for (size_t i = 0; i < names->length; i++) {
    k->size_vars[i] = names->items[i].string;
    k->bind[i][0] = bind->items[i].items[0].integer;
    k->bind[i][1] = bind->items[i].items[1].integer;
  }
  if ((st = load_program(pack, tccrt_json_get(spec, "preconditions"), &k->preconditions))) return st;
  for (size_t i = 0; i < workspaces->length; i++) {
    const tccrt_json_t *w = &workspaces->items[i];
    k->workspaces[i].name = tccrt_json_get(w, "name")->string;
    k->workspaces[i].dtype = tccrt_json_get(w, "dtype")->string;
    if ((st = load_program(pack, tccrt_json_get(w, "count"), &k->workspaces[i].count))) return st;
  }
  for (size_t i = 0; i < launches->length; i++) {
    const tccrt_json_t *l = &launches->items[i], *block = tccrt_json_get(l, "block");
    k->launches[i].function = tccrt_json_get(l, "function")->string;
    for (size_t d = 0; d < 3; d++) k->launches[i].block[d] = (unsigned)block->items[d].integer;
    if ((st = load_program(pack, tccrt_json_get(l, "grid"), &k->launches[i].grid))) return st;
  }
  return TCCRT_OK;
}

/* The checked device_kernels into pack->cuda, and per kernel-table entry where it runs. */
static tccrt_status_t load_device_kernels(tccrt_pack_t *pack, const tccrt_json_t *devices) {
  pack->kernel_device = tccrt_arena_alloc(&pack->arena, (pack->kernel_count + 1) * sizeof *pack->kernel_device);
  if (!pack->kernel_device) return NOMEM();
  for (size_t i = 0; i < pack->kernel_count; i++) pack->kernel_device[i] = -1;
  pack->cpu_kernel_count = pack->kernel_count;
  const tccrt_json_t *lib = devices ? tccrt_json_get(devices, "cuda") : NULL;
  if (!lib) return TCCRT_OK;
  tccrt_cuda_code_t *cuda = tccrt_arena_alloc(&pack->arena, sizeof *cuda);
  const tccrt_json_t *binaries = tccrt_json_get(lib, "binaries"), *kernels = tccrt_json_get(lib, "kernels");
  if (!cuda) return NOMEM();
  cuda->target = tccrt_json_get(lib, "target")->string;
  cuda->binary_count = binaries->length;
  cuda->kernel_count = kernels->length;
  cuda->binary_names = tccrt_arena_alloc(&pack->arena, (binaries->length + 1) * sizeof *cuda->binary_names);
  cuda->binaries = tccrt_arena_alloc(&pack->arena, (binaries->length + 1) * sizeof *cuda->binaries);
  cuda->kernels = tccrt_arena_alloc(&pack->arena, (kernels->length + 1) * sizeof *cuda->kernels);
  if (!cuda->binary_names || !cuda->binaries || !cuda->kernels) return NOMEM();
  const tccrt_member_t *source;
  tccrt_status_t st = named_member(pack, tccrt_json_get(lib, "source"), &source);
  for (size_t i = 0; !st && i < binaries->length; i++) {
    cuda->binary_names[i] = binaries->keys[i];
    st = named_member(pack, &binaries->items[i], &cuda->binaries[i]);
  }
  for (size_t i = 0; !st && i < kernels->length; i++) {
    size_t at = 0; /* in the table: the manifest's check saw to it */
    while (strcmp(pack->kernels[at], kernels->keys[i]) != 0) at++;
    pack->kernel_device[at] = (int64_t)i;
    pack->cpu_kernel_count -= 1;
    st = load_launch_spec(pack, pack->kernels[at], &kernels->items[i], &cuda->kernels[i]);
  }
  pack->cuda = cuda;
  return st;
}

static tccrt_status_t load_tensors(tccrt_pack_t *pack, const tccrt_json_t *list,
                                   tccrt_tensor_info_t **out) {
  *out = tccrt_arena_alloc(&pack->arena, (list->length + 1) * sizeof **out);
  if (!*out) return NOMEM();
  for (size_t i = 0; i < list->length; i++) {
    const tccrt_json_t *t = &list->items[i], *shape = tccrt_json_get(t, "shape");
    tccrt_dim_t *dims = tccrt_arena_alloc(&pack->arena, (shape->length + 1) * sizeof *dims);
    if (!dims) return NOMEM();
    for (size_t d = 0; d < shape->length; d++) {
      const tccrt_json_t *dim = &shape->items[d];
      dims[d].value = dim->kind == TCCRT_JSON_INT ? dim->integer : -1;
      dims[d].symbol = dim->kind == TCCRT_JSON_STRING ? dim->string : NULL;
    }
    (*out)[i].name = tccrt_json_get(t, "name")->string;
    (*out)[i].dtype = tccrt_json_get(t, "dtype")->string;
    (*out)[i].rank = shape->length;
    (*out)[i].dims = dims;
  }
  return TCCRT_OK;
}

tccrt_status_t tccrt_manifest_load(tccrt_pack_t *pack) {
  const tccrt_member_t *mm = tccrt_pack_find_member(pack, TCCRT_MANIFEST);
  tccrt_status_t st;
  if (!mm)
    return BAD("%s: no " TCCRT_MANIFEST " member; not a tvmpack (rebuild it with `tcc emit`)", pack->path);
  if (mm->size > TCCRT_MAX_MANIFEST_BYTES)
    return BAD("%s: " TCCRT_MANIFEST " is %zu bytes, more than the %d allowed", pack->path, mm->size,
               TCCRT_MAX_MANIFEST_BYTES);
  const uint8_t *raw = pack->data + mm->offset;
  char why[128];
  const tccrt_json_t *m = tccrt_json_parse(&pack->arena, (const char *)raw, mm->size, why, sizeof why);
  if (!m) return BAD("%s: " TCCRT_MANIFEST " is not valid JSON (%s)", pack->path, why);
  if ((st = check_fields(pack, m, raw, mm->size))) return st;
  if ((st = check_members(pack, tccrt_json_get(m, "members")))) return st;
  const tccrt_member_t *bytecode;
  if ((st = named_member(pack, tccrt_json_get(tccrt_json_get(m, "bytecode"), "member"), &bytecode)))
    return st;
  if ((st = tccrt_bytecode_decode(pack, bytecode))) return st;

  const tccrt_json_t *kernels = tccrt_json_get(m, "kernels");
  const tccrt_json_t *symbols = tccrt_json_get(kernels, "symbols");
  const tccrt_json_t *origins = tccrt_json_get(m, TCCRT_KERNEL_ORIGINS_FIELD);
  for (size_t i = 0; origins && i < origins->length; i++) {
    int known = 0;
    for (size_t s = 0; !known && s < symbols->length; s++)
      known = strcmp(symbols->items[s].string, origins->keys[i]) == 0;
    if (!known)
      return BAD("%s: " TCCRT_MANIFEST ": " TCCRT_KERNEL_ORIGINS_FIELD " names kernel " Q
                 ", which the kernel table lacks", pack->path, origins->keys[i]);
  }
  if ((st = load_weights(pack, tccrt_json_get(m, "weights")))) return st;
  if ((st = named_member(pack, tccrt_json_get(kernels, "object"), &pack->object)) ||
      (st = named_member(pack, tccrt_json_get(kernels, "shared_object"), &pack->shared_object)))
    return st;

  pack->manifest = m;
  pack->target = tccrt_json_get(m, "target")->string;
  pack->kernel_count = symbols->length;
  pack->kernels = tccrt_arena_alloc(&pack->arena, (symbols->length + 1) * sizeof *pack->kernels);
  if (!pack->kernels) return NOMEM();
  for (size_t i = 0; i < symbols->length; i++) pack->kernels[i] = symbols->items[i].string;
  if ((st = load_device_kernels(pack, tccrt_json_get(m, TCCRT_DEVICE_KERNELS_FIELD)))) return st;
  const tccrt_json_t *entries = tccrt_json_get(m, "entry_functions");
  pack->function_count = entries->length;
  pack->functions = tccrt_arena_alloc(&pack->arena, (entries->length + 1) * sizeof *pack->functions);
  if (!pack->functions) return NOMEM();
  for (size_t i = 0; i < entries->length; i++) {
    tccrt_function_t *f = &pack->functions[i];
    const tccrt_json_t *ins = tccrt_json_get(&entries->items[i], "inputs");
    const tccrt_json_t *outs = tccrt_json_get(&entries->items[i], "outputs");
    f->name = entries->keys[i];
    f->counts[TCCRT_INPUT] = ins->length;
    f->counts[TCCRT_OUTPUT] = outs->length;
    if ((st = load_tensors(pack, ins, &f->tensors[TCCRT_INPUT])) ||
        (st = load_tensors(pack, outs, &f->tensors[TCCRT_OUTPUT])))
      return st;
  }
  if ((st = tccrt_program_verify(pack))) return st;
  return tccrt_elf_check(pack);
}
