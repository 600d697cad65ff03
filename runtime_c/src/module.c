/* Modules (tcc_runtime.h): a verified pack with its kernels loaded, and running its entry
 * functions on tensors. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda.h"
#include "module.h"
#include "tccrt_pack.h"

#define CHECK_ARG(cond, ...) \
  if (!(cond)) return tccrt_fail(TCCRT_INVALID_ARGUMENT, __VA_ARGS__)

/* Thread counts, as tcc/rt/threads.py: at most TCCRT_THREADS_PER_CORE per online core and
 * never above TCCRT_MAX_THREADS (libgomp faults far above it). */
static long online_cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? n : 1;
}

static long thread_limit(void) {
  long per_core = TCCRT_THREADS_PER_CORE * online_cores();
  return per_core < TCCRT_MAX_THREADS ? per_core : TCCRT_MAX_THREADS;
}

/* `n`: the count as decimal digits, so that a value beyond long is named as given. */
static tccrt_status_t too_many_threads(const char *what, const char *n) {
  while (n[0] == '0' && n[1]) n++;
  return tccrt_fail(TCCRT_INVALID_ARGUMENT,
                    "%s is %s, more than this machine can run: at most %ld (%d per core on %ld cores, "
                    "never above %d)",
                    what, n, thread_limit(), TCCRT_THREADS_PER_CORE, online_cores(), TCCRT_MAX_THREADS);
}

/* TCC_NUM_THREADS, when set: a positive integer (0 when unset). */
static tccrt_status_t env_threads(int *out) {
  const char *s = getenv("TCC_NUM_THREADS");
  *out = 0;
  if (!s || !*s) return TCCRT_OK;
  int digits = 1;
  for (const char *c = s; *c; c++) digits &= *c >= '0' && *c <= '9';
  char *end;
  errno = 0;
  long n = digits ? strtol(s, &end, 10) : 0;
  if (!digits) return tccrt_fail(TCCRT_INVALID_ARGUMENT, "TCC_NUM_THREADS must be a positive integer, got '%s'", s);
  if (n < 1) return tccrt_fail(TCCRT_INVALID_ARGUMENT, "TCC_NUM_THREADS must be at least 1, got %ld", n);
  if (errno == ERANGE || n > thread_limit()) return too_many_threads("TCC_NUM_THREADS", s);
  *out = (int)n;
  return TCCRT_OK;
}

/* Loaded modules, so a forked child can make their kernels single-threaded: the OpenMP
 * runtime (libgomp) cannot start its threads again in the child of a process that used
 * them, and a parallel kernel would wait forever. The child runs every parallel loop on
 * the calling thread instead (the same results, slower); asking for more threads again in
 * the child brings the hang back. */
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static tccrt_module_t *open_modules;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static int forked_child; /* modules loaded in a forked child start single-threaded too */

static void single_threaded_in_child(void) {
  /* The child has one thread and a copy of the lock as the parent held it (locked by the
   * prepare handler): the list is consistent, then the lock is released. */
  forked_child = 1;
  for (tccrt_module_t *m = open_modules; m; m = m->next_open)
    if (m->kernels.set_num_threads) m->kernels.set_num_threads(1);
  pthread_mutex_unlock(&open_lock);
}

static void lock_open(void) { pthread_mutex_lock(&open_lock); }
static void unlock_open(void) { pthread_mutex_unlock(&open_lock); }
static void install_atfork(void) { pthread_atfork(lock_open, unlock_open, single_threaded_in_child); }

/* Add `m` to the list; returns whether this process is a forked child. */
static int track(tccrt_module_t *m) {
  pthread_once(&atfork_once, install_atfork);
  pthread_mutex_lock(&open_lock);
  m->next_open = open_modules;
  if (open_modules) open_modules->prev_open = m;
  open_modules = m;
  int child = forked_child;
  pthread_mutex_unlock(&open_lock);
  return child;
}

static void untrack(tccrt_module_t *m) {
  pthread_mutex_lock(&open_lock);
  if (m->prev_open) m->prev_open->next_open = m->next_open;
  else open_modules = m->next_open;
  if (m->next_open) m->next_open->prev_open = m->prev_open;
  pthread_mutex_unlock(&open_lock);
}

