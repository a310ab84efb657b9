#!/usr/bin/env python3
"""measure_lengths.py — measure a document-length profile from a folder of real files.

Walks DIR, counts each document's length in bytes, converts bytes to tokens with a stated
bytes-per-token ratio for the content kind, and writes an `empirical` dataset preset (a histogram
with log-spaced bins) that core/workload/length_profile.h loads.

    scripts/measure_lengths.py /usr/lib/python3.11 --kind code --include '*.py' \
        --name debian_code --out experiments/datasets/debian_code.json

Or, for `cpbench compare --lengths`, one length per document of a corpus as a data pipeline holds
it — JSON lines or Parquet rows (the text in --field) — counted by the tokenizer the model ships
(its local tokenizer.json, read with Hugging Face's `tokenizers` package; nothing is downloaded):

    scripts/measure_lengths.py corpus/ --field text --tokenizer model/tokenizer.json \
        --lengths-out my_lengths.csv

Rules, stated in the output's provenance and assumptions:
- a document is one regular file (symbolic links are skipped, so nothing is counted twice);
  files ending in .gz are measured decompressed; empty files are skipped;
- exact duplicates (same SHA-256 of the content) are counted once, as pretraining pipelines
  deduplicate exact copies;
- tokens = max(1, round(bytes / bytes_per_token)); bins are 4 per octave (edges 2^(i/4) tokens).

Bytes per token (GPT-2 BPE, the tokenizer DCP uses):
- prose 4.0: OpenAI's rule of thumb for its GPT tokenizers is about 4 characters of common English
  text per token; cl100k_base (a larger vocabulary than GPT-2's, so fewer tokens) measured 4.17
  bytes/token on 300 of the Debian copyright files used for debian_prose;
- code 3.0: cl100k_base measured 4.10 bytes/token on 300 files of the Python standard library
  used for debian_code; cl100k_base, like Codex's tokenizer, has tokens for runs of whitespace,
  which the Codex paper (Chen et al. 2021, §3) says cut code token counts by about 30% against
  GPT-2/GPT-3's tokenizer, so GPT-2 spends about 4.10 × 0.7 ≈ 2.9 bytes per token; we use 3.0.
"""

import argparse
import datetime
import fnmatch
import gzip
import hashlib
import json
import math
import os
import sys

BYTES_PER_TOKEN = {"code": 3.0, "prose": 4.0}
BINS_PER_OCTAVE = 4


def documents(root, patterns):
    """Yields (path, content bytes) of every regular file under root matching one of patterns."""
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            if patterns and not any(fnmatch.fnmatch(name, p) for p in patterns):
                continue
            try:
                with open(path, "rb") as f:
                    data = f.read()
                if name.endswith(".gz"):
                    data = gzip.decompress(data)
            except (OSError, EOFError, gzip.BadGzipFile) as e:
                print(f"skipping {path}: {e}", file=sys.stderr)
                continue
            yield path, data


def records(root, field, patterns):
    """Yields (where, text bytes) of every document of the JSON-lines (*.jsonl, *.ndjson) and Parquet
    files under root: one per line or row, its text in `field`."""
    paths = [root] if os.path.isfile(root) else [
        os.path.join(folder, name)
        for folder, dirs, files in sorted(os.walk(root)) for name in sorted(files)]
    for path in paths:
        name = os.path.basename(path)
        if patterns and not any(fnmatch.fnmatch(name, p) for p in patterns):
            continue
        if name.endswith((".jsonl", ".ndjson", ".jsonl.gz")):
            opener = gzip.open if name.endswith(".gz") else open
            with opener(path, "rt", encoding="utf-8") as f:
                for line_no, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        value = json.loads(line)[field]
                    except (ValueError, KeyError, TypeError):
                        sys.exit(f"error: {path}:{line_no}: expected a JSON object with a \"{field}\" string")
                    if not isinstance(value, str):
                        sys.exit(f"error: {path}:{line_no}: \"{field}\" is not a string")
                    yield f"{path}:{line_no}", value.encode("utf-8")
        elif name.endswith(".parquet"):
            try:
                import pyarrow.parquet as pq
            except ImportError:
                sys.exit(f"error: {path}: reading Parquet needs the pyarrow package (pip install pyarrow)")
            table = pq.read_table(path, columns=[field])
            for row, value in enumerate(table.column(field).to_pylist()):
                yield f"{path}:{row}", (value or "").encode("utf-8")


def token_counter(tokenizer_path, bytes_per_token):
    """len(tokens) of a document's bytes: the tokenizer's count, or bytes / bytes_per_token."""
    if not tokenizer_path:
        return lambda data: max(1, round(len(data) / bytes_per_token))
    try:
        from tokenizers import Tokenizer
    except ImportError:
        sys.exit("error: --tokenizer needs Hugging Face's tokenizers package (pip install tokenizers)")
    try:
        tok = Tokenizer.from_file(tokenizer_path)
    except Exception as e:  # the package raises its own exception types
        sys.exit(f"error: {tokenizer_path}: not a tokenizer.json the tokenizers package reads ({e})")
    return lambda data: max(1, len(tok.encode(data.decode("utf-8", errors="replace"), add_special_tokens=False).ids))


def log_bins(lengths):
    """[[lo, hi, count], ...]: integer bins [ceil(2^(i/4)), ceil(2^((i+1)/4)) - 1], empty ones left out."""
    top = max(lengths)
    edges = []
    i = 0
    while True:
        e = math.ceil(2 ** (i / BINS_PER_OCTAVE) - 1e-9)
        if not edges or e > edges[-1]:
            edges.append(e)
        if e > top:
            break
        i += 1
    counts = [0] * (len(edges) - 1)
    for n in lengths:
        lo, hi = 0, len(edges) - 1  # edges[lo] <= n < edges[hi]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if edges[mid] <= n:
                lo = mid
            else:
                hi = mid
        counts[lo] += 1
    return [[edges[k], edges[k + 1] - 1, c] for k, c in enumerate(counts) if c > 0]


