/*
 * The HMAC-SHA256 challenge-response of protocol v1 (docs/protocol.md §6.3),
 * shared by tensorwired and libtensorwire so the two sides cannot drift:
 *
 *   client proof = HMAC-SHA256(token, "tensorwire-v1 client" || server_nonce || client_nonce)
 *   server proof = HMAC-SHA256(token, "tensorwire-v1 server" || client_nonce || server_nonce)
 *
 * Pure computation (OpenSSL libcrypto), no I/O: loading a token from a file
 * is src/common/token.h. Nothing here keeps a pointer to its arguments; the
 * token bytes are only read during the call.
 */
#ifndef TW_PROTO_AUTH_H
#define TW_PROTO_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

/* A token is 1..TW_AUTH_MAX_TOKEN_LEN bytes (docs/protocol.md §6.3, §10). */
#define TW_AUTH_MAX_TOKEN_LEN 1024u

/* The labels of the two proofs, exactly as the spec spells them (no NUL is
 * hashed). They differ so a proof cannot be reflected back to its sender. */
#define TW_AUTH_LABEL_CLIENT "tensorwire-v1 client"
#define TW_AUTH_LABEL_SERVER "tensorwire-v1 server"

/* Which proof: the one the client sends in AUTH, or the one the server sends
 * in AUTH_OK. The nonce order follows from it. */
enum tw_auth_proof { TW_AUTH_PROOF_CLIENT = 0, TW_AUTH_PROOF_SERVER = 1 };

/* Computes the proof `which` over the token (token_len bytes, any byte
 * values) and the two nonces into mac. Returns 0, TW_EINVAL when token_len is
 * not 1..TW_AUTH_MAX_TOKEN_LEN or `which` is unknown, TW_EINTERNAL when
 * OpenSSL fails. */
int tw__auth_mac(const uint8_t *token, size_t token_len, enum tw_auth_proof which,
                 const uint8_t server_nonce[TW_AUTH_NONCE_LEN],
                 const uint8_t client_nonce[TW_AUTH_NONCE_LEN], uint8_t mac[TW_AUTH_MAC_LEN]);

/* Compares two proofs in constant time (CRYPTO_memcmp). 1 when equal. */
int tw__auth_mac_equal(const uint8_t a[TW_AUTH_MAC_LEN], const uint8_t b[TW_AUTH_MAC_LEN]);

/* Fills a fresh nonce from the OpenSSL CSPRNG (RAND_bytes). Returns 0 or
 * TW_EINTERNAL (the generator is not seeded or failed). */
int tw__auth_nonce(uint8_t nonce[TW_AUTH_NONCE_LEN]);

#endif