static void release_weights(tccrt_module_t *m) {
  if (!m->weights) return;
  for (size_t i = 0; i < m->pack->weight_count; i++) tccrt_value_release(m->weights[i]);
  free(m->weights);
}

/* The pack's weights as tensors, once (see tccrt_module_t.weights). */
static tccrt_status_t load_weights(tccrt_module_t *m) {
  size_t n = m->pack->weight_count;
  if (!n) return TCCRT_OK;
  m->weights = calloc(n, sizeof *m->weights);
  if (!m->weights) return tccrt_fail(TCCRT_OUT_OF_MEMORY, "%s: out of memory loading the pack", m->pack->path);
  for (size_t i = 0; i < n; i++) {
    if (!tccrt_dtype_find(m->pack->weights[i].dtype)) continue; /* load_constant reports it */
    tccrt_status_t st = tccrt_tensor_weight(m->pack, i, &m->weights[i]);
    if (!st && m->cuda) { /* a GPU pack's weights go over once, here */
      tccrt_value_t *on_host = m->weights[i];
      st = tccrt_tensor_to_device(m->cuda, on_host, &m->weights[i]);
      tccrt_value_release(on_host);
    }
    if (st) return st;
  }
  return TCCRT_OK;
}

tccrt_status_t tccrt_module_load(tccrt_pack_t *pack, tccrt_module_t **out_module) {
  CHECK_ARG(pack && out_module, "tccrt_module_load: pack and out_module must not be NULL");
  *out_module = NULL;
  int threads;
  tccrt_status_t st = env_threads(&threads);
  if (st) return st;
  if (pack->cuda && pack->cpu_kernel_count) /* tcc emits no such pack: the VM keeps its tensors on one device */
    return tccrt_fail(TCCRT_KERNEL_ERROR, "%s: the pack has both CPU and GPU kernels, which the C runtime does "
                      "not run side by side; run it with tcc.rt (tcc run --runtime python)", pack->path);
  tccrt_module_t *m = calloc(1, sizeof *m);
  if (!m) return tccrt_fail(TCCRT_OUT_OF_MEMORY, "%s: out of memory loading the pack", pack->path);
  if ((st = tccrt_kernels_load(pack, &m->kernels))) {
    free(m);
    return st;
  }
  atomic_init(&m->refs, 1);
  tccrt_pack_retain(pack);
  m->pack = pack;
  m->host_pool = tccrt_host_pool_new();
  if (!m->host_pool) st = tccrt_fail(TCCRT_OUT_OF_MEMORY, "%s: out of memory loading the pack", pack->path);
  if (st || (pack->cuda && (st = tccrt_cuda_open(pack, &m->cuda))) || (st = load_weights(m))) {
    release_weights(m);
    tccrt_host_pool_release(m->host_pool);
    tccrt_cuda_release(m->cuda);
    tccrt_kernels_unload(&m->kernels);
    tccrt_pack_release(pack);
    free(m);
    return st;
  }
  if (track(m)) threads = 1;
  if (threads && m->kernels.set_num_threads) m->kernels.set_num_threads(threads);
  *out_module = m;
  return TCCRT_OK;
}

void tccrt_module_retain(tccrt_module_t *module) {
  if (module) atomic_fetch_add(&module->refs, 1);
}

void tccrt_module_release(tccrt_module_t *module) {
  if (!module || atomic_fetch_sub(&module->refs, 1) != 1) return;
  release_weights(module);
  untrack(module);
  tccrt_cuda_release(module->cuda); /* closed once no tensor holds GPU memory */
  tccrt_host_pool_release(module->host_pool); /* freed once no tensor holds its memory */
  tccrt_kernels_unload(&module->kernels);
  tccrt_pack_release(module->pack);
  free(module->profile.calls);
  free(module->profile.ns);
  free(module);
}

tccrt_status_t tccrt_module_set_num_threads(tccrt_module_t *module, int num_threads) {
  CHECK_ARG(module, "tccrt_module_set_num_threads: NULL module");
  CHECK_ARG(num_threads >= 0, "the thread count must be 0 (the default) or positive, got %d", num_threads);
  if (num_threads > thread_limit()) {
    char text[24];
    snprintf(text, sizeof text, "%d", num_threads);
    return too_many_threads("the thread count", text);
  }
  if (module->kernels.set_num_threads) module->kernels.set_num_threads(num_threads);
  return TCCRT_OK;
}

