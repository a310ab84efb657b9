#!/usr/bin/env python3
"""attention_table_test.py — attention_table.py reads a device run's attention.txt (Google
Benchmark's CSV from bench/attention_gpu_bench, then torch's SDPA rows) and states issue 32's two
speed targets: a file where both are met, one where both are missed, one without torch's rows (not
measured), an errored benchmark row skipped, a malformed file refused with exit 2 naming the
line, and a kernel's rows written as a calibrate CSV that `cpbench calibrate --check` reads.
Usage: attention_table_test.py [CPBENCH]"""

import importlib.util
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("attention_table", os.path.join(HERE, "attention_table.py"))
at = importlib.util.module_from_spec(spec)
spec.loader.exec_module(at)

HEADER = ('name,iterations,real_time,cpu_time,time_unit,bytes_per_second,items_per_second,label,error_occurred,'
          'error_message,"TFLOP/s"')


def bench_row(name, ms, tflops):
    return f'"{name}/min_time:0.200/manual_time",10,{ms},{ms},ms,,,"label",,,{tflops}'


def write(text):
    f = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    f.write(text)
    f.close()
    return f.name


def attention_txt(ours_tflops, runner_ms, torch_ms, with_torch=True):
    rows = [HEADER,
            bench_row("BM_OursTensorCoreForward/8192/1", 1.0, ours_tflops),
            bench_row("BM_OursTensorCoreBackward/8192/1", 4.0, 150),
            bench_row("BM_CudnnForward/8192/1", runner_ms, 500),
            bench_row("BM_CudnnBackward/8192/1", 2.5 * runner_ms, 400),
            '"BM_CudnnForward/2048/0/min_time:0.200/manual_time",,,,,,,,true,"no plan"',  # Google Benchmark's skipped row
            bench_row("BM_OursSimtForward/8192/1", 90, 6),
            bench_row("BM_OursTensorCoreForward/32768/2", 2.0, 250)]
    text = "\n".join(rows) + "\n"
    if with_torch:
        text += ("\n# torch SDPA backends, NVIDIA H200, PyTorch 2.11; scripts/measure_gpu_ops.py --sdpa\n"
                 "backend,mask,L,heads,head_dim,pass,time_ms,TFLOP/s\n"
                 f"CUDNN_ATTENTION,causal,8192,32,128,fwd,{torch_ms},510.0\n"
                 f"CUDNN_ATTENTION,causal,8192,32,128,bwd,{2.5 * torch_ms},410.0\n"
                 "FLASH_ATTENTION,causal,8192,32,128,fwd,0.9,350.0\n")
    return text


def main():
    met = at.parse(write(attention_txt(ours_tflops=320, runner_ms=0.55, torch_ms=0.54)))
    assert met[("causal", 8192, "fwd")]["ours (tensor cores)"] == (1.0, 320.0), met
    assert met[("causal", 8192, "fwd")]["torch FlashAttention-2"] == (0.9, 350.0), met
    assert ("full", 2048, "fwd") not in met, "an errored row gives no figure"
    assert met[("causal pack", 32768, "fwd")]["ours (tensor cores)"] == (2.0, 250.0), met
    text = "\n".join(at.report(met))
    assert "64 % of cuDNN's TFLOP/s (target ≥ 40 %): met, goal 60 % met" in text, text
    assert "(target within ±5 %): met" in text, text
    assert "| causal | 8192 | fwd | 320.0 | 6.0 | 500.0 | 510.0 | 350.0 |" in text, text

    missed = "\n".join(at.report(at.parse(write(attention_txt(ours_tflops=150, runner_ms=0.60, torch_ms=0.54)))))
    assert "30 % of cuDNN's TFLOP/s (target ≥ 40 %): missed." in missed, missed
    assert "(target within ±5 %): missed; worst causal 8192" in missed and "+11.1 %" in missed, missed

    alone = "\n".join(at.report(at.parse(write(attention_txt(320, 0.55, 0.54, with_torch=False)))))
    assert "against torch's cuDNN SDPA: not measured" in alone, alone

    bad = write(HEADER + "\n" + '"BM_CudnnForward/x/1/manual_time",1,1,1,ms,,,"l",,,1\n')
    r = subprocess.run([sys.executable, os.path.join(HERE, "attention_table.py"), bad], capture_output=True, text=True)
    assert r.returncode == 2 and f"{bad}:2" in r.stderr and "NAME/L/KIND" in r.stderr, (r.returncode, r.stderr)
    empty = write("nothing here\n")
    r = subprocess.run([sys.executable, os.path.join(HERE, "attention_table.py"), empty], capture_output=True, text=True)
    assert r.returncode == 2 and "no benchmark rows" in r.stderr, r.stderr
    # torch's cuDNN rows as a calibrate CSV that cpbench reads back and checks.
    src = write(attention_txt(320, 0.55, 0.54))
    out = tempfile.NamedTemporaryFile(suffix=".csv", delete=False).name
    r = subprocess.run([sys.executable, os.path.join(HERE, "attention_table.py"), src, "--calibrate-csv", out,
                        "--kernel", "torch cuDNN"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = [l for l in open(out).read().splitlines() if l and not l.startswith("#")]
    pairs = 8192 * 8193 / 2
    assert lines[0] == "op,shape,time_s" and len(lines) == 3, lines
    assert lines[1] == f"flash_attention_bwd,pairs={pairs:g};heads=32;head_dim=128;mean_len={2 * pairs / 8192:g},0.00135", lines
    assert lines[2].startswith("flash_attention_fwd,") and lines[2].endswith(",0.00054"), lines
    if len(sys.argv) > 1:  # the cpbench binary: calibrate --check reads the file
        r = subprocess.run([sys.argv[1], "calibrate", out, "--preset", "h100_dgx", "--check"], capture_output=True, text=True)
        assert r.returncode == 0 and "attention" in r.stdout, (r.returncode, r.stdout, r.stderr)
    r = subprocess.run([sys.executable, os.path.join(HERE, "attention_table.py"), src, "--calibrate-csv", out,
                        "--kernel", "ours (SIMT)"], capture_output=True, text=True)
    assert r.returncode == 0, "SIMT has a causal 8K forward row"
    nothing = write(attention_txt(320, 0.55, 0.54, with_torch=False))
    r = subprocess.run([sys.executable, os.path.join(HERE, "attention_table.py"), nothing, "--calibrate-csv", out,
                        "--kernel", "torch cuDNN"], capture_output=True, text=True)
    assert r.returncode == 2 and "no rows of 'torch cuDNN'" in r.stderr, r.stderr
    print("attention_table_test: ok")


if __name__ == "__main__":
    main()
