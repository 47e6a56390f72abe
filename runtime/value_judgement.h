// A yes-or-no judgement of a graph's values, made once per value: takes a value; returns what
// `judge` (the subclass's rule, which may ask about other values through `of`) says of it. The
// walks over a value's producers that decide sizes by data, model state and call values share it.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <unordered_map>

namespace jitckpt {

class ValueJudgement {
 public:
  // `while_judged`: the answer for a value asked about while it is being judged (a graph has no
  // cycles; this bounds the walk all the same).
  explicit ValueJudgement(bool while_judged) : while_judged_(while_judged) {}
  virtual ~ValueJudgement() = default;

  bool of(const torch::jit::Value* v) {
    const auto found = memo_.find(v);
    if (found != memo_.end()) return found->second;
    memo_[v] = while_judged_;
    return memo_[v] = judge(v);
  }

 protected:
  virtual bool judge(const torch::jit::Value* v) = 0;

 private:
  bool while_judged_;
  std::unordered_map<const torch::jit::Value*, bool> memo_;
};

}  // namespace jitckpt
