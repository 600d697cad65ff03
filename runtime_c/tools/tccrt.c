/* tccrt: the C runtime's command line.
 *
 *   tccrt info [--json] PACK   verify a pack; print its target, entry functions with their
 *                              signatures, kernels and weights (--json: the summary of
 *                              `tcc show PACK --json`)
 *   tccrt run PACK ...         run an entry function on .npy inputs (see USAGE below)
 *
 * Any error is one line on stderr starting with "error: " and exit status 2, as for
 * `tcc run` (kernel failures included: tcc counts them as errors in the input). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "npy.h"
#include "pack_internal.h" /* the verified bytecode, for the summary of --json */
#include "tcc_runtime.h"
#include "tccrt_pack.h"

static const char USAGE[] =
    "usage: tccrt info [--json] [--require-signature PUBKEY] PACK\n"
    "       tccrt run PACK [--function NAME] [--input NAME=FILE.npy]... [--output-dir DIR]\n"
    "                      [--bench N] [--profile] [--threads N] [--require-signature PUBKEY]\n"
    "\n"
    "A pack is executable code: its kernels run as native code in this process.  Run only\n"
    "packs from a source you trust, or sign them (tcc compile --sign KEY) and give\n"
    "--require-signature PUBKEY (an Ed25519 public key, PEM): the pack must then carry a\n"
    "valid signature by it, checked before anything else in it is read (needs OpenSSL 3's\n"
    "libcrypto).\n"
    "\n"
    "info  Verify PACK and print its target, entry functions with their signatures, kernels\n"
    "      and weights; --json prints the summary `tcc show PACK --json` prints.\n"
    "run   Run entry function NAME (default main) of PACK.  Give every input of its signature\n"
    "      once, by name, as a C-order .npy file (numpy.save writes one).  Prints one line per\n"
    "      output, NAME: DTYPE[SHAPE], on stdout.\n"
    "      --output-dir DIR  also write each output to DIR/NAME.npy (DIR is created if its\n"
    "                        parent exists; characters other than letters, digits, '-', '_'\n"
    "                        and '.' in NAME become '_'; all files appear or none do)\n"
    "      --bench N         after that first (warm-up) run, time N more and print\n"
    "                        \"bench: N runs, median X ms (min Y, max Z)\" on stdout\n"
    "      --profile         then time every kernel and builtin call over N more runs (N\n"
    "                        from --bench, else 1) and print a table on stdout: per kernel\n"
    "                        and per category of builtins, its share of the run time, calls\n"
    "                        and milliseconds per run, then the share outside kernels\n"
    "      --threads N       threads for parallel kernels (default: TCC_NUM_THREADS if set,\n"
    "                        else OMP_NUM_THREADS, else every core)\n"
    "\n"
    "Exit status: 0 ok; 2 an error (bad arguments, a bad pack or .npy file, inputs that do\n"
    "not match the signature, a kernel failure), printed as one line \"error: ...\" on stderr.\n";

static int errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Print one "error: ..." line and return the exit status of an error. */
static int errorf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 2;
}

