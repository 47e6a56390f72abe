# -DJITCKPT_SANITIZE=ON: AddressSanitizer + UndefinedBehaviorSanitizer for everything we build.
if(JITCKPT_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
  if(JITCKPT_WITH_TORCH)
    # No -fsanitize=vptr with LibTorch: the check references the typeinfo of every polymorphic
    # class whose members our code reads, and LibTorch 1.13 does not export some of them (typeinfo
    # for c10::DynamicType), so libjitckpt_runtime.so would not even load. GCC has no ignore list
    # to exempt torch's classes alone; the other UBSan checks stay on.
    add_compile_options(-fno-sanitize=vptr)
  endif()
endif()
