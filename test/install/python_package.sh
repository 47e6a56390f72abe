#!/usr/bin/env bash
# python_package.sh BUILD SOURCE SCRATCH PYTHON MODEL.pt
# Installs the jitckpt package with pip into a venv that sees PYTHON's torch
# (--system-site-packages), reusing BUILD (JITCKPT_BUILD_DIR) so that nothing compiles twice, then
# from another folder: import jitckpt and train a rewritten model bit for bit against the
# unmodified one, the console command `jitckpt` and `python -m jitckpt` (optimize, inspect --plot).
set -euo pipefail
build=$1 source=$2 scratch=$3 python=$4 model=$5
rm -rf "$scratch" && mkdir -p "$scratch/elsewhere"
"$python" -m venv --system-site-packages "$scratch/venv"
venv=$scratch/venv
# --no-index: torch and everything else comes from the system; nothing is downloaded.
JITCKPT_BUILD_DIR=$build "$venv/bin/pip" install --no-build-isolation --no-index -q "$source"

cd "$scratch/elsewhere"
# In a file: torch.jit.script reads the model's source.
cat >train_check.py <<'PY'
import sys
import torch
import jitckpt

venv = sys.argv[1]
assert jitckpt.__file__.startswith(venv), f"imported {jitckpt.__file__}, not the installed package in {venv}"


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh())
                                            for _ in range(6)])

    def forward(self, x):
        return self.layers(x)


def scripted():
    torch.manual_seed(0)
    return torch.jit.script(Net().train())


x = torch.randn(256, 64)  # activations (64 KiB a layer) above the gradients (16 KiB a layer)
plain, model = scripted(), scripted()
rewritten = jitckpt.checkpoint(model, (x,), memory_limit=0.8)
assert jitckpt.plan(rewritten)["num_stages"] >= 4, jitckpt.plan(rewritten)["num_stages"]
with torch.jit.optimized_execution(False):
    plain(x).square().sum().backward()
rewritten(x).square().sum().backward()
for (name, a), b in zip(plain.named_parameters(), model.parameters()):
    assert b.grad is not None and torch.equal(a.grad, b.grad), name
print("import and train from", jitckpt.__file__, ": gradients equal")
PY
PYTHONPATH= "$venv/bin/python" train_check.py "$venv"

"$venv/bin/jitckpt" optimize "$model" --input 2,3,32,32 --memory-limit 0.75 -o rewritten.pt
"$venv/bin/python" -m jitckpt inspect rewritten.pt --plot curve.png | tee inspect.log
grep -q "plotted" inspect.log || { echo "FAIL: inspect --plot did not plot"; exit 1; }
grep -q "P   N   G" <<<"$(head -c 8 curve.png | od -c)" || { echo "FAIL: curve.png is not a PNG"; exit 1; }
echo "PASS"