static int usage_error(const char *what) {
  return errorf("%s (see `tccrt --help`)", what);
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

/* Calls of kernels in the bytecode, as `tcc show --json` counts them. */
static size_t kernel_call_sites(const tccrt_program_t *program) {
  size_t calls = 0;
  for (size_t f = 0; f < program->function_count; f++)
    for (size_t pc = 0; pc < program->functions[f].code_length; pc++) {
      const tccrt_instr_t *ins = &program->functions[f].code[pc];
      calls += ins->op == TCCRT_OP_CALL && program->table[ins->a].kind == TCCRT_FUNC_KIND_KERNEL;
    }
  return calls;
}

static void print_bytes(const char *key, int known, int64_t bytes) {
  if (known) printf(", \"%s\": %lld", key, (long long)bytes);
  else printf(", \"%s\": null", key);
}

/* The memory plan of every VM function with arenas, as `tcc show PACK --json` prints it. */
static int print_memory(const tccrt_program_t *program) {
  int first = 1;
  for (size_t f = 0; f < program->function_count; f++) {
    tccrt_memory_report_t m;
    if (tccrt_program_memory(program, f, &m)) return fail();
    if (!m.arenas) continue;
    printf("%s", first ? "" : ", ");
    first = 0;
    json_string(program->functions[f].name);
    printf(": {\"tensors\": %zu, \"arenas\": %zu", m.tensors, m.arenas);
    print_bytes("allocated_bytes", m.known, m.allocated_bytes);
    print_bytes("planned_bytes", m.known, m.planned_bytes);
    print_bytes("lower_bound_bytes", m.known, m.lower_bound_bytes);
    putchar('}');
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
    printf("}, \"kernels\": %zu, \"kernel_call_sites\": %zu, \"shared_object\": %s, \"object_bytes\": %zu, "
           "\"constants\": %zu, \"constant_bytes\": %llu, \"memory\": {", nk, kernel_call_sites(&pack->program),
           so ? "true" : "false", obj_size, nw, weight_bytes);
    if (print_memory(&pack->program)) return 2;
    printf("}}\n");
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


/* -- tccrt run ----------------------------------------------------------------------- */

typedef struct run_args_t {
  const char *pack, *function, *output_dir, *public_key;
  char **input_names, **input_files; /* n_inputs each, pointing into argv */
  size_t n_inputs;
  int bench, threads, profile;
} run_args_t;

/* Matches argv[*i] against option `name` ("--name value" or "--name=value"): 0 when it is
 * another argument, 1 with *value set (and *i moved past it), -1 after reporting a
 * missing value. */
static int option(int argc, char **argv, int *i, const char *name, char **value) {
  size_t n = strlen(name);
  if (strncmp(argv[*i], name, n) != 0) return 0;
  if (argv[*i][n] == '=') {
    *value = argv[*i] + n + 1;
    return 1;
  }
  if (argv[*i][n] != '\0') return 0;
  if (*i + 1 >= argc) {
    errorf("%s needs a value (see `tccrt run --help`)", name);
    return -1;
  }
  *value = argv[++*i];
  return 1;
}

static int positive_int(const char *name, const char *text, int *out) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || end == text || *end || v < 1 || v > INT_MAX)
    return errorf("%s '%s': expected a positive integer", name, text);
  *out = (int)v;
  return 0;
}

static int parse_run_args(int argc, char **argv, run_args_t *a) {
  memset(a, 0, sizeof *a);
  a->function = "main";
  a->input_names = calloc((size_t)argc, sizeof *a->input_names);
  a->input_files = calloc((size_t)argc, sizeof *a->input_files);
  if (!a->input_names || !a->input_files) return errorf("out of memory");
  for (int i = 2; i < argc; i++) {
    char *v = NULL;
    int m;
    if ((m = option(argc, argv, &i, "--input", &v)) != 0) {
      if (m < 0) return 2;
      char *eq = strchr(v, '=');
      if (!eq || eq == v || !eq[1]) return errorf("--input '%s': expected NAME=FILE.npy", v);
      *eq = '\0';
      a->input_names[a->n_inputs] = v;
      a->input_files[a->n_inputs++] = eq + 1;
    } else if ((m = option(argc, argv, &i, "--function", &v)) != 0) {
      if (m < 0) return 2;
      a->function = v;
    } else if ((m = option(argc, argv, &i, "--output-dir", &v)) != 0) {
      if (m < 0) return 2;
      a->output_dir = v;
    } else if ((m = option(argc, argv, &i, "--bench", &v)) != 0) {
      if (m < 0 || positive_int("--bench", v, &a->bench)) return 2;
    } else if (strcmp(argv[i], "--profile") == 0) {
      a->profile = 1;
    } else if ((m = option(argc, argv, &i, "--threads", &v)) != 0) {
      if (m < 0 || positive_int("--threads", v, &a->threads)) return 2;
    } else if ((m = option(argc, argv, &i, "--require-signature", &v)) != 0) {
      if (m < 0) return 2;
      a->public_key = v;
    } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
      return errorf("unknown option '%s' (see `tccrt run --help`)", argv[i]);
    } else if (a->pack) {
      return errorf("one pack at a time: '%s' after '%s' (see `tccrt run --help`)", argv[i],
                    a->pack);
    } else {
      a->pack = argv[i];
    }
  }
  if (!a->pack) return errorf("run needs a pack: tccrt run PACK --input NAME=FILE.npy ...");
  return 0;
}

