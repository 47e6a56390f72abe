// Cost fit (see cost_fit.h).
#include "solver/cost_fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace jitckpt::solver {
namespace {

__extension__ using Wide = __int128;  // exact products of sizes and byte counts

// The one variable every varying size follows: its value per sample, then the target's; nothing
// where no size varies or two vary apart.
std::optional<std::vector<int64_t>> variableOf(const std::vector<CostSample>& samples,
                                               const std::vector<int64_t>& target) {
  std::optional<size_t> first;
  for (size_t p = 0; p < target.size(); ++p) {
    const bool varies = std::any_of(samples.begin(), samples.end(),
                                    [&](const CostSample& s) { return s.sizes[p] != target[p]; });
    if (!varies) continue;
    if (!first) {
      first = p;
      continue;
    }
    for (const auto& s : samples)
      if (s.sizes[p] != s.sizes[*first]) return std::nullopt;
    if (target[p] != target[*first]) return std::nullopt;
  }
  if (!first) return std::nullopt;
  std::vector<int64_t> values;
  for (const auto& s : samples) values.push_back(s.sizes[*first]);
  values.push_back(target[*first]);
  return values;
}

// Exact arithmetic that says when it overflows.
bool mul(Wide a, Wide b, Wide& out) { return !__builtin_mul_overflow(a, b, &out); }
bool add(Wide a, Wide b, Wide& out) { return !__builtin_add_overflow(a, b, &out); }

// The quadratic through (x[k], y[k]) for k = 0, 1, 2 (distinct x), at `at`: exactly, as a whole
// number; nothing where it is not one or the arithmetic would overflow.
std::optional<Wide> quadraticAt(const std::array<int64_t, 3>& x, const std::array<int64_t, 3>& y,
                                int64_t at) {
  // P(at) = sum_i y_i prod_{j != i} (at - x_j) / d_i, d_i = prod_{j != i} (x_i - x_j); over d_0 d_1
  // d_2.
  std::array<Wide, 3> d{};
  for (size_t i = 0; i < 3; ++i) {
    d[i] = 1;
    for (size_t j = 0; j < 3; ++j)
      if (j != i && !mul(d[i], Wide(x[i]) - x[j], d[i])) return std::nullopt;
  }
  Wide denominator = 1, numerator = 0;
  for (size_t i = 0; i < 3; ++i)
    if (!mul(denominator, d[i], denominator)) return std::nullopt;
  for (size_t i = 0; i < 3; ++i) {
    Wide term = y[i];
    for (size_t j = 0; j < 3; ++j)
      if (j != i && !mul(term, Wide(at) - x[j], term)) return std::nullopt;
    if (!mul(term, denominator / d[i], term) || !add(numerator, term, numerator))
      return std::nullopt;
  }
  if (numerator % denominator != 0) return std::nullopt;
  return numerator / denominator;
}

std::optional<int64_t> exactCount(const std::vector<int64_t>& v, const std::vector<int64_t>& y);

// The samples (v's entries but the last, the target's) as (size, count), by size.
std::vector<std::pair<int64_t, int64_t>> bySize(const std::vector<int64_t>& v,
                                                const std::vector<int64_t>& y) {
  std::vector<std::pair<int64_t, int64_t>> samples;
  for (size_t i = 0; i < y.size(); ++i) samples.emplace_back(v[i], y[i]);
  std::sort(samples.begin(), samples.end());
  return samples;
}

// A count that no quadratic gives but that does not grow with the size (a kernel's workspace
// chosen by a threshold, a scalar some sizes make): the largest sampled, where the samples never
// rise from one size to a larger one and the target is not below them all (where such a count may
// be larger still); nothing otherwise.
std::optional<int64_t> boundedCount(const std::vector<int64_t>& v, const std::vector<int64_t>& y) {
  const auto by_size = bySize(v, y);
  if (v.back() < by_size.front().first) return std::nullopt;
  for (size_t i = 1; i < by_size.size(); ++i)
    if (by_size[i].second > by_size[i - 1].second) return std::nullopt;
  return by_size.front().second;
}

// A stage's overhead (a peak above its output: the largest of its ops' transients, each its own
// polynomial) that no one quadratic gives, at a target between the samples: the largest sampled
// from the size nearest below the target up. Each op's transient grows with the size, or, where a
// threshold picks a kernel, keeps to what the sample below took; nothing beyond the samples.
std::optional<int64_t> envelopedCount(const std::vector<int64_t>& v,
                                      const std::vector<int64_t>& y) {
  const int64_t at = v.back();
  std::optional<int64_t> below, bound;
  for (size_t i = 0; i < y.size(); ++i)
    if (v[i] < at && (!below || v[i] > *below)) below = v[i];
  const bool above = std::any_of(v.begin(), v.end() - 1, [&](int64_t x) { return x > at; });
  if (!below || !above) return std::nullopt;
  for (size_t i = 0; i < y.size(); ++i)
    if (v[i] >= *below) bound = std::max(bound.value_or(0), y[i]);
  return bound;
}

// An overhead at a target outside the samples' sizes (above them all or below), where it does
// not fall toward the target between the two sizes nearest it: the quadratic, and at least the
// nearest size's sample, else boundedCount. Where it falls there, the largest transient shrinks
// toward the target, and one that grows there, below it at every sample, may overtake it just
// beyond them (a GRU's backward, measured: 96 B less a step up to length 16, then 192 B more; an
// attention's below the samples: a fixed workspace under a transient that grows with the length);
// where it has stopped falling (an embedding's backward workspace, above), what grows shows.
std::optional<int64_t> overheadOutside(const std::vector<int64_t>& v,
                                       const std::vector<int64_t>& y) {
  const auto samples = bySize(v, y);
  const bool above = v.back() > samples.back().first;
  const auto& nearest = above ? samples.back() : samples.front();
  const auto& next = above ? samples[samples.size() - 2] : samples[1];
  if (nearest.second < next.second) return std::nullopt;
  if (const auto exact = exactCount(v, y)) return std::max(*exact, nearest.second);
  return boundedCount(v, y);
}

// A byte count at the target (v's last entry): the quadratic through three samples, where it
// gives every other sample exactly, else boundedCount, else, for an overhead, envelopedCount; an
// overhead outside the samples' sizes, overheadOutside.
std::optional<int64_t> predictedCount(const std::vector<int64_t>& v, const std::vector<int64_t>& y,
                                      bool overhead = false) {
  const auto samples = bySize(v, y);
  if (overhead && (v.back() > samples.back().first || v.back() < samples.front().first))
    return overheadOutside(v, y);
  if (const auto exact = exactCount(v, y)) return exact;
  if (const auto bounded = boundedCount(v, y)) return bounded;
  return overhead ? envelopedCount(v, y) : std::nullopt;
}

// The quadratic through three samples at the target, where it gives every other sample exactly.
std::optional<int64_t> exactCount(const std::vector<int64_t>& v, const std::vector<int64_t>& y) {
  const std::array<int64_t, 3> x3{v[0], v[1], v[2]}, y3{y[0], y[1], y[2]};
  for (size_t i = 3; i < y.size(); ++i) {
    const auto value = quadraticAt(x3, y3, v[i]);
    if (!value || *value != y[i]) return std::nullopt;
  }
  const auto value = quadraticAt(x3, y3, v.back());
  if (!value || *value < 0 || *value > std::numeric_limits<int64_t>::max()) return std::nullopt;
  return static_cast<int64_t>(*value);
}

// Times: the least-squares quadratic through the samples, at the target; x scaled to [-1, 1] so
// that the normal equations stay well conditioned.
std::optional<long double> fittedTime(const std::vector<int64_t>& v,
                                      const std::vector<long double>& y) {
  const auto [low, high] = std::minmax_element(v.begin(), v.end() - 1);
  const long double mid = (static_cast<long double>(*low) + *high) / 2;
  const long double half = std::max<long double>((static_cast<long double>(*high) - *low) / 2, 1);
  std::array<std::array<long double, 4>, 3> m{};
  for (size_t i = 0; i < y.size(); ++i) {
    const long double x = (v[i] - mid) / half;
    const std::array<long double, 3> basis{1.0L, x, x * x};
    for (size_t r = 0; r < 3; ++r) {
      for (size_t c = 0; c < 3; ++c) m[r][c] += basis[r] * basis[c];
      m[r][3] += basis[r] * y[i];
    }
  }
  for (size_t col = 0; col < 3; ++col) {  // Gauss-Jordan with partial pivoting
    size_t pivot = col;
    for (size_t r = col + 1; r < 3; ++r)
      if (std::fabs(m[r][col]) > std::fabs(m[pivot][col])) pivot = r;
    if (std::fabs(m[pivot][col]) < 1e-12L) return std::nullopt;
    std::swap(m[col], m[pivot]);
    for (size_t r = 0; r < 3; ++r) {
      if (r == col) continue;
      const long double f = m[r][col] / m[col][col];
      for (size_t c = col; c < 4; ++c) m[r][c] -= f * m[col][c];
    }
  }
  const long double x = (v.back() - mid) / half;
  return m[0][3] / m[0][0] + m[1][3] / m[1][1] * x + m[2][3] / m[2][2] * x * x;
}

// Fills `out` entry by entry from the samples' entries of one field; false where a count is not
// exact or the field's presence differs.
bool fitCounts(const std::vector<CostSample>& samples, const std::vector<int64_t>& v,
               std::vector<int64_t> Costs::*field, Costs& out) {
  const bool overhead = field == &Costs::of || field == &Costs::of_nograd || field == &Costs::ob;
  const std::vector<int64_t>& model = samples[0].costs->*field;
  for (const auto& s : samples)
    if ((s.costs->*field).size() != model.size()) return false;
  (out.*field).assign(model.size(), 0);
  for (size_t l = 0; l < model.size(); ++l) {
    std::vector<int64_t> y;
    for (const auto& s : samples) y.push_back((s.costs->*field)[l]);
    const auto count = predictedCount(v, y, overhead);
    if (!count) return false;
    (out.*field)[l] = *count;
  }
  return true;
}

bool fitTimes(const std::vector<CostSample>& samples, const std::vector<int64_t>& v,
              std::vector<double> Costs::*field, Costs& out) {
  const std::vector<double>& model = samples[0].costs->*field;
  for (const auto& s : samples)
    if ((s.costs->*field).size() != model.size()) return false;
  (out.*field).assign(model.size(), 0);
  for (size_t l = 0; l < model.size(); ++l) {
    std::vector<long double> y;
    for (const auto& s : samples) y.push_back((s.costs->*field)[l]);
    const auto t = fittedTime(v, y);
    if (!t) return false;
    (out.*field)[l] = static_cast<double>(std::max(*t, 0.0L));
  }
  return true;
}

bool sameStructure(const std::vector<CostSample>& samples) {
  const Costs& a = *samples[0].costs;
  return std::all_of(samples.begin(), samples.end(), [&](const CostSample& s) {
    const Costs& b = *s.costs;
    if (b.length() != a.length() || b.runs_once != a.runs_once || b.spans.size() != a.spans.size())
      return false;
    for (size_t k = 0; k < a.spans.size(); ++k)
      if (a.spans[k].first != b.spans[k].first || a.spans[k].last != b.spans[k].last) return false;
    return true;
  });
}

}  // namespace

