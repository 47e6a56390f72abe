// Call values (see call_values.h).
#include "passes/partition/call_values.h"

#include <string>
#include <unordered_map>
#include <unordered_set>

#include "passes/partition/steps.h"
#include "runtime/data_sizes.h"

namespace jitckpt {
namespace {

using torch::jit::Node;
using torch::jit::Value;

class CallValues {
 public:
  bool varies(const Value* v) {
    const auto found = memo_.find(v);
    if (found != memo_.end()) return found->second;
    memo_[v] = true;  // (a graph has no cycles; this bounds the walk all the same)
    return memo_[v] = compute(v);
  }

 private:
  bool compute(const Value* v) {
    static const std::unordered_set<std::string> sizes = {
        "aten::size",      "aten::dim",    "aten::numel", "aten::sym_size",
        "aten::sym_numel", "prim::device", "prim::dtype", "prim::layout"};
    const Node* n = v->node();
    if (n == v->owningGraph()->param_node())  // self, tensors (their shapes are keyed), others
      return v->offset() > 0 && v->type()->kind() != c10::TypeKind::TensorType;
    if (n->kind() == c10::prim::Param) return true;  // a block's: a loop's carried value
    const std::string kind = n->kind().toQualString();
    if (kind == "prim::Constant" || kind == "prim::GetAttr" || sizes.count(kind)) return false;
    if (tensorReadIntoNumber(n)) return true;
    // an if's or a loop's result: its inputs and what each block returns for it
    if (kind == "prim::If" || kind == "prim::Loop") {
      const size_t returned = v->offset() + (kind == "prim::Loop" ? 1 : 0);
      for (const torch::jit::Block* b : n->blocks())
        if (varies(b->outputs().at(returned))) return true;
    } else if (!n->blocks().empty()) {
      return true;
    }
    for (const Value* input : n->inputs())
      if (varies(input)) return true;
    return false;
  }

  std::unordered_map<const Value*, bool> memo_;
};

}  // namespace

bool variesBeyondShapes(const Value* v) {
  // An optional or a list of tensors made of the call's tensors holds their values (a mask).
  if (v->node()->kind() != c10::prim::GetAttr && partition_steps::containsTensor(v->type()))
    return true;
  return CallValues().varies(v);
}

}  // namespace jitckpt
