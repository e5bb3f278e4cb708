/* Connection admission (src/server/admission.c) as a table: counts in,
 * verdict + reason + deadline out. No sockets. */
#include <stdio.h>

#include "server/admission.h"
#include "tw_test.h"

static void test_table(void)
{
    static const struct {
        struct tw_admit_input in;
        enum tw_admit_verdict verdict;
        enum tw_admit_reason reason;
        int short_deadline;
    } rows[] = {
        /* served, max, handshaking, max_hs, from_addr, max_per_addr */
        {{0, 1024, 0, 256, 0, 128}, TW_ADMIT_ACCEPT, TW_ADMIT_R_OK, 0},
        {{500, 1024, 127, 256, 10, 128}, TW_ADMIT_ACCEPT, TW_ADMIT_R_OK, 0},
        /* The 129th waiting handshake is over half of 256. */
        {{500, 1024, 128, 256, 10, 128}, TW_ADMIT_ACCEPT, TW_ADMIT_R_OK_PRESSURE, 1},
        /* Handshake budget full: the oldest makes room; still under pressure. */
        {{500, 1024, 256, 256, 3, 128}, TW_ADMIT_EVICT_OLDEST, TW_ADMIT_R_HANDSHAKES_FULL, 1},
        /* One address at its cap is refused, even with room elsewhere. */
        {{10, 1024, 8, 256, 8, 8}, TW_ADMIT_REFUSE, TW_ADMIT_R_ADDRESS_CAP, 0},
        /* ... and the cap comes before eviction: it cannot evict others. */
        {{1024, 1024, 256, 256, 128, 128}, TW_ADMIT_REFUSE, TW_ADMIT_R_ADDRESS_CAP, 0},
        /* Server full of established connections: refused. */
        {{1024, 1024, 0, 256, 0, 128}, TW_ADMIT_REFUSE, TW_ADMIT_R_SERVER_FULL, 0},
        /* Server full, one still handshaking: it makes room. */
        {{1024, 1024, 1, 256, 0, 128}, TW_ADMIT_EVICT_OLDEST, TW_ADMIT_R_SERVER_FULL_EVICT, 0},
        /* Over the limit (evicted ones still draining) counts as full. */
        {{1030, 1024, 0, 256, 0, 128}, TW_ADMIT_REFUSE, TW_ADMIT_R_SERVER_FULL, 0},
        /* A budget of one: always under pressure. */
        {{0, 2, 0, 1, 0, 1}, TW_ADMIT_ACCEPT, TW_ADMIT_R_OK_PRESSURE, 1},
        {{1, 2, 1, 1, 0, 1}, TW_ADMIT_EVICT_OLDEST, TW_ADMIT_R_HANDSHAKES_FULL, 1},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct tw_admit_decision d = tw__admit_decide(&rows[i].in);
        printf("  row %zu: %s\n", i, tw__admit_reason_text(d.reason));
        TW_ASSERT_EQ(d.verdict, rows[i].verdict);
        TW_ASSERT_EQ(d.reason, rows[i].reason);
        TW_ASSERT_EQ(d.short_deadline, rows[i].short_deadline);
    }
}

int main(void)
{
    TW_RUN(test_table);
    TW_DONE();
}
