// Built-in chains: a ResNet-1001-shaped chain (paper, section 5), ResNet-like chains of any
// length for scaling benchmarks, and random chains for tests. Torch-free and deterministic.
#pragma once

#include <cstdint>
#include <string>

#include "solver/costs.h"

namespace jitckpt::solver {

// Stages: conv1, bn1, relu, maxpool, the 333 bottleneck blocks of ResNet-1001 (layers 33, 99, 168,
// 33), avgpool, fc: L = 339, batch 1 at 224x224, float32. Sizes are the real tensor sizes of
// each stage; abar^l adds the block's intermediate tensors; times are proportional to the
// stage's multiply-adds (1 unit = 1 GMAC), backward twice forward. Overheads are one
// intermediate tensor forward and two backward (cuDNN-like workspace).
Costs resnet1001Costs();

// The same construction with `blocks` bottleneck blocks spread over the four layers in
// ResNet-1001's proportions: L = blocks + 6.
Costs resnetLikeCosts(int blocks);

// "resnet1001" or "resnetlike:L" (L >= 7 stages). Throws std::invalid_argument otherwise.
Costs builtinCosts(const std::string& name);

// Random chain of `length` stages with integer sizes in [0, max_size] (zero sizes included),
// abar >= a, integer times in [0, max_time], no-grad forward overheads of their own (of_nograd),
// parameter gradients (wg) on about two thirds of the stages, spans of pass-throughs, and on about
// half the chains of two stages or more a caller's copy of a^{L-1} (held_output);
// deterministic for a seed.
Costs randomCosts(int length, uint64_t seed, int max_size = 6, int max_time = 9);

// The chain with spans as long and as large as its activations allow (stages that pass most of
// their input through, as Inception's and DenseNet's do), drawn for a seed.
Costs withLongSpans(Costs chain, uint64_t seed);

// The chain with a^l of size 0, and so without the spans over it.
Costs withEmptyActivation(Costs chain, int l);

}  // namespace jitckpt::solver
