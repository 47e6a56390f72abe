target_sources(jitckpt PRIVATE plan.cpp executor.cpp stage_backward.cpp chain_op.cpp)
target_sources(jitckpt PRIVATE replan.cpp)
