// The prefetch hint is a static inline function in include/prefetch.h; SwiftPM builds a C
// target from at least one source file.
#include "prefetch.h"
