/*
 * The provider names libfabric has (1.17 .. 2.x), so that a typo in
 * --fabric ("tpc", "bogus") is an error where it is written, while a real
 * provider this host lacks still falls back to inline with the reason.
 * Pure: no libfabric call, no I/O.
 */
#ifndef TW_FABRIC_PROVIDER_NAMES_H
#define TW_FABRIC_PROVIDER_NAMES_H

#include <stddef.h>

/*
 * spec is "auto", "none" or a comma-separated list of providers, each a
 * core name optionally joined with utility names by ';' ("tcp;ofi_rxm").
 * Returns NULL when every name is known; otherwise a pointer into spec at
 * the first unknown (or empty) name, whose length goes to *len.
 */
const char *tw__fabric_unknown_provider(const char *spec, size_t *len);

#endif
