/*
 * HMAC-SHA256 challenge-response of protocol v1 (docs/protocol.md, AUTH):
 *   client mac = HMAC(token, "tensorwire-v1 client" || server_nonce || client_nonce)
 *   server mac = HMAC(token, "tensorwire-v1 server" || client_nonce || server_nonce)
 * All cryptography is OpenSSL libcrypto's.
 */
#ifndef TW_SERVER_AUTH_H
#define TW_SERVER_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

#define TW_AUTH_MAX_TOKEN_LEN 1024u

struct tw_auth_token {
    size_t len; /* 0 = authentication disabled */
    uint8_t bytes[TW_AUTH_MAX_TOKEN_LEN];
};

/* Reads the token file: contents with trailing whitespace stripped, 1..1024
 * bytes. Returns 0, a negated errno, or -EINVAL (errbuf says why). */
int tw__auth_load_token(struct tw_auth_token *tok, const char *path, char *errbuf, size_t errlen);
/* Wipes the token from memory. */
void tw__auth_clear_token(struct tw_auth_token *tok);
/* Fills a nonce from the OpenSSL CSPRNG. Returns 0 or TW_EINTERNAL. */
int tw__auth_nonce(uint8_t nonce[TW_AUTH_NONCE_LEN]);
/* client_side != 0: the client's MAC, else the server's. Returns 0 or
 * TW_EINTERNAL. */
int tw__auth_mac(const struct tw_auth_token *tok, int client_side,
                 const uint8_t server_nonce[TW_AUTH_NONCE_LEN],
                 const uint8_t client_nonce[TW_AUTH_NONCE_LEN], uint8_t mac[TW_AUTH_MAC_LEN]);
/* Constant-time comparison of two MACs: 1 when equal. */
int tw__auth_mac_equal(const uint8_t a[TW_AUTH_MAC_LEN], const uint8_t b[TW_AUTH_MAC_LEN]);

#endif
