/*
 * The shared authentication module: src/proto/auth.c (the proofs of
 * docs/protocol.md §6.3) against the golden vectors tests/vectors/auth.hex and
 * auth_ok.hex (written by scripts/gen-vectors.py, an independent Python
 * implementation), so a mistake shared by tensorwired, libtensorwire and the
 * integration tests' client (all of which use this module) cannot pass
 * unnoticed; and src/common/token.c (the token file rules of §6.3).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/token.h"
#include "proto/auth.h"
#include "tw_test.h"
#include "tw_vectors.h"

/* The vector's nonces, as docs/protocol.md §6.3 states them. */
static uint8_t server_nonce[32], client_nonce[32];

static void fill_nonces(void)
{
    for (int i = 0; i < 32; i++) {
        server_nonce[i] = (uint8_t)(0xa0 + i);
        client_nonce[i] = (uint8_t)(0x40 + i);
    }
}

static char tmp_path[] = "/tmp/tw-auth-XXXXXX";

static void write_file(const void *s, size_t n)
{
    FILE *f = fopen(tmp_path, "wb");
    TW_ASSERT(f != NULL);
    TW_ASSERT_EQ(fwrite(s, 1, n, f), n);
    TW_ASSERT_EQ(fclose(f), 0);
    TW_ASSERT_OK(chmod(tmp_path, 0600)); /* a token file only its owner reads */
}

static void test_golden_macs(void)
{
    static const char token[] = "correct horse battery staple";
    uint8_t auth[128], auth_ok[128], mac[32];
    fill_nonces();
    /* AUTH: 24-byte header, client_nonce[32], mac[32]; AUTH_OK: header, mac. */
    TW_ASSERT_EQ(tw_load_vector("auth", auth, sizeof(auth)), 88);
    TW_ASSERT_EQ(tw_load_vector("auth_ok", auth_ok, sizeof(auth_ok)), 56);
    TW_ASSERT_MEM_EQ(auth + 24, client_nonce, 32);

    TW_ASSERT_OK(tw__auth_mac((const uint8_t *)token, strlen(token), TW_AUTH_PROOF_CLIENT,
                              server_nonce, client_nonce, mac));
    TW_ASSERT_MEM_EQ(mac, auth + 56, 32);
    TW_ASSERT(tw__auth_mac_equal(mac, auth + 56));
    TW_ASSERT_OK(tw__auth_mac((const uint8_t *)token, strlen(token), TW_AUTH_PROOF_SERVER,
                              server_nonce, client_nonce, mac));
    TW_ASSERT_MEM_EQ(mac, auth_ok + 24, 32);
    TW_ASSERT(tw__auth_mac_equal(mac, auth_ok + 24));
    /* The two proofs differ (different labels), so neither reflects. */
    TW_ASSERT(!tw__auth_mac_equal(auth + 56, auth_ok + 24));
    /* A flip in any byte, first or last, is seen. */
    mac[31] ^= 1;
    TW_ASSERT(!tw__auth_mac_equal(mac, auth_ok + 24));
    mac[31] ^= 1;
    mac[0] ^= 0x80;
    TW_ASSERT(!tw__auth_mac_equal(mac, auth_ok + 24));
    /* Swapped nonces give another proof: the order is part of the spec. */
    TW_ASSERT_OK(tw__auth_mac((const uint8_t *)token, strlen(token), TW_AUTH_PROOF_CLIENT,
                              client_nonce, server_nonce, mac));
    TW_ASSERT(!tw__auth_mac_equal(mac, auth + 56));
}

static void test_mac_limits(void)
{
    static uint8_t key[TW_AUTH_MAX_TOKEN_LEN + 1];
    uint8_t mac[32], mac2[32];
    fill_nonces();
    memset(key, 'k', sizeof(key));
    TW_ASSERT_ERR(tw__auth_mac(key, 0, TW_AUTH_PROOF_CLIENT, server_nonce, client_nonce, mac),
                  TW_EINVAL);
    TW_ASSERT_ERR(
        tw__auth_mac(key, sizeof(key), TW_AUTH_PROOF_CLIENT, server_nonce, client_nonce, mac),
        TW_EINVAL);
    TW_ASSERT_ERR(tw__auth_mac(key, 4, (enum tw_auth_proof)7, server_nonce, client_nonce, mac),
                  TW_EINVAL);
    /* 1 and 1024 bytes are legal, and a NUL byte is part of the key. */
    TW_ASSERT_OK(tw__auth_mac(key, 1, TW_AUTH_PROOF_CLIENT, server_nonce, client_nonce, mac));
    TW_ASSERT_OK(tw__auth_mac(key, TW_AUTH_MAX_TOKEN_LEN, TW_AUTH_PROOF_SERVER, server_nonce,
                              client_nonce, mac));
    static const uint8_t with_nul[3] = {'a', 0, 'b'};
    TW_ASSERT_OK(tw__auth_mac(with_nul, 3, TW_AUTH_PROOF_CLIENT, server_nonce, client_nonce, mac));
    TW_ASSERT_OK(tw__auth_mac(with_nul, 1, TW_AUTH_PROOF_CLIENT, server_nonce, client_nonce, mac2));
    TW_ASSERT(!tw__auth_mac_equal(mac, mac2));
}

