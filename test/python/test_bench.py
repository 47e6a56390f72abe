"""The benchmark harness (bench/): the summary's arithmetic on rows with known answers, the eager
nn.Sequential twins against their models, and one tiny experiment end to end."""
import argparse
import json
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import summary  # noqa: E402
import zoo  # noqa: E402


def row(strategy, parameter, peak, ms, predicted_peak="", predicted_ms="", status="ok", batch=4):
    return {"strategy": strategy, "parameter": parameter, "status": status, "measured_peak": peak,
            "measured_ms": ms, "throughput": batch / (ms / 1e3) if ms else "", "predicted_peak": predicted_peak,
            "predicted_ms": predicted_ms}


ROWS = [
    row("plain", "", 100, 100),
    row("sequential", 2, 60, 125),       # 32 img/s
    row("sequential", 4, 40, 160),       # 25 img/s
    row("periodic", 2, 60, 125, 60, 125),
    row("optimal", "unconstrained", 90, 100, 99, 110),  # 40 img/s: best baseline at <= 90 is 32
    row("optimal", 50, 50, 125, 50, 100),               # 32 img/s: best at <= 50 is 25 (sequential)
    row("optimal", 30, 30, 200, 30, 200),               # 20 img/s: nothing at <= 30
    row("optimal", 10, 0, 0, status="infeasible"),
    row("revolve", 10, 0, 0, status="oom"),
]


def test_gain_compares_each_optimal_point_with_the_best_baseline_at_equal_or_lower_peak():
    g = summary.gains_over(ROWS, "sequential")
    assert g["points"] == 2
    assert g["optimal_points_below_every_baseline"] == 1
    assert g["mean"] == pytest.approx(((40 / 32 - 1) + (32 / 25 - 1)) / 2)
    p = summary.gains_over(ROWS, "periodic")
    assert p["points"] == 1 and p["mean"] == pytest.approx(40 / 32 - 1)


def test_paper_gain_uses_the_fastest_sequential_point():
    # Fastest sequential: 32 img/s at peak 60; best optimal at <= 60 runs 32 img/s.
    assert summary.paper_gain(ROWS) == pytest.approx(0.0)
    assert summary.paper_gain([r for r in ROWS if r["strategy"] != "sequential"]) is None


def test_errors_and_overhead_count_only_measured_jitckpt_points():
    s = summary.summarize(ROWS)
    assert s["predicted_points"] == 4  # periodic and three optimal points; failures left out
    assert s["mape_peak"] == pytest.approx((0 + 9 / 90 + 0 + 0) / 4)
    assert s["mape_time"] == pytest.approx((0 + 10 / 100 + 25 / 125 + 0) / 4)
    assert s["overhead"] == {"time": pytest.approx(1.0), "peak": pytest.approx(0.9)}


def test_noise_is_the_spread_of_identical_schedules():
    rows = ROWS + [row("optimal", 60, 90, 120, 99, 110)]  # the unconstrained schedule again, slower
    assert summary.noise(rows) == {"mean_spread": pytest.approx(20 / 110), "groups": 1}
    assert summary.noise(ROWS) is None


@pytest.mark.parametrize("name,image", [("resnet18", 32), ("densenet121", 32), ("inception_v3", 75)])
def test_sequential_twin_computes_what_the_model_computes(name, image):
    scripted, sequential = zoo.build(name, "cpu")
    scripted.eval()
    sequential.eval()
    x = torch.randn(2, 3, image, image)
    with torch.no_grad():
        assert torch.equal(zoo.logits(scripted(x)), sequential(x))
    # The twin shares the scripted model's parameters: no second copy of the weights.
    scripted_ptrs = {p.data_ptr() for p in scripted.parameters()}
    assert {p.data_ptr() for p in sequential.parameters()} <= scripted_ptrs


def test_resnet1001_is_the_papers_chain():
    model = zoo._eager("resnet1001")
    blocks = sum(len(layer) for layer in (model.layer1, model.layer2, model.layer3, model.layer4))
    assert blocks == 333  # depth 3 * 333 + 2 = 1001; with 6 other modules, a chain of 339
    with pytest.raises(SystemExit, match="unknown model"):
        zoo._eager("resnet7")


def test_one_experiment_end_to_end(tmp_path):
    import models_bench

    args = argparse.Namespace(model="resnet18", image=32, batch=2, device="cpu", runs=1, min_seconds=0.01,
                              limits=2, profile_repeats=1, compile_budgets="", threads=0, paired_rounds=2,
                              segment_counts=3, pair="sequential,periodic", out=str(tmp_path))
    models_bench.Experiment(args).run()
    name = "resnet18-32px-batch2-cpu"
    with open(tmp_path / f"{name}.json") as f:
        result = json.load(f)
    rows = result["rows"]
    assert {r["strategy"] for r in rows} >= {"plain", "sequential", "periodic", "revolve", "optimal"}
    assert all(r["status"] in ("ok", "infeasible", "oom") for r in rows)
    for baseline in ("sequential", "periodic"):  # --segment-counts 3
        assert len([r for r in rows if r["strategy"] == baseline]) == 3, baseline
    measured = [r for r in rows if r["status"] == "ok" and r["limit_bytes"] and r["strategy"] != "periodic"]
    assert measured, "no jitckpt point ran under a limit"
    # The counting allocator's peak stays within the limit the schedule was solved for, plus the
    # parameter gradients the step makes (model memory, outside the limit; .grad is None before it).
    import torchvision
    gradient_bytes = sum(p.numel() * p.element_size() for p in torchvision.models.resnet18().parameters())
    for r in measured:
        assert int(float(r["measured_peak"])) <= int(r["limit_bytes"]) + gradient_bytes, r
    assert result["summary"]["predicted_points"] == sum(
        1 for r in rows if r["status"] == "ok" and r["strategy"] in ("optimal", "periodic", "revolve"))
    assert result["summary"]["paired_overhead"] > 0
    # Every measured baseline point was paired with optimal at its activation memory.
    baselines = [r for r in rows if r["strategy"] in ("sequential", "periodic") and r["status"] == "ok"]
    assert len(result["paired"]) == len(baselines)
    for pair in result["paired"]:
        if pair["status"] == "ok":
            assert pair["speedup_min"] <= pair["speedup_median"] <= pair["speedup_max"], pair
            assert pair["optimal_peak"] > 0 and pair["baseline_peak"] > 0
    assert (tmp_path / f"{name}.png").exists()
