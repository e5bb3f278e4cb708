/*
 * Connection admission: whether tensorwired takes a new TCP connection, a
 * pure function of counts (no I/O, no clock), so tests feed it a table.
 *
 * Two budgets: max_connections for every connection served, and a smaller
 * one, max_handshakes, for connections that have not completed the
 * handshake (HELLO, and AUTH when a token is set), with a per-address cap
 * inside it. An unauthenticated crowd can then hold at most max_handshakes
 * slots, and never the slots of established connections: when the
 * handshake budget (or the whole server) is full, the connection that has
 * waited longest for its handshake makes room for the new one, so a client
 * that completes its handshake promptly is served however many idle
 * sockets wait. docs/server.md ("Connection admission") is the user's view.
 */
#ifndef TW_SERVER_ADMISSION_H
#define TW_SERVER_ADMISSION_H

#include <stdint.h>

enum tw_admit_verdict {
    TW_ADMIT_ACCEPT = 0,   /* serve it */
    TW_ADMIT_EVICT_OLDEST, /* end the oldest handshake with ERROR(BUSY, 0), then serve it */
    TW_ADMIT_REFUSE        /* answer ERROR(BUSY, 0) and close */
};

enum tw_admit_reason {
    TW_ADMIT_R_OK = 0,
    TW_ADMIT_R_OK_PRESSURE,       /* accepted, with the shorter handshake deadline */
    TW_ADMIT_R_HANDSHAKES_FULL,   /* evict: max_handshakes waiting */
    TW_ADMIT_R_SERVER_FULL_EVICT, /* evict: max_connections served, some still handshaking */
    TW_ADMIT_R_ADDRESS_CAP,       /* refuse: this address has max_per_address waiting */
    TW_ADMIT_R_SERVER_FULL        /* refuse: max_connections served, all established */
};

struct tw_admit_input {
    uint32_t served;          /* connections served now (handshaking included) */
    uint32_t max_served;      /* --max-connections */
    uint32_t handshaking;     /* of them, not yet through the handshake */
    uint32_t max_handshaking; /* --max-handshakes */
    uint32_t from_address;    /* of the handshaking, from the new peer's address */
    uint32_t max_per_address; /* --max-handshakes-per-address */
};

struct tw_admit_decision {
    enum tw_admit_verdict verdict;
    enum tw_admit_reason reason;
    /* Give this connection the shorter handshake deadline (more than half
     * of the handshake budget in use, counting it). */
    int short_deadline;
};

struct tw_admit_decision tw__admit_decide(const struct tw_admit_input *in);
/* Static text for logs and ERROR messages. */
const char *tw__admit_reason_text(enum tw_admit_reason r);

#endif
