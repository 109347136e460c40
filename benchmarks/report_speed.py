"""Speed of ``txcalc report`` for the 405B training example: a baseline commit against the
working tree, side by side, and their ratio (target: at least 2x).

    python benchmarks/report_speed.py [--baseline REV] [--runs N]

The baseline (default ac995a1, before one search answered all: the report then ran the
planner once per frontier GPU count) is extracted with ``git archive`` into a temporary
folder; each command runs as its own process with PYTHONPATH pointing at its tree and the
tree as working directory (so each reads its own reports/validation/), alternating baseline
and working tree so that load on a shared machine hits both alike. Times: wall and the child's
CPU (user + system; less sensitive to other jobs), best and median of N runs. The two
report.json files must hold the same numbers, or the comparison is void.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["llama-3.1-405b", "--gpu", "h100", "--tokens", "15.6T", "--seq", "8192", "--days",
        "100"]


def extract(rev: str, dest: Path) -> Path:
    """The tree of ``rev`` written into ``dest`` (git archive | tar)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True,
                             check=True).stdout
    dest.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def run_once(tree: Path, out: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one ``python -m txcalc report ... -o out`` against ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "txcalc", "report", *ARGS, "-o", str(out)],
                       cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode:
        raise SystemExit(f"{tree}: exit {r.returncode}: {r.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="ac995a1")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="report-speed-") as tmp:
        tmp = Path(tmp)
        base = extract(a.baseline, tmp / "baseline")
        trees = {f"baseline {a.baseline}": base, "working tree": ROOT}
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in trees}
        for i in range(a.runs):
            for k, tree in trees.items():
                times[k].append(run_once(tree, tmp / f"out-{k.split()[0]}-{i}"))
        data = {k: json.loads((tmp / f"out-{k.split()[0]}-0" / "report.json").read_text())
                ["data"] for k in trees}
        same = len({json.dumps(d, sort_keys=True) for d in data.values()}) == 1
    print(f"txcalc report {' '.join(ARGS)}  ({a.runs} runs each, alternating)")
    stats = {}
    for k, ts in times.items():
        walls, cpus = [t[0] for t in ts], [t[1] for t in ts]
        stats[k] = (min(walls), statistics.median(walls), min(cpus), statistics.median(cpus))
        print(f"  {k:<22} wall best {stats[k][0]:6.2f} s, median {stats[k][1]:6.2f} s;  "
              f"CPU best {stats[k][2]:6.2f} s, median {stats[k][3]:6.2f} s")
    old, new = stats.values()
    print(f"  ratio (baseline / working tree): wall best {old[0] / new[0]:.2f}x, median "
          f"{old[1] / new[1]:.2f}x;  CPU best {old[2] / new[2]:.2f}x, median "
          f"{old[3] / new[3]:.2f}x  (target >= 2x)")
    print("  report.json data: " + ("identical" if same else "DIFFERENT (comparison void)"))
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
