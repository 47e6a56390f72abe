// Stage measurements (see stage_measurements.h).
#include "planner/stage_measurements.h"

#include <ATen/Functions.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <utility>

#include "planner/storage_sharing.h"

namespace jitckpt {
namespace {

// The bytes of the parameters' gradients B returned.
int64_t parameterGradBytes(const StageRunner& runner, const StageGradients& gradients) {
  Tensors parameter_grads;
  for (const auto& [position, gradient] : gradients.lifted) {
    if (runner.arguments().lifted_tensors[position].is_leaf()) parameter_grads.push_back(gradient);
  }
  return storageBytes(parameter_grads);
}

// The bytes of the tensors stage l writes in place (its updated buffers), which a recomputation
// writes to copies of.
int64_t writtenBytes(const StageRunner& runner, int l) {
  Tensors written;
  for (size_t k : runner.stages().stage(l).mutated_lifted) {
    if (runner.stages().lifted()[k].kind == LiftedKind::Scalar) continue;
    written.push_back(runner.arguments().lifted_tensors[runner.stages().position(k)]);
  }
  return storageBytes(written);
}

bool someAreNotContiguous(const Tensors& tensors) {
  return std::any_of(tensors.begin(), tensors.end(), [](const at::Tensor& t) {
    return t.defined() && t.requires_grad() && !t.is_contiguous();
  });
}

}  // namespace

Tensors onesFor(const Tensors& outputs) {
  Tensors out;
  for (const auto& t : outputs) out.push_back(t.requires_grad() ? at::ones_like(t) : at::Tensor());
  return out;
}

namespace {
bool sameTensor(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.is_alias_of(b) &&
         a.storage_offset() == b.storage_offset() && a.sizes() == b.sizes() &&
         a.strides() == b.strides();
}
}  // namespace

GradientLayouts layoutsOf(const Tensors& tensors) {
  GradientLayouts out;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    GradientLayout layout;
    if (t.defined()) {
      layout = {true, t.sizes().vec(), t.strides().vec(), t.is_contiguous()};
      layout.offset = t.storage_offset();
      const auto item = static_cast<int64_t>(t.element_size());
      layout.storage_elements = (static_cast<int64_t>(t.storage().nbytes()) + item - 1) / item;
    }
    for (size_t j = 0; j < i && layout.defined && layout.same_as < 0; ++j) {
      if (out[j].same_as < 0 && sameTensor(tensors[j], t)) layout.same_as = static_cast<int>(j);
    }
    for (size_t j = 0; j < i && layout.defined && layout.same_as < 0; ++j) {
      if (out[j].same_as < 0 && out[j].shares_storage_with < 0 && tensors[j].defined() &&
          t.is_alias_of(tensors[j])) {
        layout.shares_storage_with = static_cast<int>(j);
        break;
      }
    }
    out.push_back(std::move(layout));
  }
  return out;
}

namespace {
int64_t extentOf(const GradientLayout& layout) {
  int64_t extent = 1;
  for (size_t d = 0; d < layout.sizes.size(); ++d)
    extent += (layout.sizes[d] - 1) * layout.strides[d];
  return extent;
}
int64_t numelOf(const GradientLayout& layout) {
  return std::accumulate(layout.sizes.begin(), layout.sizes.end(), int64_t{1},
                         std::multiplies<int64_t>());
}
}  // namespace

bool measuredOn(const GradientLayouts& handed, const GradientLayouts& outputs) {
  if (handed.size() != outputs.size()) return true;  // not comparable: left as measured
  for (size_t i = 0; i < handed.size(); ++i) {
    const GradientLayout& h = handed[i];
    // measureMemory hands each output ones of its own, each filling its storage
    if (h.same_as >= 0 || h.shares_storage_with >= 0) return false;
    // None where it handed ones (an LSTM's final state that the model drops): a backward that
    // takes every output's gradient gets zeros made inside it.
    if (!h.defined && outputs[i].defined) return false;
    if (!h.defined || !outputs[i].defined || h.sizes != outputs[i].sizes) continue;
    if (h.storage_elements > numelOf(h)) return false;
    if (h.strides != outputs[i].strides && !h.contiguous) return false;
  }
  return true;
}

