#!/usr/bin/env python3
"""attention_table.py — issue 32's attention speed targets from a device run's attention.txt
(scripts/device_check.sh writes it: bench/attention_gpu_bench's Google Benchmark CSV, a blank line,
then scripts/measure_gpu_ops.py --sdpa's rows of torch's SDPA backends on the same shapes).

Prints a Markdown table of TFLOP/s per shape and pass for every kernel (ours on tensor cores and
SIMT, cuDNN through cpbench's SdpaRunner, torch's cuDNN and FlashAttention-2 backends), then the
two targets with their verdicts:
  - our tensor-core forward ≥ 40 % of cuDNN's TFLOP/s on one causal sequence of 8K tokens at head
    dim 128 (goal 60 %);
  - cpbench's cuDNN path within 5 % of torch's cuDNN SDPA in time, on every shape and pass both ran.
A target whose rows are missing is reported as not measured.

With --calibrate-csv OUT --kernel NAME (a column above, e.g. "torch cuDNN"), also writes that
kernel's rows as a `cpbench calibrate` CSV (flash_attention_fwd / flash_attention_bwd with pairs,
heads, head_dim and mean_len counted as scripts/measure_gpu_ops.py counts them), so a stack whose
attention is that kernel is checked or fitted against it: TransformerEngine runs cuDNN's fused
attention on Hopper by default, so Megatron Core's H100 and H200 stacks are checked against
"torch cuDNN" (or "cuDNN (SdpaRunner)"), not FlashAttention-2.

Usage: attention_table.py ATTENTION_TXT [--calibrate-csv OUT --kernel NAME]. Exit 0 with the
report; 2 when the file cannot be read as that format (the message names the file, the line and
what was expected) or the kernel has no rows."""

import argparse
import csv
import sys

# Google Benchmark function name -> (kernel, pass).
BENCH_KERNELS = {
    "BM_OursTensorCoreForward": ("ours (tensor cores)", "fwd"),
    "BM_OursTensorCoreBackward": ("ours (tensor cores)", "bwd"),
    "BM_OursSimtForward": ("ours (SIMT)", "fwd"),
    "BM_CudnnForward": ("cuDNN (SdpaRunner)", "fwd"),
    "BM_CudnnBackward": ("cuDNN (SdpaRunner)", "bwd"),
}
# The bench's second argument: one sequence under a full or causal mask, or a pack of causal ones.
KINDS = {"0": "full", "1": "causal", "2": "causal pack"}
TORCH_KERNELS = {"CUDNN_ATTENTION": "torch cuDNN", "FLASH_ATTENTION": "torch FlashAttention-2"}
COLUMNS = ["ours (tensor cores)", "ours (SIMT)", "cuDNN (SdpaRunner)", "torch cuDNN", "torch FlashAttention-2"]


class FormatError(Exception):
    pass


def parse(path):
    """{(mask, L, pass): {kernel: (time_ms, tflops)}} from attention.txt."""
    with open(path) as f:
        lines = f.read().splitlines()
    out = {}

    def put(key, kernel, time_ms, tflops):
        out.setdefault(key, {})[kernel] = (time_ms, tflops)

    i = 0
    # Google Benchmark's CSV: its header, then a row per benchmark until a blank line.
    while i < len(lines) and not lines[i].startswith("name,"):
        i += 1
    if i < len(lines):
        header = next(csv.reader([lines[i]]))
        need = ["name", "real_time", "time_unit", "error_occurred", "TFLOP/s"]
        missing = [c for c in need if c not in header]
        if missing:
            raise FormatError(f"{path}:{i + 1}: Google Benchmark header lacks {', '.join(missing)}")
        col = {c: header.index(c) for c in header}
        i += 1
        while i < len(lines) and lines[i].strip() and not lines[i].startswith("#"):
            row = next(csv.reader([lines[i]]))
            if len(row) > col["error_occurred"] and row[col["error_occurred"]] == "true":
                i += 1  # a benchmark that skipped with an error (cuDNN without a plan): no figure
                continue
            if len(row) < len(header):
                raise FormatError(f"{path}:{i + 1}: expected {len(header)} columns, got {len(row)}")
            parts = row[col["name"]].split("/")
            if parts[0] in BENCH_KERNELS:
                if len(parts) < 3 or not parts[1].isdigit() or parts[2] not in KINDS:
                    raise FormatError(f"{path}:{i + 1}: expected NAME/L/KIND (KIND 0 full, 1 causal, 2 causal pack), "
                                      f"got {row[col['name']]}")
                kernel, pass_ = BENCH_KERNELS[parts[0]]
                unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}.get(row[col["time_unit"]])
                if unit is None:
                    raise FormatError(f"{path}:{i + 1}: unknown time unit {row[col['time_unit']]!r}")
                mask = KINDS[parts[2]]
                put((mask, int(parts[1]), pass_), kernel, float(row[col["real_time"]]) * unit, float(row[col["TFLOP/s"]]))
            i += 1
    # torch's rows.
    for n, line in enumerate(lines):
        if line.startswith("backend,mask,L"):
            header = line.split(",")
            for m, row_line in enumerate(lines[n + 1:], start=n + 2):
                if not row_line.strip() or row_line.startswith("#"):
                    break
                row = dict(zip(header, row_line.split(",")))
                if len(row) != len(header) or row["backend"] not in TORCH_KERNELS:
                    raise FormatError(f"{path}:{m}: expected a row of {','.join(header)} with a backend of "
                                      f"{', '.join(TORCH_KERNELS)}")
                put((row["mask"], int(row["L"]), row["pass"]), TORCH_KERNELS[row["backend"]], float(row["time_ms"]),
                    float(row["TFLOP/s"]))
    if not out:
        raise FormatError(f"{path}: no benchmark rows (expected attention_gpu_bench's CSV and/or torch's SDPA rows)")
    return out


