// Storage sharing, for the profile pass: takes the tensors a stage reads and returns, and says
// which storages they share, as the solver's sizes count them.
//   sharedStorageBytes  of those behind a stage's outputs, the bytes its inputs hold too
//   SpanTracker         the activations' spans (solver::Span), fed a^0, a^1, ... in order
//   GradientSources     which storage each gradient B(l) returns lies in: one handed to B (a
//                       gradient passed on, or a view of one) or one B made
//   heldGradients       from those, wd and wd_handed: what delta^{l-1} keeps alive in a step (a
//                       slice handed on from B to B holds the whole it is a slice of), and how
//                       much of it delta^l holds too
#pragma once

#include <c10/core/StorageImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/chain_arguments.h"
#include "runtime/probes/memory_probe.h"
#include "solver/costs.h"

namespace jitckpt {

using probes::storageBytes;  // bytes of the distinct storages behind some tensors
int64_t sharedStorageBytes(const Tensors& outputs, const Tensors& inputs);

// A storage that leaves the activations and comes back starts a new span (never shared).
class SpanTracker {
 public:
  void add(int l, const Tensors& activation);
  std::vector<solver::Span> spans();  // once every activation has been added

 private:
  struct Held {
    int first;
    int64_t bytes;
  };
  void end(const Held& held, int last);
  std::unordered_map<const void*, Held> held_;
  std::map<std::pair<int, int>, int64_t> spans_;
  int last_ = 0;
};

// Per input gradient of one B: the first output gradient whose storage it shares (handed_on_from),
// or the storage B made that it lies in (made, an index into made_bytes); -1 where neither
// (undefined). own_bytes: what the gradient takes as a tensor of its own (0 where undefined), for
// one handed on from an output gradient that a step does not hand B, or hands as a slice that B
// cannot add into (heldGradients). written: handed on, and B wrote into it (autograd added a use
// of the stage's into it in place). view: a view of a storage that another tensor holds too (a
// view of the gradient handed, or of one B made), where a gradient handed on as the very tensor
// handed is a view where that one is. Empty: none is.
struct GradientSources {
  std::vector<int> handed_on_from;
  std::vector<int> made;
  std::vector<int64_t> made_bytes;
  std::vector<int64_t> own_bytes;
  std::vector<bool> written;
  std::vector<bool> view;
};

// The bytes of the storages B made.
int64_t madeBytes(const GradientSources& sources);

// Remembers the storages of the gradients handed to a B, weakly: B still frees each once read,
// and no storage made meanwhile can take its place.
class HandedGradients {
 public:
  explicit HandedGradients(const Tensors& output_grads);
  GradientSources sourcesOf(const Tensors& input_grads) const;

 private:
  std::vector<const void*> keys_;  // per output gradient: its storage, or null
  std::vector<int64_t> versions_;  // per output gradient: its version when handed
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> storages_;  // keeps each key unique
  std::vector<const void*> tensor_keys_;  // per output gradient: the tensor itself, or null
  std::vector<c10::weak_intrusive_ptr<c10::TensorImpl>> tensors_;  // keeps each one unique
};

// The gradients as a step holds them, from each stage's sources (stages[l-1] for stage l),
// following those handed on from the chain's output gradients (output_grad_bytes, one per output,
// 0 where none) down to delta^0: wd[l] for l = 0..L-1, and handed[l] for l = 1..L (entry 0 is 0),
// the bytes of the storages that delta^{l-1} and delta^l both hold (solver::Costs::wd_handed).
// A B is measured with a gradient for every output that requires grad; where a step hands it
// none (the next stage reads that output for its shape only), a gradient measured as handed on
// from it (added in place into the one handed: PyTorch 2.x's engine does) is made by B, its
// own_bytes. Likewise where B wrote into a gradient handed on that a step hands as a view (a
// transposed gradient, a slice of a cat's), or as a storage that other gradients hold too:
// PyTorch 2.x's engine adds into a gradient in place only where it holds its storage alone, and
// otherwise makes a new tensor of the gradient's own size.
struct HeldGradients {
  std::vector<int64_t> wd, handed;
};
HeldGradients heldGradients(const std::vector<GradientSources>& stages,
                            const std::vector<int64_t>& output_grad_bytes);

}  // namespace jitckpt