/* "['a', 'b']": the inputs of function `f`, as the Python runtime lists them. */
static void input_list(const tccrt_pack_t *pack, size_t f, size_t n, char *buf, size_t size) {
  size_t used = (size_t)snprintf(buf, size, "[");
  for (size_t i = 0; i < n && used < size; i++) {
    tccrt_tensor_info_t t;
    if (tccrt_pack_signature_tensor(pack, f, TCCRT_INPUT, i, &t) == TCCRT_OK)
      used += (size_t)snprintf(buf + used, size - used, "%s'%s'", i ? ", " : "", t.name);
  }
  if (used < size) snprintf(buf + used, size - used, "]");
}

static int find_function(const tccrt_pack_t *pack, const char *name, size_t *out) {
  if (tccrt_pack_function_find(pack, name, out) == TCCRT_OK) return 0;
  char list[512];
  size_t n = 0, used = (size_t)snprintf(list, sizeof list, "[");
  tccrt_pack_function_count(pack, &n);
  for (size_t f = 0; f < n && used < sizeof list; f++) {
    const char *fname = "";
    tccrt_pack_function_name(pack, f, &fname);
    used += (size_t)snprintf(list + used, sizeof list - used, "%s'%s'", f ? ", " : "", fname);
  }
  if (used < sizeof list) snprintf(list + used, sizeof list - used, "]");
  return errorf("no entry function '%s'; the pack has %s", name, list);
}

/* Read each --input into `inputs` (signature order), after checking that the names are
 * exactly the signature's. */
static int read_inputs(const tccrt_pack_t *pack, size_t f, const char *fname, const run_args_t *a,
                       tccrt_tensor_t **inputs, size_t n_inputs) {
  char want[1024];
  input_list(pack, f, n_inputs, want, sizeof want);
  size_t *slot = calloc(a->n_inputs + 1, sizeof *slot);
  if (!slot) return errorf("out of memory");
  int rc = 0;
  for (size_t k = 0; k < a->n_inputs && !rc; k++) {
    tccrt_tensor_info_t t;
    size_t i = 0;
    for (; i < n_inputs; i++)
      if (tccrt_pack_signature_tensor(pack, f, TCCRT_INPUT, i, &t) == TCCRT_OK &&
          strcmp(t.name, a->input_names[k]) == 0)
        break;
    slot[k] = i;
    if (i == n_inputs)
      rc = errorf("'%s' has no input named '%s'; its inputs are %s", fname, a->input_names[k],
                  want);
    for (size_t j = 0; j < k && !rc; j++)
      if (slot[j] == i)
        rc = errorf("input '%s' is given twice (--input %s=...)", a->input_names[k],
                    a->input_names[k]);
  }
  for (size_t i = 0; i < n_inputs && !rc; i++) {
    size_t k = 0;
    while (k < a->n_inputs && slot[k] != i) k++;
    tccrt_tensor_info_t t;
    if (k == a->n_inputs && tccrt_pack_signature_tensor(pack, f, TCCRT_INPUT, i, &t) == TCCRT_OK)
      rc = errorf("'%s': input '%s' is missing; its inputs are %s", fname, t.name, want);
  }
  for (size_t k = 0; k < a->n_inputs && !rc; k++) {
    char why[1024];
    if (npy_read(a->input_files[k], &inputs[slot[k]], why, sizeof why))
      rc = errorf("input '%s': %s", a->input_names[k], why);
  }
  free(slot);
  return rc;
}

