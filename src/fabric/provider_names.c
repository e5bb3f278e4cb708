#include "provider_names.h"

#include <string.h>

static const char *const known[] = {"verbs",   "efa",   "tcp",      "udp", "sockets", "shm",
                                    "sm2",     "psm2",  "psm3",     "opx", "cxi",     "ucx",
                                    "lnx",     "net",   "usnic",    "rxm", "rxd",     "ofi_rxm",
                                    "ofi_rxd", "mrail", "ofi_mrail"};

const char *tw__fabric_unknown_provider(const char *spec, size_t *len)
{
    if (strcmp(spec, "auto") == 0 || strcmp(spec, "none") == 0)
        return NULL;
    for (const char *p = spec;;) {
        size_t n = strcspn(p, ",;"), k = 0;
        for (; k < sizeof(known) / sizeof(known[0]); k++)
            if (strlen(known[k]) == n && strncmp(known[k], p, n) == 0)
                break;
        if (n == 0 || k == sizeof(known) / sizeof(known[0])) {
            *len = n;
            return p;
        }
        if (!p[n])
            return NULL;
        p += n + 1;
    }
}
