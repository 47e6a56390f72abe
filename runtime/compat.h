// Small named shims over the supported libtorch lines: Debian's 1.13 (CPU), and 2.x (2.6 and 2.14
// from Debian, the 2.11 wheels with CUDA).
#pragma once

#include <torch/version.h>

// c10::Allocator: `allocate` is const up to 2.2 and not from 2.3 on, when the pure virtual
// `copy_data` appeared.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define JITCKPT_ALLOCATE_CONST
#define JITCKPT_ALLOCATOR_HAS_COPY_DATA 1
#else
#define JITCKPT_ALLOCATE_CONST const
#define JITCKPT_ALLOCATOR_HAS_COPY_DATA 0
#endif

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/function.h>

#include <memory>
#include <type_traits>
#include <utility>

namespace jitckpt {

// Who owns an autograd node: std::shared_ptr up to 2.13, c10::intrusive_ptr from 2.14 (read off
// the type of Edge::function). makeNode<T>(args...) makes a node the engine can hold; WeakNodePtr
// observes one without keeping it alive.
using NodePtr = decltype(torch::autograd::Edge::function);
namespace compat_detail {
template <class Owner>
struct WeakOf;
template <class T>
struct WeakOf<std::shared_ptr<T>> {
  using type = std::weak_ptr<T>;
};
template <class T>
struct WeakOf<c10::intrusive_ptr<T>> {
  using type = c10::weak_intrusive_ptr<T>;
};
}  // namespace compat_detail
using WeakNodePtr = compat_detail::WeakOf<NodePtr>::type;

template <class T, class... Args>
auto makeNode(Args&&... args) {
  static_assert(std::is_base_of_v<torch::autograd::Node, T>, "makeNode makes autograd nodes");
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<torch::autograd::Node>>)
    return std::make_shared<T>(std::forward<Args>(args)...);
  else
    return c10::make_intrusive<T>(std::forward<Args>(args)...);
}

// Whether autograd node `n` has hooks on the gradients it receives: tensor hooks and retain_grad()
// of the tensors it made. PyTorch 1.13 keeps them among the node's pre-hooks, 2.x apart.
inline bool hasGradientHooks(torch::autograd::Node& n) {
#if TORCH_VERSION_MAJOR >= 2
  return !n.pre_hooks().empty() || !n.tensor_pre_hooks().empty() || !n.retains_grad_hooks().empty();
#else
  return !n.pre_hooks().empty();
#endif
}

// PyTorch 2.x's matmul folds a 3-D operand into an mm, or runs a bmm, by whether the 2-D operand
// requires grad (runtime/weight_operands.h); 1.13's does not look.
constexpr bool kMatmulFoldsByRequiresGrad = TORCH_VERSION_MAJOR >= 2;

// The calling thread's autocast state (torch.autocast on the CPU and CUDA). 2.4 replaced the
// per-device functions of 1.13 by functions that take the device type.
struct AutocastState {
  bool cpu = false, cuda = false, cache = true;
  c10::ScalarType cpu_dtype = c10::ScalarType::BFloat16, cuda_dtype = c10::ScalarType::Half;

  static AutocastState current() {
    AutocastState s;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    s.cpu = at::autocast::is_autocast_enabled(at::kCPU);
    s.cuda = at::autocast::is_autocast_enabled(at::kCUDA);
    s.cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
    s.cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
#else
    s.cpu = at::autocast::is_cpu_enabled();
    s.cuda = at::autocast::is_enabled();
    s.cpu_dtype = at::autocast::get_autocast_cpu_dtype();
    s.cuda_dtype = at::autocast::get_autocast_gpu_dtype();
#endif
    s.cache = at::autocast::is_autocast_cache_enabled();
    return s;
  }
  void makeCurrent() const {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(at::kCPU, cpu);
    at::autocast::set_autocast_enabled(at::kCUDA, cuda);
    at::autocast::set_autocast_dtype(at::kCPU, cpu_dtype);
    at::autocast::set_autocast_dtype(at::kCUDA, cuda_dtype);
#else
    at::autocast::set_cpu_enabled(cpu);
    at::autocast::set_enabled(cuda);
    at::autocast::set_autocast_cpu_dtype(cpu_dtype);
    at::autocast::set_autocast_gpu_dtype(cuda_dtype);
#endif
    at::autocast::set_autocast_cache_enabled(cache);
  }
  bool sameCasts(const AutocastState& o) const {
    return cpu == o.cpu && cuda == o.cuda && (!cpu || cpu_dtype == o.cpu_dtype) &&
           (!cuda || cuda_dtype == o.cuda_dtype);
  }
};

}  // namespace jitckpt