static int safe_char(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

static int taken(char *const *names, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0) return 1;
  return 0;
}

/* The file name (without ".npy") of output `name`, as tcc/cli/arrays_io.py safe_file_names
 * makes it: every character (a UTF-8 sequence is one) other than [A-Za-z0-9._-] becomes '_',
 * "", "." and ".." get a leading '_', and a name in `used` gets "_1", "_2", ...  NULL when
 * out of memory; the caller frees the result. */
static char *safe_file_name(const char *name, char *const *used, size_t n_used) {
  size_t len = strlen(name), cand_size = len + 24;
  char *base = malloc(len + 2), *cand = malloc(cand_size), *p = base;
  if (!base || !cand) {
    free(base);
    free(cand);
    return NULL;
  }
  for (const unsigned char *s = (const unsigned char *)name; *s; s++)
    if ((*s & 0xc0) != 0x80) *p++ = safe_char(*s) ? (char)*s : '_'; /* skip continuation bytes */
  *p = '\0';
  if (!strcmp(base, "") || !strcmp(base, ".") || !strcmp(base, "..")) {
    memmove(base + 1, base, strlen(base) + 1);
    base[0] = '_';
  }
  snprintf(cand, cand_size, "%s", base);
  for (size_t k = 1; taken(used, n_used, cand); k++) snprintf(cand, cand_size, "%s_%zu", base, k);
  free(base);
  return cand;
}

static char *join_path(const char *dir, const char *name, const char *suffix) {
  size_t size = strlen(dir) + strlen(name) + strlen(suffix) + 2;
  char *path = malloc(size);
  if (path) snprintf(path, size, "%s/%s%s", dir, name, suffix);
  return path;
}

/* Write `t` to a new temporary file in `dir` (created with the umask's permissions, as
 * any output file is); returns its path, or NULL with errno set. */
static char *write_temp(const char *dir, size_t index, const tccrt_tensor_t *t) {
  for (int attempt = 0; attempt < 100; attempt++) {
    char name[64];
    snprintf(name, sizeof name, ".tccrt-%ld-%zu-%d", (long)getpid(), index, attempt);
    char *path = join_path(dir, name, ".npy.tmp");
    if (!path) return NULL;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0666);
    if (fd < 0) {
      int e = errno;
      free(path);
      if (e == EEXIST) continue; /* left by an earlier run that was killed */
      errno = e;
      return NULL;
    }
    FILE *f = fdopen(fd, "wb");
    int e = 0;
    if (!f) {
      e = errno;
      close(fd);
    } else {
      if (npy_write(f, t) != 0) e = errno ? errno : EIO;
      if (fclose(f) != 0 && !e) e = errno ? errno : EIO;
    }
    if (!e) return path;
    unlink(path);
    free(path);
    errno = e;
    return NULL;
  }
  errno = EEXIST;
  return NULL;
}

/* Remove the temporaries a killed tccrt left in `dir` (".tccrt-PID-..." of a process that
 * is gone). Best effort, as in tcc/outfile.py. */
static void remove_stale(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d));) {
    long pid;
    int end = 0;
    if (sscanf(e->d_name, ".tccrt-%ld-%*u-%*d.npy.tmp%n", &pid, &end) < 1 || e->d_name[end] ||
        pid <= 0 || pid == (long)getpid())
      continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    char *path = join_path(dir, e->d_name, "");
    if (path) unlink(path);
    free(path);
  }
  closedir(d);
}

