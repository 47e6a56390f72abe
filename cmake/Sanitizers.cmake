# -DJITCKPT_SANITIZE=ON: AddressSanitizer + UndefinedBehaviorSanitizer for everything we build.
if(JITCKPT_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