uint64_t tccrt_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* -- profiling ---------------------------------------------------------------------- */

tccrt_status_t tccrt_module_set_profiling(tccrt_module_t *module, int on) {
  CHECK_ARG(module, "tccrt_module_set_profiling: NULL module");
  tccrt_profile_t *p = &module->profile;
  size_t n = module->pack->program.table_size;
  if (on && !p->calls) {
    p->calls = calloc(n ? n : 1, sizeof *p->calls);
    p->ns = calloc(n ? n : 1, sizeof *p->ns);
    if (!p->calls || !p->ns) {
      free(p->calls), free(p->ns);
      p->calls = p->ns = NULL;
      return tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory starting a profile");
    }
    p->n = n;
  }
  if (on) { /* a fresh profile */
    memset(p->calls, 0, n * sizeof *p->calls);
    memset(p->ns, 0, n * sizeof *p->ns);
    p->runs = p->total_ns = 0;
  }
  p->on = on != 0;
  return TCCRT_OK;
}

/* The row of function-table entry `e`: its kernel symbol, or its builtin's category. */
static void row_of(const tccrt_entry_t *e, tccrt_profile_row_t *row) {
  int kernel = e->kind == TCCRT_FUNC_KIND_KERNEL;
  row->kind = kernel ? "kernel" : "builtin";
  row->name = kernel ? e->name : tccrt_builtin_specs[e->index].category;
  row->calls = row->ns = 0;
}

tccrt_status_t tccrt_module_profile(const tccrt_module_t *module, tccrt_profile_row_t *rows, size_t cap,
                                    size_t *count, uint64_t *total_ns, uint64_t *runs) {
  CHECK_ARG(module && count && (rows || !cap), "tccrt_module_profile: NULL argument");
  const tccrt_profile_t *p = &module->profile;
  const tccrt_program_t *program = &module->pack->program;
  tccrt_profile_row_t *all = calloc(p->n ? p->n : 1, sizeof *all);
  if (!all) return tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory reading a profile");
  size_t n = 0;
  for (size_t i = 0; i < p->n; i++) {
    const tccrt_entry_t *e = &program->table[i];
    if (e->kind == TCCRT_FUNC_KIND_VM || !p->calls[i]) continue;
    tccrt_profile_row_t row;
    row_of(e, &row);
    size_t k = 0; /* entries of one kind and name share a row */
    while (k < n && (strcmp(all[k].kind, row.kind) != 0 || strcmp(all[k].name, row.name) != 0)) k++;
    if (k == n) all[n++] = row;
    all[k].calls += p->calls[i];
    all[k].ns += p->ns[i];
  }
  memcpy(rows, all, (n < cap ? n : cap) * sizeof *rows);
  free(all);
  *count = n;
  if (total_ns) *total_ns = p->total_ns;
  if (runs) *runs = p->runs;
  return TCCRT_OK;
}

/* "x, y" from a signature's input names (truncated to fit), for messages. */
static const char *input_names(const tccrt_function_t *f, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < f->counts[TCCRT_INPUT] && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", f->tensors[TCCRT_INPUT][i].name);
  return buf;
}

/* Output `v` as a tensor the caller owns: weights and the caller's own memory are copied,
 * as the Python runtime copies read-only views, and GPU tensors come back to the host. */
static tccrt_status_t hand_out(const tccrt_module_t *m, const char *function, size_t i, tccrt_value_t *v,
                               tccrt_tensor_t **out) {
  if (v->kind != TCCRT_V_TENSOR)
    return tccrt_fail(TCCRT_INVALID_PACK, "%s: '%s' returns a %s as output %zu, not a tensor", m->pack->path,
                      function, tccrt_value_kind_name(v), i);
  if (tccrt_tensor_on_device(v)) return tccrt_tensor_to_host(v, out);
  if (v->storage->kind == TCCRT_STORAGE_OWNED || v->storage->kind == TCCRT_STORAGE_POOLED) {
    *out = tccrt_value_retain(v);
    return TCCRT_OK;
  }
  return tccrt_tensor_copy(v, out);
}

