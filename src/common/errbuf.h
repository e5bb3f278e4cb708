/*
 * The one error-buffer writer. Modules keep the human detail of a failure in
 * a caller-owned buffer (a per-object errmsg[], or an errbuf/errlen pair
 * passed down); this formats into it. The buffer belongs to the caller;
 * nothing is kept.
 */
#ifndef TW_COMMON_ERRBUF_H
#define TW_COMMON_ERRBUF_H

#include <stdarg.h>
#include <stddef.h>

/* Formats into buf (cap bytes), always NUL-terminated, truncating when the
 * text does not fit. buf may be NULL or cap 0: then nothing is written. */
__attribute__((format(printf, 3, 4))) void tw__errbuf_set(char *buf, size_t cap, const char *fmt,
                                                          ...);
/* The same with a va_list (for modules that wrap it in their own setter
 * that picks the buffer, e.g. tw__client_seterr). */
__attribute__((format(printf, 3, 0))) void tw__errbuf_vset(char *buf, size_t cap, const char *fmt,
                                                           va_list ap);

#endif
