import sys, os, time, statistics, warnings, torch
sys.path.insert(0, "bench")
import jitckpt, zoo
from common import make_step
from torch.profiler import profile, ProfilerActivity
warnings.filterwarnings("ignore")
out = os.environ.get("OUT", "/tmp")
def sync(): torch.cuda.synchronize()
def timed(step, n):
    sync(); t = time.perf_counter()
    for _ in range(n): step()
    h = time.perf_counter() - t; sync()
    return 1e3 * h / n, 1e3 * (time.perf_counter() - t) / n
for exp in sys.argv[1:]:
    name, image, batch = exp.split(":")
    torch.manual_seed(0)
    scripted, eager = zoo.build(name, "cuda")
    x = torch.randn(int(batch), 3, int(image), int(image), device="cuda")
    params = list(scripted.parameters())
    t = time.perf_counter()
    rw = jitckpt.checkpoint(scripted, (x,), memory_limit=None, verbose=True, progress=lambda a, b: None)
    print(exp, "planned in", round(time.perf_counter() - t, 1), "s, predicted", round(jitckpt.plan(rw)["predicted_time_ms"], 1), "ms", flush=True)
    steps = {"plain": make_step(scripted, x, params), "jitckpt": make_step(rw, x, params)}
    def noopt():
        with torch.jit.optimized_execution(False):
            steps["plain"]()
    steps["noopt"] = noopt
    for s in steps.values():
        for _ in range(4): s()
    res = {k: [] for k in steps}
    for r in range(5):
        for k, s in steps.items():
            res[k].append(timed(s, 3))
    for k, v in res.items():
        print(f"  {k:8s} host {statistics.median(a for a, b in v):.1f} ms, step {statistics.median(b for a, b in v):.1f} ms  all {[round(b,1) for a,b in v]}", flush=True)
    for k in ("jitckpt", "noopt"):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            steps[k](); sync()
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40)
        open(f"{out}/prof-{name}-{k}.txt", "w").write(table)
        print(f"--- {exp} {k} self CPU top 14")
        print("\n".join(l[:150] for l in table.splitlines()[:17]), flush=True)
    del steps, rw, scripted, eager
    torch.cuda.empty_cache()
