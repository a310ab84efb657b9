#!/usr/bin/env python3
"""Mutation fuzzing of cpbench's inputs: specs, hardware and stack presets, results files.

Usage: fuzz.py CPBENCH EXPERIMENTS_DIR [--mutants N] [--seed S] [--seconds T] [--work DIR]

From a fixed seed, makes N mutants of a few committed inputs (a key dropped, a value replaced by
another type, a number made negative, zero, huge or fractional, an array emptied, the text
truncated, a key repeated) and runs cpbench on each as a user would: `run SPEC --first 1` for
specs and presets (presets through a copy of the experiments folder, --experiments), `show DIR`
and `run SPEC --resume` for results files. Every run must end with exit code 0, 1 or 2 — never a
signal, an abort (134) or a crash (139) — and leave no partial file: a results.json that exists
after a failed run parses as JSON. Stops adding mutants after --seconds and says how many ran.
Exit 0 when every mutant passed; 1 with the failures listed (each with the mutation and a command
that reproduces it). Python's random with a fixed seed: the same mutants on every machine.
"""
import argparse
import copy
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

SPECS = ["megatron_ptdp/fig16_microbatch.json", "dynamic_cp/github.json"]
PRESETS = ["hardware/a100_80gb_dgx.json", "stacks/megatron_sc21_a100.json", "models/gpt_91b.json"]
# The experiment each preset mutant runs (it reads that preset).
PRESET_SPEC = {"hardware/a100_80gb_dgx.json": "megatron_ptdp/fig16_microbatch",
               "stacks/megatron_sc21_a100.json": "megatron_ptdp/fig16_microbatch",
               "models/gpt_91b.json": "megatron_ptdp/fig16_microbatch"}
OK_CODES = {0, 1, 2}


def paths(node, prefix=()):
    """Every (path, value) in a JSON tree, containers included."""
    yield prefix, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from paths(v, prefix + (i,))


def parent_of(doc, path):
    node = doc
    for p in path[:-1]:
        node = node[p]
    return node


REPLACEMENTS = [None, True, "x", "", [], {}, 0, -1, 1e300, -1e300, 0.5, 2 ** 63, -(2 ** 63), 1e-300, "nan"]


def mutate(doc, rng):
    """One structural mutation of a JSON document: (new document or raw text, description)."""
    choices = [p for p, _ in paths(doc) if p]
    path = rng.choice(choices)
    value = parent_of(doc, path)[path[-1]]
    kind = rng.choice(["drop", "replace", "replace", "scale", "empty", "truncate", "repeat"])
    out = copy.deepcopy(doc)
    parent = parent_of(out, path)
    where = "/" + "/".join(str(p) for p in path)
    if kind == "drop":
        del parent[path[-1]]
        return out, f"drop {where}"
    if kind == "scale" and isinstance(value, (int, float)) and not isinstance(value, bool):
        factor = rng.choice([-1, 0, 1000, 1e-6, 2 ** 40])
        parent[path[-1]] = value * factor
        return out, f"{where} *= {factor}"
    if kind == "empty" and isinstance(value, (list, dict)):
        parent[path[-1]] = type(value)()
        return out, f"empty {where}"
    if kind == "truncate":
        text = json.dumps(doc, indent=2)
        cut = rng.randrange(1, len(text))
        return text[:cut], f"truncate at byte {cut}"
    if kind == "repeat" and isinstance(parent, dict):
        text = json.dumps(out, indent=2)
        key = json.dumps(path[-1])
        # The key written twice in its object: JSON parsers that keep the last value hide typos.
        text = text.replace(f"{key}:", f"{key}: {json.dumps(value)}, {key}:", 1)
        return text, f"repeat key {where}"
    new = rng.choice(REPLACEMENTS)
    parent[path[-1]] = new
    return out, f"{where} = {json.dumps(new)}"


def write(path, doc):
    with open(path, "w") as f:
        f.write(doc if isinstance(doc, str) else json.dumps(doc, indent=2))


def run(cmd, timeout):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stderr[-400:]
    except subprocess.TimeoutExpired:
        return "timeout", ""


