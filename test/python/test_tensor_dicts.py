"""torchvision's segmentation models, scripted: their backbone returns its features in a dict that
forward makes empty where it starts and fills layer by layer (IntermediateLayerGetter), which left
no position to cut at before passes/tensor_dicts.cpp. Trained bit for bit against the model itself
trained twice, AdamW with two micro-batches a step and clipping, in float32 and under bfloat16
autocast, and within the limit."""
from typing import Any, List

import pytest
import torch

import jitckpt

import families

torchvision = pytest.importorskip("torchvision")
segmentation = torchvision.models.segmentation

MODELS = {
    "fcn": lambda: segmentation.fcn_resnet50(num_classes=4, weights_backbone=None, aux_loss=True),
    "deeplab": lambda: segmentation.deeplabv3_resnet50(num_classes=4, weights_backbone=None),
    "lraspp": lambda: segmentation.lraspp_mobilenet_v3_large(num_classes=4, weights_backbone=None),
}
STAGES_AT_LEAST = {"fcn": 16, "deeplab": 16, "lraspp": 15}  # a stage per block or more


def scripted(name: str) -> torch.jit.ScriptModule:
    torch.manual_seed(0)
    return torch.jit.script(MODELS[name]().train())


def batch(i: int) -> List[torch.Tensor]:
    g = torch.Generator().manual_seed(i)
    return [torch.randn(2, 3, 32, 32, generator=g), torch.randint(0, 4, (2, 32, 32), generator=g)]


def loss_of(output: Any, labels: torch.Tensor) -> torch.Tensor:
    loss = torch.nn.functional.cross_entropy(output["out"].float(), labels)
    if "aux" in output:
        loss = loss + 0.5 * torch.nn.functional.cross_entropy(output["aux"].float(), labels)
    return loss


def steps(model: torch.nn.Module, autocast: bool) -> List[torch.Tensor]:
    def loss(i: int) -> torch.Tensor:
        x, labels = batch(i)
        torch.manual_seed(i)  # dropout in the heads
        # the interpreter as it runs the model the first time: the executor's later optimized
        # graphs (fusions) round otherwise, run to run
        with torch.jit.optimized_execution(False), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            output = model(x)
        return loss_of(output, labels)

    return families.adamw_record(model, loss)


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bfloat16"])
def test_a_scripted_segmentation_model_trains_bit_for_bit(name, autocast):
    if autocast and not families.cpu_autocast_casts_to(torch.bfloat16):
        pytest.skip("this PyTorch's CPU autocast does not cast to bfloat16")
    reference = steps(scripted(name), autocast)
    families.assert_same_records(reference, steps(scripted(name), autocast), f"{name} twice")
    model = jitckpt.checkpoint(scripted(name), memory_limit="min", profile_repeats=1)
    families.assert_same_records(reference, steps(model, autocast), f"{name} through jitckpt")
    info = jitckpt.plan(model)
    assert info["num_stages"] >= STAGES_AT_LEAST[name], info["labels"]
    assert info["predicted_peak"] <= info["memory_limit"] < info["unconstrained_peak"]


@pytest.mark.parametrize("name", list(MODELS))
def test_a_scripted_segmentation_models_step_peak_is_within_the_limit(name):
    """The step's peak above what was live, with the image the chain holds added back, against
    the limit and what the loss itself holds."""
    model = jitckpt.checkpoint(scripted(name), memory_limit="min", profile_repeats=1)
    x, labels = batch(0)
    output = model(x)  # plans
    loss_bytes = families.loss_held_bytes(output, lambda out: loss_of(out, labels))
    del output
    model.zero_grad(set_to_none=True)
    with jitckpt.cpu_memory() as memory:
        loss_of(model(x), labels).backward()
    info = jitckpt.plan(model)
    peak = memory.peak + families.caller_held_bytes(model, (x,))
    allowed = info["memory_limit"] + loss_bytes + families.OUTSIDE_CHAIN_BYTES
    assert peak <= allowed, f"{name}: measured {peak} bytes, allowed {allowed}"
