/* The server's HMAC-SHA256 exchange against the protocol's golden vectors
 * (tests/vectors/auth.hex, auth_ok.hex: an independent Python generator),
 * so a mistake shared by the server and the integration tests' client
 * (which reuse these functions) cannot pass unnoticed; and token loading. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "server/auth.h"
#include "tw_test.h"

static const uint8_t want_client[32] = {
    0xad, 0xbb, 0x88, 0x21, 0xda, 0x1a, 0xa1, 0x7b, 0x68, 0xd3, 0x09, 0x9f, 0xf5, 0x0b, 0x16, 0xd8,
    0xd9, 0xae, 0xd7, 0x26, 0xe0, 0x00, 0x7f, 0xe3, 0xa5, 0xe1, 0x7e, 0x62, 0xcc, 0x11, 0x67, 0x10};
static const uint8_t want_server[32] = {
    0x30, 0x63, 0x35, 0x3f, 0x65, 0x9d, 0x3d, 0x28, 0x90, 0x02, 0xe2, 0x15, 0x4c, 0xc0, 0x75, 0xff,
    0x4a, 0xe4, 0x95, 0xc3, 0x21, 0xdd, 0x9b, 0x04, 0x6e, 0x8a, 0xfd, 0x55, 0x57, 0x20, 0xef, 0xb9};

static void write_file(const char *path, const char *s, size_t n)
{
    FILE *f = fopen(path, "wb");
    TW_ASSERT(f != NULL);
    TW_ASSERT_EQ(fwrite(s, 1, n, f), n);
    fclose(f);
}

static void test_golden_macs(void)
{
    struct tw_auth_token tok;
    char err[256];
    char path[] = "/tmp/tw-auth-XXXXXX";
    int fd = mkstemp(path);
    TW_ASSERT(fd >= 0);
    close(fd);
    /* Trailing whitespace is not part of the token. */
    write_file(path, "correct horse battery staple \t\r\n\n", 33);
    TW_ASSERT_OK(tw__auth_load_token(&tok, path, err, sizeof(err)));
    TW_ASSERT_EQ(tok.len, 28);
    uint8_t sn[32], cn[32], mac[32];
    for (int i = 0; i < 32; i++) {
        sn[i] = (uint8_t)(0xa0 + i);
        cn[i] = (uint8_t)(0x40 + i);
    }
    TW_ASSERT_OK(tw__auth_mac(&tok, 1, sn, cn, mac));
    TW_ASSERT_MEM_EQ(mac, want_client, 32);
    TW_ASSERT(tw__auth_mac_equal(mac, want_client));
    TW_ASSERT_OK(tw__auth_mac(&tok, 0, sn, cn, mac));
    TW_ASSERT_MEM_EQ(mac, want_server, 32);
    mac[31] ^= 1;
    TW_ASSERT(!tw__auth_mac_equal(mac, want_server));

    /* Empty (after stripping) and over-long tokens are refused. */
    write_file(path, " \n", 2);
    TW_ASSERT_ERR(tw__auth_load_token(&tok, path, err, sizeof(err)), -EINVAL);
    fprintf(stderr, "  %s\n", err);
    static char big[1100];
    memset(big, 'k', sizeof(big));
    write_file(path, big, sizeof(big));
    TW_ASSERT_ERR(tw__auth_load_token(&tok, path, err, sizeof(err)), -EINVAL);
    write_file(path, big, 1024);
    TW_ASSERT_OK(tw__auth_load_token(&tok, path, err, sizeof(err)));
    TW_ASSERT_EQ(tok.len, 1024);
    unlink(path);
    TW_ASSERT_ERR(tw__auth_load_token(&tok, path, err, sizeof(err)), -ENOENT);
    tw__auth_clear_token(&tok);
    TW_ASSERT_EQ(tok.len, 0);
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
    TW_RUN(test_golden_macs);
    TW_RUN(test_nonces_differ);
    TW_DONE();
}
