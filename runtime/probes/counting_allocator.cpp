// Counting CPU allocator (see counting_allocator.h): forwards to the previous CPU allocator and
// remembers each allocation's size, so that the free is counted too. Allocations keep the raw
// form (context == data, one deleter) when the inner allocator has it, because oneDNN uses the
// raw interface; otherwise the inner DataPtr is wrapped in a context that carries the size.
#include "runtime/probes/counting_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <optional>

namespace jitckpt::probes {
namespace {

// Owns the inner allocator's DataPtr; deleting it frees the memory through the inner deleter.
struct CountedContext {
  c10::DataPtr inner;
  int64_t nbytes;
};

}  // namespace

CountingAllocator& CountingAllocator::instance() {
  static auto* allocator = new CountingAllocator();  // never destroyed, see the header
  return *allocator;
}

void CountingAllocator::onAllocate(int64_t nbytes) {
  allocations_.fetch_add(1);
  const int64_t now = current_.fetch_add(nbytes) + nbytes;
  int64_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
}

void CountingAllocator::onFree(int64_t nbytes) {
  frees_.fetch_add(1);
  current_.fetch_sub(nbytes);
}

int64_t CountingAllocator::countedBytes(int64_t nbytes) const {
  const int64_t block = block_bytes_.load();
  return (nbytes + block - 1) / block * block;
}

void CountingAllocator::setBlockBytes(int64_t bytes) {
  TORCH_CHECK(bytes >= 1, "counting allocator: a block of ", bytes, " bytes; give 1 or more");
  block_bytes_.store(bytes);
}

int64_t CountingAllocator::resetPeak() {
  const int64_t now = current_.load();
  const int64_t dropped = peak_.exchange(now);
  int64_t folded = folded_peak_.load();
  while (dropped > folded && !folded_peak_.compare_exchange_weak(folded, dropped)) {
  }
  return now;
}

int64_t CountingAllocator::resetOuterPeak() {
  const int64_t now = current_.load();
  folded_peak_.store(now);
  peak_.store(now);
  return now;
}

void CountingAllocator::deleteWithContext(void* context) {
  auto* counted = static_cast<CountedContext*>(context);
  instance().onFree(counted->nbytes);
  delete counted;  // frees the memory through the inner allocator's deleter
}

void CountingAllocator::deleteRaw(void* data) {
  CountingAllocator& self = instance();
  std::optional<RawEntry> entry;
  {
    std::lock_guard<std::mutex> lock(self.raw_mutex_);
    auto it = self.raw_.find(data);
    if (it != self.raw_.end()) {
      entry = it->second;
      self.raw_.erase(it);
    }
  }
  if (entry) {
    self.onFree(entry->nbytes);
    entry->inner_deleter(data);
    return;
  }
  // Raw memory from before installation, freed through this allocator's raw_deleter().
  c10::Allocator* inner = self.inner_.load();
  const c10::DeleterFnPtr deleter = inner != nullptr ? inner->raw_deleter() : nullptr;
  TORCH_CHECK(deleter != nullptr, "counting allocator: cannot free raw memory it did not allocate");
  deleter(data);
}

c10::DeleterFnPtr CountingAllocator::raw_deleter() const {
  c10::Allocator* inner = inner_.load();
  if (inner == nullptr) inner = c10::GetDefaultCPUAllocator();
  return inner->raw_deleter() != nullptr ? &CountingAllocator::deleteRaw : nullptr;
}

c10::DataPtr CountingAllocator::allocate(size_t nbytes) JITCKPT_ALLOCATE_CONST {
  c10::Allocator* inner = inner_.load();
  if (inner == nullptr) inner = c10::GetDefaultCPUAllocator();
  auto* self = const_cast<CountingAllocator*>(this);
  if (nbytes > 0 && fail_countdown_.load() > 0 && self->fail_countdown_.fetch_sub(1) == 1) {
    TORCH_CHECK(false, "CPU out of memory: the counting allocator failed an allocation of ", nbytes,
                " bytes on request (failAllocation, for tests)");
  }
  c10::DataPtr data = inner->allocate(nbytes);
  if (nbytes == 0) return data;  // nothing to count; the default allocator returns nullptr
  void* address = const_cast<void*>(static_cast<const void*>(data.get()));
  const c10::Device device = data.device();
  const int64_t size = countedBytes(static_cast<int64_t>(nbytes));
  // allocate() is const on LibTorch < 2.3; the counters are atomics, the map has its mutex.
  const c10::DeleterFnPtr inner_raw = inner->raw_deleter();
  if (inner_raw != nullptr && data.get_context() == address && data.get_deleter() == inner_raw) {
    data.release_context();  // from here on deleteRaw frees it through inner_raw
    int64_t stale = 0;       // an entry whose free went past this allocator (see the header)
    {
      std::lock_guard<std::mutex> lock(raw_mutex_);
      auto [it, inserted] = raw_.try_emplace(address, RawEntry{size, inner_raw});
      if (!inserted) {
        stale = it->second.nbytes;
        it->second = RawEntry{size, inner_raw};
      }
    }
    if (stale != 0) self->onFree(stale);
    self->onAllocate(size);
    return c10::DataPtr(address, address, &CountingAllocator::deleteRaw, device);
  }
  auto* context = new CountedContext{std::move(data), size};
  self->onAllocate(size);
  return c10::DataPtr(address, context, &CountingAllocator::deleteWithContext, device);
}

#if JITCKPT_ALLOCATOR_HAS_COPY_DATA
void CountingAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}
#endif

CountingAllocatorGuard::CountingAllocatorGuard() {
  CountingAllocator& counting = CountingAllocator::instance();
  previous_ = c10::GetCPUAllocator();
  if (previous_ == &counting) return;  // nested: the outer guard restores
  counting.inner_.store(previous_);
  // SetAllocator ignores an allocator of lower priority than the installed one; the priorities
  // are not readable, so try the default first and the highest if that was ignored.
  for (uint8_t priority : {uint8_t{0}, uint8_t{255}}) {
    c10::SetCPUAllocator(&counting, priority);
    if (c10::GetCPUAllocator() == &counting) {
      priority_ = priority;
      installed_here_ = true;
      return;
    }
  }
  TORCH_CHECK(false, "could not install the counting CPU allocator: c10::SetCPUAllocator ",
              "ignored it (another allocator holds a higher priority)");
}

CountingAllocatorGuard::~CountingAllocatorGuard() {
  if (installed_here_) c10::SetCPUAllocator(previous_, priority_);
}

}  // namespace jitckpt::probes
