target_sources(jitckpt PRIVATE rewrite.cpp)
