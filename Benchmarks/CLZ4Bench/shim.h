#ifndef LOGBOOK_CLZ4_SHIM_H
#define LOGBOOK_CLZ4_SHIM_H
#include <lz4.h>
#include <lz4frame.h>
#include <lz4hc.h>
#endif