/* Copy the finished temporary `from` into the device or FIFO `to`, then remove it. */
static int copy_into(const char *from, const char *to) {
  int in = open(from, O_RDONLY), out = in < 0 ? -1 : open(to, O_WRONLY);
  int err = in < 0 || out < 0 ? errno : 0;
  char buf[1 << 16];
  for (ssize_t got; !err && (got = read(in, buf, sizeof buf)) != 0;) {
    if (got < 0) {
      if (errno != EINTR) err = errno;
      continue;
    }
    for (ssize_t done = 0, w; !err && done < got; done += w > 0 ? w : 0)
      if ((w = write(out, buf + done, (size_t)(got - done))) < 0 && errno != EINTR) err = errno;
  }
  if (out >= 0 && close(out) != 0 && !err) err = errno;
  if (in >= 0) close(in);
  unlink(from);
  return err;
}

/* Put the finished temporary `staged` at `final`: renamed over a regular file (or nothing),
 * copied into a character device or FIFO (never replaced), refused for anything else. */
static int publish(const char *staged, const char *final) {
  struct stat st;
  if (stat(final, &st) != 0) return errno == ENOENT ? (rename(staged, final) ? errno : 0) : errno;
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) return copy_into(staged, final);
  if (!S_ISREG(st.st_mode)) return S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
  return rename(staged, final) ? errno : 0;
}

/* Write output i to dir/<safe name>.npy: every file is written to a temporary name
 * first and all are published at the end, so an error leaves none half-written. */
static int write_outputs(const tccrt_pack_t *pack, size_t f, const char *dir,
                         tccrt_tensor_t *const *outputs, size_t n) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return errorf("--output-dir %s: cannot write outputs: %s", dir, strerror(errno));
  remove_stale(dir);
  char **files = calloc(n + 1, sizeof *files), **staged = calloc(n + 1, sizeof *staged);
  int err = files && staged ? 0 : ENOMEM;
  for (size_t i = 0; i < n && !err; i++) {
    tccrt_tensor_info_t t;
    tccrt_pack_signature_tensor(pack, f, TCCRT_OUTPUT, i, &t);
    files[i] = safe_file_name(t.name, files, i);
    if (!files[i]) err = ENOMEM;
    else if (!(staged[i] = write_temp(dir, i, outputs[i]))) err = errno ? errno : EIO;
  }
  for (size_t i = 0; i < n && !err; i++) {
    char *final = join_path(dir, files[i], ".npy");
    if (!final) err = ENOMEM;
    else if (!(err = publish(staged[i], final))) staged[i][0] = '\0'; /* nothing to clean up */
    free(final);
  }
  for (size_t i = 0; i < n && staged && files; i++) {
    if (staged[i] && staged[i][0]) unlink(staged[i]);
    free(staged[i]);
    free(files[i]);
  }
  free(staged);
  free(files);
  if (err) return errorf("--output-dir %s: cannot write outputs: %s", dir, strerror(err));
  return 0;
}

static void print_outputs(const tccrt_pack_t *pack, size_t f, tccrt_tensor_t *const *outputs,
                          size_t n) {
  for (size_t i = 0; i < n; i++) {
    tccrt_tensor_info_t t;
    tccrt_pack_signature_tensor(pack, f, TCCRT_OUTPUT, i, &t);
    const int64_t *shape = tccrt_tensor_shape(outputs[i]);
    printf("%s: %s[", t.name, tccrt_tensor_dtype(outputs[i]));
    for (size_t d = 0; d < tccrt_tensor_rank(outputs[i]); d++)
      printf("%s%lld", d ? ", " : "", (long long)shape[d]);
    printf("]\n");
  }
}

