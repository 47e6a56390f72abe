// Counting CPU allocator: wraps the CPU allocator that was installed before it and counts the
// bytes of every live CPU allocation, exactly and deterministically (requested sizes, not
// malloc's rounding; tests may have each rounded up to a block, as CUDA's caching allocator does).
// Installed with c10::SetCPUAllocator by CountingAllocatorGuard, which restores the previous
// allocator when it goes out of scope.
//
// What it sees: everything that goes through c10::GetCPUAllocator() (at::empty and every ATen CPU
// kernel's outputs and temporaries, autograd's saved tensors and gradients). What it does not
// see: memory that libraries allocate themselves (oneDNN/MKL scratch buffers, the interpreter's
// own objects, std::vector in C++ code).
#pragma once

#include <c10/core/Allocator.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "runtime/compat.h"

namespace jitckpt::probes {

class CountingAllocator final : public c10::Allocator {
 public:
  // The one instance. It is never destroyed: storages keep a pointer to the allocator that made
  // them (resize_ allocates through it), possibly long after the guard has uninstalled it.
  static CountingAllocator& instance();

  c10::DataPtr allocate(size_t nbytes) JITCKPT_ALLOCATE_CONST override;
  // Supports the raw interface (raw_allocate/raw_deallocate) whenever the inner allocator does:
  // oneDNN (ideep) allocates its buffers through it, and frees through whatever CPU allocator is
  // installed at that moment, including memory it got before the guard installed this one.
  c10::DeleterFnPtr raw_deleter() const override;
#if JITCKPT_ALLOCATOR_HAS_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override;
#endif

  int64_t currentBytes() const { return current_.load(); }  // bytes of live allocations
  int64_t peakBytes() const { return peak_.load(); }        // max of currentBytes since resetPeak
  // The peak a caller outside jitckpt measures (jitckpt.cpu_memory): the max of currentBytes since
  // resetOuterPeak, through the resets of the profiler that a first training call runs inside it.
  int64_t outerPeakBytes() const { return std::max(peak_.load(), folded_peak_.load()); }
  int64_t resetOuterPeak();
  int64_t allocations() const { return allocations_.load(); }  // allocate calls with nbytes > 0
  int64_t frees() const { return frees_.load(); }              // of those, how many were freed
  // Sets the peak to the current live bytes (keeping the peak so far for outerPeakBytes); returns
  // the current live bytes.
  int64_t resetPeak();
  // For tests of out-of-memory handling: the n-th allocation from now (n >= 1, counting those
  // with nbytes > 0) throws a c10::Error instead of allocating; 0 cancels. Once only.
  void failAllocation(int64_t n) { fail_countdown_.store(n); }

  // What an allocation of nbytes counts: nbytes rounded up to whole blocks (1 byte unless set).
  int64_t countedBytes(int64_t nbytes) const;
  // For tests: count each allocation in whole blocks of `bytes` (512: as CUDA's caching allocator
  // does), so that CPU runs check the sizes that CUDA's would. Allocations already live keep the
  // count they were made with.
  void setBlockBytes(int64_t bytes);

  // The allocator that allocate() forwards to (the one installed before the first guard).
  c10::Allocator* inner() const { return inner_.load(); }

 private:
  friend class CountingAllocatorGuard;
  CountingAllocator() = default;
  static void deleteWithContext(void* context);
  static void deleteRaw(void* data);
  void onAllocate(int64_t nbytes);
  void onFree(int64_t nbytes);

  std::atomic<c10::Allocator*> inner_{nullptr};
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> folded_peak_{0};  // the largest peak resetPeak dropped since resetOuterPeak
  std::atomic<int64_t> allocations_{0};
  std::atomic<int64_t> frees_{0};
  std::atomic<int64_t> fail_countdown_{0};
  std::atomic<int64_t> block_bytes_{1};
  // Raw allocations (context == data): their sizes and the inner deleter, by address.
  struct RawEntry {
    int64_t nbytes;
    c10::DeleterFnPtr inner_deleter;
  };
  mutable std::mutex raw_mutex_;
  mutable std::unordered_map<void*, RawEntry> raw_;
};

// Installs the counting allocator as the CPU allocator for its lifetime and restores the
// previous one afterwards. Guards nest: an inner guard finds the counting allocator already
// installed and leaves it. Memory allocated before installation keeps its own deleter and is
// freed by the allocator that made it, uncounted. (One exception, rare: memory that the raw
// interface got through this allocator and frees after the guard has gone, through the previous
// allocator's raw deleter, stays counted; its entry is dropped when the address is reused.) Not for
// concurrent use from several threads (c10::SetAllocator is not thread-safe); counting itself is.
class CountingAllocatorGuard {
 public:
  CountingAllocatorGuard();
  ~CountingAllocatorGuard();
  CountingAllocatorGuard(const CountingAllocatorGuard&) = delete;
  CountingAllocatorGuard& operator=(const CountingAllocatorGuard&) = delete;

  CountingAllocator& allocator() { return CountingAllocator::instance(); }

 private:
  c10::Allocator* previous_ = nullptr;
  uint8_t priority_ = 0;
  bool installed_here_ = false;
};

}  // namespace jitckpt::probes
