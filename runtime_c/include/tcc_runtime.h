/* tcc_runtime.h: the C runtime of tcc, for running a .tvmpack without Python.
 *
 * A pack is opened and verified (tccrt_pack_*), answers questions about itself (target,
 * entry functions and their signatures, kernel table, weights), and is loaded into a
 * module (tccrt_module_*) that runs its entry functions on tensors (tccrt_tensor_*).
 * Every call returns a tccrt_status_t; on failure tccrt_last_error() holds a one-line
 * message saying what is wrong and where (for a pack, starting with its path).  Handles
 * are opaque and counted: *_retain adds a reference, *_release drops one and frees the
 * object with the last (NULL is allowed).  Strings and arrays returned by queries belong
 * to the object queried and live as long as it does.
 *
 * Opening verifies the whole pack once (tar headers, manifest fields, every member's
 * sha256 and the manifest's own, the weights index, and the bytecode: every index, jump
 * and builtin argument, as docs/vm.md "Verification" lists), so later calls need no
 * checks beyond the data they are given.  The file is mapped read-only and weights point
 * into the mapping: they are not copied.
 */
#ifndef TCC_RUNTIME_H_
#define TCC_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; only what this header declares is exported. */
#if defined(__GNUC__)
#define TCCRT_API __attribute__((visibility("default")))
#else
#define TCCRT_API
#endif

typedef enum tccrt_status_e {
  TCCRT_OK = 0,
  TCCRT_INVALID_ARGUMENT = 1, /* a NULL handle, an index out of range, an unknown name */
  TCCRT_IO_ERROR = 2,         /* the file cannot be opened, sized or mapped */
  TCCRT_INVALID_PACK = 3,     /* the bytes are not a well-formed pack of this version */
  TCCRT_OUT_OF_MEMORY = 4,
  TCCRT_INVALID_INPUT = 5,  /* a run's inputs: wrong count, dtype, rank or dimension */
  TCCRT_KERNEL_ERROR = 6,   /* the kernels cannot be loaded, or a kernel reported an error */
} tccrt_status_t;

/* The message of the last failed call on this thread ("" when none has failed). */
TCCRT_API const char *tccrt_last_error(void);

/* A short name of a status ("ok", "invalid pack", ...). */
TCCRT_API const char *tccrt_status_string(tccrt_status_t status);

typedef struct tccrt_pack_t tccrt_pack_t;

/* Map the file at `path` read-only and verify it.  A pack is executable code: open only
 * packs from a source you trust, or require a signature (below; docs/security.md). */
TCCRT_API tccrt_status_t tccrt_pack_open_file(const char *path, tccrt_pack_t **out_pack);

/* As tccrt_pack_open_file, and the pack must carry an Ed25519 signature (manifest.sig) by
 * the public key in the PEM file `public_key_path`, checked before anything else in the
 * pack is read.  Needs the system's OpenSSL 3 libcrypto (loaded with dlopen); without it
 * this fails with TCCRT_IO_ERROR, never opening the pack unchecked. */
TCCRT_API tccrt_status_t tccrt_pack_open_file_signed(const char *path, const char *public_key_path,
                                                     tccrt_pack_t **out_pack);

/* Verify a pack held in memory.  The bytes are not copied: they must stay valid and
 * unchanged until the pack is released. */
TCCRT_API tccrt_status_t tccrt_pack_open_memory(const void *data, size_t size, tccrt_pack_t **out_pack);

TCCRT_API void tccrt_pack_retain(tccrt_pack_t *pack);
TCCRT_API void tccrt_pack_release(tccrt_pack_t *pack); /* NULL is allowed */

/* The target string the kernels were compiled for (e.g. "llvm -mtriple=..."). */
TCCRT_API tccrt_status_t tccrt_pack_target(const tccrt_pack_t *pack, const char **out_target);

/* -- entry functions and signatures ------------------------------------------------- */

TCCRT_API tccrt_status_t tccrt_pack_function_count(const tccrt_pack_t *pack, size_t *out_count);
/* Functions are in the manifest's order (sorted by name). */
TCCRT_API tccrt_status_t tccrt_pack_function_name(const tccrt_pack_t *pack, size_t function,
                                        const char **out_name);
TCCRT_API tccrt_status_t tccrt_pack_function_find(const tccrt_pack_t *pack, const char *name,
                                        size_t *out_function);

typedef enum tccrt_io_e {
  TCCRT_INPUT = 0,
  TCCRT_OUTPUT = 1,
} tccrt_io_t;

/* One dimension of a signature: a fixed size (symbol == NULL, value >= 0) or a symbolic
 * one (value == -1, symbol the size variable's name such as "batch", or an expression
 * over them such as "n * 3"). */
