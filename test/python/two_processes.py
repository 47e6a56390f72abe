"""Named cases run in two processes joined by gloo (ddp_worker.py, fsdp_worker.py): `cases(rank)`,
called once the process group is up, gives {name: a function returning "ok" or what differed};
each case runs on both ranks, an error reported as its result, and rank 0 writes {name: result}
to `out` as JSON."""
import json
import os
import tempfile
import traceback
import warnings
from typing import Callable, Dict

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

Cases = Callable[[int], Dict[str, Callable[[], str]]]


def _worker(rank: int, store: str, out: str, cases: Cases) -> None:
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    results = {}
    for name, run in cases(rank).items():
        try:
            results[name] = run()
        except Exception as error:  # reported, so that the test names the case
            results[name] = f"error: {str(error).strip().splitlines()[0][:300]}"
            traceback.print_exc()
        dist.barrier()
    if rank == 0:
        with open(out, "w") as f:
            json.dump(results, f, indent=1)
    dist.destroy_process_group()


def run_cases(cases: Cases, out: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(_worker, args=(os.path.join(folder, "store"), out, cases), nprocs=2)
