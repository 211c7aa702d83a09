"""
E7 part 0's reading (docs/plan.md): for each solved MHA run and each window W, accuracy >= 0.99 at
the keys inside the window (distance < W) and at most 1/N beyond it (distance > W), at every count
N with answers there. Reads the tables `bash docs/runs/e7/runs.sh windows` wrote:
    python docs/runs/e7/check_part0.py docs/runs/e7/part0
"""
import glob
import os
import re
import sys

ok = True
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*", "window_*.md"))):
    W = int(re.search(r"window_(\d+)\.md", path).group(1))
    table = open(path).read().split("by the distance")[1]
    for row in re.findall(r"^\| (\d+) \|(.*)\|$", table, re.M):
        N, cells = int(row[0]), [c.strip() for c in row[1].split("|")]
        inside, beyond = cells[-2:]  # "accuracy (answers)" or "-"
        for name, cell, good in (("inside", inside, lambda a: a >= 0.99),
                                 ("beyond", beyond, lambda a: a <= 1 / N)):
            if cell == "-":
                continue
            acc, n = re.fullmatch(r"([\d.]+) \((\d+)\)", cell).groups()
            passed = good(float(acc))
            ok &= passed
            print(f"{os.path.basename(os.path.dirname(path))} W={W} N={N} {name}: {acc} of {n} "
                  f"answers {'pass' if passed else 'FAIL'}")
print("part 0:", "passes" if ok else "FAILS: the probe cannot be shown to see forgetting")
sys.exit(0 if ok else 1)
