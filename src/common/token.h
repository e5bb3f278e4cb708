/*
 * The shared secret of HMAC-SHA256 authentication (docs/protocol.md §6.3),
 * loaded from a token file by tensorwired (--token-file) and libtensorwire
 * (tw_client_options.token_file) with one set of rules:
 *
 *   the token is the file's content with trailing whitespace (space, tab,
 *   CR, LF) removed; it must then be 1..TW_AUTH_MAX_TOKEN_LEN bytes. Any
 *   other byte, NUL included, is part of the token; leading whitespace is
 *   kept.
 *
 * A struct tw_token holds the bytes inline (no heap), so it can live in a
 * server struct or on the stack. Whoever owns one must call tw__token_clear
 * when done: it wipes the bytes with OPENSSL_cleanse.
 */
#ifndef TW_COMMON_TOKEN_H
#define TW_COMMON_TOKEN_H

#include <stddef.h>
#include <stdint.h>

#include "proto/auth.h"

struct tw_token {
    size_t len; /* 0: no token (authentication off) */
    uint8_t bytes[TW_AUTH_MAX_TOKEN_LEN];
};

/* Flags of tw__token_load_file. */
#define TW__TOKEN_ALLOW_INSECURE                                                                   \
    1u /* accept a file that group or others may                                                   \
          read or write */

/* Reads the token file at path into *tok (overwritten; on failure it is left
 * cleared, len 0). A file with any group or other permission bit is refused
 * with -EACCES (errbuf gives the 'chmod 600 PATH' fix) unless flags has
 * TW__TOKEN_ALLOW_INSECURE. The whole file is read, so a token followed by any amount
 * of trailing whitespace is accepted and one longer than the limit is refused
 * however the file is laid out; no byte of the file stays in a buffer that
 * was not wiped. Returns 0; a negated errno when the file cannot be opened or
 * read (e.g. -ENOENT, -EACCES); TW_EINVAL when the content breaks the rules
 * above (empty after stripping, or longer than TW_AUTH_MAX_TOKEN_LEN). On
 * failure errbuf (errlen bytes, may be 0) says why and names the path; it
 * never contains token bytes. */
int tw__token_load_file(struct tw_token *tok, const char *path, unsigned flags, char *errbuf,
                        size_t errlen);

/* Copies len bytes at bytes into *tok, as given (no stripping: a token passed
 * directly is already the secret). Returns 0 or TW_EINVAL when len is not
 * 1..TW_AUTH_MAX_TOKEN_LEN (errbuf says why; *tok is left cleared). */
int tw__token_set(struct tw_token *tok, const void *bytes, size_t len, char *errbuf, size_t errlen);

/* Wipes the token bytes and its length (OPENSSL_cleanse); *tok reads as "no
 * token" afterwards. Safe to call on a cleared token. */
void tw__token_clear(struct tw_token *tok);

#endif
