target_sources(jitckpt PRIVATE partition.cpp partition_run.cpp print_chain.cpp)
