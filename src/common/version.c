#include "tensorwire/version.h"

const char *tw_version(void)
{
    return TW_VERSION_STRING;
}
