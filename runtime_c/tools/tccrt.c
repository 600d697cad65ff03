/* tccrt: the C runtime's command line.  `tccrt info [--json] PACK` verifies a pack and
 * prints its target, entry functions with their signatures, kernels and weights (--json:
 * the same summary as `tcc show PACK --json`).  Any error is one line on stderr starting
 * with "error: " and exit status 2. */
#include <stdio.h>
#include <string.h>

#include "tcc_runtime.h"

static int usage(void) {
  fprintf(stderr, "error: usage: tccrt info [--json] PACK (print a pack's signatures, kernels and weights)\n");
  return 2;
}

static int fail(void) {
  fprintf(stderr, "error: %s\n", tccrt_last_error());
  return 2;
}

static void json_string(const char *s) {
  putchar('"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') printf("\\%c", *p);
    else if (*p < 0x20) printf("\\u%04x", *p);
    else putchar(*p);
  }
  putchar('"');
}

static void print_dims(const tccrt_dim_t *dims, size_t rank, int as_json) {
  putchar('[');
  for (size_t d = 0; d < rank; d++) {
    if (d) printf(", ");
    if (!dims[d].symbol) printf("%lld", (long long)dims[d].value);
    else if (as_json) json_string(dims[d].symbol);
    else printf("%s", dims[d].symbol);
  }
  putchar(']');
}

static int print_tensors(const tccrt_pack_t *pack, size_t f, tccrt_io_t io, int as_json) {
  size_t n;
  if (tccrt_pack_signature_count(pack, f, io, &n)) return fail();
  for (size_t i = 0; i < n; i++) {
    tccrt_tensor_info_t t;
    if (tccrt_pack_signature_tensor(pack, f, io, i, &t)) return fail();
    if (i) printf(", ");
    if (as_json) {
      printf("{\"dtype\": ");
      json_string(t.dtype);
      printf(", \"name\": ");
      json_string(t.name);
      printf(", \"shape\": ");
      print_dims(t.dims, t.rank, 1);
      putchar('}');
    } else {
      printf("%s: %s", t.name, t.dtype);
      print_dims(t.dims, t.rank, 0);
    }
  }
  return 0;
}

static int info(const tccrt_pack_t *pack, const char *path, int as_json) {
  const char *target, *obj_name, *so_name;
  const void *obj, *so;
  size_t nf, nk, nw, obj_size, so_size;
  if (tccrt_pack_target(pack, &target) || tccrt_pack_function_count(pack, &nf) ||
      tccrt_pack_kernel_count(pack, &nk) || tccrt_pack_weight_count(pack, &nw) ||
      tccrt_pack_kernel_object(pack, &obj_name, &obj, &obj_size) ||
      tccrt_pack_kernel_shared_object(pack, &so_name, &so, &so_size))
    return fail();
  unsigned long long weight_bytes = 0;
  for (size_t i = 0; i < nw; i++) {
    tccrt_weight_info_t w;
    if (tccrt_pack_weight(pack, i, &w)) return fail();
    weight_bytes += w.nbytes;
  }
  if (as_json) {
    printf("{\"target\": ");
    json_string(target);
    printf(", \"functions\": {");
  } else {
    printf("pack: %s\ntarget: %s\nentry functions: %zu\n", path, target, nf);
  }
  for (size_t f = 0; f < nf; f++) {
    const char *name;
    if (tccrt_pack_function_name(pack, f, &name)) return fail();
    if (as_json) {
      printf("%s", f ? ", " : "");
      json_string(name);
      printf(": {\"inputs\": [");
    } else {
      printf("  %s(", name);
    }
    if (print_tensors(pack, f, TCCRT_INPUT, as_json)) return 2;
    printf(as_json ? "], \"outputs\": [" : ") -> (");
    if (print_tensors(pack, f, TCCRT_OUTPUT, as_json)) return 2;
    printf(as_json ? "]}" : ")\n");
  }
  if (as_json) {
    printf("}, \"kernels\": %zu, \"shared_object\": %s, \"object_bytes\": %zu, \"constants\": %zu, "
           "\"constant_bytes\": %llu}\n", nk, so ? "true" : "false", obj_size, nw, weight_bytes);
    return 0;
  }
  printf("kernels: %zu", nk);
  if (obj_name) printf(" (object %s, %zu bytes", obj_name, obj_size);
  if (obj_name && so_name) printf("; shared object %s, %zu bytes", so_name, so_size);
  printf("%s\n", obj_name ? ")" : "");
  for (size_t k = 0; k < nk; k++) {
    const char *sym;
    if (tccrt_pack_kernel_symbol(pack, k, &sym)) return fail();
    printf("  %s\n", sym);
  }
  printf("weights: %zu (%llu bytes)\n", nw, weight_bytes);
  for (size_t i = 0; i < nw; i++) {
    tccrt_weight_info_t w;
    if (tccrt_pack_weight(pack, i, &w)) return fail();
    printf("  %s: %s[", w.name, w.dtype);
    for (size_t d = 0; d < w.rank; d++) printf("%s%lld", d ? ", " : "", (long long)w.shape[d]);
    printf("] at offset %llu\n", (unsigned long long)w.offset);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "info") != 0) return usage();
  int as_json = 0;
  const char *path = NULL;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) as_json = 1;
    else if (!path && argv[i][0] != '-') path = argv[i];
    else return usage();
  }
  if (!path) return usage();
  tccrt_pack_t *pack;
  if (tccrt_pack_open_file(path, &pack)) return fail();
  int rc = info(pack, path, as_json);
  tccrt_pack_release(pack);
  if (!rc && fflush(stdout) != 0) {
    fprintf(stderr, "error: cannot write the output\n");
    return 2;
  }
  return rc;
}
