// Twin stages, for the profile pass: stages of one chain call that a profile would measure alike
// (a transformer's blocks, the bottlenecks of a ResNet stage). Takes a call's StageRunner, a stage
// and the activations it reads; twinKey returns a text equal for two stages exactly when their
// graphs are the same op for op and every value they read is alike (dtype, device, sizes,
// strides, storage sharing, whether it gets a gradient; lifted scalars equal), and nothing where a
// size may come from data or a value cannot be compared. The profile measures one stage of each
// key and gives its twins a copy (twinProfile), so that a deep chain's first step profiles a
// block once, not once per block.
#pragma once

#include <optional>
#include <string>

#include "planner/profile.h"
#include "runtime/stage_runner.h"

namespace jitckpt {

std::optional<std::string> twinKey(const StageRunner& runner, int l, const Tensors& activations);

// Stage `measured_stage`'s measurements `measured` as those of its twin `l`: its own label, and
// the gradients of its lifted tensors (by position) at its own tensors' positions.
StageProfile twinProfile(const StageRunner& runner, int measured_stage,
                         const StageProfile& measured, int l);

}  // namespace jitckpt
