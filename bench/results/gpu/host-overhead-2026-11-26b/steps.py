"""ResNet-1001 224 px batch 2 on CUDA (run by run3.sh): training steps of plain TorchScript and
of jitckpt with no limit, timed in alternating rounds (3 steps a round, synchronized)."""
import sys, time, statistics, warnings, torch
sys.path.insert(0, "bench")
import jitckpt, zoo
from common import make_step
warnings.filterwarnings("ignore")
torch.manual_seed(0)
scripted, eager = zoo.build("resnet1001", "cuda")
x = torch.randn(2, 3, 224, 224, device="cuda")
params = list(scripted.parameters())
rw = jitckpt.checkpoint(scripted, (x,), memory_limit=None, progress=lambda a, b: None)
steps = {"plain": make_step(scripted, x, params), "jitckpt": make_step(rw, x, params)}
for s in steps.values():
    for _ in range(4): s()
times = {k: [] for k in steps}
for r in range(7):
    for k, s in steps.items():
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(3): s()
        torch.cuda.synchronize()
        times[k].append(1e3 * (time.perf_counter() - t) / 3)
for k, v in times.items():
    print(f"{k:8s} median {statistics.median(v):.1f} ms a step, rounds {[round(a, 1) for a in v]}")
ratios = [a / b for a, b in zip(times["jitckpt"], times["plain"])]
print(f"jitckpt / plain, round by round: median x{statistics.median(ratios):.3f} "
      f"[{min(ratios):.3f}, {max(ratios):.3f}]")
