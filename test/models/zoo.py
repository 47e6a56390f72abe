"""The models the benchmarks train, each in two forms that share their parameters: the scripted
module (plain TorchScript and jitckpt) and the equivalent eager nn.Sequential (the paper's
adaptation, for torch.utils.checkpoint.checkpoint_sequential and torch.compile).

Names: resnet18 .. resnet152 and the paper's resnet1001 (torchvision's ImageNet ResNet with
Bottleneck blocks [33, 99, 168, 33]: 333 blocks, a chain of length 339 as in the paper),
densenet121 .. densenet201, inception_v3 (no auxiliary head: its branch is not a chain).
"""
import re
import warnings
from typing import List, Tuple

import torch
import torchvision
from torchvision.models.resnet import Bottleneck, ResNet

RESNET1001_LAYERS = [33, 99, 168, 33]


def _eager(name: str) -> torch.nn.Module:
    if name == "resnet1001":
        return ResNet(Bottleneck, RESNET1001_LAYERS)
    if re.fullmatch(r"resnet(18|34|50|101|152)|densenet(121|161|169|201)", name):
        return getattr(torchvision.models, name)()
    if name == "inception_v3":
        return torchvision.models.inception_v3(aux_logits=False, init_weights=False)
    raise SystemExit(f"unknown model '{name}': use resnet18..resnet152, resnet1001, densenet121..201 or inception_v3")


def _sequential(name: str, model: torch.nn.Module) -> torch.nn.Sequential:
    """The same computation as model.forward, as a flat nn.Sequential of the model's own modules."""
    blocks: List[torch.nn.Module]
    if name.startswith("resnet"):
        blocks = [model.conv1, model.bn1, model.relu, model.maxpool]
        for layer in (model.layer1, model.layer2, model.layer3, model.layer4):
            blocks.extend(layer.children())
        blocks += [model.avgpool, torch.nn.Flatten(1), model.fc]
    elif name.startswith("densenet"):
        # forward: features, relu (in place on the features' output), pool, flatten, classifier.
        blocks = list(model.features.children())
        blocks += [torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d((1, 1)), torch.nn.Flatten(1), model.classifier]
    else:  # inception_v3 without the auxiliary head and without transform_input
        blocks = [module for child, module in model.named_children() if child not in ("AuxLogits", "fc")]
        blocks += [torch.nn.Flatten(1), model.fc]
    # A top-level in-place ReLU right after a segment boundary would write into the tensor that
    # reentrant checkpointing saved as the segment's input: use the out-of-place form there.
    blocks = [torch.nn.ReLU() if isinstance(b, torch.nn.ReLU) else b for b in blocks]
    return torch.nn.Sequential(*blocks)


def eager(name: str, device: str, seed: int = 0) -> torch.nn.Module:
    """The model as torchvision builds it, in train() mode on `device`: the same parameters as
    build's for the same seed."""
    torch.manual_seed(seed)
    return _eager(name).to(device).train()


def build(name: str, device: str, seed: int = 0) -> Tuple[torch.jit.ScriptModule, torch.nn.Sequential]:
    """(scripted module, eager sequential twin), both in train() mode on `device`, sharing
    parameters and buffers."""
    model = eager(name, device, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 2.10+: torch.jit.script is deprecated (it still works)
        scripted = torch.jit.script(model)
    return scripted, _sequential(name, model)


def logits(output) -> torch.Tensor:
    """The logits of a forward's output (scripted Inception returns a (logits, aux) named tuple)."""
    return output[0] if isinstance(output, tuple) else output
