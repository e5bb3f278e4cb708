#include "server/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char label_client[] = "tensorwire-v1 client";
static const char label_server[] = "tensorwire-v1 server";

int tw__auth_load_token(struct tw_auth_token *tok, const char *path, char *errbuf, size_t errlen)
{
    uint8_t buf[TW_AUTH_MAX_TOKEN_LEN + 64];
    size_t len = 0;
    int rc = 0;
    memset(tok, 0, sizeof(*tok));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        snprintf(errbuf, errlen, "token file %s: %s", path, strerror(-rc));
        return rc;
    }
    for (;;) {
        ssize_t n = read(fd, buf + len, sizeof(buf) - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            snprintf(errbuf, errlen, "token file %s: %s", path, strerror(-rc));
            goto out_wipe;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len == sizeof(buf))
            break;
    }
    /* Exactly the whitespace docs/protocol.md names: space, tab, CR, LF. */
    while (len > 0 && (buf[len - 1] == ' ' || buf[len - 1] == '\t' || buf[len - 1] == '\n' ||
                       buf[len - 1] == '\r'))
        len--;
    if (len == 0 || len > TW_AUTH_MAX_TOKEN_LEN) {
        rc = -EINVAL;
        snprintf(errbuf, errlen, "token file %s: the token must be 1..%u bytes (found %s)", path,
                 TW_AUTH_MAX_TOKEN_LEN, len == 0 ? "an empty file" : "more");
        goto out_wipe;
    }
    memcpy(tok->bytes, buf, len);
    tok->len = len;

out_wipe:
    OPENSSL_cleanse(buf, sizeof(buf));
    close(fd);
    return rc;
}

void tw__auth_clear_token(struct tw_auth_token *tok)
{
    OPENSSL_cleanse(tok, sizeof(*tok));
}

int tw__auth_nonce(uint8_t nonce[TW_AUTH_NONCE_LEN])
{
    return RAND_bytes(nonce, TW_AUTH_NONCE_LEN) == 1 ? 0 : TW_EINTERNAL;
}

int tw__auth_mac(const struct tw_auth_token *tok, int client_side,
                 const uint8_t server_nonce[TW_AUTH_NONCE_LEN],
                 const uint8_t client_nonce[TW_AUTH_NONCE_LEN], uint8_t mac[TW_AUTH_MAC_LEN])
{
    uint8_t msg[sizeof(label_client) - 1 + 2 * TW_AUTH_NONCE_LEN];
    const char *label = client_side ? label_client : label_server;
    size_t ll = sizeof(label_client) - 1;
    unsigned int maclen = 0;
    memcpy(msg, label, ll);
    memcpy(msg + ll, client_side ? server_nonce : client_nonce, TW_AUTH_NONCE_LEN);
    memcpy(msg + ll + TW_AUTH_NONCE_LEN, client_side ? client_nonce : server_nonce,
           TW_AUTH_NONCE_LEN);
    if (!HMAC(EVP_sha256(), tok->bytes, (int)tok->len, msg, sizeof(msg), mac, &maclen) ||
        maclen != TW_AUTH_MAC_LEN)
        return TW_EINTERNAL;
    return 0;
}

int tw__auth_mac_equal(const uint8_t a[TW_AUTH_MAC_LEN], const uint8_t b[TW_AUTH_MAC_LEN])
{
    return CRYPTO_memcmp(a, b, TW_AUTH_MAC_LEN) == 0;
}