typedef struct tccrt_dim_t {
  int64_t value;
  const char *symbol;
} tccrt_dim_t;

typedef struct tccrt_tensor_info_t {
  const char *name;
  const char *dtype; /* a tcc dtype name: "float32", "int64", "bfloat16", ... */
  size_t rank;
  const tccrt_dim_t *dims; /* rank entries */
} tccrt_tensor_info_t;

TCCRT_API tccrt_status_t tccrt_pack_signature_count(const tccrt_pack_t *pack, size_t function,
                                          tccrt_io_t io, size_t *out_count);
TCCRT_API tccrt_status_t tccrt_pack_signature_tensor(const tccrt_pack_t *pack, size_t function,
                                           tccrt_io_t io, size_t index,
                                           tccrt_tensor_info_t *out_info);

/* -- kernels ------------------------------------------------------------------------ */

/* The kernel table: the only kernel symbols the bytecode may call. */
TCCRT_API tccrt_status_t tccrt_pack_kernel_count(const tccrt_pack_t *pack, size_t *out_count);
TCCRT_API tccrt_status_t tccrt_pack_kernel_symbol(const tccrt_pack_t *pack, size_t kernel,
                                        const char **out_symbol);

/* The bytes of a member ("bytecode.bin", "kernels/llvm.so", ...), inside the mapping.
 * TCCRT_INVALID_ARGUMENT when the pack has no such member. */
TCCRT_API tccrt_status_t tccrt_pack_member(const tccrt_pack_t *pack, const char *name,
                                 const void **out_data, size_t *out_size);

/* The kernel object and shared object members named by the manifest; NULL (and size 0)
 * where the pack has none. */
TCCRT_API tccrt_status_t tccrt_pack_kernel_object(const tccrt_pack_t *pack, const char **out_member,
                                        const void **out_data, size_t *out_size);
TCCRT_API tccrt_status_t tccrt_pack_kernel_shared_object(const tccrt_pack_t *pack,
                                               const char **out_member,
                                               const void **out_data, size_t *out_size);

/* -- weights ------------------------------------------------------------------------ */

typedef struct tccrt_weight_info_t {
  const char *name;
  const char *dtype;
  size_t rank;
  const int64_t *shape; /* rank entries */
  uint64_t offset;      /* within weights.bin; a multiple of 64 */
  uint64_t nbytes;
  const void *data;     /* little-endian C-order bytes inside the mapping, 64-byte aligned */
} tccrt_weight_info_t;

/* Weights are sorted by name. */
TCCRT_API tccrt_status_t tccrt_pack_weight_count(const tccrt_pack_t *pack, size_t *out_count);
TCCRT_API tccrt_status_t tccrt_pack_weight(const tccrt_pack_t *pack, size_t weight,
                                 tccrt_weight_info_t *out_info);

/* -- tensors ------------------------------------------------------------------------ */

/* The DLPack layout (dlpack.h's DLDevice, DLDataType and DLTensor, field for field), so a
 * tensor can be handed to any DLPack consumer without copying. */
typedef struct tccrt_dl_device_t {
  int32_t device_type; /* 1: CPU */
  int32_t device_id;
} tccrt_dl_device_t;

typedef struct tccrt_dl_dtype_t {
  uint8_t code; /* 0 int, 1 uint, 2 float, 6 bool (one byte a value) */
  uint8_t bits;
  uint16_t lanes;
} tccrt_dl_dtype_t;

typedef struct tccrt_dl_tensor_t {
  void *data;
  tccrt_dl_device_t device;
  int32_t ndim;
  tccrt_dl_dtype_t dtype;
  int64_t *shape;
  int64_t *strides; /* NULL: compact row-major, the only layout tcc uses */
  uint64_t byte_offset;
} tccrt_dl_tensor_t;

/* A dense row-major CPU tensor of one of the dtypes the kernels take: bool, int8..int64,
 * uint8..uint64, float16, float32, float64. */
typedef struct tccrt_tensor_t tccrt_tensor_t;

/* A new zero-filled tensor owning 64-byte aligned memory. */
TCCRT_API tccrt_status_t tccrt_tensor_new(const char *dtype, size_t rank, const int64_t *shape,
                                          tccrt_tensor_t **out_tensor);

/* A tensor over the caller's memory (row-major, `dtype` elements of `shape`), not copied:
 * the memory must stay valid until the tensor's last reference is released.  A run never
 * writes to its inputs. */
TCCRT_API tccrt_status_t tccrt_tensor_wrap(void *data, const char *dtype, size_t rank,
                                           const int64_t *shape, tccrt_tensor_t **out_tensor);

