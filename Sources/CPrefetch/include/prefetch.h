#ifndef LOGBOOK_PREFETCH_H
#define LOGBOOK_PREFETCH_H

/// Asks the CPU to bring the cache line at `p` in, for writing, without waiting for it. Never
/// faults, whatever `p` is: a hint only.
static inline void logbook_prefetch(const void *p) {
    __builtin_prefetch(p, 1, 3);
}

#endif
