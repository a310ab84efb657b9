#!/usr/bin/env python3
"""Zoltan (cpbench's DCP partitioner) against Mt-KaHyPar on the same DCP hypergraphs.

Runs `build/dcp_bench --hypergraphs DIR` (the micro_causal batches' hypergraphs in hMetis format,
with their true weights and Zoltan's one-level 16-way result), partitions each with Mt-KaHyPar
(PyPI `mtkahypar`, preset DEFAULT, km1, the same k and the combined weight's ε) and prints, per
hypergraph, km1 of both (true byte weights), their ratio, the time of each, and whether each
partition meets both balances (memory ε_mem, compute ε_comp; the mean plus the heaviest vertex
when one vertex exceeds the tolerance). Zoltan's figures include its seeds (2-8, under the planner's budget) and the refinement
pass that enforces the second balance; Mt-KaHyPar's partition (one run, on the combined weight)
gets the same refinement here, reimplemented in Python (its time shown apart), so both km1 are
of partitions that meet both balances.

  scripts/compare_partitioners.py [--threads 2] [--out FILE.md]
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def km1(net_pins, net_weight, part):
    total = 0.0
    for pins, w in zip(net_pins, net_weight):
        total += w * (len({part[v] for v in pins}) - 1)
    return total


def balanced(part, k, weights, eps):
    total = sum(weights)
    if total == 0:
        return True
    mean = total / k
    cap = max((1 + eps) * mean, mean + max(weights))
    load = [0.0] * k
    for v, p in enumerate(part):
        load[p] += weights[v]
    return max(load) <= cap * (1 + 1e-9)


def caps(k, weights, eps):
    total = sum(weights)
    mean = total / k
    return max((1 + eps) * mean, mean + max(weights))


def refine(part, k, net_pins, net_weight, memory, compute, eps_m, eps_c):
    """cpbench's refine_balance (core/strategies/hypergraph.cpp) in Python: moves out of overloaded
    parts, cheapest km1 increase first, into parts that stay within the caps of what they receive."""
    w = (memory, compute)
    cap = (caps(k, memory, eps_m), caps(k, compute, eps_c))
    load = [[0.0, 0.0] for _ in range(k)]
    for v, p in enumerate(part):
        load[p][0] += memory[v]
        load[p][1] += compute[v]
    nets_of = [[] for _ in part]
    count = [[0] * k for _ in net_pins]
    for e, pins in enumerate(net_pins):
        for v in pins:
            nets_of[v].append(e)
            count[e][part[v]] += 1
    for _ in range(4 * len(part) + 16):
        over = sorted((-load[p][d] / cap[d], p, d) for p in range(k) for d in (0, 1)
                      if cap[d] > 0 and load[p][d] > cap[d] * (1 + 1e-12))
        if not over:
            break
        best = None
        for _, p, d in over:
            for v in range(len(part)):
                if part[v] != p or w[d][v] <= 0:
                    continue
                for to in range(k):
                    if to == p or (memory[v] > 0 and load[to][0] + memory[v] > cap[0]) or \
                            (compute[v] > 0 and load[to][1] + compute[v] > cap[1]):
                        continue
                    delta = sum((-net_weight[e] if count[e][p] == 1 else 0) + (net_weight[e] if count[e][to] == 0 else 0)
                                for e in nets_of[v])
                    if best is None or delta < best[0]:
                        best = (delta, v, p, to)
            if best:
                break
        if not best:
            break
        _, v, p, to = best
        for e in nets_of[v]:
            count[e][p] -= 1
            count[e][to] += 1
        load[p][0] -= memory[v]; load[p][1] -= compute[v]
        load[to][0] += memory[v]; load[to][1] += compute[v]
        part[v] = to
    return part


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bench", default=str(ROOT / "build" / "dcp_bench"))
    ap.add_argument("--out", help="also write the table (Markdown) here")
    a = ap.parse_args()
    try:
        import mtkahypar
    except ImportError:
        sys.exit("compare_partitioners: needs the mtkahypar module (pip install mtkahypar)")
    mt = mtkahypar.initialize(a.threads, False)
    rows = ["| hypergraph | vertices | nets | km1 Zoltan (MB) | km1 Mt-KaHyPar (MB) | Zoltan / Mt-KaHyPar | "
            "time Zoltan (s) | time Mt-KaHyPar (s) (+ refinement in Python) | balanced Zoltan / Mt-KaHyPar |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([a.bench, "--hypergraphs", d], check=True, stdout=subprocess.DEVNULL)
        for meta_file in sorted(pathlib.Path(d).glob("*.json")):
            meta = json.loads(meta_file.read_text())
            hgr = meta_file.with_suffix(".hgr")
            lines = hgr.read_text().split("\n")
            n_nets, n_vertices = int(lines[0].split()[0]), int(lines[0].split()[1])
            net_pins = [[int(x) - 1 for x in lines[1 + e].split()[1:]] for e in range(n_nets)]
            k = meta["k"]
            mtkahypar.set_seed(1)
            ctx = mt.context_from_preset(mtkahypar.PresetType.DEFAULT)
            ctx.set_partitioning_parameters(k, min(meta["eps_memory"], meta["eps_compute"]), mtkahypar.Objective.KM1)
            ctx.logging = False
            start = time.perf_counter()
            hg = mt.hypergraph_from_file(str(hgr), ctx, mtkahypar.FileFormat.HMETIS)
            partitioned = hg.partition(ctx)
            seconds = time.perf_counter() - start
            part = [partitioned.block_id(v) for v in range(n_vertices)]
            # The same balance refinement Zoltan's partitions get, so both meet both balances.
            start_refine = time.perf_counter()
            part = refine(part, k, net_pins, meta["net_weight"], meta["memory"], meta["compute"],
                          meta["eps_memory"], meta["eps_compute"])
            refine_seconds = time.perf_counter() - start_refine
            km1_mt = km1(net_pins, meta["net_weight"], part)
            z = meta["zoltan"]
            ok_z = "yes" if z["balanced"] else "no"
            ok_m = "yes" if (balanced(part, k, meta["memory"], meta["eps_memory"]) and
                             balanced(part, k, meta["compute"], meta["eps_compute"])) else "no"
            rows.append(f"| {meta_file.stem} | {n_vertices} | {n_nets} | {z['km1'] / 1e6:.1f} | {km1_mt / 1e6:.1f} | "
                        f"{z['km1'] / km1_mt:.2f} | {z['seconds']:.3f} | {seconds:.3f} (+{refine_seconds:.2f}) | {ok_z} / {ok_m} |")
    table = "\n".join(rows)
    print(table)
    if a.out:
        pathlib.Path(a.out).write_text(table + "\n")


if __name__ == "__main__":
    main()
