// jitckpt::forward_begins (see forward_start.h).
#include "runtime/forward_start.h"

#include <c10/core/GradMode.h>

#include <algorithm>
#include <optional>
#include <unordered_set>
#include <utility>

#include "runtime/probes/memory_probe.h"

namespace jitckpt {

struct ForwardStart {
  c10::Device device{c10::kCPU};
  int64_t made_bytes = 0;  // allocated since the forward began, and live as the chain starts
  std::unordered_set<const c10::StorageImpl*> argument_storages;  // compared, never dereferenced
};

namespace {

struct OpenStart {
  ForwardStart start;
  std::unique_ptr<probes::MemoryProbe> probe;  // on the CPU it counts while it exists
  int64_t base = 0;
};

thread_local std::unique_ptr<OpenStart> open_start;

}  // namespace

void beginForward(const std::vector<c10::IValue>& arguments) {
  open_start.reset();  // a forward that stopped before its chain: its probe ends here
  if (!c10::GradMode::is_enabled()) return;
  auto open = std::make_unique<OpenStart>();
  std::optional<c10::Device> device;
  for (const c10::IValue& argument : arguments) {
    argument.visit([&](const c10::IValue& inner) {  // lists, tuples, dicts too
      if (!inner.isTensor()) return false;
      const at::Tensor& t = inner.toTensor();
      if (!t.defined() || !t.has_storage()) return false;
      if (!device || (device->is_cpu() && !t.device().is_cpu())) device = t.device();
      open->start.argument_storages.insert(t.storage().unsafeGetStorageImpl());
      return false;
    });
  }
  open->start.device = device.value_or(c10::Device(c10::kCPU));
  if (!open->start.device.is_cpu() && !open->start.device.is_cuda()) return;  // not measured
  try {
    open->probe = probes::makeMemoryProbe(open->start.device);
  } catch (const c10::Error&) {
    return;  // a device jitckpt cannot measure: the plan counts nothing more, as before
  }
  open->base = open->probe->currentBytes();
  open_start = std::move(open);
}

std::shared_ptr<const ForwardStart> takeForwardStart() {
  std::unique_ptr<OpenStart> open = std::move(open_start);
  if (!open) return nullptr;
  open->start.made_bytes = open->probe->currentBytes() - open->base;
  return std::make_shared<const ForwardStart>(std::move(open->start));
}

int64_t heldBeforeChainBytes(const ForwardStart* start, const ChainStages& stages,
                             const ChainArguments& arguments) {
  if (start == nullptr) return 0;
  Tensors made;
  for (const at::Tensor& t : heldFromStart(stages, arguments)) {
    if (t.defined() && t.has_storage() && t.device() == start->device &&
        !start->argument_storages.count(t.storage().unsafeGetStorageImpl()))
      made.push_back(t);
  }
  return std::max<int64_t>(0, start->made_bytes - probes::storageBytes(made));
}

}  // namespace jitckpt
