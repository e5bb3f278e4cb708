/*
 * Token files (docs/protocol.md §6.3). The file is streamed through a small
 * chunk buffer instead of being read whole: only the first
 * TW_AUTH_MAX_TOKEN_LEN content bytes can ever be part of a valid token, and
 * a non-whitespace byte past that limit makes the file invalid, so nothing
 * beyond the limit needs keeping. Trailing whitespace of any length is
 * skipped without storing it, which a fixed-size read would get wrong (it
 * would either refuse a valid file or silently cut a long token short).
 */
#include "common/errbuf.h"
#include "common/token.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "tensorwire/error.h"

static int is_token_space(uint8_t b)
{
    /* Exactly the whitespace the spec names; not \v or \f. */
    return b == ' ' || b == '\t' || b == '\r' || b == '\n';
}

int tw__token_load_file(struct tw_token *tok, const char *path, unsigned flags, char *errbuf,
                        size_t errlen)
{
    struct stat st;
    uint8_t chunk[512];
    uint64_t pos = 0; /* content bytes seen so far */
    uint64_t end = 0; /* one past the last non-whitespace byte seen */
    int rc, fd;

    tw__token_clear(tok);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        tw__errbuf_set(errbuf, errlen, "cannot open token file '%s': %s", path, strerror(-rc));
        return rc;
    }
    /* Checked on the open descriptor, not the path, so the file judged is
     * the file read. A secret that others can read is no secret. */
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        tw__errbuf_set(errbuf, errlen, "cannot stat token file '%s': %s", path, strerror(-rc));
        close(fd);
        return rc;
    }
    if (S_ISDIR(st.st_mode)) {
        tw__errbuf_set(errbuf, errlen, "token file '%s' is a directory", path);
        close(fd);
        return -EISDIR;
    }
    if ((st.st_mode & (S_IRWXG | S_IRWXO)) && !(flags & TW__TOKEN_ALLOW_INSECURE)) {
        tw__errbuf_set(
            errbuf, errlen,
            "token file '%s' is readable or writable by %s (mode %03o); run 'chmod 600 %s' "
            "(or pass --allow-insecure-token-file)",
            path, (st.st_mode & S_IRWXO) ? "others" : "its group", (unsigned)(st.st_mode & 0777),
            path);
        close(fd);
        return -EACCES;
    }
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            tw__errbuf_set(errbuf, errlen, "cannot read token file '%s': %s", path, strerror(-rc));
            goto out_wipe;
        }
        if (n == 0)
            break;
        for (ssize_t i = 0; i < n; i++, pos++) {
            if (!is_token_space(chunk[i])) {
                end = pos + 1;
                if (end > TW_AUTH_MAX_TOKEN_LEN) {
                    tw__errbuf_set(errbuf, errlen,
                                   "token file '%s' holds a token longer than %u bytes (trailing "
                                   "whitespace aside)",
                                   path, TW_AUTH_MAX_TOKEN_LEN);
                    rc = TW_EINVAL;
                    goto out_wipe;
                }
            }
            /* Whitespace past the limit is dropped: it can only be trailing,
             * or a later byte makes the file invalid anyway. */
            if (pos < TW_AUTH_MAX_TOKEN_LEN)
                tok->bytes[pos] = chunk[i];
        }
    }
    if (end == 0) {
        tw__errbuf_set(errbuf, errlen, "token file '%s' is %s (the token must be 1..%u bytes)",
                       path, pos == 0 ? "empty" : "only whitespace", TW_AUTH_MAX_TOKEN_LEN);
        rc = TW_EINVAL;
        goto out_wipe;
    }
    /* Wipe the stored trailing whitespace too: only the token stays. */
    if (end < TW_AUTH_MAX_TOKEN_LEN)
        OPENSSL_cleanse(tok->bytes + end, TW_AUTH_MAX_TOKEN_LEN - end);
    tok->len = (size_t)end;
    rc = 0;

out_wipe:
    OPENSSL_cleanse(chunk, sizeof(chunk));
    if (rc)
        tw__token_clear(tok);
    close(fd);
    return rc;
}

int tw__token_set(struct tw_token *tok, const void *bytes, size_t len, char *errbuf, size_t errlen)
{
    tw__token_clear(tok);
    if (!bytes || len == 0 || len > TW_AUTH_MAX_TOKEN_LEN) {
        tw__errbuf_set(errbuf, errlen, "the token must be 1..%u bytes (got %zu)",
                       TW_AUTH_MAX_TOKEN_LEN, bytes ? len : (size_t)0);
        return TW_EINVAL;
    }
    memcpy(tok->bytes, bytes, len);
    tok->len = len;
    return 0;
}

void tw__token_clear(struct tw_token *tok)
{
    OPENSSL_cleanse(tok, sizeof(*tok));
}
