// Call values (see call_values.h).
#include "passes/partition/call_values.h"

#include <string>
#include <unordered_set>

#include "passes/partition/steps.h"
#include "runtime/data_sizes.h"
#include "runtime/value_judgement.h"

namespace jitckpt {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// Whether a value varies beyond the shapes of the call's tensors.
class CallValues : public ValueJudgement {
 public:
  CallValues() : ValueJudgement(true) {}

 private:
  bool judge(const Value* v) override {
    static const std::unordered_set<std::string> metadata = {"prim::device", "prim::dtype",
                                                             "prim::layout"};
    const Node* n = v->node();
    if (n == v->owningGraph()->param_node())  // self, tensors (their shapes are keyed), others
      return v->offset() > 0 && v->type()->kind() != c10::TypeKind::TensorType;
    if (n->kind() == c10::prim::Param) return true;  // a block's: a loop's carried value
    const std::string kind = n->kind().toQualString();
    if (kind == "prim::Constant" || kind == "prim::GetAttr" || readsShapeOnly(n) ||
        metadata.count(kind))
      return false;
    if (tensorReadIntoNumber(n) || n->kind() == c10::prim::PythonOp) return true;
    // an if's or a loop's result: its inputs and what each block returns for it
    if (kind == "prim::If" || kind == "prim::Loop") {
      const size_t returned = v->offset() + (kind == "prim::Loop" ? 1 : 0);
      for (const torch::jit::Block* b : n->blocks())
        if (of(b->outputs().at(returned))) return true;
    } else if (!n->blocks().empty()) {
      return true;
    }
    for (const Value* input : n->inputs())
      if (of(input)) return true;
    return false;
  }
};

}  // namespace

bool variesBeyondShapes(const Value* v) {
  // An optional or a list of tensors made of the call's tensors holds their values (a mask).
  if (v->node()->kind() != c10::prim::GetAttr && partition_steps::containsTensor(v->type()))
    return true;
  return CallValues().of(v);
}

}  // namespace jitckpt
