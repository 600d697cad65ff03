/* npy.h: NumPy .npy files read into and written from tccrt tensors, for `tccrt run`.
 *
 * Reading accepts what numpy.save writes for the dtypes tccrt tensors hold: format
 * versions 1.0, 2.0 and 3.0, C order, little-endian bool, int8..int64, uint8..uint64,
 * float16, float32 and float64.  Anything else (Fortran order, big-endian, objects,
 * strings, structured dtypes, a data section of the wrong size, a malformed header) is
 * refused with a one-line message that names the file and says how to save it instead.
 * Writing produces the bytes numpy.save would for the same array (version 1.0). */
#ifndef TCCRT_NPY_H_
#define TCCRT_NPY_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tcc_runtime.h"

#define NPY_MAX_RANK 64        /* numpy's own limit (NPY_MAXDIMS) */
#define NPY_MAX_HEADER 10000   /* numpy refuses longer headers by default, for safety */

/* What a header says about the array that follows it. */
typedef struct npy_header_t {
  const char *dtype; /* a tcc dtype name, e.g. "float32" */
  size_t itemsize;
  size_t rank;
  int64_t shape[NPY_MAX_RANK];
  size_t nbytes; /* itemsize times the product of shape, checked against overflow */
  int big_endian; /* the data is stored big-endian ('>f4'): swapped on reading */
} npy_header_t;

/* Parse the header dict `text[0 .. len-1]` (what follows the length field).  Returns 0, or
 * -1 with a message saying what is wrong (without the file's name) in `err`. */
int npy_parse_header(const char *text, size_t len, npy_header_t *out, char *err, size_t err_size);

/* Read the .npy file at `path` into a new tensor.  Returns 0, or -1 with a one-line
 * message starting with `path` in `err`. */
int npy_read(const char *path, tccrt_tensor_t **out_tensor, char *err, size_t err_size);

/* Write `tensor` to `f` as a version 1.0 .npy file.  Returns 0, or -1 with errno set by
 * the failed write. */
int npy_write(FILE *f, const tccrt_tensor_t *tensor);

#endif /* TCCRT_NPY_H_ */
