// jitckpt-solve: the torch-free solver on a chain file or a built-in chain. Prints the schedule
// for a limit, the time-memory curve, and the baselines at the same limit.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>

#include "passes/solver/baselines.h"
#include "passes/solver/builtin_chains.h"
#include "passes/solver/memory_size.h"
#include "passes/solver/persistent_dp.h"
#include "passes/solver/simulator.h"

using namespace jitckpt::solver;

namespace {

void printRow(const char* name, const SimulationResult& sim, double reference_time) {
  std::printf("  %-14s peak %12s  time %10.4f  (%.2fx)  recomputed forwards %d\n", name,
              formatBytes(sim.peak).c_str(), sim.time, sim.time / reference_time,
              sim.recomputations);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"jitckpt-solve: optimal checkpointing schedule for a chain (torch-free)"};
  std::string chain_file, builtin, limit_text = "none", strategy = "optimal", write_chain;
  int slots = 500, curve_points = 0;
  bool print_schedule = false;
  auto* source = app.add_option_group("chain");
  source->add_option("--chain", chain_file, "chain file (JSON with uf ub wa wabar wd of ob)");
  source->add_option("--builtin", builtin, "built-in chain: resnet1001 or resnetlike:L");
  source->require_option(1);
  app.add_option(
      "--memory-limit", limit_text,
      "bytes (2GiB, 512MiB), a fraction of the no-checkpointing peak (0.5, 50%), or none");
  app.add_option("--slots", slots, "memory slots of the DP")->check(CLI::Range(1, 100000));
  app.add_option(
      "--strategy", strategy,
      "optimal, periodic[:k] (k segments; default the fastest k that fits), revolve or none");
  app.add_flag("--schedule", print_schedule, "print the op sequence");
  app.add_option("--curve", curve_points, "print this many points of the time-memory curve");
  app.add_option("--write-chain", write_chain, "write the chain as JSON");
  CLI11_PARSE(app, argc, argv);

  try {
    int segments = 0;  // periodic:k
    if (strategy.rfind("periodic:", 0) == 0) {
      try {
        size_t used = 0;
        segments = std::stoi(strategy.substr(9), &used);
        if (used != strategy.size() - 9 || segments < 1) segments = -1;
      } catch (const std::exception&) {
        segments = -1;
      }
      if (segments < 0)
        throw std::invalid_argument("--strategy " + strategy +
                                    ": write periodic:k with k >= 1 segments");
      strategy = "periodic";
    } else if (strategy != "optimal" && strategy != "periodic" && strategy != "revolve" &&
               strategy != "none") {
      throw std::invalid_argument("--strategy " + strategy +
                                  ": use optimal, periodic, periodic:k, revolve or none");
    }
    const Chain chain = chain_file.empty() ? builtinChain(builtin) : readChainFile(chain_file);
    if (!write_chain.empty()) writeChainFile(chain, write_chain);
    const SimulationResult none = simulate(chain, noCheckpointSchedule(chain));
    const int64_t limit = std::min(parseMemorySpec(limit_text).resolve(none.peak), none.peak * 4);
    std::printf("chain: %d stages, input %s, no-checkpointing peak %s, time %.4f\n", chain.length(),
                formatBytes(chain.wa[0]).c_str(), formatBytes(none.peak).c_str(), none.time);
    std::printf("limit: %s\n", formatBytes(limit).c_str());

    Schedule chosen;
    if (strategy == "optimal" || strategy == "revolve") {
      // The table is built for this limit: slots of limit/S bytes, the finest resolution there.
      const auto start = std::chrono::steady_clock::now();
      const SolveResult result = strategy == "optimal" ? solveOptimal(chain, limit, slots)
                                                       : solveRevolve(chain, limit, slots);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("solved (L=%d, S=%d, slot %s) in %.3f s\n", chain.length(), slots,
                  formatBytes(std::max<int64_t>(1, (limit + slots - 1) / slots)).c_str(), seconds);
      if (!result.feasible) {
        std::fprintf(stderr, "error: %s\n", result.message.c_str());
        if (result.min_feasible_limit > 0) {
          std::fprintf(
              stderr,
              "the smallest limit that works is about %s (%.3f of the no-checkpointing peak)\n",
              formatBytes(result.min_feasible_limit).c_str(),
              static_cast<double>(result.min_feasible_limit) / static_cast<double>(none.peak));
        }
        return 2;
      }
      chosen = result.schedule;
    } else if (strategy == "none") {
      chosen = noCheckpointSchedule(chain);
    } else {
      double best = -1;
      for (int k = segments > 0 ? segments : 1; k <= (segments > 0 ? segments : chain.length());
           ++k) {
        const Schedule s = periodicSchedule(chain, k);
        const SimulationResult sim = simulate(chain, s);
        if (sim.peak <= limit && (best < 0 || sim.time < best)) {
          best = sim.time;
          chosen = s;
        }
      }
      if (chosen.empty()) {
        std::fprintf(
            stderr, "error: no periodic schedule%s fits in %s\n",
            segments > 0 ? (" with " + std::to_string(segments) + " segments").c_str() : "",
            formatBytes(limit).c_str());
        return 2;
      }
    }
    const SimulationResult sim = simulate(chain, chosen);
    if (sim.peak > limit) {
      std::fprintf(stderr, "error: the %s schedule needs %s, above the limit %s\n",
                   strategy.c_str(), formatBytes(sim.peak).c_str(), formatBytes(limit).c_str());
      return 2;
    }
    std::printf("\n%s schedule at %s:\n", strategy.c_str(), formatBytes(limit).c_str());
    printRow(strategy.c_str(), sim, none.time);
    if (print_schedule) std::printf("  %s\n", toString(chosen).c_str());

    std::printf("\nbaselines at the same limit:\n");
    printRow("none", none, none.time);
    SimulationResult best_periodic;
    int best_k = 0;
    for (int k = 1; k <= chain.length(); ++k) {
      const SimulationResult p = simulate(chain, periodicSchedule(chain, k));
      if (p.peak <= limit && (best_k == 0 || p.time < best_periodic.time)) {
        best_periodic = p;
        best_k = k;
      }
    }
    if (best_k) {
      const std::string name = "periodic:" + std::to_string(best_k);
      printRow(name.c_str(), best_periodic, none.time);
    } else {
      std::printf("  %-14s does not fit\n", "periodic");
    }
    const SolveResult revolve = solveRevolve(chain, limit, slots);
    if (revolve.feasible)
      printRow("revolve", simulate(chain, revolve.schedule), none.time);
    else
      std::printf("  %-14s does not fit\n", "revolve");

    if (curve_points > 0) {
      // One table up to the no-checkpointing peak gives the optimum at every limit below it.
      const auto start = std::chrono::steady_clock::now();
      const PersistentSolver solver(chain, none.peak, slots);
      const auto curve = solver.curve();
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf(
          "\ntime-memory curve (optimal, one table up to %s, S=%d, %.3f s; %zu points in all):\n",
          formatBytes(none.peak).c_str(), slots, seconds, curve.size());
      for (int i = 0; i < curve_points && !curve.empty(); ++i) {
        const size_t index =
            curve_points == 1 ? curve.size() - 1 : i * (curve.size() - 1) / (curve_points - 1);
        std::printf("  limit %12s  time %10.4f  (%.2fx)\n", formatBytes(curve[index].limit).c_str(),
                    curve[index].time, curve[index].time / none.time);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
