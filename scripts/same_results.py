#!/usr/bin/env python3
"""Exit 0 when two results.json files hold the same results: every field but the provenance and
the points' wall-clock "timings" must be equal (DESIGN.md contract 4). Otherwise print the first
difference and exit 1.

usage: same_results.py A/results.json B/results.json [--points N]   (N: expected point count)
"""
import json
import sys


def strip(doc):
    doc = dict(doc)
    doc.pop("provenance", None)
    doc["points"] = [{k: v for k, v in p.items() if k != "timings"} for p in doc.get("points", [])]
    return doc


def first_difference(a, b, where=""):
    if type(a) is not type(b):
        return f"{where or '/'}: {a!r} vs {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{where}/{k}: only in {'B' if k not in a else 'A'}"
            d = first_difference(a[k], b[k], f"{where}/{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} vs {len(b)} entries"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{where}/{i}")
            if d:
                return d
        return None
    return None if a == b else f"{where}: {a!r} vs {b!r}"


def main(argv):
    args = argv[1:]
    expected = None
    if "--points" in args:
        i = args.index("--points")
        expected = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    a, b = (strip(json.load(open(f))) for f in args)
    if expected is not None and len(a["points"]) != expected:
        print(f"{args[0]}: {len(a['points'])} points, expected {expected}")
        return 1
    d = first_difference(a, b)
    if d:
        print(f"results differ at {d}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
