// Trains a module that `jitckpt optimize` (or jitckpt.checkpoint and torch.jit.save) rewrote, with
// libtorch alone: the training program changes nothing but the file it loads.
//
//   train_saved REWRITTEN.pt BATCH,C,H,W [STEPS]
//   e.g. jitckpt optimize resnet18.pt --input 8,3,64,64 --memory-limit 0.5 -o resnet18.ckpt.pt
//        build-example/jitckpt-train-saved resnet18.ckpt.pt 8,3,64,64 3
//
// Including jitckpt/jitckpt.h is what makes torch::jit::load know the jitckpt::chain op: the
// header keeps libjitckpt linked, and loading it registers the op (no linker flags needed).
#include <torch/script.h>
#include <torch/torch.h>

#include <iostream>
#include <sstream>

#include "jitckpt/jitckpt.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: " << argv[0] << " REWRITTEN.pt BATCH,C,H,W [STEPS]\n";
    return 2;
  }
  try {
    std::vector<int64_t> shape;
    std::stringstream dims(argv[2]);
    for (std::string d; std::getline(dims, d, ',');) shape.push_back(std::stoll(d));
    const int steps = argc > 3 ? std::stoi(argv[3]) : 3;

    torch::jit::Module model = torch::jit::load(argv[1]);
    model.train();
    if (const auto plan = jitckpt::planOf(model)) std::cout << plan->str();

    std::vector<torch::Tensor> parameters;
    for (const auto& p : model.parameters()) parameters.push_back(p);
    torch::optim::SGD optimizer(parameters, torch::optim::SGDOptions(0.01));
    torch::manual_seed(0);
    for (int step = 0; step < steps; ++step) {
      for (auto& p : parameters) p.mutable_grad() = torch::Tensor();
      torch::Tensor loss = model.forward({torch::randn(shape)}).toTensor().pow(2).mean();
      loss.backward();
      optimizer.step();
      std::cout << "step " << step << " loss " << loss.item<double>() << "\n";
    }
  } catch (const std::exception& e) {
    const std::string what = e.what();
    std::cerr << "error: " << what.substr(0, what.find("\nException raised from")) << "\n";
    return 1;
  }
  return 0;
}
