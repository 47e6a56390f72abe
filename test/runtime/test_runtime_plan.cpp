// The Plan class, the rewritten graph, save/load, validation errors and the inference path.
#include <c10/core/InferenceMode.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/serialization/import.h>

#include <sstream>

#include "runtime/probes/counting_allocator.h"
#include "test/runtime/test_runtime_support.h"

namespace jitckpt::test {
namespace {

// Node kinds in order, nested blocks included: the structure of a graph, whatever its value names.
std::string structure(const torch::jit::Block* block) {
  std::string out;
  for (const torch::jit::Node* n : block->nodes()) {
    out += std::string(n->kind().toQualString()) + "/" + std::to_string(n->outputs().size()) + " ";
    for (const torch::jit::Block* b : n->blocks()) out += "{ " + structure(b) + "} ";
  }
  return out;
}

int countNodes(const torch::jit::Graph& graph, const char* kind) {
  int n = 0;
  for (const torch::jit::Node* node : graph.nodes())
    n += node->kind().toQualString() == std::string(kind);
  return n;
}

TEST(RuntimePlan, PrintsStagesAndScheduleWithoutAddresses) {
  Rewritten r = rewriteWith(loadFixture("tiny_resnet"), ScheduleKind::OptimalMid);
  const std::string text = r.plan->str();
  EXPECT_NE(text.find("schedule: " + solver::toString(r.plan->solution().schedule)),
            std::string::npos)
      << text;
  for (const auto& s : r.plan->stages().stages())
    EXPECT_NE(text.find("\"" + s.label + "\""), std::string::npos) << s.label;
  EXPECT_NE(text.find("(terminal)"), std::string::npos);
  EXPECT_EQ(text.find("0x"), std::string::npos) << "addresses make the dump unstable:\n" << text;
  // The schedule ends with the input gradient and hands off to autograd at B(L+1).
  const int L = r.plan->numStages();
  EXPECT_NE(text.find("B(" + std::to_string(L + 1) + ")"), std::string::npos);
  // Printing is deterministic.
  EXPECT_EQ(text, r.plan->str());
}

TEST(RuntimePlan, StageMetadataFromThePartition) {
  Rewritten r = rewriteWith(loadFixture("tiny_resnet"), ScheduleKind::None);
  int with_buffers = 0;
  for (int l = 1; l <= r.plan->numStages(); ++l) {
    const StageSpec& s = r.plan->stages().stage(l);
    EXPECT_EQ(s.num_activation_inputs, 1u);
    EXPECT_FALSE(r.plan->stages().hasRandomOps(l));
    with_buffers += !s.mutated_lifted.empty();
  }
  EXPECT_GE(with_buffers, 3) << "every residual block updates BatchNorm statistics";
  Rewritten d = rewriteWith(loadFixture("dropout_mlp"), ScheduleKind::None);
  int random = 0;
  for (int l = 1; l <= d.plan->numStages(); ++l) random += d.plan->stages().hasRandomOps(l);
  EXPECT_GE(random, 3);
}

TEST(RuntimePlan, RewrittenGraphCallsTheChainOnce) {
  torch::jit::Module original = loadFixture("tiny_resnet");
  const std::string original_forward = original.get_method("forward").graph()->toString();
  Rewritten r = rewriteWith(original, ScheduleKind::OptimalMid);
  auto graph = r.module.get_method("forward").graph();
  EXPECT_EQ(countNodes(*graph, "jitckpt::chain"), 1) << *graph;
  EXPECT_EQ(countNodes(*graph, "aten::_convolution") + countNodes(*graph, "aten::conv2d"), 0)
      << *graph;
  EXPECT_TRUE(planOf(r.module));
  EXPECT_EQ(planOf(r.module).get(), r.plan.get());
  // The user's module keeps its forward and gets no plan.
  EXPECT_FALSE(planOf(original));
  EXPECT_EQ(original.get_method("forward").graph()->toString(), original_forward);
}

TEST(RuntimePlan, RewritingTwiceIsAnError) {
  Rewritten r = rewriteWith(loadFixture("dropout_mlp"), ScheduleKind::None);
  try {
    partitionClone(r.module);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("already rewritten"), std::string::npos) << e.what();
  }
}

TEST(RuntimePlan, InvalidScheduleIsRejectedWithTheReason) {
  PartitionedClone pc = partitionClone(loadFixture("dropout_mlp"));
  auto stages = chainStagesOf(pc.partition);
  Solution s;
  s.costs = syntheticCosts(stages->size());
  s.schedule = solver::noCheckpointSchedule(s.costs);
  s.schedule.pop_back();  // no B(1): never reaches the input gradient
  try {
    Plan plan(stages, s);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid"), std::string::npos) << e.what();
  }
  // The forward part must end at the hand-off B(L+1): here it does, after Fall(L+1).
  const int L = stages->size();
  s.schedule.clear();
  for (int l = 1; l <= L + 1; ++l) s.schedule.push_back({solver::OpKind::ForwardAll, l});
  s.schedule.push_back({solver::OpKind::Backward, L + 1});
  for (int l = L; l >= 1; --l) s.schedule.push_back({solver::OpKind::Backward, l});
  EXPECT_NO_THROW((void)Plan(stages, s));
  s.costs = syntheticCosts(L - 1);  // costs for another chain
  EXPECT_THROW((void)Plan(stages, s), c10::Error);
}

TEST(RuntimePlan, PickleKeepsEverything) {
  Rewritten r = rewriteWith(loadFixture("tiny_resnet"), ScheduleKind::OptimalMin);
  Solution solution = r.plan->solution();
  solution.curve = {{100, 3.5}, {200, 2.25}};
  solution.input_key.shapes = {{2, 3, 12, 12}};
  solution.input_key.types = {"Float@cpu", "parameters and buffers: Float@cpu"};
  solution.requested_limit = solver::MemoryLimit::fraction(0.25);
  const Plan plan(r.plan->sharedStages(), solution);
  auto copy = Plan::fromState(plan.getState());
  EXPECT_EQ(copy->str(), plan.str());
  EXPECT_EQ(copy->solution().schedule, solution.schedule);
  EXPECT_EQ(copy->solution().strategy, solution.strategy);
  ASSERT_EQ(copy->stages().lifted().size(), plan.stages().lifted().size());
  for (size_t k = 0; k < plan.stages().lifted().size(); ++k) {
    EXPECT_EQ(copy->stages().lifted()[k].name, plan.stages().lifted()[k].name);
    EXPECT_EQ(copy->stages().lifted()[k].kind, plan.stages().lifted()[k].kind);
    EXPECT_EQ(copy->stages().position(k), plan.stages().position(k));
  }
  EXPECT_EQ(copy->solution().input_key.shapes, solution.input_key.shapes);
  EXPECT_EQ(copy->solution().input_key.types, solution.input_key.types);
  EXPECT_EQ(copy->solution().requested_limit.kind, solver::MemoryLimit::Kind::Fraction);
  EXPECT_EQ(copy->solution().requested_limit.value, 0.25);
  ASSERT_EQ(copy->solution().curve.size(), 2u);
  EXPECT_EQ(copy->solution().curve[1].limit, 200);
  EXPECT_EQ(copy->solution().curve[1].time, 2.25);
  ASSERT_EQ(copy->numStages(), plan.numStages());
  for (int l = 1; l <= copy->numStages(); ++l) {
    const StageSpec& a = copy->stages().stage(l);
    const StageSpec& b = plan.stages().stage(l);
    EXPECT_EQ(structure(a.graph->block()), structure(b.graph->block())) << "stage " << l;
    EXPECT_EQ(a.graph->inputs().size(), b.graph->inputs().size());
    EXPECT_EQ(a.mutated_lifted, b.mutated_lifted);
    EXPECT_EQ(copy->stages().hasRandomOps(l), plan.stages().hasRandomOps(l));
  }
}

// A stage graph holding a tensor constant survives pickling (parseIR cannot read one back).
TEST(RuntimePlan, PickleKeepsTensorConstants) {
  StageSpec stage;
  stage.graph = std::make_shared<torch::jit::Graph>();
  torch::jit::Value* x = stage.graph->addInput("x")->setType(c10::TensorType::get());
  const at::Tensor constant = torch::arange(6, at::kFloat).reshape({2, 3});
  torch::jit::Value* c = stage.graph->insertConstant(constant);
  stage.graph->registerOutput(stage.graph->insert(c10::aten::mul, {x, c}));
  stage.num_activation_inputs = 1;
  stage.label = "scale";
  auto stages =
      std::make_shared<const ChainStages>(std::vector<StageSpec>{stage}, std::vector<LiftedSpec>{});
  const Plan plan(stages, syntheticSolution(1, solver::noCheckpointSchedule));
  auto copy = Plan::fromState(plan.getState());
  int constants = 0;
  for (const torch::jit::Node* n : copy->stages().stage(1).graph->nodes()) {
    if (n->kind() == c10::prim::Constant &&
        n->output()->type()->kind() == c10::TypeKind::TensorType) {
      ++constants;
      EXPECT_TRUE(torch::equal(n->t(c10::attr::value), constant));
    }
  }
  EXPECT_EQ(constants, 1) << *copy->stages().stage(1).graph;
}

// torch.jit.save/load keep the plan; the loaded module trains exactly like the reference.
TEST(RuntimePlan, SaveLoadRoundTripTrainsIdentically) {
  ReferenceExecutorGuard reference_executor;
  torch::jit::Module reference = loadFixture("tiny_resnet");
  Rewritten r = rewriteWith(loadFixture("tiny_resnet"), ScheduleKind::OptimalMin);
  std::stringstream file;
  r.module.save(file);
  torch::jit::Module loaded = torch::jit::load(file);
  auto plan = planOf(loaded);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->str(), r.plan->str());
  EXPECT_EQ(countNodes(*loaded.get_method("forward").graph(), "jitckpt::chain"), 1);
  torch::manual_seed(21);
  const at::Tensor input = torch::randn(inputShape("tiny_resnet"));
  expectSameTraining(reference, loaded, input, /*steps=*/3, "loaded tiny_resnet");
}

