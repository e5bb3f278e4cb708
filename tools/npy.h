/*
 * NumPy .npy header parsing and writing (format versions 1.0, 2.0, 3.0), and
 * the shape argument parser of the tensorwire CLI (sizes: tw_parse_size).
 * Only the CLI uses them, so they live in tools/, over the public API. Pure functions: no
 * I/O, no allocation; callers read and write the files.
 *
 * dtype mapping (little-endian or byte-order-free descr only):
 *   <f8 f64, <f4 f32, <f2 f16, |i1 i8, <i2 i16, <i4 i32, <i8 i64,
 *   |u1 u8, <u2 u16, <u4 u32, <u8 u64, |b1 bool.
 * bf16, f8e4m3 and f8e5m2 have no NumPy dtype: they are written as raw
 * void elements, '|V2' (bf16) and '|V1' (f8), which NumPy loads as np.void
 * (view them with ml_dtypes). Reading '|V2' / '|V1' needs the caller to say
 * which dtype they hold (void_dtype argument), since the file cannot.
 */
#ifndef TW_TOOLS_NPY_H
#define TW_TOOLS_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "tensorwire/client.h"

#define TW__NPY_MAGIC_LEN 6
#define TW__NPY_PREAMBLE_MAX 12   /* magic + version + u32 header length */
#define TW__NPY_HEADER_MAX 65536u /* we refuse larger headers */

struct tw__npy_info {
    uint8_t dtype; /* enum tw_dtype_code */
    uint8_t ndim;
    uint64_t shape[TW_TENSOR_MAX_NDIM];
    uint64_t byte_length;
    size_t data_offset; /* where the array bytes start in the file */
};

/*
 * Parses the .npy header at buf[0..len). void_dtype is the dtype to use for
 * '|V2' / '|V1' descr (0: reject them with a message saying to pass --dtype).
 * Returns 0 with *out filled; -EAGAIN when len is too short, with
 * out->data_offset set to the number of bytes needed (call again with at
 * least that many); TW_EINVAL for a malformed or unsupported header
 * (Fortran order, big-endian, object or unknown dtypes, too many dimensions,
 * byte length overflow), with a sentence in err (NUL-terminated, cap bytes).
 */
int tw__npy_parse(const uint8_t *buf, size_t len, int void_dtype, struct tw__npy_info *out,
                  char *err, size_t errcap);

/*
 * Writes a .npy header (version 1.0, or 2.0 when the header needs it) for a
 * C-order array into buf, padded so the data starts at a multiple of 64.
 * Returns the header length (data offset), -ENOBUFS when cap is too small, or
 * TW_EINVAL for an unknown dtype or ndim > 16. *is_void (may be NULL) is set
 * to 1 when the dtype was written as raw void elements (bf16, f8).
 */
long tw__npy_write_header(uint8_t dtype, uint8_t ndim, const uint64_t *shape, uint8_t *buf,
                          size_t cap, int *is_void);

/* "2,3,4" -> ndim 3; "" or "scalar" -> ndim 0. Each dimension a decimal
 * u64. Returns 0 or TW_EINVAL. */
int tw__cli_parse_shape(const char *s, uint8_t *ndim, uint64_t shape[TW_TENSOR_MAX_NDIM]);

#endif