def partial_file(out_dir):
    """A results.json left behind that does not parse, or None."""
    for root, _, files in os.walk(out_dir):
        for name in files:
            if name == "results.json":
                path = os.path.join(root, name)
                try:
                    with open(path) as f:
                        json.load(f)
                except (ValueError, OSError):
                    return path
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cpbench")
    ap.add_argument("experiments")
    ap.add_argument("--mutants", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--min-mutants", type=int, default=0,
                    help="fail when fewer mutants than this ran before --seconds ran out (a corpus cut short proves less)")
    ap.add_argument("--work", default=None, help="keep the mutants here (default: a temporary folder)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every run's mutation and exit code")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    work = args.work or tempfile.mkdtemp(prefix="cpbench_fuzz_")
    os.makedirs(work, exist_ok=True)
    cp = [args.cpbench]

    # A results file to mutate: one committed experiment run once here.
    base_out = os.path.join(work, "base")
    code, err = run(cp + ["--experiments", args.experiments, "run", "megatron_ptdp/fig16_microbatch", "--first", "2",
                          "--out", base_out], 300)
    if code != 0:
        print(f"fuzz: the unmutated run failed ({code}): {err}")
        return 1
    results_path = os.path.join(base_out, "megatron_ptdp/fig16_microbatch/results.json")
    with open(results_path) as f:
        results = json.load(f)
    sources = {s: json.load(open(os.path.join(args.experiments, s))) for s in SPECS + PRESETS}

    failures, ran, mutated, start = [], 0, 0, time.time()
    for i in range(args.mutants):
        if time.time() - start > args.seconds:
            break
        mutated += 1
        target = rng.choice(["spec", "preset", "results"])
        case = os.path.join(work, f"m{i:04d}")
        shutil.rmtree(case, ignore_errors=True)
        os.makedirs(case)
        out = os.path.join(case, "out")
        if target == "spec":
            name = rng.choice(SPECS)
            doc, what = mutate(sources[name], rng)
            spec = os.path.join(case, os.path.basename(name))
            write(spec, doc)
            cmds = [cp + ["--experiments", args.experiments, "run", spec, "--first", "1", "--out", out]]
            what = f"{name}: {what}"
        elif target == "preset":
            name = rng.choice(PRESETS)
            doc, what = mutate(sources[name], rng)
            tree = os.path.join(case, "experiments")
            shutil.copytree(args.experiments, tree)
            write(os.path.join(tree, name), doc)
            cmds = [cp + ["--experiments", tree, "run", PRESET_SPEC[name], "--first", "1", "--out", out]]
            what = f"{name}: {what}"
        else:
            doc, what = mutate(results, rng)
            folder = os.path.join(out, "megatron_ptdp/fig16_microbatch")
            os.makedirs(folder)
            write(os.path.join(folder, "results.json"), doc)
            with open(os.path.join(folder, "results.json")) as f:
                written = f.read()
            cmds = [cp + ["--experiments", args.experiments, "show", folder],
                    cp + ["--experiments", args.experiments, "run", "megatron_ptdp/fig16_microbatch", "--first", "1",
                          "--resume", "--out", out]]
            what = f"results.json: {what}"
        for cmd in cmds:
            code, err = run(cmd, 120)
            ran += 1
            if args.verbose:
                print(f"{i} {what} -> {code} {err.strip().splitlines()[-1][:150] if err.strip() else ''}")
            bad = None
            if code not in OK_CODES:
                bad = f"exit {code}"
            elif code != 0 and target != "results" and (p := partial_file(out)):
                bad = f"partial file {p}"
            elif code != 0 and target == "results" and open(os.path.join(folder, "results.json")).read() != written:
                bad = "a rejected results file was rewritten (data lost)"
            if bad:
                failures.append(f"mutant {i} ({what}): {bad}\n    {' '.join(cmd)}\n    {err.strip()[-300:]}")
        if args.work is None:
            shutil.rmtree(case, ignore_errors=True)
    elapsed = time.time() - start
    print(f"fuzz: {ran} runs of {mutated} mutants (seed {args.seed}) in {elapsed:.0f} s, "
          f"{len(failures)} failed")
    if mutated < args.min_mutants:
        failures.append(f"only {mutated} of the {args.min_mutants} mutants asked for ran within {args.seconds:.0f} s")
    for f in failures:
        print(f)
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
