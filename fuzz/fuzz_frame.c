/*
 * libFuzzer target: the frame decoder on arbitrary bytes. The input is a
 * stream of frames decoded one after another, under the pre-authentication
 * limit when the first byte is odd and the largest limit otherwise, the way
 * a connection reads them. Decoded LIST_REPLY / STATS_REPLY bodies are
 * walked with their iterators, and the zero-copy DATA path is exercised on
 * every DATA header; a verdict gets its explanation (tw__explain_request_verdict).
 * ASan catches any read past the input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint32_t max_frame = (size > 0 && (data[0] & 1)) ? TW_PREAUTH_MAX_FRAME : TW_MAX_MAX_FRAME;
    size_t off = 0;
    for (int frames = 0; frames < 64 && off < size; frames++) {
        struct tw_msg m;
        struct tw_frame_header h;
        int hr = tw__frame_decode_header(data + off, size - off, max_frame, &h);
        ssize_t n = tw__msg_decode(data + off, size - off, max_frame, &m);
        if (hr < 0 && n != hr)
            abort(); /* the full decoder must report the header's verdict */
        if (hr == 0 && h.tag == TW_TAG_DATA && size - off >= TW_FRAME_HEADER_LEN + 8 &&
            h.payload_len >= 8) {
            struct tw_msg dm;
            if (tw__msg_decode_data_prefix(&h, data + off + TW_FRAME_HEADER_LEN, &dm) == 0 &&
                dm.u.data.bytes.len != h.payload_len - 8)
                abort();
        }
        if (n < 0) {
            /* The words for a request-level verdict re-read the raw fields:
             * they must stay inside the frame too. */
            if (hr == 0 && size - off >= TW_FRAME_HEADER_LEN + (size_t)h.payload_len) {
                char why[200];
                tw__explain_request_verdict(data + off, TW_FRAME_HEADER_LEN + h.payload_len, (int)n,
                                            why, sizeof(why));
                if (memchr(why, 0, sizeof(why)) == NULL)
                    abort();
            }
            break;
        }
        if ((size_t)n > size - off || (size_t)n != TW_FRAME_HEADER_LEN + m.hdr.payload_len)
            abort();
        if (m.hdr.tag == TW_TAG_LIST_REPLY) {
            size_t cur = 0;
            struct tw_descriptor d;
            uint32_t count = 0;
            int rc;
            while ((rc = tw__list_next(&m, &cur, &d)) == 1)
                count++;
            if (rc != 0 || count != m.u.list_reply.count)
                abort(); /* the decoder validated every entry */
        } else if (m.hdr.tag == TW_TAG_STATS_REPLY) {
            size_t cur = 0;
            struct tw_bytes k;
            uint64_t v;
            uint32_t count = 0;
            int rc;
            while ((rc = tw__stats_next(&m, &cur, &k, &v)) == 1)
                count++;
            if (rc != 0 || count != m.u.stats_reply.count)
                abort();
        }
        off += (size_t)n;
    }
    return 0;
}