/* A GPU pack's run: the inputs go to GPU memory once, and the VM's tensors stay there. */
static tccrt_status_t run_on_device(tccrt_module_t *module, size_t index, tccrt_tensor_t *const *inputs,
                                    size_t n_inputs, tccrt_value_t **out) {
  tccrt_status_t st = tccrt_cuda_enter(module->cuda);
  if (st) return st;
  tccrt_value_t **on_device = calloc(n_inputs ? n_inputs : 1, sizeof *on_device);
  if (!on_device) return tccrt_fail(TCCRT_OUT_OF_MEMORY, "out of memory starting a run");
  size_t done = 0;
  while (done < n_inputs && !(st = tccrt_tensor_to_device(module->cuda, inputs[done], &on_device[done]))) done++;
  if (!st) st = tccrt_vm_invoke(module, index, on_device, n_inputs, out);
  for (size_t i = 0; i < done; i++) tccrt_value_release(on_device[i]);
  free(on_device);
  return st;
}

tccrt_status_t tccrt_module_run(tccrt_module_t *module, const char *function, tccrt_tensor_t *const *inputs,
                                size_t n_inputs, tccrt_tensor_t **outputs, size_t n_outputs) {
  CHECK_ARG(module && (inputs || !n_inputs) && (outputs || !n_outputs), "tccrt_module_run: NULL argument");
  const tccrt_pack_t *pack = module->pack;
  const char *name = function ? function : "main";
  const tccrt_function_t *sig = NULL;
  for (size_t f = 0; f < pack->function_count && !sig; f++)
    if (strcmp(pack->functions[f].name, name) == 0) sig = &pack->functions[f];
  if (!sig) return tccrt_fail(TCCRT_INVALID_INPUT, "no entry function '%s' in %s (see `tccrt info %s`)", name,
                              pack->path, pack->path);
  char names[512];
  if (n_inputs != sig->counts[TCCRT_INPUT])
    return tccrt_fail(TCCRT_INVALID_INPUT, "'%s' takes %zu inputs (%s), got %zu", name, sig->counts[TCCRT_INPUT],
                      input_names(sig, names, sizeof names), n_inputs);
  CHECK_ARG(n_outputs == sig->counts[TCCRT_OUTPUT], "tccrt_module_run: '%s' has %zu outputs, not %zu", name,
            sig->counts[TCCRT_OUTPUT], n_outputs);
  for (size_t i = 0; i < n_inputs; i++)
    CHECK_ARG(inputs[i], "tccrt_module_run: input %zu ('%s') is NULL", i, sig->tensors[TCCRT_INPUT][i].name);
  int64_t index = tccrt_program_find(&pack->program, name);
  if (index < 0) /* the verifier checked every entry function is defined */
    return tccrt_fail(TCCRT_INVALID_PACK, "%s: no bytecode for entry function '%s'", pack->path, name);

  tccrt_value_t *result = NULL;
  uint64_t t0 = module->profile.on ? tccrt_now_ns() : 0;
  tccrt_status_t st = module->cuda ? run_on_device(module, (size_t)index, inputs, n_inputs, &result)
                                   : tccrt_vm_invoke(module, (size_t)index, inputs, n_inputs, &result);
  if (t0) {
    module->profile.total_ns += tccrt_now_ns() - t0;
    module->profile.runs += 1;
  }
  if (st) return st;
  tccrt_value_t *const *items = &result;
  if (n_outputs != 1) {
    if (result->kind != TCCRT_V_TUPLE || result->n != n_outputs) {
      tccrt_value_release(result);
      return tccrt_fail(TCCRT_INVALID_PACK, "%s: '%s' returns other values than its %zu outputs", pack->path, name,
                        n_outputs);
    }
    items = result->items;
  }
  size_t done = 0;
  while (done < n_outputs && !(st = hand_out(module, name, done, items[done], &outputs[done]))) done++;
  if (st) /* nothing half-returned: drop the outputs already handed out */
    for (size_t i = 0; i < done; i++) {
      tccrt_value_release(outputs[i]);
      outputs[i] = NULL;
    }
  tccrt_value_release(result);
  return st;
}