bool sameLayouts(const GradientLayouts& a, const GradientLayouts& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const GradientLayout& x, const GradientLayout& y) {
                      return x.defined == y.defined && x.sizes == y.sizes &&
                             x.strides == y.strides && x.same_as == y.same_as &&
                             x.offset == y.offset && x.storage_elements == y.storage_elements &&
                             x.shares_storage_with == y.shares_storage_with;
                    });
}

// Ones on storages laid out as the step's: one for the outputs handed views of one storage, as
// large as it was; each gradient at its offset and strides (zero strides and gaps included).
Tensors onesLaidOut(const GradientLayouts& handed, const Tensors& outputs) {
  Tensors out = onesFor(outputs);
  const size_t n = std::min(out.size(), handed.size());
  auto laidOut = [&](size_t i) {
    const GradientLayout& h = handed[i];
    return out[i].defined() && h.defined && h.sizes == out[i].sizes().vec() && out[i].numel() > 0;
  };
  std::vector<int64_t> elements(n, 0);  // per storage's first gradient: the storage's size
  for (size_t i = 0; i < n; ++i) {
    const GradientLayout& h = handed[i];
    if (!laidOut(i)) continue;
    const size_t first = h.shares_storage_with >= 0 ? h.shares_storage_with : i;
    elements[first] = std::max({elements[first], h.offset + extentOf(h), h.storage_elements});
  }
  std::vector<at::Tensor> storages(n);
  for (size_t i = 0; i < n; ++i) {
    const GradientLayout& h = handed[i];
    if (!h.defined) out[i] = at::Tensor();  // handed none, as the step hands it
    if (!laidOut(i)) continue;
    if (h.same_as >= 0 && out[h.same_as].defined() && out[h.same_as].sizes() == out[i].sizes()) {
      out[i] = out[h.same_as];
      continue;
    }
    const size_t first = h.shares_storage_with >= 0 ? h.shares_storage_with : i;
    if (!storages[first].defined()) storages[first] = at::ones({elements[first]}, out[i].options());
    out[i] = storages[first].as_strided(h.sizes, h.strides, h.offset);
  }
  return out;
}

int64_t measureBackward(StageRunner& runner, int l, RecordedStage recorded, Tensors deltas,
                        probes::MemoryProbe& probe, StageProfile& s) {
  const HandedGradients handed(deltas);
  const int64_t base = probe.resetPeak();
  const StageGradients gradients = runner.backward(l, std::move(recorded), std::move(deltas));
  const int64_t peak = probe.peakBytes() - base;
  s.input_grad_bytes = storageBytes(gradients.inputs);
  s.input_grad_sources = handed.sourcesOf(gradients.inputs);
  s.input_grad_layouts = {layoutsOf(gradients.inputs)};
  s.parameter_grad_bytes = parameterGradBytes(runner, gradients);
  s.lifted_gradients.clear();
  for (const auto& [position, gradient] : gradients.lifted) {
    s.lifted_gradients.emplace_back(runner.firstPosition(position), storageBytes({gradient}));
  }
  return std::max<int64_t>(0, peak - madeBytes(s.input_grad_sources));
}