def quantile(sorted_values, p):
    return sorted_values[min(len(sorted_values) - 1, int(p * (len(sorted_values) - 1)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="folder to walk (or one JSON-lines or Parquet file with --field)")
    ap.add_argument("--kind", choices=sorted(BYTES_PER_TOKEN), help="content kind (its bytes/token; without --tokenizer)")
    ap.add_argument("--tokenizer", help="a local tokenizer.json: count each document's tokens with it")
    ap.add_argument("--field", help="documents are the lines of *.jsonl / rows of *.parquet, their text in this field")
    ap.add_argument("--lengths-out", help="write one length per document (CSV doc,num_tokens) for cpbench compare")
    ap.add_argument("--name", help="preset name (the output file's name without .json)")
    ap.add_argument("--out", help="output JSON file (a dataset preset)")
    ap.add_argument("--include", action="append", default=[], help="file-name glob to keep (repeatable)")
    ap.add_argument("--bytes-per-token", type=float, help="override the kind's ratio")
    ap.add_argument("--min-length", type=int, default=1, help="min_length_tokens of the preset")
    ap.add_argument("--max-length", type=int, default=131072, help="max_length_tokens of the preset")
    ap.add_argument("--corpus", default="", help="one line naming the corpus, for the provenance")
    args = ap.parse_args()
    if not args.lengths_out and not (args.out and args.name):
        ap.error("give --lengths-out FILE, or --out FILE and --name NAME")
    if not args.tokenizer and not args.kind and not args.bytes_per_token:
        ap.error("give --tokenizer, or --kind (bytes per token) to count tokens")

    bpt = args.bytes_per_token or BYTES_PER_TOKEN.get(args.kind, 0)
    count = token_counter(args.tokenizer, bpt)
    source = records(args.dir, args.field, args.include) if args.field else documents(args.dir, args.include)
    seen = set()
    sizes, kept = [], []
    files = duplicates = 0
    for where, data in source:
        if not data:
            continue
        files += 1
        digest = hashlib.sha256(data).digest()
        if digest in seen:
            duplicates += 1
            continue
        seen.add(digest)
        sizes.append(len(data))
        kept.append((where, count(data)))
    if not sizes:
        sys.exit(f"error: no non-empty documents under {args.dir}")

    if args.lengths_out:
        with open(args.lengths_out, "w") as f:
            f.write(f"# scripts/measure_lengths.py {args.dir}: {len(kept)} documents ({duplicates} exact duplicates "
                    f"dropped), tokens by {args.tokenizer or f'{bpt} bytes per token'}\n")
            f.write("doc,num_tokens\n")
            for where, n in kept:
                f.write("\"" + where.replace("\"", "\"\"") + f"\",{n}\n")
        total = sum(n for _, n in kept)
        print(f"{args.lengths_out}: {len(kept)} documents, mean {total / len(kept):.0f} tokens")
        if not args.out:
            return

    tokens = sorted(n for _, n in kept)
    mean = sum(tokens) / len(tokens)
    above_max = sum(t > args.max_length for t in tokens)
    date = datetime.date.today().isoformat()
    include = ", ".join(args.include) if args.include else "all files"
    counted = f"tokens by {args.tokenizer}" if args.tokenizer else f"{bpt} bytes/token"
    profile = {
        "name": args.name,
        "description": (
            f"Measured {args.kind or 'corpus'} document lengths: {len(tokens)} unique documents of {args.dir} "
            f"({include}); mean {mean:.0f} tokens, median {quantile(tokens, 0.5)}, "
            f"p90 {quantile(tokens, 0.9)}, max {tokens[-1]}."
        ),
        "provenance": (
            f"scripts/measure_lengths.py {args.dir}" + (f" --kind {args.kind}" if args.kind else "")
            + "".join(f" --include '{p}'" for p in args.include)
            + f" on {date}: {files} non-empty documents, {duplicates} exact duplicates dropped, "
            f"{sum(sizes)} bytes in the {len(sizes)} kept; {counted}. "
            + (args.corpus + " " if args.corpus else "")
        ).strip(),
        "assumptions": [
            ("One line or row is one training document (its text field)." if args.field else
             "One file is one training document; symbolic links are skipped and .gz files are measured decompressed."),
            "Exact duplicate documents (same SHA-256) are counted once.",
            (f"Tokens counted by the tokenizer {args.tokenizer}, without special tokens." if args.tokenizer else
             f"Tokens = round(bytes / {bpt}), the {args.kind} ratio stated in scripts/measure_lengths.py "
             "for GPT-2 BPE; a real tokenizer's count varies per document around this ratio."),
            f"Lengths are binned 4 per octave; inside a bin every integer length is equally likely.",
            f"Documents longer than {args.max_length} tokens ({above_max} here) are clipped to it.",
        ],
        "min_length_tokens": args.min_length,
        "max_length_tokens": args.max_length,
        "kind": "empirical",
        "bins": log_bins(tokens),
    }
    text = json.dumps(profile, indent=2)
    # One bin per line keeps the file readable and its diffs small.
    text = text.replace("[\n      ", "[").replace(",\n      ", ", ").replace("\n    ]", "]")
    with open(args.out, "w") as f:
        f.write(text + "\n")
    print(f"{args.out}: {len(tokens)} documents, mean {mean:.0f} tokens, {len(profile['bins'])} bins")


if __name__ == "__main__":
    main()