static void release_outputs(tccrt_tensor_t **tensors, size_t n) {
  for (size_t i = 0; tensors && i < n; i++) {
    tccrt_tensor_release(tensors[i]);
    tensors[i] = NULL;
  }
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Time `runs` runs (the caller's first run was the warm-up) and print them as `tcc run
 * --bench` does; the median of an even count is the mean of the middle two. */
static int bench(tccrt_module_t *module, const char *function, tccrt_tensor_t *const *inputs,
                 size_t n_inputs, tccrt_tensor_t **outputs, size_t n_outputs, int runs) {
  double *ms = malloc((size_t)runs * sizeof *ms);
  if (!ms) return errorf("out of memory");
  for (int r = 0; r < runs; r++) {
    double t0 = now_ms();
    if (tccrt_module_run(module, function, inputs, n_inputs, outputs, n_outputs)) {
      free(ms);
      return fail();
    }
    ms[r] = now_ms() - t0;
    release_outputs(outputs, n_outputs);
  }
  qsort(ms, (size_t)runs, sizeof *ms, compare_doubles);
  double median = runs % 2 ? ms[runs / 2] : (ms[runs / 2 - 1] + ms[runs / 2]) / 2;
  printf("bench: %d runs, median %.4f ms (min %.4f, max %.4f)\n", runs, median, ms[0],
         ms[runs - 1]);
  free(ms);
  return 0;
}

static int by_time(const void *a, const void *b) {
  const tccrt_profile_row_t *x = a, *y = b;
  if (x->ns != y->ns) return x->ns < y->ns ? 1 : -1;
  int k = strcmp(x->kind, y->kind);
  return k ? k : strcmp(x->name, y->name);
}

/* Profile `runs` runs and print the rows largest first, as `tcc run --profile` does, then
 * the share of the time spent outside kernels (builtins and the interpreter). */
static int profile(tccrt_module_t *module, const char *function, tccrt_tensor_t *const *inputs,
                   size_t n_inputs, tccrt_tensor_t **outputs, size_t n_outputs, int runs) {
  if (tccrt_module_set_profiling(module, 1)) return fail();
  for (int r = 0; r < runs; r++) {
    if (tccrt_module_run(module, function, inputs, n_inputs, outputs, n_outputs)) return fail();
    release_outputs(outputs, n_outputs);
  }
  size_t count = 0;
  uint64_t total = 0, done = 0;
  if (tccrt_module_profile(module, NULL, 0, &count, NULL, NULL)) return fail();
  tccrt_profile_row_t *rows = calloc(count + 1, sizeof *rows);
  if (!rows) return errorf("out of memory");
  if (tccrt_module_profile(module, rows, count, &count, &total, &done)) {
    free(rows);
    return fail();
  }
  qsort(rows, count, sizeof *rows, by_time);
  double per_run = done ? (double)total / 1e6 / (double)done : 0.0;
  printf("profile: %.3f ms per run, mean of %llu run%s\n", per_run, (unsigned long long)done,
         done == 1 ? "" : "s");
  printf("%7s  %-8s %10s %10s %10s  %s\n", "share", "kind", "calls", "total ms", "mean ms", "name");
  uint64_t timed = 0, kernels = 0;
  for (size_t i = 0; i < count; i++) {
    timed += rows[i].ns;
    if (strcmp(rows[i].kind, "kernel") == 0) kernels += rows[i].ns;
  }
  uint64_t whole = total > timed ? total : timed;
  for (size_t i = 0; i < count; i++) {
    const tccrt_profile_row_t *r = &rows[i];
    printf("%6.1f%%  %-8s %10.6g %10.3f %10.4f  %s\n", whole ? 100.0 * (double)r->ns / (double)whole : 0.0,
           r->kind, (double)r->calls / (double)done, (double)r->ns / 1e6 / (double)done,
           (double)r->ns / 1e6 / (double)r->calls, r->name);
  }
  uint64_t interpreter = whole - timed;
  printf("%6.1f%%  %-8s %10d %10.3f %10s  %s\n", whole ? 100.0 * (double)interpreter / (double)whole : 0.0,
         "vm", 1, (double)interpreter / 1e6 / (double)done, "", "interpreter");
  printf("outside kernels: %.1f%% of the run time\n",
         whole ? 100.0 * (double)(whole - kernels) / (double)whole : 0.0);
  free(rows);
  return tccrt_module_set_profiling(module, 0) ? fail() : 0;
}

static int cmd_run(int argc, char **argv) {
  run_args_t a;
  tccrt_pack_t *pack = NULL;
  tccrt_module_t *module = NULL;
  tccrt_tensor_t **inputs = NULL, **outputs = NULL;
  size_t f = 0, n_in = 0, n_out = 0;
  int rc = parse_run_args(argc, argv, &a);
  if (!rc && (a.public_key ? tccrt_pack_open_file_signed(a.pack, a.public_key, &pack)
                            : tccrt_pack_open_file(a.pack, &pack)))
    rc = fail();
  if (!rc) rc = find_function(pack, a.function, &f);
  if (!rc && (tccrt_pack_signature_count(pack, f, TCCRT_INPUT, &n_in) ||
              tccrt_pack_signature_count(pack, f, TCCRT_OUTPUT, &n_out)))
    rc = fail();
  if (!rc) {
    inputs = calloc(n_in + 1, sizeof *inputs);
    outputs = calloc(n_out + 1, sizeof *outputs);
    if (!inputs || !outputs) rc = errorf("out of memory");
  }
  if (!rc) rc = read_inputs(pack, f, a.function, &a, inputs, n_in);
  if (!rc && tccrt_module_load(pack, &module)) rc = fail();
  if (!rc && a.threads && tccrt_module_set_num_threads(module, a.threads)) rc = fail();
  if (!rc && tccrt_module_run(module, a.function, inputs, n_in, outputs, n_out)) rc = fail();
  if (!rc && a.output_dir) rc = write_outputs(pack, f, a.output_dir, outputs, n_out);
  if (!rc) print_outputs(pack, f, outputs, n_out);
  release_outputs(outputs, n_out);
  if (!rc && a.bench) rc = bench(module, a.function, inputs, n_in, outputs, n_out, a.bench);
  release_outputs(outputs, n_out);
  if (!rc && a.profile)
    rc = profile(module, a.function, inputs, n_in, outputs, n_out, a.bench ? a.bench : 1);
  release_outputs(outputs, n_out);
  release_outputs(inputs, n_in);
  free(outputs);
  free(inputs);
  tccrt_module_release(module);
  tccrt_pack_release(pack);
  free(a.input_names);
  free(a.input_files);
  return rc;
}

/* -- main ---------------------------------------------------------------------------- */

static int cmd_info(int argc, char **argv) {
  int as_json = 0, m;
  const char *path = NULL;
  char *public_key = NULL;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) as_json = 1;
    else if ((m = option(argc, argv, &i, "--require-signature", &public_key)) != 0) {
      if (m < 0) return 2;
    } else if (argv[i][0] == '-') return errorf("unknown option '%s' (see `tccrt --help`)", argv[i]);
    else if (path) return usage_error("info takes one pack");
    else path = argv[i];
  }
  if (!path) return usage_error("info needs a pack: tccrt info [--json] PACK");
  tccrt_pack_t *pack;
  if (public_key ? tccrt_pack_open_file_signed(path, public_key, &pack) : tccrt_pack_open_file(path, &pack))
    return fail();
  int rc = info(pack, path, as_json);
  tccrt_pack_release(pack);
  return rc;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(USAGE, stdout);
      return 0;
    }
  int rc;
  if (argc < 2) rc = usage_error("a command is needed: tccrt info PACK, or tccrt run PACK ...");
  else if (strcmp(argv[1], "info") == 0) rc = cmd_info(argc, argv);
  else if (strcmp(argv[1], "run") == 0) rc = cmd_run(argc, argv);
  else
    rc = errorf("unknown command '%s'; the commands are info and run (see `tccrt --help`)",
                argv[1]);
  if (!rc && fflush(stdout) != 0) return errorf("cannot write the output: %s", strerror(errno));
  return rc;
}
