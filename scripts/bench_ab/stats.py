#!/usr/bin/env python3
"""Paired statistics of scripts/bench_compare.sh raw files (round, binary, metric, value per line).

  scripts/bench_ab/stats.py RAW.tsv [RAW.tsv ...]

Per metric: rounds, the geometric mean of the per-round B/A ratios with a 95% t-interval on the log ratios,
and the median ratio with a 95% percentile-bootstrap interval (10000 resamples, fixed seed). Files are
pooled (rounds are numbered per file). B/A > 1: B faster.
"""
import math
import random
import statistics
import sys
from collections import defaultdict

T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 12: 2.18,
       15: 2.13, 20: 2.09, 25: 2.06, 30: 2.04}


def t95(df):
    keys = sorted(k for k in T95 if k <= df)
    return T95[keys[-1]] if keys else T95[1]


def main():
    ratios = defaultdict(list)
    for fi, path in enumerate(sys.argv[1:]):
        vals = defaultdict(dict)
        for line in open(path):
            r, b, m, v = line.rstrip("\n").split("\t")
            if v:
                vals[(m, r)][b] = float(v)
        for (m, r), d in vals.items():
            if d.get("A", 0) > 0 and "B" in d:
                ratios[m].append(d["B"] / d["A"])
    rng = random.Random(1)
    print(f"{'metric':40s} {'n':>3s} {'geomean':>8s} {'95% CI':>15s} {'median':>7s} {'95% CI (bootstrap)':>19s}")
    for m in sorted(ratios):
        x = ratios[m]
        n = len(x)
        logs = [math.log(v) for v in x]
        mu = statistics.fmean(logs)
        half = t95(n - 1) * statistics.stdev(logs) / math.sqrt(n) if n > 1 else float("nan")
        meds = sorted(statistics.median(rng.choices(x, k=n)) for _ in range(10000))
        print(f"{m:40s} {n:3d} {math.exp(mu):8.3f} {math.exp(mu - half):7.3f}-{math.exp(mu + half):<7.3f} "
              f"{statistics.median(x):7.3f} {meds[250]:9.3f}-{meds[9749]:<9.3f}")


if __name__ == "__main__":
    main()
