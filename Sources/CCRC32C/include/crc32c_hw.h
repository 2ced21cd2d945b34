#ifndef LOGBOOK_CRC32C_HW_H
#define LOGBOOK_CRC32C_HW_H
#include <stddef.h>
#include <stdint.h>

/// Nonzero when this CPU has a CRC-32C instruction this build can use (SSE 4.2 on x86-64).
int logbook_crc32c_hw_available(void);

/// Continues a CRC-32C register (pre-inverted, as in the table-driven code) over `count` bytes
/// with the CPU's instruction. Call only when logbook_crc32c_hw_available() is nonzero.
uint32_t logbook_crc32c_hw_update(uint32_t crc, const void *bytes, size_t count);

#endif