std::optional<Costs> predictCosts(const std::vector<CostSample>& samples,
                                  const std::vector<int64_t>& target, bool rounded_sizes) {
  if (samples.size() < kMinSamples) return std::nullopt;
  for (const auto& s : samples)
    if (!s.costs || s.sizes.size() != target.size()) return std::nullopt;
  if (!sameStructure(samples)) return std::nullopt;
  const auto v = variableOf(samples, target);
  if (!v) return std::nullopt;
  std::vector<int64_t> sampled(v->begin(), v->end() - 1);
  std::sort(sampled.begin(), sampled.end());
  if (std::adjacent_find(sampled.begin(), sampled.end()) != sampled.end()) return std::nullopt;
  const int64_t span = sampled.back() - sampled.front();
  if (v->back() < sampled.front() - span || v->back() > sampled.back() + span)
    return std::nullopt;  // extrapolated at most the samples' own span
  if (std::binary_search(sampled.begin(), sampled.end(), v->back())) return std::nullopt;
  if (rounded_sizes) {
    int64_t step = 0;
    for (int64_t x : sampled) step = std::gcd(step, x - sampled.front());
    if ((v->back() - sampled.front()) % step != 0) return std::nullopt;
  }

  Costs c;
  for (auto field : {&Costs::wa, &Costs::wabar, &Costs::wd, &Costs::of, &Costs::of_nograd,
                     &Costs::ob, &Costs::wg, &Costs::wd_handed})
    if (!fitCounts(samples, *v, field, c)) return std::nullopt;
  for (auto field : {&Costs::uf, &Costs::uf_nograd, &Costs::ub})
    if (!fitTimes(samples, *v, field, c)) return std::nullopt;
  std::vector<int64_t> held;
  for (const auto& s : samples) held.push_back(s.costs->held_output);
  const auto held_output = predictedCount(*v, held);
  if (!held_output) return std::nullopt;
  c.held_output = *held_output;
  c.runs_once = samples[0].costs->runs_once;
  c.spans = samples[0].costs->spans;
  for (size_t k = 0; k < c.spans.size(); ++k) {
    std::vector<int64_t> y;
    for (const auto& s : samples) y.push_back(s.costs->spans[k].bytes);
    const auto bytes = predictedCount(*v, y);
    if (!bytes) return std::nullopt;
    c.spans[k].bytes = *bytes;
  }
  try {
    validate(c);
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
  return c;
}

void scaleTimes(const std::vector<CostSample>& samples, Costs& measured) {
  auto weight = [](const Costs& c) {
    long double bytes = 0;
    for (int64_t w : c.wabar) bytes += static_cast<long double>(w);
    return bytes;
  };
  const CostSample* nearest = nullptr;
  long double distance = std::numeric_limits<long double>::max();
  for (const auto& s : samples) {
    if (!s.costs || s.costs->length() != measured.length()) continue;
    const long double d = std::fabs(std::log((weight(*s.costs) + 1) / (weight(measured) + 1)));
    if (d < distance) distance = d, nearest = &s;
  }
  if (!nearest) throw std::invalid_argument("scaleTimes: no sample of this chain's length");
  const Costs& from = *nearest->costs;
  measured.uf.assign(from.uf.size(), 0);
  measured.ub.assign(from.ub.size(), 0);
  measured.uf_nograd.assign(from.uf_nograd.size(), 0);
  for (size_t l = 1; l < from.uf.size(); ++l) {
    const double scale = from.wabar[l] > 0 ? static_cast<double>(measured.wabar[l]) /
                                                 static_cast<double>(from.wabar[l])
                                           : 1.0;
    measured.uf[l] = from.uf[l] * scale;
    measured.ub[l] = from.ub[l] * scale;
    if (!from.uf_nograd.empty()) measured.uf_nograd[l] = from.uf_nograd[l] * scale;
  }
}

}  // namespace jitckpt::solver
