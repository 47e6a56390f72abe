// Stable text form of a Partition.
#include "passes/partition/print.h"

#include <sstream>

#include "passes/partition/call_values.h"

namespace jitckpt {

std::string describeValue(const torch::jit::Value* value) {
  std::ostringstream os;
  os << "%" << value->debugName() << " : ";
  const auto tensor = value->type()->cast<c10::TensorType>();
  if (tensor && tensor->isComplete()) {
    const auto sizes = *tensor->sizes().concrete_sizes();
    const auto dtype = *tensor->scalarType();
    int64_t numel = 1;
    os << c10::toString(dtype) << "(";
    for (size_t i = 0; i < sizes.size(); ++i) {
      os << (i ? ", " : "") << sizes[i];
      numel *= sizes[i];
    }
    os << ") " << numel * static_cast<int64_t>(c10::elementSize(dtype)) << " B";
  } else {
    os << value->type()->annotation_str();
  }
  return os.str();
}

namespace {
void printValues(std::ostream& out, const std::vector<torch::jit::Value*>& values) {
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << describeValue(values[i]);
}
// One node per line, nested blocks indented below their node; constants are left out (their
// values are in the stage graph).
void printNode(std::ostream& out, const torch::jit::Node* n, int indent) {
  if (n->kind() == c10::prim::Constant) return;
  out << std::string(indent, ' ');
  for (size_t o = 0; o < n->outputs().size(); ++o)
    out << (o ? ", " : "") << "%" << n->output(o)->debugName();
  out << (n->outputs().empty() ? "" : " = ") << n->kind().toQualString() << "(";
  for (size_t i = 0; i < n->inputs().size(); ++i)
    out << (i ? ", " : "") << "%" << n->input(i)->debugName();
  out << ")\n";
  for (size_t b = 0; b < n->blocks().size(); ++b) {
    out << std::string(indent + 2, ' ') << "block" << b << ":\n";
    for (const torch::jit::Node* inner : n->blocks()[b]->nodes()) printNode(out, inner, indent + 4);
  }
}
}  // namespace

void printPartition(std::ostream& out, const Partition& partition) {
  out << "chain: " << partition.stages.size() << " stages\n";
  for (const auto& warning : partition.warnings) out << "warning: " << warning << "\n";
  out << "input: ";
  printValues(out, partition.chain_inputs);
  out << "\noutput: ";
  printValues(out, partition.chain_outputs);
  out << "\nlifted:\n";
  for (size_t k = 0; k < partition.lifted.size(); ++k) {
    const LiftedInput& l = partition.lifted[k];
    out << "  [" << k << "] " << toString(l.kind) << " " << l.name << " : "
        << l.value->type()->annotation_str();
    if (l.kind != LiftedKind::Side && variesBeyondShapes(l.value)) out << " (beyond shapes)";
    out << "\n";
  }
  for (size_t s = 0; s < partition.stages.size(); ++s) {
    const Stage& stage = partition.stages[s];
    out << "stage " << s + 1 << " \"" << stage.label << "\"";  // 1..L, as in the plan
    if (stage.writes_activation_input) out << " writes-input";
    if (s < partition.boundary_bytes.size()) {
      out << "  (boundary " << partition.boundary_bytes[s]
          << (partition.bytes_measured ? " B)" : " tensor(s))");
    }
    out << "\n  inputs: ";
    std::vector<torch::jit::Value*> inputs(
        stage.graph->inputs().begin(), stage.graph->inputs().begin() + stage.num_activation_inputs);
    printValues(out, inputs);
    out << "\n  lifted:";
    for (size_t k : stage.lifted) out << " [" << k << "]";
    if (!stage.mutated_lifted.empty()) {
      out << "\n  mutates:";
      for (size_t k : stage.mutated_lifted) out << " " << partition.lifted[k].name;
    }
    out << "\n  outputs: ";
    if (s + 1 == partition.stages.size() && s + 1 < partition.boundary_bytes.size()) {
      out << "(boundary " << partition.boundary_bytes[s + 1]
          << (partition.bytes_measured ? " B) " : " tensor(s)) ");
    }
    std::vector<torch::jit::Value*> outputs(stage.graph->outputs().begin(),
                                            stage.graph->outputs().end());
    printValues(out, outputs);
    out << "\n  nodes:\n";
    for (const torch::jit::Node* n : stage.graph->nodes()) printNode(out, n, 4);
  }
}

}  // namespace jitckpt
