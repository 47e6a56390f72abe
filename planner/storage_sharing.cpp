// Storage sharing for the profile pass (see storage_sharing.h).
#include "planner/storage_sharing.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <numeric>
#include <unordered_set>

#include "runtime/probes/memory_probe.h"

namespace jitckpt {
namespace {
// What the storage takes from its device's allocator, as the memory probe counts it.
int64_t allocatedBytes(const c10::Storage& storage) {
  return probes::allocatedBytes(storage.device(), static_cast<int64_t>(storage.nbytes()));
}
}  // namespace

int64_t sharedStorageBytes(const Tensors& outputs, const Tensors& inputs) {
  std::unordered_set<const void*> held;
  for (const auto& t : inputs) {
    if (t.defined() && t.has_storage()) held.insert(t.storage().unsafeGetStorageImpl());
  }
  Tensors shared;
  for (const auto& t : outputs) {
    if (t.defined() && t.has_storage() && held.count(t.storage().unsafeGetStorageImpl()))
      shared.push_back(t);
  }
  return storageBytes(shared);
}

void SpanTracker::add(int l, const Tensors& activation) {
  std::unordered_map<const void*, Held> next;
  for (const auto& t : activation) {
    if (!t.defined() || !t.has_storage()) continue;
    const void* key = t.storage().unsafeGetStorageImpl();
    if (next.count(key)) continue;
    auto found = held_.find(key);
    next[key] = found != held_.end() ? found->second : Held{l, allocatedBytes(t.storage())};
  }
  for (const auto& [key, held] : held_) {
    if (!next.count(key)) end(held, l - 1);
  }
  held_ = std::move(next);
  last_ = l;
}

std::vector<solver::Span> SpanTracker::spans() {
  for (const auto& [key, held] : held_) end(held, last_);
  held_.clear();
  std::vector<solver::Span> out;
  for (const auto& [range, bytes] : spans_) out.push_back({range.first, range.second, bytes});
  return out;
}

void SpanTracker::end(const Held& held, int last) {
  if (last > held.first) spans_[{held.first, last}] += held.bytes;
}

namespace {
// Inference tensors have no version counter.
int64_t versionOf(const at::Tensor& t) {
  return t.defined() && !t.is_inference() ? static_cast<int64_t>(t._version()) : 0;
}
}  // namespace

HandedGradients::HandedGradients(const Tensors& output_grads) {
  for (const auto& t : output_grads) {
    const bool held = t.defined() && t.has_storage();
    keys_.push_back(held ? t.storage().unsafeGetStorageImpl() : nullptr);
    versions_.push_back(versionOf(t));
    tensor_keys_.push_back(t.defined() ? t.unsafeGetTensorImpl() : nullptr);
    if (t.defined()) tensors_.emplace_back(t.getIntrusivePtr());
    if (held) storages_.push_back(t.storage().getWeakStorageImpl());
  }
}

GradientSources HandedGradients::sourcesOf(const Tensors& input_grads) const {
  GradientSources sources;
  std::unordered_map<const void*, int> made;
  for (const auto& t : input_grads) {
    int from = -1, index = -1;
    if (t.defined() && t.has_storage()) {
      const void* key = t.storage().unsafeGetStorageImpl();
      for (size_t m = 0; m < keys_.size() && from < 0; ++m) {
        if (keys_[m] == key) from = static_cast<int>(m);
      }
      if (from < 0) {
        auto [it, added] = made.emplace(key, static_cast<int>(sources.made_bytes.size()));
        if (added) sources.made_bytes.push_back(allocatedBytes(t.storage()));
        index = it->second;
      }
    }
    sources.handed_on_from.push_back(from);
    // A gradient handed on shares the version counter of the one handed (it is that tensor, or a
    // view or detached alias of it); one that does not reads as written, the safe side.
    sources.written.push_back(from >= 0 && versionOf(t) != versions_[static_cast<size_t>(from)]);
    const bool same_tensor =
        from >= 0 && t.unsafeGetTensorImpl() == tensor_keys_[static_cast<size_t>(from)];
    sources.view.push_back(from >= 0 ? !same_tensor : t.defined() && t.is_view());
    sources.made.push_back(index);
    sources.own_bytes.push_back(
        t.defined()
            ? probes::allocatedBytes(t.device(), static_cast<int64_t>(t.numel()) * t.element_size())
            : 0);
  }
  return sources;
}

int64_t madeBytes(const GradientSources& sources) {
  return std::accumulate(sources.made_bytes.begin(), sources.made_bytes.end(), int64_t{0});
}

namespace {
// One gradient of a delta as a step holds it.
struct HeldGradient {
  int storage = -1;   // into the storages' bytes; -1: none
  int64_t own = 0;    // its bytes as a tensor of its own
  bool view = false;  // a view in a step
};
using HeldDelta = std::vector<HeldGradient>;

int64_t distinctBytes(const HeldDelta& delta, const std::vector<int64_t>& bytes_of,
                      const HeldDelta* within = nullptr) {
  std::unordered_set<int> seen;
  int64_t bytes = 0;
  for (const HeldGradient& g : delta) {
    if (g.storage < 0 || !seen.insert(g.storage).second) continue;
    if (within && std::none_of(within->begin(), within->end(),
                               [&](const HeldGradient& o) { return o.storage == g.storage; }))
      continue;
    bytes += bytes_of[static_cast<size_t>(g.storage)];
  }
  return bytes;
}

// Whether PyTorch 2.x's engine adds into `g` in place: only where it holds its storage alone, so
// not a view, nor a slice of a storage that other gradients of the delta hold or that is larger.
bool addableInPlace(const HeldGradient& g, const HeldDelta& delta,
                    const std::vector<int64_t>& bytes_of) {
  const auto holders = std::count_if(delta.begin(), delta.end(),
                                     [&](const HeldGradient& o) { return o.storage == g.storage; });
  return !g.view && holders == 1 && bytes_of[static_cast<size_t>(g.storage)] <= g.own;
}

// Gradient i of delta^{l-1} from B(l)'s sources `s` and delta^l as a step holds it; a storage it
// makes anew goes into bytes_of (B's own storages start at first_made). Where B wrote into a
// handed gradient that autograd cannot add into in place, the sum is a new tensor of the handed
// gradient's size, and the gradients B hands on as views of it (a cat's slices) lie in that one
// (`summed_anew`: per output gradient, its new storage).
HeldGradient heldInputGradient(const GradientSources& s, size_t i, int first_made,
                               const HeldDelta& delta, std::vector<int64_t>& bytes_of, size_t l,
                               std::unordered_map<int, int>& summed_anew) {
  HeldGradient g;
  g.own = i < s.own_bytes.size() ? s.own_bytes[i] : 0;
  const bool view = i < s.view.size() && s.view[i];
  const int from = s.handed_on_from[i];
  if (from < 0) {
    if (s.made[i] >= 0) g.storage = first_made + s.made[i];
    g.view = view;
    return g;
  }
  TORCH_INTERNAL_ASSERT(static_cast<size_t>(from) < delta.size(), "jitckpt: B(", l,
                        ") handed on the gradient of output ", from, ", which stage ", l,
                        " does not have");
  const HeldGradient& handed = delta[static_cast<size_t>(from)];
  const bool written = i < s.written.size() && s.written[i];
  if (handed.storage >= 0 && (!written || addableInPlace(handed, delta, bytes_of))) {
    g.storage = handed.storage;
    g.view = view || handed.view;
  } else if (handed.storage >= 0 && view) {  // a view of the sum, made out of place
    auto [it, added] = summed_anew.emplace(from, static_cast<int>(bytes_of.size()));
    if (added) bytes_of.push_back(std::max(handed.own, g.own));
    g.storage = it->second;
    g.view = true;
  } else if (g.own > 0) {  // none handed there, or added into out of place: B's own
    g.storage = static_cast<int>(bytes_of.size());
    bytes_of.push_back(g.own);
  }
  return g;
}
}  // namespace

HeldGradients heldGradients(const std::vector<GradientSources>& stages,
                            const std::vector<int64_t>& output_grad_bytes) {
  std::vector<int64_t> bytes_of;  // per storage, numbered as met from delta^L down
  HeldDelta delta;                // the current delta, from delta^L down
  for (int64_t bytes : output_grad_bytes) {
    delta.push_back({bytes > 0 ? static_cast<int>(bytes_of.size()) : -1, bytes, false});
    if (bytes > 0) bytes_of.push_back(bytes);
  }
  HeldGradients held{std::vector<int64_t>(stages.size(), 0),
                     std::vector<int64_t>(stages.size() + 1, 0)};
  for (size_t l = stages.size(); l >= 1; --l) {
    const GradientSources& s = stages[l - 1];
    const int first_made = static_cast<int>(bytes_of.size());
    bytes_of.insert(bytes_of.end(), s.made_bytes.begin(), s.made_bytes.end());
    HeldDelta next;
    std::unordered_map<int, int> summed_anew;
    for (size_t i = 0; i < s.handed_on_from.size(); ++i)
      next.push_back(heldInputGradient(s, i, first_made, delta, bytes_of, l, summed_anew));
    held.wd[l - 1] = distinctBytes(next, bytes_of);
    held.handed[l] = distinctBytes(next, bytes_of, &delta);
    delta = std::move(next);
  }
  return held;
}

}  // namespace jitckpt
