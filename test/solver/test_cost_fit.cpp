// predictCosts: byte counts exact where one quadratic gives every sample, times fitted, and
// nothing where the samples cannot say.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "solver/baselines.h"
#include "solver/cost_fit.h"
#include "solver/simulator.h"

using namespace jitckpt::solver;

namespace {

constexpr int64_t kBatch = 4, kWidth = 64, kHeads = 8;

// A transformer-like chain at sequence length t: activations linear in t, attention scores
// quadratic, parameter gradients constant, a span over stages 1-2.
Costs chainAt(int64_t t) {
  Costs c;
  const int L = 4;
  for (int l = 0; l <= L; ++l) {
    const int64_t act = 4 * kBatch * kWidth * t;
    const int64_t scores = l % 2 == 1 ? 4 * kBatch * kHeads * t * t : 0;
    c.wa.push_back(act);
    c.wabar.push_back(l == 0 ? act : 3 * act + scores);
    c.wd.push_back(act);
    c.of.push_back(l == 0 ? 0 : 512 + scores / 2);
    c.of_nograd.push_back(l == 0 ? 0 : scores);
    c.ob.push_back(l == 0 ? 0 : act + scores);
    c.wg.push_back(l == 0 ? 0 : 4 * kWidth * kWidth);
    c.uf.push_back(
        l == 0 ? 0 : 1.0 + 0.01 * static_cast<double>(t) + 1e-4 * static_cast<double>(t * t));
    c.ub.push_back(l == 0 ? 0 : 2 * c.uf.back());
  }
  c.spans = {Span{1, 2, 4 * kBatch * kWidth * t}};
  c.held_output = c.wa[L - 1];
  validate(c);
  return c;
}

// Sizes as an InputKey flattens them: the chain input (batch, t, width) and a mask (t, t).
std::vector<int64_t> sizesAt(int64_t t) { return {kBatch, t, kWidth, t, t}; }

struct Profiles {
  std::vector<Costs> costs;
  std::vector<CostSample> samples;
  Profiles(const std::vector<int64_t>& lengths, const std::function<Costs(int64_t)>& make = chainAt,
           const std::function<std::vector<int64_t>(int64_t)>& sizes = sizesAt) {
    for (int64_t t : lengths) costs.push_back(make(t));
    for (size_t k = 0; k < lengths.size(); ++k) samples.push_back({sizes(lengths[k]), &costs[k]});
  }
};

TEST(CostFit, ByteCountsAreExactAndTimesCloseBetweenProfiledLengths) {
  const Profiles profiles({64, 128, 192, 256});
  for (int64_t t : {80, 144, 240}) {
    const auto predicted = predictCosts(profiles.samples, sizesAt(t));
    ASSERT_TRUE(predicted) << t;
    const Costs truth = chainAt(t);
    EXPECT_EQ(predicted->wa, truth.wa);
    EXPECT_EQ(predicted->wabar, truth.wabar);
    EXPECT_EQ(predicted->wd, truth.wd);
    EXPECT_EQ(predicted->of, truth.of);
    EXPECT_EQ(predicted->of_nograd, truth.of_nograd);
    EXPECT_EQ(predicted->ob, truth.ob);
    EXPECT_EQ(predicted->wg, truth.wg);
    EXPECT_EQ(predicted->spans, truth.spans);
    EXPECT_EQ(predicted->held_output, truth.held_output);
    for (int l = 1; l <= truth.length(); ++l) {
      EXPECT_NEAR(predicted->uf[l], truth.uf[l], 1e-9) << l;
      EXPECT_NEAR(predicted->ub[l], truth.ub[l], 1e-9) << l;
    }
    EXPECT_EQ(simulate(*predicted, noCheckpointSchedule(*predicted)).peak,
              simulate(truth, noCheckpointSchedule(truth)).peak);
  }
}

// Exact where predicted: every count, and the no-checkpointing peak they make.
void expectExactAt(const Profiles& profiles, int64_t t) {
  const auto predicted = predictCosts(profiles.samples, sizesAt(t));
  ASSERT_TRUE(predicted) << t;
  const Costs truth = chainAt(t);
  for (auto field : {&Costs::wa, &Costs::wabar, &Costs::wd, &Costs::of, &Costs::of_nograd,
                     &Costs::ob, &Costs::wg})
    EXPECT_EQ((*predicted).*field, truth.*field) << t;
  EXPECT_EQ(predicted->spans, truth.spans) << t;
  EXPECT_EQ(simulate(*predicted, noCheckpointSchedule(*predicted)).peak,
            simulate(truth, noCheckpointSchedule(truth)).peak);
}

// chainAt with overheads that keep to one size: predicted below the samples as well.
Costs levelOverheadsAt(int64_t t) {
  Costs c = chainAt(t);
  for (int l = 1; l <= c.length(); ++l) c.of[l] = c.of_nograd[l] = c.ob[l] = 4096;
  return c;
}

TEST(CostFit, BeyondTheProfiledRangeAtMostItsSpanAndNeverAtAProfiledLength) {
  const Profiles profiles({64, 128, 192, 256});  // span 192
  for (int64_t t : {272, 448}) expectExactAt(profiles, t);
  EXPECT_FALSE(predictCosts(profiles.samples, sizesAt(464)));
  EXPECT_FALSE(predictCosts(profiles.samples, sizesAt(128)));
  // Below the samples an overhead that grows with the length may be overtaken by one that does
  // not (AnOverheadFallingTowardTheTargetIsNotPredictedBeyondTheSamples): profiled.
  EXPECT_FALSE(predictCosts(profiles.samples, sizesAt(48)));
  const Profiles level({64, 128, 192, 256}, levelOverheadsAt);
  for (int64_t t : {16, 48, 272}) {
    const auto predicted = predictCosts(level.samples, sizesAt(t));
    ASSERT_TRUE(predicted) << t;
    const Costs truth = levelOverheadsAt(t);
    EXPECT_EQ(predicted->wabar, truth.wabar) << t;
    EXPECT_EQ(predicted->ob, truth.ob) << t;
  }
  const Profiles near({80, 96, 112, 128}, levelOverheadsAt);  // span 48: not down to 16
  EXPECT_FALSE(predictCosts(near.samples, sizesAt(16)));
  EXPECT_TRUE(predictCosts(near.samples, sizesAt(32)));
}

TEST(CostFit, RoundedSizesArePredictedOnlyWhereTheyRoundAsTheSamplesDo) {
  const Profiles profiles({64, 128, 160, 256});  // differences: multiples of 32
  for (int64_t t : {96, 192, 288}) EXPECT_TRUE(predictCosts(profiles.samples, sizesAt(t), true));
  for (int64_t t : {80, 97, 200}) EXPECT_FALSE(predictCosts(profiles.samples, sizesAt(t), true));
  EXPECT_TRUE(predictCosts(profiles.samples, sizesAt(97)));  // not rounded: any length
}

TEST(CostFit, NothingFromTooFewSamples) {
  const Profiles profiles({64, 128, 256});
  EXPECT_FALSE(predictCosts(profiles.samples, sizesAt(192)));
}

TEST(CostFit, NothingWhereACountIsNotOneQuadratic) {
  // Sizes rounded up to whole blocks, as a caching allocator counts them.
  const Profiles profiles({64, 96, 128, 256}, [](int64_t t) {
    Costs c = chainAt(t);
    for (auto& w : c.wabar) w = (w + 100'000 + 511) / 512 * 512 + (t > 100 ? 512 : 0);
    return c;
  });
  EXPECT_FALSE(predictCosts(profiles.samples, sizesAt(192)));
}

// A stage's overhead as the largest of two ops' transients: one linear in the length, one
// quadratic (attention scores), which overtakes it between the samples; and a workspace that a
// threshold makes larger at the shortest lengths.
int64_t twoOpsOverhead(int64_t t) { return std::max<int64_t>(96 * t, 32 * t * t - 192 * t + 12); }
int64_t thresholdWorkspace(int64_t t) { return t < 6 ? 2164 : 96 * t + 1204; }

TEST(CostFit, AnOverheadNoQuadraticGivesIsBoundedBetweenTheSamplesOnly) {
  const Profiles profiles({16, 4, 12, 8}, [](int64_t t) {
    Costs c = chainAt(t);
    c.of[1] = twoOpsOverhead(t);
    c.ob[3] = thresholdWorkspace(t);
    return c;
  });
  for (int64_t t : {5, 6, 7, 9, 10, 11, 13, 14, 15}) {
    const auto predicted = predictCosts(profiles.samples, sizesAt(t));
    ASSERT_TRUE(predicted) << t;
    EXPECT_GE(predicted->of[1], twoOpsOverhead(t)) << t;
    EXPECT_GE(predicted->ob[3], thresholdWorkspace(t)) << t;
    // the largest sample from the one below t up
    const int64_t below = t < 8 ? 4 : t < 12 ? 8 : 12;
    int64_t bound = 0;
    for (int64_t x : {4, 8, 12, 16})
      if (x >= below) bound = std::max(bound, twoOpsOverhead(x));
    EXPECT_EQ(predicted->of[1], bound) << t;
    const Costs truth = chainAt(t);
    EXPECT_EQ(predicted->wabar, truth.wabar) << t;  // the sizes exact as before
    EXPECT_EQ(predicted->ob[2], truth.ob[2]) << t;
  }
  // Beyond the samples an overhead may grow past any of them: profiled.
  for (int64_t t : {2, 3, 17, 20}) EXPECT_FALSE(predictCosts(profiles.samples, sizesAt(t))) << t;
}

TEST(CostFit, ACountThatFallsWithTheSizeIsBoundedByItsLargestSample) {
  // An embedding's backward: a workspace that smaller batches of indices take more of.
  const std::vector<int64_t> lengths{64, 96, 128, 256};
  const std::vector<int64_t> workspace{11252, 8692, 8192, 8192};
  std::vector<Costs> costs;
  for (size_t k = 0; k < lengths.size(); ++k) {
    costs.push_back(chainAt(lengths[k]));
    costs.back().ob[1] = workspace[k];
  }
  std::vector<CostSample> samples;
  for (size_t k = 0; k < lengths.size(); ++k) samples.push_back({sizesAt(lengths[k]), &costs[k]});
  for (int64_t t : {112, 320}) {
    const auto predicted = predictCosts(samples, sizesAt(t));
    ASSERT_TRUE(predicted) << t;
    EXPECT_EQ(predicted->ob[1], 11252);
    EXPECT_EQ(predicted->ob[2], chainAt(t).ob[2]);
  }
  // Below the smallest sample it may take more than any sample did.
  EXPECT_FALSE(predictCosts(samples, sizesAt(48)));
}

// A GRU's backward overhead on 2.6 (measured, bytes): a transient that falls with the length,
// overtaken past length 16 by one that grows.
int64_t fallingThenGrowing(int64_t t) { return std::max<int64_t>(4516 - 96 * t, 192 * t - 140); }

TEST(CostFit, AnOverheadFallingTowardTheTargetIsNotPredictedBeyondTheSamples) {
  const Profiles falling({16, 4, 12, 8}, [](int64_t t) {
    Costs c = levelOverheadsAt(t);
    c.ob[2] = fallingThenGrowing(t);
    return c;
  });
  for (int64_t t : {17, 20, 24, 28}) EXPECT_FALSE(predictCosts(falling.samples, sizesAt(t))) << t;
  for (int64_t t : {6, 10, 14}) {  // between the samples, the line through them
    const auto predicted = predictCosts(falling.samples, sizesAt(t));
    ASSERT_TRUE(predicted) << t;
    EXPECT_EQ(predicted->ob[2], fallingThenGrowing(t)) << t;
  }
  const auto below = predictCosts(falling.samples, sizesAt(2));  // it grows toward length 2
  ASSERT_TRUE(below);
  EXPECT_EQ(below->ob[2], fallingThenGrowing(2));
  // Sampled where it grows: predicted above, as the quadratic says, and not below, where the
  // transient that falls takes over.
  const Profiles growing({28, 18, 24, 20}, [](int64_t t) {
    Costs c = levelOverheadsAt(t);
    c.ob[2] = fallingThenGrowing(t);
    return c;
  });
  for (int64_t t : {30, 36}) {
    const auto predicted = predictCosts(growing.samples, sizesAt(t));
    ASSERT_TRUE(predicted) << t;
    EXPECT_EQ(predicted->ob[2], fallingThenGrowing(t)) << t;
  }
  for (int64_t t : {8, 12, 16}) EXPECT_FALSE(predictCosts(growing.samples, sizesAt(t))) << t;
}

TEST(CostFit, NothingWhereTwoSizesVaryApart) {
  // The batch varies with the length (t / 32), or only at the target: one variable cannot say.
  const Profiles scaled({64, 128, 192, 256}, chainAt, [](int64_t t) {
    return std::vector<int64_t>{t / 32, t, kWidth, t, t};
  });
  EXPECT_FALSE(predictCosts(scaled.samples, {5, 160, kWidth, 160, 160}));
  const Profiles profiles({64, 128, 192, 256});
  EXPECT_FALSE(predictCosts(profiles.samples, {2 * kBatch, 160, kWidth, 160, 160}));
  EXPECT_TRUE(predictCosts(profiles.samples, {kBatch, 160, kWidth, 160, 160}));
}

TEST(CostFit, NothingWhereTheStructureDiffers) {
  const Profiles profiles({64, 128, 192, 256}, [](int64_t t) {
    Costs c = chainAt(t);
    if (t == 192) c.spans = {Span{2, 3, c.wa[2]}};
    return c;
  });
  EXPECT_FALSE(predictCosts(profiles.samples, sizesAt(160)));
}

}  // namespace

namespace {

TEST(CostFit, TimesOfAProfileWithoutTimingComeFromTheNearestSample) {
  const Profiles profiles({64, 256});
  Costs measured = chainAt(96);
  for (auto* times : {&measured.uf, &measured.ub, &measured.uf_nograd})
    times->assign(times->size(), 0);
  scaleTimes(profiles.samples, measured);
  const Costs& nearest = profiles.costs[0];  // t = 64
  for (int l = 1; l <= measured.length(); ++l) {
    const double scale = static_cast<double>(measured.wabar[l]) / nearest.wabar[l];
    EXPECT_DOUBLE_EQ(measured.uf[l], nearest.uf[l] * scale) << l;
    EXPECT_DOUBLE_EQ(measured.ub[l], nearest.ub[l] * scale) << l;
    EXPECT_GT(measured.uf[l], nearest.uf[l]) << l;
  }
  EXPECT_EQ(measured.uf[0], 0);
  Costs shorter = chainAt(96);
  shorter.uf.pop_back();
  EXPECT_THROW(scaleTimes({{sizesAt(96), &shorter}}, measured), std::invalid_argument);
}

}  // namespace
