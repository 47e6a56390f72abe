"""A part of a model checkpointed while the rest of its forward runs as it is: what a user does where
jitckpt cannot take the model whole (torchvision's detectors draw an image size with `.item()` and
set attributes in forward), and what jitckpt's refusal tells that user to do."""
from typing import Any, Dict, List, Tuple

import pytest
import torch

import jitckpt
from jitckpt.export import capture

import families

pytestmark = pytest.mark.skipif(not capture.available(), reason="torch.export's training capture needs PyTorch 2.6")


class Detector(torch.nn.Module):
    """A backbone, a head, and a forward that neither export nor TorchScript takes whole, as
    torchvision's detectors: a scale drawn at random and read with `.item()`, kept in an attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.normalize = torch.nn.Identity()
        self.backbone = torch.nn.Sequential(*(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
                                              for _ in range(4)))
        self.head = torch.nn.Linear(16, 2)
        self.scale = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.scale = [1.0, 0.5][int(torch.empty(1).uniform_(0.0, 2.0).item())]
        return self.head(self.backbone(self.normalize(x) * self.scale))


@pytest.mark.parametrize("front_end", ["export", "auto"])
def test_a_model_taken_by_neither_front_end_names_the_part_to_checkpoint(front_end):
    with pytest.raises(capture.CaptureError, match=r"could not capture Detector.*to train the rest of Detector as "
                                                   r"it is, checkpoint the part that holds its activations instead: "
                                                   r"`model\.backbone = jitckpt\.checkpoint\(model\.backbone, "):
        jitckpt.checkpoint(Detector(), memory_limit="min", front_end=front_end)(torch.randn(4, 16))

    class Flat(torch.nn.Module):  # no part with parameters and a forward: nothing to name
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(16, 16))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.weight * {1: 1.0}[int(torch.empty(1).uniform_(1.0, 2.0).item())]

    with pytest.raises(capture.CaptureError) as refused:
        jitckpt.checkpoint(Flat(), memory_limit="min", front_end="export")(torch.randn(4, 16))
    assert "checkpoint the part" not in str(refused.value)


def test_the_part_trains_bit_for_bit_inside_the_model():
    def steps(model: torch.nn.Module) -> List[torch.Tensor]:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        record = []
        for i in range(4):
            torch.manual_seed(i)  # the scale's draw
            loss = model(torch.randn(4, 16, generator=torch.Generator().manual_seed(i))).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            record += [loss.detach()] + [p.detach().clone() for p in model.parameters()]
        return record

    def make(checkpointed: bool) -> Detector:
        torch.manual_seed(0)
        model = Detector()
        if checkpointed:
            model.backbone = jitckpt.checkpoint(model.backbone, memory_limit="min", profile_repeats=1)
        return model

    reference = steps(make(False))
    assert all(torch.equal(a, b) for a, b in zip(reference, steps(make(False))))
    model = make(True)
    got = steps(model)
    assert len(got) == len(reference) and all(torch.equal(a, b) for a, b in zip(reference, got))
    assert jitckpt.plan(model.backbone)["num_stages"] >= 4


torchvision = pytest.importorskip("torchvision")


def detector() -> torch.nn.Module:
    """torchvision's Faster R-CNN at a small size, the first two stages of its backbone frozen."""
    torch.manual_seed(0)
    model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_fpn(
        weights=None, weights_backbone=None, num_classes=5, min_size=64, max_size=96).train()
    for layer in list(model.backbone.body.children())[:2]:
        layer.requires_grad_(False)
    return model


def detection_batch(i: int) -> Tuple[List[torch.Tensor], List[Dict[str, torch.Tensor]]]:
    """Two images of different widths and three boxes in each."""
    g = torch.Generator().manual_seed(i)
    images = [torch.rand(3, 64, 64 + 32 * k, generator=g) for k in range(2)]
    targets = []
    for _ in images:
        corner = torch.rand(3, 2, generator=g) * 32
        boxes = torch.cat([corner, corner + 8 + torch.rand(3, 2, generator=g) * 24], 1)
        targets.append({"boxes": boxes, "labels": torch.randint(1, 5, (3,), generator=g)})
    return images, targets


def detection_steps(model: torch.nn.Module, autocast: bool) -> List[torch.Tensor]:
    """families.adamw_record of the detector's summed losses (buffers: BatchNorm's statistics); one
    step under autocast, whose convolutions take PyTorch's slow path with oneDNN off
    (onednn_off.py), two in float32."""

    def loss(i: int) -> torch.Tensor:
        images, targets = detection_batch(i)
        torch.manual_seed(i)  # the image size drawn, the boxes sampled
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            losses = model(images, targets)
        return sum(v.float() for v in losses.values())

    return families.adamw_record(model, loss, 2 if autocast else 4)


def test_a_torchvision_detector_names_its_backbone():
    images, targets = detection_batch(0)
    with pytest.raises(capture.CaptureError, match=r"TorchScript could not take it either.*"
                                                   r"`model\.backbone = jitckpt\.checkpoint\(model\.backbone, "):
        jitckpt.checkpoint(detector(), memory_limit="min")(images, targets)


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bfloat16"])
def test_a_torchvision_detectors_backbone_trains_bit_for_bit(autocast):
    reference = detection_steps(detector(), autocast)
    families.assert_same_records(reference, detection_steps(detector(), autocast), "the detector twice")
    model = detector()
    model.backbone = jitckpt.checkpoint(model.backbone, memory_limit="min", profile_repeats=1)
    families.assert_same_records(reference, detection_steps(model, autocast), "its backbone through jitckpt")
    info = jitckpt.plan(model.backbone)
    assert info["num_stages"] >= 10, info["labels"]
    assert info["predicted_peak"] <= info["memory_limit"] < info["unconstrained_peak"]


def test_a_torchvision_detectors_backbone_keeps_its_step_peak_within_the_limit():
    """The backbone's step on a batch as the detector makes it (images padded to one size), its
    features' loss taken outside: the peak above what was live, with the images the chain holds
    added back, against the plan's limit and what the loss itself holds."""
    backbone = jitckpt.checkpoint(detector().backbone, memory_limit="min", profile_repeats=1)
    x = torch.rand(2, 3, 64, 96, generator=torch.Generator().manual_seed(0))

    def loss(features: Any) -> torch.Tensor:
        return sum(t.pow(2).mean() for t in features.values())

    loss_bytes = families.loss_held_bytes(backbone(x), loss)  # the first call plans
    info = jitckpt.plan(backbone)
    backbone.zero_grad(set_to_none=True)
    with jitckpt.cpu_memory() as memory:
        loss(backbone(x)).backward()
    flat = capture.flatten((x,), {})[0]
    held = families.caller_held_bytes(backbone.rewritten, tuple(capture.arguments(backbone._captures[0][0], flat)))
    allowed = info["memory_limit"] + loss_bytes + families.OUTSIDE_CHAIN_BYTES
    assert memory.peak + held <= allowed, f"measured {memory.peak + held} bytes, allowed {allowed}"
    assert info["memory_limit"] < info["unconstrained_peak"]
