#!/usr/bin/env python3
"""measure_gpu_ops_test.py — the CPU side of replaying a layer on a device: `cpbench run --trace`
writes a point's single kernels (NAME.layer_ops.csv), scripts/measure_gpu_ops.py --replay reads
them (parse_ops: every row, each with the comment naming its op; attention calls as equal causal
sequences with the call's rows and mean keys per row), and `cpbench calibrate --check` compares a
replayed file with the model: on the file itself (predicted as measured) every family is exact.
Usage: measure_gpu_ops_test.py CPBENCH"""

import glob
import importlib.util
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def load_script():
    spec = importlib.util.spec_from_file_location("measure_gpu_ops", os.path.join(HERE, "measure_gpu_ops.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class FakeTensor:
    """Just enough of a tensor for replay(): it records the calls made on it."""

    def __init__(self, log, shape, transposed=False):
        self.log, self.shape, self.grad, self.transposed = log, shape, None, transposed

    def t(self):
        return FakeTensor(self.log, tuple(reversed(self.shape)), not self.transposed)

    def fill_(self, _):
        return self

    def copy_(self, other):
        self.log.append(("copy", other.shape))
        return self

    def detach(self):
        return self

    def backward(self, grad):
        self.log.append(("backward", grad.shape))


def stand_in_torch(log):
    """A torch module whose ops record what replay() runs, for a CPU without PyTorch."""
    import contextlib
    import types
    torch = types.ModuleType("torch")
    torch.__version__ = "stand-in"
    torch.bfloat16, torch.uint8 = "bf16", "u8"
    torch.version = types.SimpleNamespace(cuda="none")
    torch.cuda = types.SimpleNamespace(get_device_name=lambda i: "stand-in GPU")
    torch.randn = lambda *shape, **kw: FakeTensor(log, shape)
    torch.empty = lambda n, **kw: FakeTensor(log, (n,))
    torch.empty_like = lambda t: FakeTensor(log, t.shape)

    def matmul(a, b):
        log.append(("matmul", a.shape, b.shape, a.transposed, b.transposed))
        return FakeTensor(log, (a.shape[0], b.shape[1]))

    def sdpa(q, k, v, is_causal):
        log.append(("sdpa", q.shape, is_causal))
        return FakeTensor(log, q.shape)

    torch.matmul = matmul
    torch.nn = types.ModuleType("torch.nn")
    torch.nn.functional = types.SimpleNamespace(scaled_dot_product_attention=sdpa)
    attention = types.ModuleType("torch.nn.attention")
    attention.SDPBackend = types.SimpleNamespace(FLASH_ATTENTION="flash")
    attention.sdpa_kernel = lambda backends: contextlib.nullcontext()
    torch.nn.attention = attention
    sys.modules.update({"torch": torch, "torch.nn": torch.nn, "torch.nn.attention": attention})
    return torch


def replay_with_a_stand_in_torch(mod):
    """replay() runs every row of a committed layer as the op its family names (a GEMM as m×k by
    k×n, a pass as a copy of half its bytes, attention as equal causal sequences) and writes a file
    calibrate loads, rows and comments in order."""
    log = []
    torch = stand_in_torch(log)

    def timed(fn, setup=None):
        if setup:
            setup()
        fn()
        return 1e-3

    src = os.path.join(HERE, "..", "experiments", "replay", "kwai_fig9_175b_t4c1.layer_ops.csv")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "replayed.csv")
        mod.replay(torch, "cuda", timed, src, out, 10)
        rows_in, rows_out = mod.parse_ops(src), mod.parse_ops(out)
        assert [(c[-1], op) for c, op, _ in rows_in] == [(c[-1], op) for c, op, _ in rows_out]
        assert "stand-in GPU" in rows_out[0][0][0], rows_out[0][0]
        for (_, op, want), (_, _, got) in zip(rows_in, rows_out):
            if op == "gemm":
                assert got == want, (want, got)
            elif op == "memory_bound":
                assert abs(got["bytes"] - want["bytes"]) <= 1, (want, got)
            else:  # the stand-in sequences: the call's heads and head dim, its keys per row within one
                assert got["heads"] == want["heads"] and got["head_dim"] == want["head_dim"], (want, got)
                assert abs(got["mean_len"] - want["mean_len"]) <= 1, (want, got)
    kinds = [entry[0] for entry in log]
    assert "matmul" in kinds and "copy" in kinds and "sdpa" in kinds and "backward" in kinds, kinds
    # Each pass of a linear in training's layout: forward X·Wᵀ, dgrad dY·W, wgrad Xᵀ·dY.
    assert mod.gemm_operands(torch, "cuda", 8, 4, 2, "# backward fc1 wgrad")[0].transposed
    a, b = mod.gemm_operands(torch, "cuda", 8, 4, 2, "# backward fc1 dgrad")
    assert not a.transposed and not b.transposed and a.shape == (8, 2) and b.shape == (2, 4)
    a, b = mod.gemm_operands(torch, "cuda", 8, 4, 2, "# forward qkv")
    assert not a.transposed and b.transposed and b.shape == (2, 4), (a.shape, b.shape)
    a, b = mod.gemm_operands(torch, "cuda", 8, 4, 2, "# backward qkv wgrad")
    assert a.shape == (8, 2) and b.shape == (2, 4)
    assert all(causal for entry in log if entry[0] == "sdpa" for causal in [entry[2]])
    for name in ("torch", "torch.nn", "torch.nn.attention"):
        del sys.modules[name]


def main():
    cpbench = sys.argv[1]
    mod = load_script()
    with tempfile.TemporaryDirectory() as d:
        run = subprocess.run([cpbench, "run", "megatron_ptdp/table1", "--first", "1", "--trace", "--out", d],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        files = glob.glob(os.path.join(d, "**", "*.layer_ops.csv"), recursive=True)
        assert len(files) == 1, files
        ops = mod.parse_ops(files[0])
        kinds = [op for _, op, _ in ops]
        # Table 1's first row (1.7B, unfused attention and full recomputation, as 2021's Megatron
        # ran it): the linears' forward, recomputed forward, dgrad and wgrad GEMMs and the
        # element-wise passes; no flash call to replay.
        assert kinds.count("gemm") == 16, kinds
        assert kinds.count("memory_bound") >= 6, kinds
        for comments, op, shape in ops:
            assert comments and comments[-1].startswith(("# forward ", "# backward ")), comments
            assert all(v > 0 for v in shape.values()), (op, shape)
        names = [c[-1] for c, _, _ in ops]
        assert "# forward qkv" in names and "# backward recompute qkv" in names and "# backward fc2 wgrad" in names, names
        # calibrate --check on the file itself: the model's times as the measurement.
        check = subprocess.run([cpbench, "calibrate", files[0], "--preset", "a100_80gb_dgx", "--check"],
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
        lines = {line.split()[0]: line for line in check.stdout.splitlines() if line.strip()}
        for family in ("gemm", "memory_bound", "all"):
            assert family in lines, check.stdout
            assert "+0.0%" in lines[family] or "-0.0%" in lines[family], lines[family]
    # An attention call: 32 causal sequences of 1024 tokens, as the cost model counts them.
    pairs = 32 * 1024 * 1025 / 2
    assert mod.replay_attention_shape({"pairs": pairs, "mean_len": 1025.0}) == (32, 1024)
    # A pack of unequal lengths stands in as its mean keys per row over its rows.
    lengths = [3000, 1000, 96]
    pairs = sum(L * (L + 1) / 2 for L in lengths)
    batch, length = mod.replay_attention_shape({"pairs": pairs, "mean_len": 2 * pairs / sum(lengths)})
    assert abs(batch * length - sum(lengths)) <= length, (batch, length)
    replay_with_a_stand_in_torch(mod)
    print("ok")


if __name__ == "__main__":
    main()
