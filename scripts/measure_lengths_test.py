#!/usr/bin/env python3
"""measure_lengths_test.py — scripts/measure_lengths.py writes the lengths file cpbench compare
reads: a corpus of JSON lines counted by a local tokenizer.json (built here with the tokenizers
package, word-level, so every count is known), exact duplicates dropped, files counted by bytes per
token, and errors that name the file and line."""

import csv
import os
import subprocess
import sys
import tempfile

from tokenizers import Tokenizer, models, pre_tokenizers

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "measure_lengths.py")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def read_lengths(path):
    with open(path) as f:
        rows = [r for r in csv.reader(line for line in f if not line.startswith("#"))]
    assert rows[0] == ["doc", "num_tokens"], rows[0]
    return [(r[0], int(r[1])) for r in rows[1:]]


def main():
    with tempfile.TemporaryDirectory() as d:
        vocab = {"[UNK]": 0, "the": 1, "cat": 2, "sat": 3}
        tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok_path = os.path.join(d, "tokenizer.json")
        tok.save(tok_path)
        corpus = os.path.join(d, "corpus")
        os.makedirs(corpus)
        with open(os.path.join(corpus, "b.jsonl"), "w") as f:
            f.write('{"text": "the cat sat"}\n\n{"text": "the cat sat"}\n{"text": "one two three four five"}\n')
        with open(os.path.join(corpus, "a.jsonl"), "w") as f:
            f.write('{"text": "the", "id": 1}\n')
        out = os.path.join(d, "lengths.csv")
        r = run(corpus, "--field", "text", "--tokenizer", tok_path, "--lengths-out", out)
        assert r.returncode == 0, r.stderr
        got = read_lengths(out)
        # Files by name, lines in order; the duplicate of "the cat sat" dropped; unknown words are
        # one token each.
        assert [n for _, n in got] == [1, 3, 5], got
        assert got[0][0].endswith("a.jsonl:1") and got[2][0].endswith("b.jsonl:4"), got

        # Files as documents, counted at the prose ratio (4 bytes per token).
        files = os.path.join(d, "files")
        os.makedirs(files)
        for name, size in (("x.txt", 400), ("y.txt", 10)):
            with open(os.path.join(files, name), "w") as f:
                f.write("a" * size)
        r = run(files, "--kind", "prose", "--lengths-out", out)
        assert r.returncode == 0, r.stderr
        assert [n for _, n in read_lengths(out)] == [100, 2]

        # Errors name the file and line, or the missing flag.
        with open(os.path.join(corpus, "c.jsonl"), "w") as f:
            f.write('{"body": "no text field"}\n')
        r = run(corpus, "--field", "text", "--tokenizer", tok_path, "--lengths-out", out)
        assert r.returncode != 0 and "c.jsonl:1: expected a JSON object with a \"text\" string" in r.stderr, r.stderr
        r = run(files, "--lengths-out", out)
        assert r.returncode == 2 and "give --tokenizer, or --kind" in r.stderr, r.stderr
    print("measure_lengths_test: ok")


if __name__ == "__main__":
    main()
