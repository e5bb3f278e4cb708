/*
 * Byte sizes as people write them: the one parser behind every size option of
 * tensorwired (--capacity, --max-frame, --rdma-min-bytes) and the tensorwire
 * CLI (--size, --count, --rdma-min-bytes ...), so both accept the same text.
 */
#ifndef TENSORWIRE_SIZE_H
#define TENSORWIRE_SIZE_H

#include <stdint.h>

#include "tensorwire/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Parses s into *out. The rules, in order:
 *   - one or more decimal digits (no sign, no space, no fraction);
 *   - then optionally a unit: K, M, G, T (either case) for powers of 1000,
 *     or Ki, Mi, Gi, Ti (the 'i' lower case) for powers of 1024;
 *   - then optionally 'B' or 'b' ("4KiB", "5MB", "100B");
 *   - nothing else.
 * "4096" = 4096, "4K" = 4000, "4Ki" = "4KiB" = 4096, "2Gi" = 2^31.
 * Returns 0, or TW_EINVAL (s NULL, empty, another character, or a value
 * above UINT64_MAX); *out is written only on success. Thread-safe.
 */
TW_EXTERN int tw_parse_size(const char *s, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
