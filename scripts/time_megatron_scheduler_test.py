#!/usr/bin/env python3
"""time_megatron_scheduler_test.py — scripts/time_megatron_scheduler.py loads a scheduler module
that imports torch and megatron (stubbed: neither is installed here), hands it the group's size
and the padded lengths, and prints one row per case with the rounds it formed. The module here is
a stand-in with the interface of Megatron's BalancedCPScheduler whose rounds are known."""

import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "time_megatron_scheduler.py")

STAND_IN = '''
import torch
from megatron.core import parallel_state
from megatron.core.rerun_state_machine import RerunDataIterator


class BalancedCPScheduler:
    def __init__(self, max_seq_len_per_rank, dp_cp_group: torch.distributed.ProcessGroup):
        self.cap = max_seq_len_per_rank
        self.ranks = dp_cp_group.size()

    def get_groups_and_subsamples(self, sample_id_seqlens, config):
        # One round per `ranks` samples; every length padded to a multiple of 2 x ranks.
        assert all(length % (2 * self.ranks) == 0 for _, length in sample_id_seqlens)
        ids = [i for i, _ in sample_id_seqlens]
        groups = [ids[k:k + self.ranks] for k in range(0, len(ids), self.ranks)]
        return groups, groups
'''


def main():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "hybrid_cp_schedule.py")
        with open(path, "w") as f:
            f.write(STAND_IN)
        r = subprocess.run([sys.executable, SCRIPT, path, "--cases", "64:4:16384,10:8:65536", "--repeats", "2"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        rows = [line.split(",") for line in r.stdout.strip().splitlines()]
        assert rows[0] == ["sequences", "pool", "max_seqlen_per_dp_cp_rank", "best_ms", "rounds"], rows[0]
        assert [(x[0], x[1], x[4]) for x in rows[1:]] == [("64", "4", "16"), ("10", "8", "2")], rows
        assert all(float(x[3]) >= 0 for x in rows[1:]), rows
        missing = subprocess.run([sys.executable, SCRIPT, os.path.join(d, "absent.py")], capture_output=True, text=True)
        assert missing.returncode != 0
    print("time_megatron_scheduler_test: ok")


if __name__ == "__main__":
    main()
