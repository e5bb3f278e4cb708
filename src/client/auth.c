/*
 * Token handling and the HMAC-SHA256 proofs of the handshake
 * (docs/protocol.md, AUTH / AUTH_OK). The token never leaves this process:
 * both sides prove knowledge of it over fresh nonces.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "client/client_internal.h"

#define TOKEN_MAX 1024u

int tw__client_token_read_file(const char *path, char **out, size_t *out_len, char *err,
                               size_t errcap)
{
    char buf[TOKEN_MAX + 64];
    size_t len;
    int rc;
    FILE *f = fopen(path, "rb");
    if (!f) {
        rc = -errno;
        snprintf(err, errcap, "cannot open token file '%s': %s", path, strerror(errno));
        return rc;
    }
    len = fread(buf, 1, sizeof(buf), f);
    if (ferror(f)) {
        snprintf(err, errcap, "cannot read token file '%s'", path);
        rc = -EIO;
        goto out_close;
    }
    if (len == sizeof(buf) && fgetc(f) != EOF) {
        snprintf(err, errcap, "token file '%s' is longer than %u bytes", path, TOKEN_MAX);
        rc = TW_EINVAL;
        goto out_wipe;
    }
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' ' ||
                       buf[len - 1] == '\t'))
        len--;
    if (len == 0 || len > TOKEN_MAX) {
        snprintf(err, errcap, "token file '%s' %s", path,
                 len == 0 ? "is empty" : "holds more than 1024 bytes");
        rc = TW_EINVAL;
        goto out_wipe;
    }
    *out = malloc(len + 1);
    if (!*out) {
        rc = -ENOMEM;
        goto out_wipe;
    }
    memcpy(*out, buf, len);
    (*out)[len] = '\0';
    *out_len = len;
    rc = 0;

out_wipe:
    OPENSSL_cleanse(buf, sizeof(buf));
out_close:
    fclose(f);
    return rc;
}

int tw__client_auth_mac(const char *token, size_t token_len, const char *label, const uint8_t *a,
                        const uint8_t *b, uint8_t mac[TW_AUTH_MAC_LEN])
{
    uint8_t msg[64 + 2 * TW_AUTH_NONCE_LEN];
    size_t llen = strlen(label);
    unsigned int maclen = 0;
    if (llen > 64)
        return TW_EINVAL;
    memcpy(msg, label, llen);
    memcpy(msg + llen, a, TW_AUTH_NONCE_LEN);
    memcpy(msg + llen + TW_AUTH_NONCE_LEN, b, TW_AUTH_NONCE_LEN);
    if (!HMAC(EVP_sha256(), token, (int)token_len, msg, llen + 2 * TW_AUTH_NONCE_LEN, mac,
              &maclen) ||
        maclen != TW_AUTH_MAC_LEN)
        return TW_EINTERNAL;
    return 0;
}
