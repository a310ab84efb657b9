#!/usr/bin/env python3
"""Measure a GPU's op times with PyTorch into a `cpbench calibrate` CSV (op,key=value;...,time_s).

Run on the machine to model (needs PyTorch with CUDA); then, on any machine,
    ./build/cpbench calibrate MEASUREMENTS.csv --preset HARDWARE --out fitted_stack.json
prints the stack's error on every measurement before and after the fit and writes the fitted stack.

What is measured, each the median of `--iters` CUDA-event timings after warm-up:
  gemm                  bf16 torch.matmul, m×k by k×n (the cost model's GEMM shapes: tokens × hidden),
                        from 1024³ (launch-bound) to 16384 × 12288 × 4096
  flash_attention_fwd   torch SDPA with the FLASH_ATTENTION backend only (FlashAttention-2, as
  flash_attention_bwd   PyTorch bundles it), bf16, head dims 128 and 64, causal and full masks; the backward
                        timed alone (its forward done first); pairs and mean_len as cpbench counts
                        them (core/sim/attention_sim.cpp attention_tile_s): pairs = allowed (query,
                        key) pairs per head, mean_len = 2·pairs/rows
  memory_bound          a device-to-device copy of N bytes: 2N bytes through HBM
With --sustained SECONDS, the training-size GEMMs again under training-like load: each shape run
back to back (no synchronization) for SECONDS first, so the GPU reaches the clock its power limit
allows, then timed as the mean of a block of back-to-back calls, with the SM clock and board power
read through nvidia-smi at the block's start and end — the steady clock a training step sees (the
burst timings above can run at boost clocks). Written to --sustained-out (default: sustained.csv
beside --out), a calibrate CSV of its own whose comment lines carry the clocks and power.
With --replay OPS.csv (a layer's single kernels, as `cpbench run --trace` writes them beside the
point's timeline: NAME.layer_ops.csv), each row of it is measured instead, in order, and written to
--out with its comment line (the op it is in the layer) and the shape actually run: a GEMM as is,
an element-wise pass as a copy of the same bytes, an attention call as equal causal sequences with
the call's mean keys per row and its rows (the model's own summary of a packed batch). Then
    ./build/cpbench calibrate OUT.csv --preset HARDWARE --stack STACK --check
prints measured beside predicted per op family and for the layer.
Also written beside the CSV (host_ops.txt, not a calibrate op): the host time of one eager torch
call issued back to back without synchronization — narrow, index_select and cat on small GPU
tensors, the calls of TransformerEngine's per-sequence reorder loop — the figure cpbench's stacks
call host_op_us.
"""
import argparse
import statistics
import subprocess
import sys
import time


