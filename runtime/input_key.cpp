// InputKey (see input_key.h).
#include "runtime/input_key.h"

#include <c10/util/ArrayRef.h>
#include <c10/util/StringUtil.h>

namespace jitckpt {

std::string InputKey::str() const {
  std::string text;
  for (size_t i = 0; i < shapes.size(); ++i) {
    text += (i ? ", " : "") + c10::str(c10::IntArrayRef(shapes[i]));
    if (i < types.size()) text += " " + types[i];
  }
  if (types.size() > shapes.size()) text += "; " + types.back();
  if (!outside.empty()) text += ", " + outside;
  return text;
}

}  // namespace jitckpt
