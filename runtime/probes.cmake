# Memory and timing probes: the counting CPU allocator, the CUDA caching-allocator statistics and
# CUDA events (cuda_probe.cpp compiles to nothing without JITCKPT_CUDA), and the random-state guard.
target_sources(jitckpt PRIVATE
  probes/counting_allocator.cpp
  probes/memory_probe.cpp
  probes/cuda_probe.cpp
  probes/state_guard.cpp)
