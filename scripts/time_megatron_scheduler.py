#!/usr/bin/env python3
"""time_megatron_scheduler.py — how long Megatron main's Dynamic-CP scheduler takes on the host.

Megatron main's hybrid context parallelism schedules every global batch in Python on the host
(megatron/core/pipeline_parallel/hybrid_cp_schedule.py, BalancedCPScheduler, called by
HybridCPDataLoaderWrapper before the step's first forward). This times that code, read from a
Megatron-LM or megatron-core checkout the user points at (nothing of it is copied here), on
lognormal batches like the Dynamic-CP blog's example script (mean 16384, sigma 1.1, 256-131072
tokens, each padded as cpbench's dynamic_cp_pad_multiple pads), with torch and megatron's
imports stubbed: the scheduler itself is plain Python (it reads only the group's size).

    pip download megatron-core --no-deps -d /tmp/mc && unzip -q /tmp/mc/*.whl -d /tmp/mc/x
    scripts/time_megatron_scheduler.py /tmp/mc/x/megatron/core/pipeline_parallel/hybrid_cp_schedule.py

Prints one row per (sequences, pool, max_seqlen_per_dp_cp_rank): the best of --repeats calls, in
ms, and the rounds it formed. A host's single-thread speed moves the figures; say which host.
"""
import argparse
import importlib.util
import math
import random
import sys
import time
import types


def load_scheduler(path):
    torch = types.ModuleType("torch")
    torch.distributed = types.SimpleNamespace(ProcessGroup=object)
    core = types.ModuleType("megatron.core")
    core.parallel_state = types.SimpleNamespace()
    rerun = types.ModuleType("megatron.core.rerun_state_machine")
    rerun.RerunDataIterator = object
    sys.modules.update({"torch": torch, "megatron": types.ModuleType("megatron"), "megatron.core": core,
                        "megatron.core.rerun_state_machine": rerun})
    spec = importlib.util.spec_from_file_location("hybrid_cp_schedule", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.BalancedCPScheduler


class Group:
    def __init__(self, size):
        self._size = size

    def size(self):
        return self._size


def batch(n, pool, cap, rng):
    # Padded as cpbench's dynamic_cp_pad_multiple pads (2 x the largest power of two <= the pool),
    # then kept within what the largest group (that power of two) can hold.
    largest = 1 << (pool.bit_length() - 1)
    pad = 2 * largest
    most = cap * largest // pad * pad
    mu = math.log(16384) - 1.1 ** 2 / 2
    out = []
    for _ in range(n):
        length = min(131072, max(256, int(rng.lognormvariate(mu, 1.1))))
        out.append(min(most, (length + pad - 1) // pad * pad))
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("schedule_py", help="path to megatron/core/pipeline_parallel/hybrid_cp_schedule.py")
    ap.add_argument("--cases", default="64:4:16384,256:8:16384,512:32:16384,2048:8:65536,2048:64:65536",
                    help="sequences:pool:max_seqlen_per_dp_cp_rank, comma-separated")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    scheduler = load_scheduler(args.schedule_py)
    rng = random.Random(args.seed)
    print("sequences,pool,max_seqlen_per_dp_cp_rank,best_ms,rounds")
    for case in args.cases.split(","):
        n, pool, cap = (int(x) for x in case.split(":"))
        lengths = batch(n, pool, cap, rng)
        best, rounds = float("inf"), 0
        for _ in range(args.repeats):
            s = scheduler(cap, Group(pool))
            t = time.perf_counter()
            groups, _ = s.get_groups_and_subsamples(list(enumerate(lengths)), None)
            best = min(best, time.perf_counter() - t)
            rounds = len(groups)
        print(f"{n},{pool},{cap},{best * 1e3:.2f},{rounds}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
