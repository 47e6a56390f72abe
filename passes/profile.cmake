# Profile pass: per-stage costs (Table 1) measured with the runtime's memory and timing probes.
target_sources(jitckpt PRIVATE profile.cpp)
