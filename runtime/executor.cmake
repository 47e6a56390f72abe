target_sources(jitckpt PRIVATE plan.cpp executor.cpp chain_op.cpp)
target_sources(jitckpt PRIVATE replan.cpp)
