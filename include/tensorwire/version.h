/* tensorwire version and protocol version. */
#ifndef TENSORWIRE_VERSION_H
#define TENSORWIRE_VERSION_H

#include "tensorwire/error.h"

#define TW_VERSION_MAJOR 0
#define TW_VERSION_MINOR 1
#define TW_VERSION_PATCH 0
#define TW_VERSION_STRING "0.1.0"
#define TW_PROTOCOL_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif
/* Library version string, e.g. "0.1.0"; static storage. */
TW_EXTERN const char *tw_version(void);
#ifdef __cplusplus
}
#endif
#endif