static void test_token_file_rules(void)
{
    struct tw_token tok;
    char err[512];
    static char big[3000];

    /* The vector's token with every kind of trailing whitespace. */
    write_file("correct horse battery staple \t\r\n\n", 33);
    TW_ASSERT_OK(tw__token_load_file(&tok, tmp_path, 0, err, sizeof(err)));
    TW_ASSERT_EQ(tok.len, 28);
    TW_ASSERT_MEM_EQ(tok.bytes, "correct horse battery staple", 28);

    /* Leading and inner whitespace stay; \v and \f are not stripped. */
    write_file(" a b\v\f\n", 7);
    TW_ASSERT_OK(tw__token_load_file(&tok, tmp_path, 0, err, sizeof(err)));
    TW_ASSERT_EQ(tok.len, 6);
    TW_ASSERT_MEM_EQ(tok.bytes, " a b\v\f", 6);

    /* NUL bytes are token bytes. */
    write_file("a\0b\n", 4);
    TW_ASSERT_OK(tw__token_load_file(&tok, tmp_path, 0, err, sizeof(err)));
    TW_ASSERT_EQ(tok.len, 3);
    TW_ASSERT_MEM_EQ(tok.bytes, "a\0b", 3);

    /* Empty and whitespace-only files are refused, saying so. */
    write_file("", 0);
    TW_ASSERT_ERR(tw__token_load_file(&tok, tmp_path, 0, err, sizeof(err)), TW_EINVAL);
    fprintf(stderr, "  %s\n", err);
    TW_ASSERT(strstr(err, "empty") != NULL && strstr(err, tmp_path) != NULL);
    write_file(" \r\n\t", 4);
    TW_ASSERT_ERR(tw__token_load_file(&tok, tmp_path, 0, err, sizeof(err)), TW_EINVAL);
    fprintf(stderr, "  %s\n", err);
    TW_ASSERT(strstr(err, "whitespace") != NULL);
    TW_ASSERT_EQ(tok.len, 0);

    /* Exactly 1024 bytes, followed by far more trailing whitespace than any
     * read buffer: valid, and the token is the 1024 bytes. */
    memset(big, 'k', sizeof(big));
    memset(big + TW_AUTH_MAX_TOKEN_LEN, '\n', sizeof(big) - TW_AUTH_MAX_TOKEN_LEN);
    write_file(big, sizeof(big));
    TW_ASSERT_OK(tw__token_load_file(&tok, tmp_path, 0, err, sizeof(err)));
    TW_ASSERT_EQ(tok.len, TW_AUTH_MAX_TOKEN_LEN);

    /* 1025 bytes: refused. */
    big[TW_AUTH_MAX_TOKEN_LEN] = 'k';
    write_file(big, TW_AUTH_MAX_TOKEN_LEN + 1);
    TW_ASSERT_ERR(tw__token_load_file(&tok, tmp_path, 0, err, sizeof(err)), TW_EINVAL);
    fprintf(stderr, "  %s\n", err);
    TW_ASSERT(strstr(err, "1024") != NULL);
    TW_ASSERT_EQ(tok.len, 0);

    /* A short token, a long run of whitespace, then one more byte far past
     * the limit: the whitespace is inside the token, so the token is too
     * long. A loader that reads a fixed-size prefix would accept a
     * truncated token here. */
    memset(big, ' ', sizeof(big));
    memcpy(big, "short", 5);
    big[sizeof(big) - 1] = 'x';
    write_file(big, sizeof(big));
    TW_ASSERT_ERR(tw__token_load_file(&tok, tmp_path, 0, err, sizeof(err)), TW_EINVAL);
    /* The same with the byte at position 1024 (the 1025th): refused; at
     * 1023: a valid 1024-byte token with inner spaces. */
    write_file(big, TW_AUTH_MAX_TOKEN_LEN);
    TW_ASSERT_OK(tw__token_load_file(&tok, tmp_path, 0, err, sizeof(err)));
    TW_ASSERT_EQ(tok.len, 5);
    big[TW_AUTH_MAX_TOKEN_LEN] = 'x';
    write_file(big, TW_AUTH_MAX_TOKEN_LEN + 1);
    TW_ASSERT_ERR(tw__token_load_file(&tok, tmp_path, 0, err, sizeof(err)), TW_EINVAL);
    big[TW_AUTH_MAX_TOKEN_LEN - 1] = 'x';
    write_file(big, TW_AUTH_MAX_TOKEN_LEN);
    TW_ASSERT_OK(tw__token_load_file(&tok, tmp_path, 0, err, sizeof(err)));
    TW_ASSERT_EQ(tok.len, TW_AUTH_MAX_TOKEN_LEN);
    TW_ASSERT_EQ(tok.bytes[TW_AUTH_MAX_TOKEN_LEN - 1], 'x');

    /* A missing file and a directory: the errno, with the path. */
    TW_ASSERT_OK(unlink(tmp_path));
    TW_ASSERT_ERR(tw__token_load_file(&tok, tmp_path, 0, err, sizeof(err)), -ENOENT);
    fprintf(stderr, "  %s\n", err);
    TW_ASSERT(strstr(err, tmp_path) != NULL);
    TW_ASSERT_ERR(tw__token_load_file(&tok, "/", 0, err, sizeof(err)), -EISDIR);
    fprintf(stderr, "  %s\n", err);
    /* errbuf may be absent. */
    TW_ASSERT_ERR(tw__token_load_file(&tok, tmp_path, 0, NULL, 0), -ENOENT);

    /* The loaded token authenticates exactly like the string. */
    write_file("correct horse battery staple\n", 29);
    TW_ASSERT_OK(tw__token_load_file(&tok, tmp_path, 0, err, sizeof(err)));
    uint8_t auth[128], mac[32];
    TW_ASSERT_EQ(tw_load_vector("auth", auth, sizeof(auth)), 88);
    fill_nonces();
    TW_ASSERT_OK(
        tw__auth_mac(tok.bytes, tok.len, TW_AUTH_PROOF_CLIENT, server_nonce, client_nonce, mac));
    TW_ASSERT_MEM_EQ(mac, auth + 56, 32);

    /* A file its group or others may read (or write) is refused with the
     * fix in the message, whatever its content, unless the caller allows
     * it; the owner's own bits do not matter. */
    static const mode_t insecure[] = {0644, 0640, 0604, 0620, 0602, 0660};
    for (size_t i = 0; i < sizeof(insecure) / sizeof(insecure[0]); i++) {
        TW_ASSERT_OK(chmod(tmp_path, insecure[i]));
        TW_ASSERT_ERR(tw__token_load_file(&tok, tmp_path, 0, err, sizeof(err)), -EACCES);
        TW_ASSERT_EQ(tok.len, 0);
        char fix[128];
        snprintf(fix, sizeof(fix), "chmod 600 %s", tmp_path);
        TW_ASSERT(strstr(err, fix) != NULL);
        if (i == 0)
            fprintf(stderr, "  %s\n", err);
        TW_ASSERT_OK(
            tw__token_load_file(&tok, tmp_path, TW__TOKEN_ALLOW_INSECURE, err, sizeof(err)));
        TW_ASSERT_EQ(tok.len, 28);
    }
    TW_ASSERT_OK(chmod(tmp_path, 0400));
    TW_ASSERT_OK(tw__token_load_file(&tok, tmp_path, 0, err, sizeof(err)));
    TW_ASSERT_EQ(tok.len, 28);

    /* Clearing wipes bytes and length. */
    tw__token_clear(&tok);
    TW_ASSERT_EQ(tok.len, 0);
    static const uint8_t zero[TW_AUTH_MAX_TOKEN_LEN];
    TW_ASSERT_MEM_EQ(tok.bytes, zero, sizeof(zero));
    TW_ASSERT_OK(unlink(tmp_path));
}

