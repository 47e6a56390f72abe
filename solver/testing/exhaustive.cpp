// Exhaustive persistent enumeration and a Dijkstra search over all memory states.
#include "solver/testing/exhaustive.h"

#include <map>
#include <queue>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

#include "solver/simulator.h"

namespace jitckpt::solver {
namespace {

// All persistent sequences for the sub-chain (s, t): Fall(s) + (s+1,t) + B(s), or
// Fck(s) F∅(s+1..s'-1) + (s',t) + (s,s'-1) for every split s'.
std::vector<Schedule> persistentSequences(
    int s, int t, std::map<std::pair<int, int>, std::vector<Schedule>>& memo) {
  auto it = memo.find({s, t});
  if (it != memo.end()) return it->second;
  std::vector<Schedule> all;
  if (s == t) {
    all.push_back({{OpKind::ForwardAll, s}, {OpKind::Backward, s}});
  } else {
    for (const Schedule& inner : persistentSequences(s + 1, t, memo)) {
      Schedule seq{{OpKind::ForwardAll, s}};
      seq.insert(seq.end(), inner.begin(), inner.end());
      seq.push_back({OpKind::Backward, s});
      all.push_back(std::move(seq));
    }
    for (int split = s + 1; split <= t; ++split) {
      Schedule forward{{OpKind::ForwardCheck, s}};
      for (int j = s + 1; j < split; ++j) forward.push_back({OpKind::ForwardNone, j});
      const auto rights = persistentSequences(split, t, memo);
      const auto lefts = persistentSequences(s, split - 1, memo);
      for (const Schedule& right : rights) {
        for (const Schedule& left : lefts) {
          Schedule seq = forward;
          seq.insert(seq.end(), right.begin(), right.end());
          seq.insert(seq.end(), left.begin(), left.end());
          all.push_back(std::move(seq));
        }
      }
    }
  }
  memo[{s, t}] = all;
  return all;
}

}  // namespace

SearchResult bestPersistentSequence(const Costs& chain, int64_t limit) {
  validate(chain);
  if (chain.length() > 8)
    throw std::invalid_argument("exhaustive persistent search: chain too long (at most 8 stages)");
  std::map<std::pair<int, int>, std::vector<Schedule>> memo;
  SearchResult best;
  for (const Schedule& seq : persistentSequences(1, chain.length(), memo)) {
    const SimulationResult sim = simulate(chain, seq);
    if (!sim.valid || !sim.complete || sim.peak > limit) continue;
    if (!best.feasible || sim.time < best.time) {
      best = {true, seq, sim.time, sim.peak};
    }
  }
  return best;
}

SearchResult bestAnySequence(const Costs& chain, int64_t limit) {
  validate(chain);
  const int L = chain.length();
  if (L > 12)
    throw std::invalid_argument(
        "exhaustive search over all sequences: chain too long (at most 12 stages)");
  // With spans, memory depends on which run made each copy, not on the state below alone.
  if (!chain.spans.empty())
    throw std::invalid_argument(
        "exhaustive search over all sequences: chains with spans are not "
        "searched (clear Costs::spans)");
  // State: bit l of `a` = a^l held alone, bit l of `abar` = abar^l held, `delta` = index of the
  // gradient held (exactly one at any time). The transitions below are Table 1 exactly as the
  // simulator applies them (same validity rules, same peak = held + produced + overhead); the
  // tests replay every schedule found here with the simulator. Among equally fast schedules the
  // one with the fewest ops wins, so that zero-cost detours do not show up. `output_apart`: the
  // caller's copy of a^{L-1} is counted apart (Costs::held_output).
  struct State {
    uint32_t a, abar;
    int delta;
    bool output_apart;
    bool operator<(const State& o) const {
      return std::tie(a, abar, delta, output_apart) <
             std::tie(o.a, o.abar, o.delta, o.output_apart);
    }
  };
  auto memory = [&](const State& st) {
    int64_t held = chain.wd[st.delta] + (st.output_apart ? chain.held_output : 0);
    for (int l = st.delta + 1; l <= L; ++l) held += chain.gradientBytes(l);  // B(l) has run
    for (int l = 0; l <= L; ++l) {
      if (st.abar >> l & 1)
        held += chain.abarOwnBytes(l);
      else if (st.a >> l & 1)
        held += chain.wa[l];
    }
    return held;
  };
  using Cost = std::pair<double, int>;  // (time, number of ops)
  struct Entry {
    Cost cost;
    State state;
    bool operator>(const Entry& o) const { return cost > o.cost; }
  };
  std::map<State, Cost> dist;
  std::map<State, std::pair<State, Op>> parent;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  const State start{1u, 0u, L, false};
  if (memory(start) > limit) return {};
  dist[start] = {0, 0};
  queue.push({{0, 0}, start});
  while (!queue.empty()) {
    const Entry entry = queue.top();
    queue.pop();
    if (entry.cost > dist[entry.state]) continue;
    const State st = entry.state;
    if (st.delta == 0) {
      SearchResult result;
      result.feasible = true;
      result.time = entry.cost.first;
      for (State cur = st;
           !(cur.a == start.a && cur.abar == start.abar && cur.delta == start.delta);) {
        const auto& [prev, op] = parent.at(cur);
        result.schedule.insert(result.schedule.begin(), op);
        cur = prev;
      }
      result.peak = simulate(chain, result.schedule).peak;
      return result;
    }
    const int64_t held = memory(st);
    for (int l = 1; l <= L; ++l) {
      const bool input = (st.a >> (l - 1) & 1) || (st.abar >> (l - 1) & 1);
      const bool has_a = st.a >> l & 1, has_abar = st.abar >> l & 1;
      auto relax = [&](State next, Op op, int64_t peak, double cost) {
        if (peak > limit) return;
        const Cost next_cost{entry.cost.first + cost, entry.cost.second + 1};
        auto found = dist.find(next);
        if (found != dist.end() && found->second <= next_cost) return;
        dist[next] = next_cost;
        parent[next] = {st, op};
        queue.push({next_cost, next});
      };
      if (input && !has_abar) {  // Fall(l)
        State next = st;
        next.abar |= 1u << l;
        next.a &= ~(1u << l);
        relax(next, {OpKind::ForwardAll, l}, held + chain.abarOwnBytes(l) + chain.of[l],
              chain.uf[l]);
      }
      if (input && !has_a && !has_abar) {  // Fck(l), F∅(l)
        State next = st;
        next.a |= 1u << l;
        relax(next, {OpKind::ForwardCheck, l}, held + chain.wa[l] + chain.noGradForwardOverhead(l),
              chain.noGradForward(l));
        if (st.a >> (l - 1) & 1) {
          next.a &= ~(1u << (l - 1));
          relax(next, {OpKind::ForwardNone, l}, held + chain.wa[l] + chain.noGradForwardOverhead(l),
                chain.noGradForward(l));
        }
        // F∅ from abar^{l-1} keeps abar^{l-1}: the same state as Fck(l), already relaxed.
      }
      if (st.delta == l && has_abar && input) {  // B(l)
        State next = st;
        next.abar &= ~(1u << l);
        next.a &= ~(1u << (l - 1));
        next.delta = l - 1;
        if (l == L) next.output_apart = chain.held_output > 0 && !(st.abar >> (l - 1) & 1);
        if (l == L - 1) next.output_apart = chain.held_output > 0;
        relax(next, {OpKind::Backward, l}, held + chain.backwardAddedBytes(l), chain.ub[l]);
      }
    }
  }
  return {};
}

}  // namespace jitckpt::solver