def report(rows):
    """The table and the two verdicts, as Markdown lines."""
    lines = ["| mask | tokens | pass | " + " | ".join(COLUMNS) + " |", "|---|---:|---|" + "---:|" * len(COLUMNS)]
    for key in sorted(rows, key=lambda k: (k[0], k[1], k[2])):
        cells = [f"{rows[key][c][1]:.1f}" if c in rows[key] else "—" for c in COLUMNS]
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("TFLOP/s: 4·(allowed pairs)·heads·d forward, 2.5× that backward; one sequence, 32 heads of 128, bf16.")
    lines.append("")
    target = rows.get(("causal", 8192, "fwd"), {})
    if "ours (tensor cores)" in target and "cuDNN (SdpaRunner)" in target:
        share = target["ours (tensor cores)"][1] / target["cuDNN (SdpaRunner)"][1]
        verdict = "met" if share >= 0.40 else "missed"
        goal = ", goal 60 % met" if share >= 0.60 else ""
        lines.append(f"- Our tensor-core forward, causal 8K, d 128: {100 * share:.0f} % of cuDNN's TFLOP/s "
                     f"(target ≥ 40 %): {verdict}{goal}.")
    else:
        lines.append("- Our tensor-core forward against cuDNN, causal 8K, d 128: not measured.")
    ratios = []
    for key in sorted(rows):
        r = rows[key]
        if "cuDNN (SdpaRunner)" in r and "torch cuDNN" in r:
            ratios.append((key, r["cuDNN (SdpaRunner)"][0] / r["torch cuDNN"][0]))
    if ratios:
        worst = max(ratios, key=lambda kr: abs(kr[1] - 1))
        within = all(abs(x - 1) <= 0.05 for _, x in ratios)
        listed = ", ".join(f"{k[0]} {k[1]} {k[2]} {x:.3f}" for k, x in ratios)
        lines.append(f"- cpbench's cuDNN path / torch's cuDNN SDPA, time: {listed} (target within ±5 %): "
                     f"{'met' if within else 'missed'}; worst {worst[0][0]} {worst[0][1]} {worst[0][2]} at "
                     f"{100 * (worst[1] - 1):+.1f} %.")
    else:
        lines.append("- cpbench's cuDNN path against torch's cuDNN SDPA: not measured.")
    return lines


# The shape both sources run (bench/attention_gpu_bench.cpp kHeads, kHeadDim; measure_gpu_ops.py
# sdpa_backends' heads, d): one sequence (or a pack) of L tokens, 32 heads of 128. The bench's CSV
# does not carry it in a column; change all three together.
HEADS, HEAD_DIM = 32, 128


def calibrate_rows(rows, kernel):
    """(op, shape, seconds) of `kernel`'s single-sequence measurements, as calibrate reads them:
    pairs = allowed (query, key) pairs per head, mean_len = 2·pairs/rows."""
    out = []
    for (mask, length, pass_), kernels in sorted(rows.items()):
        if kernel not in kernels or mask not in ("causal", "full"):
            continue
        pairs = length * (length + 1) / 2 if mask == "causal" else length * length
        shape = {"pairs": pairs, "heads": HEADS, "head_dim": HEAD_DIM, "mean_len": 2 * pairs / length}
        out.append(("flash_attention_" + pass_, shape, kernels[kernel][0] * 1e-3))
    return out


def write_calibrate_csv(path, source, kernel, out_rows):
    with open(path, "w") as f:
        f.write("op,shape,time_s\n")
        f.write(f"# {kernel} from {source} (bench/attention_gpu_bench, measure_gpu_ops.py --sdpa); "
                f"scripts/attention_table.py\n")
        for op, shape, t in out_rows:
            f.write(op + "," + ";".join(f"{k}={v:g}" for k, v in shape.items()) + f",{t:.9g}\n")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("attention_txt")
    ap.add_argument("--calibrate-csv", default=None)
    ap.add_argument("--kernel", default=None, choices=COLUMNS)
    args = ap.parse_args(argv[1:])
    if (args.calibrate_csv is None) != (args.kernel is None):
        print("attention_table: --calibrate-csv and --kernel go together", file=sys.stderr)
        return 2
    try:
        rows = parse(args.attention_txt)
    except (OSError, FormatError, ValueError) as e:
        print(f"attention_table: {e}", file=sys.stderr)
        return 2
    print("\n".join(report(rows)))
    if args.calibrate_csv:
        out_rows = calibrate_rows(rows, args.kernel)
        if not out_rows:
            print(f"attention_table: {args.attention_txt}: no rows of {args.kernel!r}", file=sys.stderr)
            return 2
        write_calibrate_csv(args.calibrate_csv, args.attention_txt, args.kernel, out_rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
