# Warnings on for our own targets (not for third-party headers, which come in as SYSTEM).
function(jitckpt_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wno-unused-parameter)
endfunction()
