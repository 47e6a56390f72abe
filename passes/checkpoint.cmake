target_sources(jitckpt PRIVATE checkpoint.cpp)
