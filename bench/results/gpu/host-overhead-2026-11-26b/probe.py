"""Where jitckpt's host time goes on CUDA (run by run.sh): the cost of one nested autograd engine
call (as each stage's B makes) on the CPU and on CUDA, then ResNet-1001 224 px batch 2 steps,
jitckpt then plain, each looped while run.sh samples the process with perf."""
import os, sys, time, statistics, warnings, torch
sys.path.insert(0, "bench")
import jitckpt, zoo
from common import make_step
warnings.filterwarnings("ignore")
out = os.environ.get("OUT", "/tmp")

def engine_call_us(device, ops, n=2000):
    x = torch.randn(64, device=device, requires_grad=True)
    g = torch.ones(64, device=device)
    def once():
        y = x
        for _ in range(ops):
            y = y * 1.5
        torch.autograd.grad(y, x, g)
    for _ in range(50): once()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n): once()
    torch.cuda.synchronize()
    return 1e6 * (time.perf_counter() - t) / n

for device in ("cpu", "cuda"):
    for ops in (1, 10):
        print(f"forward of {ops} mul + autograd.grad on {device}: {engine_call_us(device, ops):.1f} us", flush=True)

torch.manual_seed(0)
scripted, eager = zoo.build("resnet1001", "cuda")
x = torch.randn(2, 3, 224, 224, device="cuda")
params = list(scripted.parameters())
rw = jitckpt.checkpoint(scripted, (x,), memory_limit=None, progress=lambda a, b: None)
steps = {"jitckpt": make_step(rw, x, params), "plain": make_step(scripted, x, params)}
for s in steps.values():
    for _ in range(4): s()
for r in range(3):
    for k, s in steps.items():
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(3): s()
        torch.cuda.synchronize()
        print(f"{k} step {1e3 * (time.perf_counter() - t) / 3:.1f} ms", flush=True)
for k, s in steps.items():
    open(f"/tmp/ready-{k}", "w").write("1")
    t = time.perf_counter()
    n = 0
    while time.perf_counter() - t < 14:
        s(); n += 1
    torch.cuda.synchronize()
    print(f"{k}: {n} steps looped", flush=True)