static void test_token_set(void)
{
    struct tw_token tok;
    char err[256];
    static char big[TW_AUTH_MAX_TOKEN_LEN + 1];
    memset(big, 'k', sizeof(big));
    TW_ASSERT_OK(tw__token_set(&tok, "s3cret \n", 8, err, sizeof(err)));
    TW_ASSERT_EQ(tok.len, 8); /* given directly: taken as is */
    TW_ASSERT_OK(tw__token_set(&tok, big, TW_AUTH_MAX_TOKEN_LEN, err, sizeof(err)));
    TW_ASSERT_EQ(tok.len, TW_AUTH_MAX_TOKEN_LEN);
    TW_ASSERT_ERR(tw__token_set(&tok, big, sizeof(big), err, sizeof(err)), TW_EINVAL);
    fprintf(stderr, "  %s\n", err);
    TW_ASSERT_EQ(tok.len, 0);
    TW_ASSERT_ERR(tw__token_set(&tok, "", 0, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT_ERR(tw__token_set(&tok, NULL, 3, NULL, 0), TW_EINVAL);
}

static void test_nonces_differ(void)
{
    uint8_t a[32], b[32];
    TW_ASSERT_OK(tw__auth_nonce(a));
    TW_ASSERT_OK(tw__auth_nonce(b));
    TW_ASSERT(memcmp(a, b, 32) != 0);
}

int main(void)
{
    int fd = mkstemp(tmp_path);
    TW_ASSERT(fd >= 0);
    close(fd);
    TW_RUN(test_golden_macs);
    TW_RUN(test_mac_limits);
    TW_RUN(test_token_file_rules);
    TW_RUN(test_token_set);
    TW_RUN(test_nonces_differ);
    TW_DONE();
}