// Under no_grad and in inference mode the chain runs straight through: no graph, nothing kept.
TEST(RuntimeInference, NoGradSavesNothing) {
  ReferenceExecutorGuard reference_executor;
  torch::jit::Module reference = loadFixture("tiny_resnet");
  Rewritten r = rewriteWith(loadFixture("tiny_resnet"), ScheduleKind::OptimalMin);
  reference.eval();
  r.module.eval();
  torch::manual_seed(23);
  const at::Tensor input = torch::randn(inputShape("tiny_resnet"));
  at::Tensor expected;
  {
    torch::NoGradGuard no_grad;
    expected = reference.forward({input}).toTensor();
  }
  probes::CountingAllocatorGuard counting;
  {
    torch::NoGradGuard no_grad;
    const int64_t before = counting.allocator().currentBytes();
    at::Tensor out = r.module.forward({input}).toTensor();
    EXPECT_FALSE(out.requires_grad());
    EXPECT_TRUE(torch::equal(out, expected));
    // Nothing but the output is still allocated.
    EXPECT_EQ(counting.allocator().currentBytes() - before, static_cast<int64_t>(out.nbytes()));
  }
  {
    c10::InferenceMode inference;
    at::Tensor out = r.module.forward({input}).toTensor();
    EXPECT_TRUE(torch::equal(out, expected));
  }
  // Grad enabled but nothing requires grad: the same path.
  for (auto p : r.module.parameters()) p.requires_grad_(false);
  const int64_t before = counting.allocator().currentBytes();
  at::Tensor out = r.module.forward({input}).toTensor();
  EXPECT_FALSE(out.requires_grad());
  EXPECT_TRUE(torch::equal(out, expected));
  EXPECT_EQ(counting.allocator().currentBytes() - before, static_cast<int64_t>(out.nbytes()));
}

