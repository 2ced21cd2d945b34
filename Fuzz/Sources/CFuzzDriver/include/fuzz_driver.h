#ifndef LOGBOOK_FUZZ_DRIVER_H
#define LOGBOOK_FUZZ_DRIVER_H
#include <stddef.h>
#include <stdint.h>

/// Runs libFuzzer's driver on `callback`: the entry point of a fuzz target built as a SwiftPM
/// executable (SwiftPM names its entry `<Target>_main`, so libFuzzer's own `main` is not used).
int logbook_fuzz_main(int argc, char **argv, int (*callback)(const uint8_t *data, size_t size));

#endif
