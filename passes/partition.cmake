target_sources(jitckpt PRIVATE partition.cpp print_chain.cpp)