// In training, the forward keeps only what the schedule keeps: a schedule that recomputes holds
// less after the forward than the no-checkpointing one, and both free everything after backward.
TEST(RuntimeMemory, ForwardKeepsOnlyWhatTheScheduleKeeps) {
  Rewritten none = rewriteWith(loadFixture("tiny_resnet"), ScheduleKind::None);
  Rewritten tight = rewriteWith(loadFixture("tiny_resnet"), ScheduleKind::Revolve);
  torch::manual_seed(29);
  const at::Tensor input = torch::randn({4, 3, 16, 16});
  auto held_after_forward = [&](torch::jit::Module& m) {
    probes::CountingAllocatorGuard counting;
    int64_t held = 0;
    {
      const int64_t before = counting.allocator().currentBytes();
      at::Tensor out = m.forward({input}).toTensor();
      held = counting.allocator().currentBytes() - before;
      out.sum().backward();
    }
    for (auto p : m.parameters()) p.mutable_grad() = at::Tensor();
    return held;
  };
  held_after_forward(none.module);  // warm-up: lazily allocated state
  held_after_forward(tight.module);
  const int64_t held_none = held_after_forward(none.module);
  const int64_t held_tight = held_after_forward(tight.module);
  EXPECT_LT(held_tight, held_none)
      << "revolve kept " << held_tight << " bytes, no checkpointing " << held_none;
}

TEST(RuntimeOp, SecondBackwardIsAClearError) {
  Rewritten r = rewriteWith(loadFixture("shared_parameter"), ScheduleKind::OptimalMid);
  at::Tensor out = r.module.forward({torch::randn({4, 16})}).toTensor();
  at::Tensor loss = out.sum();
  loss.backward();
  try {
    loss.backward();
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("retain_graph=True"), std::string::npos) << e.what();
  }
}

TEST(RuntimeOp, RetainGraphBackwardsTwiceAsTheModelDoes) {
  torch::jit::Module original = loadFixture("shared_parameter");
  Rewritten r = rewriteWith(original, ScheduleKind::OptimalMid);
  const at::Tensor input = torch::randn({4, 16});
  auto twice = [&](torch::jit::Module& m) {
    for (auto p : m.parameters()) p.mutable_grad() = at::Tensor();
    at::Tensor loss = m.forward({input}).toTensor().pow(2).sum();
    loss.backward({}, /*retain_graph=*/true);
    loss.backward();
    std::vector<at::Tensor> grads;
    for (const auto& p : m.parameters()) grads.push_back(p.grad().clone());
    return grads;
  };
  torch::jit::GraphOptimizerEnabledGuard unoptimized(false);
  const auto expected = twice(original);
  const auto got = twice(r.module);
  ASSERT_EQ(expected.size(), got.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::equal(expected[i], got[i])) << i;
}

}  // namespace
}  // namespace jitckpt::test
