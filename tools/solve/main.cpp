// jitckpt-solve: the torch-free solver on a chain file or a built-in chain. Prints the schedule
// for a limit, the time-memory curve, and the baselines at the same limit.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>

#include "solver/baselines.h"
#include "solver/memory_limit.h"
#include "solver/persistent_dp.h"
#include "solver/simulator.h"
#include "solver/strategy.h"
#include "solver/testing/builtin_chains.h"

using namespace jitckpt::solver;

namespace {

struct Options {
  std::string chain_file, builtin, limit_text = "none", strategy = "optimal", write_chain;
  int slots = 500, curve_points = 0, segments = 0;  // segments: periodic:k
  bool print_schedule = false;
};

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void printRow(const char* name, const SimulationResult& sim, double reference_time) {
  std::printf("  %-14s peak %12s  time %10.4f  (%.2fx)  recomputed forwards %d\n", name,
              formatBytes(sim.peak).c_str(), sim.time, sim.time / reference_time,
              sim.recomputations);
}

// "periodic:k" sets segments = k and the strategy to periodic.
void parseStrategyOption(Options& o) {
  if (o.strategy.rfind("periodic:", 0) == 0) {
    const std::string count = o.strategy.substr(9);
    try {
      size_t used = 0;
      o.segments = std::stoi(count, &used);
      if (used != count.size()) o.segments = -1;
    } catch (const std::exception&) {
      o.segments = -1;
    }
    if (o.segments < 1)
      throw std::invalid_argument("--strategy " + o.strategy +
                                  ": write periodic:k with k >= 1 segments");
    o.strategy = "periodic";
  } else if (o.strategy != "optimal" && o.strategy != "periodic" && o.strategy != "revolve" &&
             o.strategy != "none") {
    throw std::invalid_argument("--strategy " + o.strategy +
                                ": use optimal, periodic, periodic:k, revolve or none");
  }
}

// The DP (optimal, revolve) at the limit's own resolution; reports the solve time.
bool solveWithDp(const Costs& chain, int64_t limit, int64_t none_peak, const Options& o,
                 Schedule& chosen) {
  const auto start = std::chrono::steady_clock::now();
  const SolveResult result = o.strategy == "optimal" ? solveOptimal(chain, limit, o.slots)
                                                     : solveRevolve(chain, limit, o.slots);
  std::printf("solved (L=%d, S=%d, slot %s) in %.3f s\n", chain.length(), o.slots,
              formatBytes(std::max<int64_t>(1, (limit + o.slots - 1) / o.slots)).c_str(),
              secondsSince(start));
  if (!result.feasible) {
    std::fprintf(stderr, "error: %s\n", result.message.c_str());
    if (result.min_feasible_limit > 0) {
      std::fprintf(
          stderr, "the smallest limit that works is about %s (%.3f of the no-checkpointing peak)\n",
          formatBytes(result.min_feasible_limit).c_str(),
          static_cast<double>(result.min_feasible_limit) / static_cast<double>(none_peak));
    }
    return false;
  }
  chosen = result.schedule;
  return true;
}

void printBaselines(const Costs& chain, int64_t limit, const SimulationResult& none, int slots) {
  std::printf("\nbaselines at the same limit:\n");
  printRow("none", none, none.time);
  const Selection periodic = selectSchedule(chain, limit, Strategy::Periodic);
  if (periodic.feasible) {
    const std::string name = "periodic:" + std::to_string(periodic.segments);
    printRow(name.c_str(), simulate(chain, periodic.schedule), none.time);
  } else {
    std::printf("  %-14s does not fit\n", "periodic");
  }
  const SolveResult revolve = solveRevolve(chain, limit, slots);
  if (revolve.feasible)
    printRow("revolve", simulate(chain, revolve.schedule), none.time);
  else
    std::printf("  %-14s does not fit\n", "revolve");
}

// One table up to the no-checkpointing peak gives the optimum at every limit below it.
void printCurve(const Costs& chain, const SimulationResult& none, int slots, int points) {
  const auto start = std::chrono::steady_clock::now();
  const auto curve = PersistentSolver(chain, none.peak, slots).curve();
  std::printf(
      "\ntime-memory curve (optimal, one table up to %s, S=%d, %.3f s; %zu points in all):\n",
      formatBytes(none.peak).c_str(), slots, secondsSince(start), curve.size());
  for (int i = 0; i < points && !curve.empty(); ++i) {
    const size_t index = points == 1 ? curve.size() - 1 : i * (curve.size() - 1) / (points - 1);
    std::printf("  limit %12s  time %10.4f  (%.2fx)\n", formatBytes(curve[index].limit).c_str(),
                curve[index].time, curve[index].time / none.time);
  }
}

int run(Options o) {
  parseStrategyOption(o);
  const Costs chain = o.chain_file.empty() ? builtinCosts(o.builtin) : readCostsFile(o.chain_file);
  if (!o.write_chain.empty()) writeCostsFile(chain, o.write_chain);
  const SimulationResult none = simulate(chain, noCheckpointSchedule(chain));
  const MemoryLimit asked_limit = MemoryLimit::parse(o.limit_text);
  if (asked_limit.kind == MemoryLimit::Kind::Auto)
    throw std::invalid_argument(
        "--memory-limit auto needs a device; give bytes, a fraction or min");
  std::printf("chain: %d stages, input %s, no-checkpointing peak %s, time %.4f\n", chain.length(),
              formatBytes(chain.wa[0]).c_str(), formatBytes(none.peak).c_str(), none.time);
  const bool smallest = asked_limit.kind == MemoryLimit::Kind::Min;
  int64_t limit = smallest ? 0 : std::min(asked_limit.resolve(none.peak), none.peak * 4);
  if (!smallest) std::printf("limit: %s\n", formatBytes(limit).c_str());

  Schedule chosen;
  if (smallest) {  // the exact smallest limit of the strategy (selectSmallest)
    const auto start = std::chrono::steady_clock::now();
    const Selection found = selectSmallest(chain, parseStrategy(o.strategy), {o.slots, o.segments});
    limit = found.peak;
    chosen = found.schedule;
    std::printf("limit: min = %s (%lld bytes; %s, %.3f s)\n", formatBytes(limit).c_str(),
                static_cast<long long>(limit), found.origin.c_str(), secondsSince(start));
  } else if (o.strategy == "optimal" || o.strategy == "revolve") {
    if (!solveWithDp(chain, limit, none.peak, o, chosen)) return 2;
  } else {
    const Strategy strategy = parseStrategy(o.strategy);
    // none is checked against the limit below, with the other strategies' schedules.
    const int64_t asked = strategy == Strategy::None ? std::max(limit, none.peak) : limit;
    const Selection selection = selectSchedule(chain, asked, strategy, {o.slots, o.segments});
    if (!selection.feasible) {
      std::fprintf(stderr, "error: %s\n", selection.message.c_str());
      return 2;
    }
    chosen = selection.schedule;
  }
  const SimulationResult sim = simulate(chain, chosen);
  if (sim.peak > limit) {
    std::fprintf(stderr, "error: the %s schedule needs %s, above the limit %s\n",
                 o.strategy.c_str(), formatBytes(sim.peak).c_str(), formatBytes(limit).c_str());
    return 2;
  }
  std::printf("\n%s schedule at %s:\n", o.strategy.c_str(), formatBytes(limit).c_str());
  printRow(o.strategy.c_str(), sim, none.time);
  if (o.print_schedule) std::printf("  %s\n", toString(chosen).c_str());
  printBaselines(chain, limit, none, o.slots);
  if (o.curve_points > 0) printCurve(chain, none, o.slots, o.curve_points);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"jitckpt-solve: optimal checkpointing schedule for a chain (torch-free)"};
  Options o;
  auto* source = app.add_option_group("chain");
  source->add_option("--chain", o.chain_file, "chain file (JSON with uf ub wa wabar wd of ob)");
  source->add_option("--builtin", o.builtin, "built-in chain: resnet1001 or resnetlike:L");
  source->require_option(1);
  app.add_option(
      "--memory-limit", o.limit_text,
      "bytes (2GiB, 512MiB), a fraction of the no-checkpointing peak (0.5, 50%), none, or min "
      "(the smallest limit a schedule of the strategy fits)");
  app.add_option("--slots", o.slots, "memory slots of the DP")->check(CLI::Range(1, 100000));
  app.add_option(
      "--strategy", o.strategy,
      "optimal, periodic[:k] (k segments; default the fastest k that fits), revolve or none");
  app.add_flag("--schedule", o.print_schedule, "print the op sequence");
  app.add_option("--curve", o.curve_points, "print this many points of the time-memory curve");
  app.add_option("--write-chain", o.write_chain, "write the chain as JSON");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
