// Stage measurements for the profile pass (profile.h): takes one stage, its input and a
// StageRunner; measures the memory of its no-grad forward, its recording forward and its backward
// with the device's probe, and their times with its stopwatch, filling a StageProfile. Also the
// gradients a measured B is handed: ones laid out as the stage's output, or as a given layout.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/profile.h"
#include "runtime/probes/memory_probe.h"
#include "runtime/probes/stopwatch.h"
#include "runtime/stage_runner.h"

namespace jitckpt {

// delta = ones for the outputs that require grad (undefined for the others).
Tensors onesFor(const Tensors& outputs);

GradientLayouts layoutsOf(const Tensors& tensors);

// Whether measureMemory measured B of outputs laid out as `outputs` (StageProfile's: none where
// B was handed none) on gradients laid out as `handed`: it hands B ones laid out as a^l, and
// contiguous ones too where a^l is not.
bool measuredOn(const GradientLayouts& handed, const GradientLayouts& outputs);

// Whether both describe the same gradients (sizes, strides, the tensors and storages they share).
bool sameLayouts(const GradientLayouts& a, const GradientLayouts& b);

// Ones for `outputs` laid out as `handed` (zero strides and gaps included): one tensor for the
// outputs handed one gradient, one storage, as large as the step's, for those handed views of
// one, and none for those handed none.
Tensors onesLaidOut(const GradientLayouts& handed, const Tensors& outputs);

// B(l) on `recorded` with `deltas` (delta^l) moved in, as the executor hands them over (B frees
// them once read, before its peak). Returns B's peak above what it makes (the gradients it hands
// on were there before) and fills in s's gradient sizes.
int64_t measureBackward(StageRunner& runner, int l, RecordedStage recorded, Tensors deltas,
                        probes::MemoryProbe& probe, StageProfile& s);

// Memory of F∅/Fck, Fall and B of stage l on `current` (a^{l-1}): s's sizes and overheads.
// Returns a^l.
Tensors measureMemory(StageRunner& runner, int l, const Tensors& current,
                      probes::MemoryProbe& probe, StageProfile& s);

// Untimed F and B rounds, so that lazy allocations and caches are in place before measuring.
void warmUp(StageRunner& runner, int l, const Tensors& current, int rounds);

// Median times of F∅/Fck, Fall and B of stage l over `repeats` runs: s's times.
void measureTimes(StageRunner& runner, int l, const Tensors& current, int repeats,
                  c10::Device device, probes::Stopwatch& stopwatch, StageProfile& s);

}  // namespace jitckpt
