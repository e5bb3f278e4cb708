/*
 * libFuzzer target: decode -> encode -> decode. Every frame the decoder
 * accepts must be re-encodable, the re-encoding must equal the input byte
 * for byte (except reserved capability bits, which receivers mask off), and
 * decoding it again must give the same fields.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t out[1 << 20];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tw_msg a, b;
    ssize_t n = tw__msg_decode(data, size, TW_MAX_MAX_FRAME, &a);
    if (n < 0)
        return 0;
    if ((size_t)n > sizeof(out))
        return 0;
    ssize_t len = tw__msg_encoded_len(&a);
    ssize_t e = tw__msg_encode(&a, out, sizeof(out));
    if (e < 0 || e != n || len != n)
        abort();
    /* Expected bytes: the input with the caps' reserved bits cleared. */
    uint8_t *want = malloc((size_t)n);
    if (!want)
        return 0;
    memcpy(want, data, (size_t)n);
    if (a.hdr.tag == TW_TAG_HELLO || a.hdr.tag == TW_TAG_HELLO_ACK) {
        uint8_t *caps = want + TW_FRAME_HEADER_LEN;
        caps[0] &= (uint8_t)TW_CAP_KNOWN_MASK;
        memset(caps + 1, 0, 7);
    }
    if (memcmp(want, out, (size_t)n) != 0)
        abort();
    free(want);
    ssize_t n2 = tw__msg_decode(out, (size_t)e, TW_MAX_MAX_FRAME, &b);
    if (n2 != e || !tw__msg_equal(&a, &b))
        abort();
    return 0;
}
