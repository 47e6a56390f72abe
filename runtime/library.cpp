// The shared library jitckpt: TorchScript passes and the runtime that executes their plans.
namespace jitckpt {
const char* version() { return "0.1.0"; }
}  // namespace jitckpt