def smi_clock_power():
    """(SM clock MHz, board power W) of GPU 0 from nvidia-smi, or (None, None) without it."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                              "-i", "0"], capture_output=True, text=True, timeout=10).stdout.strip().splitlines()
        clock, power = (float(v) for v in out[0].split(","))
        return clock, power
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None, None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the measurements CSV to write")
    ap.add_argument("--host-out", default=None, help="where to write the host-op timings (default: beside --out)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--sustained", type=float, default=0,
                    help="seconds of back-to-back load before timing each training-size GEMM again (0: skip)")
    ap.add_argument("--sustained-out", default=None, help="where to write the sustained GEMMs (default: beside --out)")
    ap.add_argument("--skip-burst", action="store_true", help="only the sustained GEMMs (with --sustained)")
    ap.add_argument("--replay", default=None, help="a layer's kernels to measure instead (NAME.layer_ops.csv)")
    ap.add_argument("--sdpa", action="store_true",
                    help="instead: torch's cuDNN and FlashAttention SDPA backends on attention_gpu_bench's shapes")
    args = ap.parse_args()
    if args.skip_burst and args.sustained <= 0:
        ap.error("--skip-burst needs --sustained SECONDS")
    import torch

    if not torch.cuda.is_available():
        sys.exit("measure_gpu_ops.py: no CUDA device")
    dev = torch.device("cuda")
    torch.manual_seed(0)

    def timed(fn, setup=None):
        """Median GPU seconds of one fn() over args.iters timings (setup() before each, untimed).
        A call shorter than 0.5 ms is captured `reps` times into a CUDA graph whose replay lasts
        about 2 ms: PyTorch's host issue time (10-20 µs a call, more than a small kernel runs)
        does not count, only the kernels and their launch gaps, as cpbench's kernel_overhead_us
        means it (its host_op_us is the host's part, measured apart below). Longer calls, and
        calls with setup (the backward, which needs its forward first), are timed one by one."""
        for _ in range(3):
            if setup:
                setup()
            fn()
        torch.cuda.synchronize()

        def event_time(run):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            run()
            b.record()
            b.synchronize()
            return a.elapsed_time(b) * 1e-3

        if setup:
            times = []
            for _ in range(args.iters):
                setup()
                times.append(event_time(fn))
            return statistics.median(times)
        single = event_time(fn)
        if single >= 0.5e-3:  # host issue time is negligible beside it: eager calls
            return statistics.median(event_time(fn) for _ in range(args.iters))
        reps = max(1, min(1000, round(2e-3 / single)))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(reps):
                fn()
        graph.replay()
        torch.cuda.synchronize()
        return statistics.median(event_time(graph.replay) / reps for _ in range(args.iters))

    def beside(path, name):
        return path.rsplit("/", 1)[0] + "/" + name if "/" in path else name

    if args.replay:
        replay(torch, dev, timed, args.replay, args.out, args.iters)
        return
    if args.sdpa:
        sdpa_backends(torch, dev, timed, args.out)
        return

    if args.sustained > 0:
        measure_sustained(torch, dev, args, args.sustained_out or beside(args.out, "sustained.csv"))
        if args.skip_burst:
            return

    rows = []
    # GEMMs: a transformer layer's shapes at hidden 4096-12288 over 4096-16384 tokens, and squares.
    for m, n, k in GEMM_SHAPES:
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        t = timed(lambda: torch.matmul(x, w))
        rows.append(("gemm", {"m": m, "n": n, "k": k}, t))
        print(f"gemm {m}x{n}x{k}: {t * 1e3:.3f} ms, {2 * m * n * k / t / 1e12:.0f} TFLOP/s", flush=True)
        del x, w

    # FlashAttention-2 through SDPA: [batch, heads, length, d], about 32K tokens per call, at head
    # dims 128 and 64 (a 64-wide head does half the work per pair on the same tiles: whether the
    # kernel keeps its rate there is the model's head-dim term, checked by calibrate --check).
    heads = 32
    shapes = [(d, length, causal) for d in (128, 64) for length in [1024, 2048, 4096, 8192, 16384]
              for causal in (True, False)]
    for d, length, causal in shapes:
        batch = max(1, 32768 // length)
        pairs = batch * (length * (length + 1) / 2 if causal else length * length)
        mean_len = 2 * pairs / (batch * length)
        fwd, bwd = time_flash(torch, dev, timed, batch, heads, length, d, causal, ("fwd", "bwd"))
        shape = {"pairs": pairs, "heads": heads, "head_dim": d, "mean_len": mean_len}
        rows.append(("flash_attention_fwd", shape, fwd))
        rows.append(("flash_attention_bwd", shape, bwd))
        fl = 4 * pairs * heads * d
        print(f"flash d={d} L={length} batch={batch} causal={causal}: fwd {fwd * 1e3:.3f} ms ({fl / fwd / 1e12:.0f} TFLOP/s),"
              f" bwd {bwd * 1e3:.3f} ms ({2.5 * fl / bwd / 1e12:.0f} TFLOP/s)", flush=True)

    # HBM: device-to-device copies.
    # At least 256 MiB: smaller copies repeated back to back stay in L2 (50-60 MB on H100/H200) and
    # would measure it, not HBM.
    for nbytes in [256 << 20, 1 << 30, 4 << 30]:
        src = torch.empty(nbytes, device=dev, dtype=torch.uint8).fill_(1)
        dst = torch.empty_like(src)
        t = timed(lambda: dst.copy_(src))
        rows.append(("memory_bound", {"bytes": 2 * nbytes}, t))
        print(f"copy {nbytes >> 20} MiB: {t * 1e3:.3f} ms, {2 * nbytes / t / 1e12:.2f} TB/s moved", flush=True)
        del src, dst

    with open(args.out, "w") as f:
        f.write("op,shape,time_s\n")
        f.write(f"# {torch.cuda.get_device_name(0)}, PyTorch {torch.__version__}, CUDA {torch.version.cuda}; "
                f"scripts/measure_gpu_ops.py, median of {args.iters}\n")
        for op, shape, t in rows:
            f.write(op + "," + ";".join(f"{k}={v:g}" for k, v in shape.items()) + f",{t:.9g}\n")

    # Host time per eager call, back to back (no synchronization): TransformerEngine's reorder loop.
    x = torch.randn(4096, 8, 128, device=dev, dtype=torch.bfloat16)
    idx = torch.arange(0, 1024, device=dev)
    calls = {
        "narrow": lambda: x.narrow(0, 128, 512),
        "index_select": lambda: torch.index_select(x, 0, idx),
        "cat": lambda: torch.cat([x[:512], x[1024:1536]], dim=0),
    }
    lines = [f"# host seconds per eager torch call, {torch.cuda.get_device_name(0)}, PyTorch {torch.__version__}"]

    def host_seconds(fn, n=20000):
        """Host seconds of one fn() issued back to back (the GPU runs behind, never waited for)."""
        for _ in range(1000):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        host = (time.perf_counter() - t0) / n
        torch.cuda.synchronize()
        return host

    for name, fn in calls.items():
        lines.append(f"{name}: {host_seconds(fn) * 1e6:.2f} us")
    # One sequence of the loop: the sequence's two chunks narrowed, cat, index_select: 4 calls.
    chunks = [x[i * 256:(i + 1) * 256] for i in range(16)]
    idx256 = idx[:256]

    def one_sequence():
        a = chunks[3].narrow(0, 0, 128)
        b = chunks[12].narrow(0, 128, 128)
        return torch.index_select(torch.cat([a, b], dim=0), 0, idx256)

    lines.append(f"reorder loop (4 calls per sequence): {host_seconds(one_sequence) / 4 * 1e6:.2f} us per call")
    host_out = args.host_out or beside(args.out, "host_ops.txt")
    with open(host_out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


GEMM_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 12288, 4096), (16384, 4096, 12288),
               (8192, 14336, 4096), (8192, 4096, 14336), (2048, 4096, 4096), (4096, 1024, 4096),
               (2048, 2048, 2048), (1024, 1024, 1024)]


def time_flash(torch, dev, timed, batch, heads, length, d, causal, passes, backend="FLASH_ATTENTION", thd=False):
    """FlashAttention-2 through SDPA (its FLASH_ATTENTION backend only, or the SDPBackend named) on
    [batch, heads, length, d] bf16 (with thd, views of [batch, length, heads, d] tensors: a token's
    heads side by side, the rows cpbench's kernels and cuDNN graphs read): the seconds of each pass
    asked for ("fwd": the forward alone, no autograd record; "bwd": the backward alone, its forward
    run untimed before each timing)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sdpa = torch.nn.functional.scaled_dot_product_attention
    def tensor(requires_grad):
        if thd:
            t = torch.randn(batch, length, heads, d, device=dev, dtype=torch.bfloat16).transpose(1, 2)
            return t.detach().requires_grad_() if requires_grad else t  # a leaf with the strides of the view
        return torch.randn(batch, heads, length, d, device=dev, dtype=torch.bfloat16, requires_grad=requires_grad)

    q, k, v = (tensor(True) for _ in range(3))
    grad = tensor(False)
    out = []
    with sdpa_kernel([getattr(SDPBackend, backend)]):
        for p in passes:
            if p == "fwd":
                qd, kd, vd = q.detach(), k.detach(), v.detach()
                out.append(timed(lambda: sdpa(qd, kd, vd, is_causal=causal)))
            else:
                state = {}

                def forward_only():
                    for t_ in (q, k, v):
                        t_.grad = None
                    state["out"] = sdpa(q, k, v, is_causal=causal)

                out.append(timed(lambda: state["out"].backward(grad), setup=forward_only))
    return out


def sdpa_backends(torch, dev, timed, path):
    """torch's SDPA backends on bench/attention_gpu_bench.cpp's shapes (one sequence, 32 heads of
    128, bf16, causal and full; FLOPs counted alike), one line each, beside that bench's rows."""
    heads, d = 32, 128
    lines = [f"# torch SDPA backends, {torch.cuda.get_device_name(0)}, PyTorch {torch.__version__}, "
             f"cuDNN {torch.backends.cudnn.version()}; scripts/measure_gpu_ops.py --sdpa",
             "backend,mask,L,heads,head_dim,pass,time_ms,TFLOP/s"]
    for backend in ("CUDNN_ATTENTION", "FLASH_ATTENTION"):
        for length in (2048, 8192):
            for causal in (True, False):
                pairs = length * (length + 1) / 2 if causal else length * length
                fl = 4 * pairs * heads * d
                fwd, bwd = time_flash(torch, dev, timed, 1, heads, length, d, causal, ("fwd", "bwd"), backend, thd=True)
                for name, t, f in (("fwd", fwd, fl), ("bwd", bwd, 2.5 * fl)):
                    lines.append(f"{backend},{'causal' if causal else 'full'},{length},{heads},{d},{name},"
                                 f"{t * 1e3:.4f},{f / t / 1e12:.1f}")
                print(lines[-2] + "\n" + lines[-1], flush=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def parse_ops(path):
    """(comment lines before it, op, {key: value}) for every row of a calibrate CSV."""
    out, comments = [], []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line == "op,shape,time_s":
                continue
            if line.startswith("#"):
                comments.append(line)
                continue
            op, shape, _ = line.split(",")
            out.append((comments, op, {k: float(v) for k, v in (kv.split("=") for kv in shape.split(";"))}))
            comments = []
    return out


def replay_attention_shape(shape):
    """Equal causal sequences standing in for an attention call: length L = mean_len - 1 (the
    mean keys per row of a causal pack is (L + 1) / 2) and as many as the call's rows fill."""
    rows = 2 * shape["pairs"] / shape["mean_len"]
    length = max(1, round(shape["mean_len"] - 1))
    batch = max(1, round(rows / length))
    return batch, length


def gemm_operands(torch, dev, m, n, k, name):
    """The operands of a linear layer's GEMM C[m,n] = A[m,k]·B[k,n] laid out as training lays them
    (activations [tokens, features] row-major, an nn.Linear weight [out, in]), from the op's name
    in the layer ("... wgrad", "... dgrad", else a forward): forward X·Wᵀ (B a transposed view of
    W[n,k]); dgrad dY·W (both row-major); wgrad Xᵀ·dY (A a transposed view of X[k,m], the token
    dimension k strided)."""
    def randn(*size):
        return torch.randn(*size, device=dev, dtype=torch.bfloat16)
    if name.endswith("wgrad"):
        return randn(k, m).t(), randn(k, n)
    if name.endswith("dgrad"):
        return randn(m, k), randn(k, n)
    return randn(m, k), randn(n, k).t()


def replay(torch, dev, timed, ops_path, out_path, iters):
    """Each kernel of a layer (parse_ops) measured as measure_gpu_ops measures its family."""
    lines = ["op,shape,time_s",
             f"# {torch.cuda.get_device_name(0)}, PyTorch {torch.__version__}, CUDA {torch.version.cuda}; "
             f"scripts/measure_gpu_ops.py --replay {ops_path}, median of {iters}"]
    for comments, op, shape in parse_ops(ops_path):
        if op == "gemm":
            m, n, k = (int(shape[x]) for x in ("m", "n", "k"))
            x, w = gemm_operands(torch, dev, m, n, k, comments[-1] if comments else "")
            t = timed(lambda: torch.matmul(x, w))
            del x, w
        elif op == "memory_bound":
            nbytes = max(1, int(shape["bytes"] // 2))
            src = torch.empty(nbytes, device=dev, dtype=torch.uint8).fill_(1)
            dst = torch.empty_like(src)
            t = timed(lambda: dst.copy_(src))
            shape = {"bytes": 2 * nbytes}
            del src, dst
        elif op in ("flash_attention_fwd", "flash_attention_bwd"):
            batch, length = replay_attention_shape(shape)
            heads, d = int(shape["heads"]), int(shape["head_dim"])
            (t,) = time_flash(torch, dev, timed, batch, heads, length, d, True, (op[-3:],))
            pairs = batch * length * (length + 1) / 2
            shape = {"pairs": pairs, "heads": heads, "head_dim": d, "mean_len": 2 * pairs / (batch * length)}
        else:
            sys.exit(f"measure_gpu_ops.py --replay: {ops_path}: unknown op {op}")
        lines += comments
        lines.append(op + "," + ";".join(f"{k}={v:.17g}" for k, v in shape.items()) + f",{t:.9g}")
        print(f"{comments[-1] if comments else op}: {t * 1e3:.4f} ms", flush=True)
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")


def measure_sustained(torch, dev, args, path):
    """The GEMMs of 4096 and more in every dimension under back-to-back load (module docstring)."""
    lines = ["op,shape,time_s",
             f"# {torch.cuda.get_device_name(0)}, PyTorch {torch.__version__}, CUDA {torch.version.cuda}; "
             f"scripts/measure_gpu_ops.py --sustained {args.sustained:g}: each GEMM after {args.sustained:g} s "
             "of back-to-back load, the mean of a block of back-to-back calls"]
    for m, n, k in GEMM_SHAPES:
        if min(m, n, k) < 4096:
            continue
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        torch.matmul(x, w, out=out)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        calls = 0
        while time.perf_counter() - t0 < args.sustained:  # load: the host stays ahead of the GPU
            for _ in range(8):
                torch.matmul(x, w, out=out)
            calls += 8
            if calls % 64 == 0:
                torch.cuda.synchronize()  # keep the queue short so the load ends when the loop does
        torch.cuda.synchronize()
        block = max(args.iters, 10)
        clock0, power0 = smi_clock_power()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(block):
            torch.matmul(x, w, out=out)
        b.record()
        b.synchronize()
        clock1, power1 = smi_clock_power()
        t = a.elapsed_time(b) * 1e-3 / block
        lines.append(f"# {m}x{n}x{k}: SM clock {clock0} -> {clock1} MHz, power {power0} -> {power1} W")
        lines.append(f"gemm,m={m};n={n};k={k},{t:.9g}")
        print(f"sustained gemm {m}x{n}x{k}: {t * 1e3:.3f} ms, {2 * m * n * k / t / 1e12:.0f} TFLOP/s, "
              f"SM clock {clock0}->{clock1} MHz, {power0}->{power1} W", flush=True)
        del x, w, out
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
