"""Stages that a schedule always runs together run as one graph (runtime/grouped_stages.h): with
no limit the whole chain is one group, at a limit the groups its schedule allows. Training stays
bit for bit the unmodified model's, the measured peak within the limit, and each group runs once
per op of the grouped schedule (torch.profiler's jitckpt::Fall scopes)."""
import os
import re

import pytest
import torch

import jitckpt

import families
from smallest_limit import at_smallest_limit
from test_model_families import assert_same_training, train, train_step

NAMES = ["gpt_mask_builtin", "densenet121", "unet", "lstm_stack", "two_input"]


def fall_scopes(model, family) -> int:
    with torch.profiler.profile() as profile:
        train_step(model, family, 0)
    return sum(1 for event in profile.events() if event.name == "jitckpt::Fall")


def grouped_falls(info) -> int:
    """Fall ops of the grouped schedule: those of each group's first stage."""
    firsts = {first for first, _ in info["stage_groups"]}
    return sum(1 for stage in re.findall(r"Fall\((\d+)\)", info["schedule"]) if int(stage) in firsts)


@pytest.fixture(scope="module", params=NAMES)
def family(request) -> families.Family:
    return families.FAMILIES[request.param]("test")


@pytest.fixture(scope="module")
def profiled(family):
    return jitckpt.checkpoint(family.make(0), family.inputs, memory_limit=None, profile_repeats=1)


def test_no_limit_runs_the_chain_as_one_group(family, profiled):
    info = jitckpt.plan(profiled)
    assert info["num_stages"] > 1
    assert info["stage_groups"] == [(1, info["num_stages"])]
    assert fall_scopes(profiled, family) == 1
    model = jitckpt.checkpoint(family.make(0), family.inputs, memory_limit=None, reuse_profile_of=profiled)
    assert_same_training(f"{family.name} without a limit", train(family.make(0), family), train(model, family))


def test_smallest_limit_runs_the_groups_its_schedule_allows(family, profiled):
    model = at_smallest_limit(family.make, family.inputs, profiled)
    info = jitckpt.plan(model)
    groups = info["stage_groups"]
    assert groups[0][0] == 1 and groups[-1][1] == info["num_stages"]
    assert all(b[0] == a[1] + 1 for a, b in zip(groups, groups[1:])), groups
    assert_same_training(f"{family.name} at {info['memory_limit']} bytes", train(family.make(0), family),
                         train(model, family))
    assert fall_scopes(model, family) == grouped_falls(info)
    loss_bytes = families.loss_held_bytes(train_step(model, family, 0), family.loss)
    model.zero_grad(set_to_none=True)
    with jitckpt.cpu_memory() as memory:
        train_step(model, family, 1)
    # As test_model_families: the step also holds what the loss computes.
    peak = memory.peak + families.caller_held_bytes(model, family.inputs)
    assert peak <= info["memory_limit"] + loss_bytes + families.OUTSIDE_CHAIN_BYTES, (peak, info["memory_limit"], loss_bytes)


def test_under_autocast_too_and_apart_when_asked(family, profiled, monkeypatch):
    """Under autocast the chain with no limit is one group too (each of its stages' casts end with
    the stage, as the plan counts them). JITCKPT_GROUP_STAGES=0 runs every stage apart (for
    comparisons), with the same training."""
    stages = jitckpt.plan(profiled)["num_stages"]
    with torch.autocast("cpu", torch.bfloat16):
        assert fall_scopes(profiled, family) == 1
    monkeypatch.setenv("JITCKPT_GROUP_STAGES", "0")
    assert fall_scopes(profiled, family) == stages
    model = jitckpt.checkpoint(family.make(0), family.inputs, memory_limit=None, reuse_profile_of=profiled)
    assert_same_training(f"{family.name}, every stage apart", train(family.make(0), family), train(model, family))


def test_inference_gives_the_unmodified_outputs(family, profiled):
    model = jitckpt.checkpoint(family.make(0), family.inputs, memory_limit=None, reuse_profile_of=profiled)
    unmodified = family.make(0)
    with torch.no_grad():
        torch.manual_seed(0)  # dropout
        expected = families.tensors_of(unmodified(*family.inputs))
        torch.manual_seed(0)
        got = families.tensors_of(model(*family.inputs))
    assert len(got) == len(expected)
    assert all(torch.equal(a, b) for a, b in zip(expected, got))
