/*
 * HMAC-SHA256 proofs of the handshake (docs/protocol.md §6.3). The message
 * is built in a stack buffer of fixed size: label (20 bytes) and two nonces.
 */
#include "proto/auth.h"

#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "tensorwire/error.h"

#define LABEL_LEN (sizeof(TW_AUTH_LABEL_CLIENT) - 1)

/* Both labels must have one length so one buffer size fits both. */
_Static_assert(sizeof(TW_AUTH_LABEL_CLIENT) == sizeof(TW_AUTH_LABEL_SERVER),
               "the two auth labels have one length");

int tw__auth_mac(const uint8_t *token, size_t token_len, enum tw_auth_proof which,
                 const uint8_t server_nonce[TW_AUTH_NONCE_LEN],
                 const uint8_t client_nonce[TW_AUTH_NONCE_LEN], uint8_t mac[TW_AUTH_MAC_LEN])
{
    uint8_t msg[LABEL_LEN + 2 * TW_AUTH_NONCE_LEN];
    const uint8_t *first, *second;
    const char *label;
    unsigned int maclen = 0;

    if (!token || token_len == 0 || token_len > TW_AUTH_MAX_TOKEN_LEN)
        return TW_EINVAL;
    switch (which) {
    case TW_AUTH_PROOF_CLIENT:
        label = TW_AUTH_LABEL_CLIENT;
        first = server_nonce;
        second = client_nonce;
        break;
    case TW_AUTH_PROOF_SERVER:
        label = TW_AUTH_LABEL_SERVER;
        first = client_nonce;
        second = server_nonce;
        break;
    default:
        return TW_EINVAL;
    }
    memcpy(msg, label, LABEL_LEN);
    memcpy(msg + LABEL_LEN, first, TW_AUTH_NONCE_LEN);
    memcpy(msg + LABEL_LEN + TW_AUTH_NONCE_LEN, second, TW_AUTH_NONCE_LEN);
    if (!HMAC(EVP_sha256(), token, (int)token_len, msg, sizeof(msg), mac, &maclen) ||
        maclen != TW_AUTH_MAC_LEN)
        return TW_EINTERNAL;
    return 0;
}

int tw__auth_mac_equal(const uint8_t a[TW_AUTH_MAC_LEN], const uint8_t b[TW_AUTH_MAC_LEN])
{
    return CRYPTO_memcmp(a, b, TW_AUTH_MAC_LEN) == 0;
}

int tw__auth_nonce(uint8_t nonce[TW_AUTH_NONCE_LEN])
{
    return RAND_bytes(nonce, TW_AUTH_NONCE_LEN) == 1 ? 0 : TW_EINTERNAL;
}
