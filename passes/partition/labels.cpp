// Step 10 of the partition pass: stage labels, from the modules whose parameters each stage reads.
#include <algorithm>
#include <string>

#include "passes/partition/steps.h"

namespace jitckpt::partition_steps {
namespace {

using Path = std::vector<std::string>;  // an attribute path split at its dots

Path split(const std::string& path) {
  Path parts;
  size_t start = 0;
  for (size_t dot; (dot = path.find('.', start)) != std::string::npos; start = dot + 1) {
    parts.push_back(path.substr(start, dot - start));
  }
  parts.push_back(path.substr(start));
  return parts;
}

std::string join(const Path& parts, size_t count) {
  std::string path;
  for (size_t i = 0; i < count; ++i) path += (i ? "." : "") + parts[i];
  return path;
}

bool isUnder(const Path& path, const Path& prefix, size_t n) {
  return path.size() >= n && std::equal(prefix.begin(), prefix.begin() + n, path.begin());
}

// For each stage, the modules that own the parameters it reads, in the order it reads them.
std::vector<std::vector<Path>> parameterOwners(const Partition& partition) {
  std::vector<std::vector<Path>> owners(partition.stages.size());
  for (size_t s = 0; s < partition.stages.size(); ++s) {
    for (size_t k : partition.stages[s].lifted) {
      if (partition.lifted[k].kind != LiftedKind::Parameter) continue;
      auto parts = split(partition.lifted[k].name);
      parts.pop_back();  // "weight", "bias"
      if (!parts.empty()) owners[s].push_back(parts);
    }
  }
  return owners;
}

// Length of the path that all of `paths` start with.
size_t commonLength(const std::vector<Path>& paths) {
  const auto& head = paths.front();
  size_t common = head.size();
  for (const auto& o : paths) {
    size_t c = 0;
    while (c < common && c < o.size() && o[c] == head[c]) ++c;
    common = c;
  }
  return common;
}

// Whether no other stage reads a parameter under the first `common` parts of `head`.
bool uniqueToStage(const std::vector<std::vector<Path>>& owners, size_t s, const Path& head,
                   size_t common) {
  if (common == 0) return false;
  for (size_t t = 0; t < owners.size(); ++t) {
    if (t == s) continue;
    for (const auto& o : owners[t]) {
      if (isUnder(o, head, common)) return false;
    }
  }
  return true;
}

// Label of stage s, whose owners are not empty.
std::string moduleLabel(const std::vector<std::vector<Path>>& owners, size_t s) {
  const auto& head = owners[s].front();
  const size_t common = commonLength(owners[s]);
  if (uniqueToStage(owners, s, head, common)) return join(head, common);
  const auto& tail = owners[s].back();
  std::string label = join(head, std::min(common + 1, head.size()));
  if (tail.size() > common && tail[common] != head[std::min(common, head.size() - 1)]) {
    label += ".." + tail[common];
  }
  return label;
}

}  // namespace

void labelStagesByModule(Partition& partition) {
  const auto owners = parameterOwners(partition);
  for (size_t s = 0; s < owners.size(); ++s) {
    if (!owners[s].empty()) partition.stages[s].label = moduleLabel(owners, s);
  }
}

}  // namespace jitckpt::partition_steps
