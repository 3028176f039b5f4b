#!/usr/bin/env python3
"""The rows of an A/B run (bench/gpu/ab.sh): fp4cl-bench --csv output gathered per tree and round,
and the table of each row's medians side by side.

    ab_table.py append PART.csv AB.csv TREE ROUND   appends PART's rows to AB with the columns
                                                    tree and round first (AB's header once),
                                                    and prints each row in one line
    ab_table.py table AB.csv                        a Markdown table: each (op, shape, scheme,
                                                    T) row's us_median per round for each tree,
                                                    and the ratio of the trees' middle medians

The table's trees are in the order they first appear (ab.sh runs "new", then "base"). Exit status
1, naming the file and row, when a row's reference check is not "ok" or a file is not such CSV.
"""
import csv
import statistics
import sys

KEY = ("op", "shape", "scheme", "tokens")


def fail(message):
    print(f"ab_table.py: {message}", file=sys.stderr)
    sys.exit(1)


def append(part, ab, tree, round_):
    try:
        with open(part, newline="") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        fail(f"{part}: {e.strerror}")
    if not rows or "us_median" not in rows[0]:
        fail(f"{part}: not fp4cl-bench --csv output (no us_median column)")
    try:
        with open(ab, newline="") as f:
            has_header = bool(f.readline())
    except FileNotFoundError:
        has_header = False
    with open(ab, "a", newline="") as f:
        w = csv.writer(f)
        if not has_header:
            w.writerow(["tree", "round", *rows[0]])
        for row in rows[1:]:
            w.writerow([tree, round_, *row])
    for row in rows[1:]:  # one line a row, as the run goes
        r = dict(zip(rows[0], row))
        print(tree, round_, *(r.get(k, "") for k in ("op", "shape", "scheme")), "T", r.get("tokens", ""),
              *(r.get(k, "") for k in ("kernel", "us_median", "check")))


def table(ab):
    try:
        with open(ab, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        fail(f"{ab}: {e.strerror}")
    if not rows or any(k not in rows[0] for k in ("tree", "round", "us_median", "check", *KEY)):
        fail(f"{ab}: no rows of ab_table.py append")
    trees, order, times, kernels = [], [], {}, {}
    bad = []
    for i, r in enumerate(rows, start=2):
        if not r["check"].startswith("ok"):
            bad.append(f"{ab}:{i}: {r['tree']} round {r['round']} {r['op']} {r['shape']} {r['scheme']} T = "
                       f"{r['tokens']}: check '{r['check']}'")
        if r["tree"] not in trees:
            trees.append(r["tree"])
        key = tuple(r[k] for k in KEY)
        if key not in times:
            order.append(key)
            times[key] = {}
            kernels[key] = {}
        times[key].setdefault(r["tree"], []).append(float(r["us_median"]))
        kernels[key].setdefault(r["tree"], r["kernel"])
    print("| op | shape | scheme | T | kernel | " + " | ".join(f"{t} µs" for t in trees) +
          (f" | {trees[0]} / {trees[1]} |" if len(trees) == 2 else " |"))
    print("|---|---|---|---:|---|" + "---:|" * len(trees) + ("---:|" if len(trees) == 2 else ""))
    for key in order:
        ks = kernels[key]
        kernel = " / ".join(ks.get(t, "-") for t in trees) if len(set(ks.values())) > 1 else next(iter(ks.values()))
        cells = [", ".join(f"{v:.1f}" for v in times[key].get(t, [])) or "-" for t in trees]
        ratio = ""
        if len(trees) == 2:
            a, b = times[key].get(trees[0]), times[key].get(trees[1])
            ratio = f" {statistics.median(a) / statistics.median(b):.3f} |" if a and b else " - |"
        print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {kernel} | " + " | ".join(cells) + " |" + ratio)
    if bad:
        print("\n".join(bad), file=sys.stderr)
        sys.exit(1)


def main():
    args = sys.argv[1:]
    if len(args) == 5 and args[0] == "append":
        append(*args[1:])
    elif len(args) == 2 and args[0] == "table":
        table(args[1])
    else:
        fail("usage: ab_table.py append PART.csv AB.csv TREE ROUND | ab_table.py table AB.csv")


if __name__ == "__main__":
    main()
