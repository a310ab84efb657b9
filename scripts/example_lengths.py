#!/usr/bin/env python3
"""example_lengths.py — write the synthetic lengths file of docs/your-data.md's walkthrough.

    scripts/example_lengths.py > examples/long_tail_lengths.csv

2,000 documents of a long-tailed corpus, made up for the example (not measured): 90 % drawn from a
lognormal of median 1,500 tokens (sigma 1.0), 10 % from one of median 20,000 tokens (sigma 0.9),
each clipped to [16, 131072]. Python's random with seed 7, so the file is the same every time.
Measure your own corpus with scripts/measure_lengths.py instead.
"""

import math
import random


def main():
    rng = random.Random(7)
    print("# synthetic long-tailed lengths: scripts/example_lengths.py (docs/your-data.md)")
    print("doc_id,num_tokens")
    for i in range(2000):
        median, sigma = (1500, 1.0) if rng.random() < 0.9 else (20000, 0.9)
        length = int(math.exp(rng.gauss(math.log(median), sigma)))
        print(f"{i},{max(16, min(length, 131072))}")


if __name__ == "__main__":
    main()