// Deterministic: measured once.
Tensors measureMemory(StageRunner& runner, int l, const Tensors& current,
                      probes::MemoryProbe& probe, StageProfile& s) {
  int64_t base = probe.resetPeak();
  Tensors outputs = runner.forward(l, current);  // F∅/Fck: keeps a^l
  s.output_bytes = storageBytes(outputs);
  s.passed_bytes = sharedStorageBytes(outputs, current);
  // Above the bytes the stage made: what it passes through of its input was held before it ran.
  const int64_t made_bytes = s.output_bytes - s.passed_bytes;
  s.forward_overhead_no_grad = std::max<int64_t>(0, probe.peakBytes() - base - made_bytes);

  base = probe.resetPeak();
  RecordedStage recorded = runner.recordedForward(l, current);  // Fall: keeps abar^l
  s.recorded_bytes = probe.currentBytes() - base;
  s.written_copies_bytes = writtenBytes(runner, l);
  s.forward_overhead_grad = std::max<int64_t>(0, probe.peakBytes() - base - s.recorded_bytes);
  // B holds the stage's parameter gradients at its end, with transients that may come before
  // them: ob covers both (once B is done they are wg's, held to the end of the chain's backward).
  const bool other_layouts = someAreNotContiguous(recorded.outputs);
  Tensors deltas = onesFor(recorded.outputs);
  s.output_layouts = layoutsOf(outputs);
  for (size_t i = 0; i < deltas.size() && i < s.output_layouts.size(); ++i) {
    if (!deltas[i].defined()) s.output_layouts[i] = GradientLayout{};
  }
  s.backward_overhead =
      measureBackward(runner, l, std::move(recorded), std::move(deltas), probe, s);
  if (other_layouts) {
    // An output laid out otherwise (a transposed view) may get its gradient contiguous from the B
    // above (a matmul's), which B(l) reads back through the stage's views and may copy (a
    // convolution's gradient made contiguous): measured that way too, ob is the larger.
    StageProfile again;
    RecordedStage second = runner.recordedForward(l, current);
    Tensors contiguous;
    for (const auto& d : onesFor(second.outputs))
      contiguous.push_back(d.defined() ? d.contiguous() : d);
    s.backward_overhead = std::max(
        s.backward_overhead,
        measureBackward(runner, l, std::move(second), std::move(contiguous), probe, again));
    s.input_grad_layouts.push_back(again.input_grad_layouts.at(0));
  }
  return outputs;
}

void warmUp(StageRunner& runner, int l, const Tensors& current, int rounds) {
  for (int w = 0; w < rounds; ++w) {
    runner.forward(l, current);
    RecordedStage recorded = runner.recordedForward(l, current);
    Tensors deltas = onesFor(recorded.outputs);
    runner.backward(l, std::move(recorded), std::move(deltas));
  }
}

// B on autograd's thread, as the executor runs it (runAsBackward).
void measureTimes(StageRunner& runner, int l, const Tensors& current, int repeats,
                  c10::Device device, probes::Stopwatch& stopwatch, StageProfile& s) {
  std::vector<double> no_grad_ms, forward_ms, backward_ms;
  for (int r = 0; r < repeats; ++r) {
    stopwatch.start();
    runner.forward(l, current);  // its outputs freed inside the timing, as F∅ frees its input
    no_grad_ms.push_back(stopwatch.stopSeconds() * 1e3);
  }
  for (int r = 0; r < repeats; ++r) {
    stopwatch.start();
    RecordedStage recorded = runner.recordedForward(l, current);
    forward_ms.push_back(stopwatch.stopSeconds() * 1e3);
    const bool has_backward = recorded.outputsHaveGradients() &&
                              (recorded.inputsGetGradients() || !runner.gradientTargets(l).empty());
    Tensors deltas = onesFor(recorded.outputs);
    double ms = 0;
    runAsBackward(device, [&] {
      stopwatch.start();
      runner.backward(l, std::move(recorded), std::move(deltas));
      ms = stopwatch.stopSeconds() * 1e3;
    });
    backward_ms.push_back(has_backward ? ms : 0.0);
  }
  s.forward_no_grad_ms = probes::median(no_grad_ms);
  s.forward_ms = probes::median(forward_ms);
  s.backward_ms = probes::median(backward_ms);
}

}  // namespace jitckpt
