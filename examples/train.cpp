// Trains a saved TorchScript model under a memory limit with libtorch alone:
//
//   train MODEL.pt BATCH,C,H,W LIMIT [STEPS]
//   e.g. build/examples/jitckpt-train-example resnet18.pt 8,3,64,64 auto 3
//
// The model is loaded and rewritten by jitckpt::checkpoint for the limit ("auto": what the device
// has available; "min"; bytes such as "512MiB"; a fraction of the unconstrained activation peak)
// without example inputs: the first training step profiles and plans for its own inputs, on its
// own device. The training loop is the ordinary libtorch one: only the rewrite call is new.
#include <torch/script.h>
#include <torch/torch.h>

#include <iostream>
#include <sstream>

#include "jitckpt/jitckpt.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: " << argv[0] << " MODEL.pt BATCH,C,H,W LIMIT [STEPS]\n";
    return 2;
  }
  try {
    std::vector<int64_t> shape;
    std::stringstream dims(argv[2]);
    for (std::string d; std::getline(dims, d, ',');) shape.push_back(std::stoll(d));
    const int steps = argc > 4 ? std::stoi(argv[4]) : 3;

    torch::jit::Module model = torch::jit::load(argv[1]);
    model.train();
    torch::manual_seed(0);
    torch::jit::Module rewritten = jitckpt::checkpoint(model, jitckpt::MemoryLimit::parse(argv[3]));

    std::vector<torch::Tensor> parameters;
    for (const auto& p : rewritten.parameters()) parameters.push_back(p);
    torch::optim::SGD optimizer(parameters, torch::optim::SGDOptions(0.01).momentum(0.9));
    for (int step = 0; step < steps; ++step) {
      torch::Tensor x = torch::randn(shape);
      // Gradients freed, not zeroed (zero_grad's default on libtorch 2.x, not on 1.13): the
      // chain's new ones then take .grad's place instead of being held beside it.
      for (auto& p : parameters) p.mutable_grad() = torch::Tensor();
      torch::Tensor loss = rewritten.forward({x}).toTensor().pow(2).mean();
      loss.backward();
      optimizer.step();
      std::cout << "step " << step << " loss " << loss.item<double>() << "\n";
      if (step == 0) std::cout << jitckpt::planOf(rewritten)->str();  // with the plan made
    }
  } catch (const std::exception& e) {  // torch's errors say what to do before their backtrace
    const std::string what = e.what();
    std::cerr << "error: " << what.substr(0, what.find("\nException raised from")) << "\n";
    return 1;
  }
  return 0;
}