TCCRT_API void tccrt_tensor_retain(tccrt_tensor_t *tensor);
TCCRT_API void tccrt_tensor_release(tccrt_tensor_t *tensor); /* NULL is allowed */

/* The tensor as DLPack sees it (valid while the tensor is). */
TCCRT_API const tccrt_dl_tensor_t *tccrt_tensor_dl(const tccrt_tensor_t *tensor);
TCCRT_API const char *tccrt_tensor_dtype(const tccrt_tensor_t *tensor);
TCCRT_API size_t tccrt_tensor_rank(const tccrt_tensor_t *tensor);
TCCRT_API const int64_t *tccrt_tensor_shape(const tccrt_tensor_t *tensor);
TCCRT_API void *tccrt_tensor_data(const tccrt_tensor_t *tensor);
TCCRT_API size_t tccrt_tensor_nbytes(const tccrt_tensor_t *tensor);

/* -- modules: a pack loaded to run ---------------------------------------------------- */

typedef struct tccrt_module_t tccrt_module_t;

/* Load the pack's kernels (its shared object, written to a private temporary file or an
 * anonymous memory file and opened with dlopen) and get ready to run.  A pack of CUDA
 * kernels opens the CUDA driver instead (libcuda.so.1, or $TCC_CUDA_DRIVER, with dlopen),
 * loads its code for GPU 0 and copies the weights there; its runs take and give host
 * tensors and keep every tensor between kernels in GPU memory.  No driver, no GPU, or no
 * code for this GPU is TCCRT_KERNEL_ERROR.  The module holds a reference to the pack.  The thread count for parallel kernels starts from the
 * environment variable TCC_NUM_THREADS when it is set (a positive integer), else the
 * OpenMP default (OMP_NUM_THREADS or every core). */
TCCRT_API tccrt_status_t tccrt_module_load(tccrt_pack_t *pack, tccrt_module_t **out_module);
TCCRT_API void tccrt_module_retain(tccrt_module_t *module);
TCCRT_API void tccrt_module_release(tccrt_module_t *module); /* NULL is allowed */

/* Threads for parallel kernels; 0 restores the default.  Applies to every module that
 * shares this process's OpenMP runtime. */
TCCRT_API tccrt_status_t tccrt_module_set_num_threads(tccrt_module_t *module, int num_threads);

/* Run entry function `function` (NULL: "main") on `inputs`, in signature order.  On
 * success `outputs[0 .. n_outputs-1]` receive new references, in signature order, which
 * the caller releases; `n_outputs` must be the signature's output count.  Wrong inputs
 * (count, dtype, rank, a dimension) give TCCRT_INVALID_INPUT naming the input.  Runs on
 * one module may happen on several threads at once. */
TCCRT_API tccrt_status_t tccrt_module_run(tccrt_module_t *module, const char *function,
                                          tccrt_tensor_t *const *inputs, size_t n_inputs,
                                          tccrt_tensor_t **outputs, size_t n_outputs);

/* -- profiling ---------------------------------------------------------------------- */

/* One row of a profile: a kernel (by symbol) or a category of builtins ("shapes", "alloc",
 * "views", "copies", "tuples", "constants", "control flow"), with its calls and nanoseconds
 * over the runs profiled so far.  The strings belong to the module. */
typedef struct tccrt_profile_row_t {
  const char *kind; /* "kernel" or "builtin" */
  const char *name;
  uint64_t calls;
  uint64_t ns;
} tccrt_profile_row_t;

/* Profiling on (1) or off (0).  While it is on, each run adds the time of every kernel and
 * builtin call and of the whole run; turning it on starts a fresh profile.  A module being
 * profiled must not run on several threads at once. */
TCCRT_API tccrt_status_t tccrt_module_set_profiling(tccrt_module_t *module, int on);

/* The profile so far: up to `cap` rows into `rows` (in function-table order), how many there
 * are in `*count`, and the runs' whole time and count in `*total_ns` and `*runs` (either may
 * be NULL).  The time no row accounts for is the interpreter's own. */
TCCRT_API tccrt_status_t tccrt_module_profile(const tccrt_module_t *module, tccrt_profile_row_t *rows,
                                              size_t cap, size_t *count, uint64_t *total_ns,
                                              uint64_t *runs);

/* -- hashing ------------------------------------------------------------------------ */

/* The sha256 of `size` bytes as 64 lowercase hex digits and a NUL (the digest the pack
 * records for its members). */
TCCRT_API void tccrt_sha256_hex(const void *data, size_t size, char out_hex[65]);

#ifdef __cplusplus
}
#endif

#endif /* TCC_RUNTIME_H_ */
