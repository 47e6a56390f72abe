"""Every family of the model zoo (test/models/families.py) as an eager module through
jitckpt.checkpoint (torch.export on PyTorch 2.6 on; TorchScript for those export cannot capture), at
the smallest limit that works: bit for bit like the eager model trained twice, a stage per block,
the measured step peak within the limit."""
import warnings
from typing import Any, List

import pytest
import torch

import jitckpt
from jitckpt.export import capture

import families
from test_model_families import assert_same_training, train

pytestmark = pytest.mark.skipif(not capture.available(), reason="torch.export's training capture needs PyTorch 2.6")


@pytest.fixture(scope="module", params=list(families.FAMILIES))
def family(request) -> families.Family:
    return families.FAMILIES[request.param]("test")


def unwrapped(records: List[Any]) -> List[Any]:
    """A CheckpointedModule's names are the model's under "module."."""
    return [(o, {n[len("module."):]: g for n, g in grads.items()}, {n[len("module."):]: b for n, b in buffers.items()})
            for o, grads, buffers in records]


def test_zoo_family_as_an_eager_module_trains_bit_for_bit_within_the_limit(family):
    reference = train(family.eager(0), family, steps=2)
    assert_same_training(family.name, reference, train(family.eager(0), family, steps=2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the families export cannot capture train through TorchScript
        model = jitckpt.checkpoint(family.eager(0), memory_limit="min", profile_repeats=1)
        assert_same_training(f"{family.name}, eager module", reference, unwrapped(train(model, family, steps=2)))
    info = jitckpt.plan(model)
    assert info["num_stages"] >= family.blocks, f"{family.name}: {info['num_stages']} stages"
    loss_bytes = families.loss_held_bytes(model(*family.inputs), family.loss)
    model.zero_grad(set_to_none=True)
    with jitckpt.cpu_memory() as memory:
        torch.manual_seed(0)
        family.loss(model(*family.inputs)).backward()
    peak = memory.peak + families.caller_held_bytes(model.rewritten, family.inputs)
    assert peak <= info["memory_limit"] + loss_bytes + families.OUTSIDE_CHAIN_BYTES, \
        f"{family.name}: measured peak {peak} bytes, limit {info['memory_limit']}, the loss's {loss_bytes}"
