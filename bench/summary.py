"""The summary figures of the paper's section 5 over measured points (rows of models_bench.py):

- gain: for each optimal point, its throughput over the best throughput of a periodic baseline
  (torch's checkpoint_sequential, or jitckpt's own periodic schedule) whose measured peak is equal
  or lower; the mean over optimal points that have such a baseline point.
- paper_gain: the paper's own figure, one per experiment: the best optimal throughput at or below
  the measured peak of the fastest checkpoint_sequential point, over that point's throughput.
- MAPE of predicted against measured peak and step time, over jitckpt's points.
- overhead: jitckpt (optimal, unconstrained) against plain TorchScript, time and peak; and the
  paired time ratio (models_bench.py times both in alternating rounds, so drifts of the machine
  cancel), where measured.
- noise: the spread (max - min over median) of step times among points that ran the same schedule
  (same strategy, predicted peak and time; revolve's schedule, say, often stops changing with the
  limit): differences between strategies smaller than this are not measured.

A row is a dict with strategy, parameter, status ("ok", "oom", "infeasible"), measured_peak,
measured_ms, throughput, predicted_peak, predicted_ms.
"""
import statistics
from typing import Dict, List, Optional

BASELINES = ("sequential", "periodic")
JITCKPT = ("optimal", "periodic", "revolve")


def _ok(rows: List[Dict], strategy: str) -> List[Dict]:
    return [r for r in rows if r["strategy"] == strategy and r["status"] == "ok"]


def gains_over(rows: List[Dict], baseline: str) -> Dict:
    """Per optimal point: its gain over the best `baseline` point at equal or lower peak."""
    base = _ok(rows, baseline)
    gains, unmatched = [], 0
    for o in _ok(rows, "optimal"):
        fitting = [b["throughput"] for b in base if b["measured_peak"] <= o["measured_peak"]]
        if fitting:
            gains.append(o["throughput"] / max(fitting) - 1)
        else:
            unmatched += 1  # optimal runs where no baseline point fits
    return {"mean": statistics.mean(gains) if gains else None, "points": len(gains),
            "optimal_points_below_every_baseline": unmatched}


def paper_gain(rows: List[Dict]) -> Optional[float]:
    seq = _ok(rows, "sequential")
    if not seq:
        return None
    fastest = max(seq, key=lambda r: r["throughput"])
    fitting = [o["throughput"] for o in _ok(rows, "optimal") if o["measured_peak"] <= fastest["measured_peak"]]
    return max(fitting) / fastest["throughput"] - 1 if fitting else None


def errors(rows: List[Dict]) -> List[Dict]:
    """(peak, time) absolute percentage errors of jitckpt's measured points."""
    out = []
    for r in rows:
        if r["strategy"] in JITCKPT and r["status"] == "ok" and r.get("predicted_peak") not in (None, ""):
            out.append({"peak": abs(r["measured_peak"] - r["predicted_peak"]) / r["measured_peak"],
                        "time": abs(r["measured_ms"] - r["predicted_ms"]) / r["measured_ms"]})
    return out


def overhead(rows: List[Dict]) -> Optional[Dict]:
    plain = _ok(rows, "plain")
    free = [r for r in _ok(rows, "optimal") if r["parameter"] == "unconstrained"]
    if not plain or not free:
        return None
    return {"time": free[0]["measured_ms"] / plain[0]["measured_ms"],
            "peak": free[0]["measured_peak"] / plain[0]["measured_peak"]}


def noise(rows: List[Dict]) -> Optional[Dict]:
    """Mean relative spread of step time among measured points that ran an identical schedule."""
    groups: Dict[tuple, List[float]] = {}
    for r in rows:
        if r["strategy"] in JITCKPT and r["status"] == "ok" and r.get("predicted_ms") not in (None, ""):
            groups.setdefault((r["strategy"], r["predicted_peak"], r["predicted_ms"]), []).append(r["measured_ms"])
    spreads = [(max(t) - min(t)) / statistics.median(t) for t in groups.values() if len(t) >= 2]
    return {"mean_spread": statistics.mean(spreads), "groups": len(spreads)} if spreads else None


def summarize(rows: List[Dict], paired_overhead: Optional[float] = None) -> Dict:
    errs = errors(rows)
    return {
        "noise": noise(rows),
        "paired_overhead": paired_overhead,
        "gain": {b: gains_over(rows, b) for b in BASELINES},
        "paper_gain": paper_gain(rows),
        "mape_peak": statistics.mean(e["peak"] for e in errs) if errs else None,
        "mape_time": statistics.mean(e["time"] for e in errs) if errs else None,
        "predicted_points": len(errs),
        "overhead": overhead(rows),
    }


def _pct(value: Optional[float], signed: bool = True) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:+.1f}%" if signed else f"{100 * value:.1f}%"


def describe(s: Dict) -> List[str]:
    """Readable lines for one summary."""
    lines = []
    for b, name in (("sequential", "checkpoint_sequential"), ("periodic", "jitckpt periodic")):
        g = s["gain"][b]
        lines.append(f"throughput gain of optimal over the best {name} at equal or lower peak: {_pct(g['mean'])} "
                     f"(mean over {g['points']} optimal points; {g['optimal_points_below_every_baseline']} "
                     f"optimal points run below every {name} point)")
    lines.append(f"paper's figure (best optimal at or below the fastest checkpoint_sequential's peak): "
                 f"{_pct(s['paper_gain'])}")
    lines.append(f"MAPE predicted vs measured over {s['predicted_points']} jitckpt points: peak "
                 f"{_pct(s['mape_peak'], False)}, time {_pct(s['mape_time'], False)}")
    o = s["overhead"]
    lines.append("jitckpt unconstrained against plain TorchScript: " +
                 (f"time x{o['time']:.3f}, peak x{o['peak']:.3f}" if o else "n/a (a point is missing)") +
                 (f"; paired time ratio x{s['paired_overhead']:.3f}" if s.get("paired_overhead") else ""))
    n = s.get("noise")
    lines.append("timing noise: " + (f"identical schedules spread by {_pct(n['mean_spread'], False)} on average "
                                     f"({n['groups']} groups)" if n else "n/a (no schedule measured twice)"))
    return lines


def paired_summary(paired: List[Dict]) -> Dict:
    """Per baseline: the mean of the paired speedups of optimal (baseline time / optimal time), how
    many pairs optimal loses by more than their own spread, and how many it ran above the
    baseline's measured peak."""
    out = {}
    for baseline in ("sequential", "periodic"):
        ok = [p for p in paired if p["baseline"] == baseline and p.get("status") == "ok"]
        if not ok:
            continue
        out[baseline] = {
            "pairs": len(ok),
            "mean_speedup": statistics.mean(p["speedup_median"] for p in ok),
            "losses_beyond_spread": sum(1 for p in ok if p["speedup_max"] < 1),
            "above_baseline_peak": sum(1 for p in ok if p["optimal_peak"] > p["baseline_peak"]),
            "infeasible": sum(1 for p in paired if p["baseline"] == baseline and p.get("status") != "ok"),
        }
    return out


def describe_paired(s: Dict) -> List[str]:
    names = {"sequential": "checkpoint_sequential", "periodic": "jitckpt periodic"}
    return [f"paired against {names[b]}: optimal faster by {_pct(v['mean_speedup'] - 1)} on average over "
            f"{v['pairs']} pairs; {v['losses_beyond_spread']} lost in every round; {v['above_baseline_peak']} "
            f"measured above the baseline's peak; {v['infeasible']} infeasible"
            for b, v in s.items()]
