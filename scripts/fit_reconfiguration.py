#!/usr/bin/env python3
"""Fits the two reconfiguration constants of a stack (restart_s, state_store_GBps) on published
reconfiguration times, and writes them into the stack preset with --write.

The model (core/reshard/reconfigure.h) is  time = restart_s + critical_bytes / (state_store_GBps·1e9),
where critical_bytes (the busiest node's network bytes of cpbench's re-shard plan) does not depend
on the constants. So two published times give the two constants exactly: the script runs the
experiment once, reads critical_bytes of the fit's training comparisons (the stack's "fits" record)
and solves the 2×2 system. With more than two training values it solves least squares.

  scripts/fit_reconfiguration.py [--stack tenplex_state_store] [--write]
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stack", default="tenplex_state_store")
    ap.add_argument("--cpbench", default=str(ROOT / "build" / "cpbench"))
    ap.add_argument("--write", action="store_true", help="write the fitted values into the stack preset")
    a = ap.parse_args()
    stack_file = ROOT / "experiments" / "stacks" / f"{a.stack}.json"
    stack = json.loads(stack_file.read_text())
    fits = [f for f in stack.get("fits", []) if f["metric"] == "reconfigure_time_s"]
    if len(fits) != 1:
        sys.exit(f"{stack_file}: expected one fit record of metric reconfigure_time_s, found {len(fits)}")
    fit = fits[0]
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([a.cpbench, "run", fit["experiment"], "--out", out], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        results = json.loads((pathlib.Path(out) / fit["experiment"] / "results.json").read_text())
    points = {(p.get("case", ""), p["strategy"]): p for p in results["points"]}
    rows = []
    for c in results["comparisons"]:
        if c["label"] not in fit["train"]:
            continue
        p = points[(c["select"].get("case", ""), c["select"]["strategy"])]
        rows.append((p["metrics"]["reshard_critical_bytes"] / 1e9, c["published"], c["label"]))
    if len(rows) != len(fit["train"]) or len(rows) < 2:
        sys.exit(f"found {len(rows)} of the {len(fit['train'])} training comparisons (need at least 2)")
    # time = r + x·u with u = 1 / GBps: least squares over the rows (exact for two).
    n = len(rows)
    mx = sum(x for x, _, _ in rows) / n
    my = sum(y for _, y, _ in rows) / n
    spread = sum((x - mx) ** 2 for x, _, _ in rows)
    if spread == 0:
        sys.exit("the training comparisons move the same bytes: they cannot separate the restart from the rate")
    u = sum((x - mx) * (y - my) for x, y, _ in rows) / spread
    r = my - u * mx
    if u <= 0 or r < 0:
        sys.exit(f"the fit is not physical (restart {r:.3f} s, {1 / u if u else float('inf'):.3f} GB/s)")
    gbps = 1 / u
    for x, y, label in rows:
        print(f"{label}: busiest node {x:.3f} GB, published {y} s, fitted {r + x * u:.3f} s")
    print(f"restart_s = {r:.4f}, state_store_GBps = {gbps:.4f}")
    if a.write:
        rc = stack["reconfiguration"]
        rc["restart_s"]["value"] = round(r, 4)
        rc["state_store_GBps"]["value"] = round(gbps, 4)
        stack_file.write_text(json.dumps(stack, indent=2, ensure_ascii=False) + "\n")
        print(f"wrote {stack_file}")


if __name__ == "__main__":
    main()
