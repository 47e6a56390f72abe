// Small named shims over the two supported libtorch lines: Debian's 1.13 (CPU) and the 2.x wheels.
#pragma once

#include <torch/version.h>

// c10::Allocator: `allocate` is const up to 2.2 and not from 2.3 on, when the pure virtual
// `copy_data` appeared.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define JITCKPT_ALLOCATE_CONST
#define JITCKPT_ALLOCATOR_HAS_COPY_DATA 1
#else
#define JITCKPT_ALLOCATE_CONST const
#define JITCKPT_ALLOCATOR_HAS_COPY_DATA 0
#endif
