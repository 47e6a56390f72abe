"""DistributedDataParallel around a rewritten module, two processes with gloo (issue: exact or
refused, point 6): after all-reduce, gradients and parameters are bit-identical to DDP around the
unmodified module with find_unused_parameters off and on, with static_graph=True, and with a
parameter that every stage uses, with gradients accumulated under no_sync, and around eager
modules through torch.export on 2.6 and later, one compiled with torch.compile first
(ddp_worker.py runs the processes)."""
import json
import os
import subprocess
import sys

import pytest
import torch.distributed as dist

import jitckpt

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddp_worker.py")


@pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()), reason="no gloo in this torch")
def test_ddp_gradients_are_bit_identical(tmp_path):
    out = tmp_path / "ddp.json"
    run = subprocess.run([sys.executable, WORKER, str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and out.exists(), run.stderr[-3000:]
    results = json.loads(out.read_text())
    assert len(results) == 11 if jitckpt.export.available() else 7  # and four around eager modules
    failed = {case: result for case, result in results.items() if result != "ok"}
    assert not failed, failed
