"""Wall time of simple txcalc commands against the bare interpreter, side by side.

Run: python3 benchmarks/cli_speed.py [--runs N] [--importtime]

For each command: the median of N runs (default 7) of ``python3 -m txcalc ...``, the median of
``python3 -c pass`` measured in between (the floor any Python CLI pays), the difference (what
txcalc itself costs) and the target (issue 18: a simple command under 0.1 s; the heavier
``flops``/``memory`` of a 405B model under 0.5 s). ``--importtime`` adds the modules that cost
most at start-up (``python3 -X importtime``), cumulative, for the first command.
The machine must be otherwise idle: on a shared, loaded machine every figure inflates.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: (arguments, target seconds)
COMMANDS = [(["presets"], 0.1), (["params", "llama-3-8b"], 0.1),
            (["params", "llama-3.1-405b", "--json"], 0.1),
            (["memory", "llama-3-8b", "--seq", "4096"], 0.1),
            (["params", "deepseek-v3"], 0.5),
            (["flops", "llama-3.1-405b", "--seq", "8192"], 0.5),
            (["memory", "llama-3.1-405b", "--seq", "8192"], 0.5)]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def wall(argv) -> float:
    t = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, env=_env())
    return time.perf_counter() - t


def side_by_side(args, runs: int) -> tuple[float, float]:
    """(median of the command, median of python -c pass), runs interleaved so that both see
    the same machine load."""
    cmd, base = [], []
    for _ in range(runs):
        base.append(wall([sys.executable, "-c", "pass"]))
        cmd.append(wall([sys.executable, "-m", "txcalc", *args]))
    return statistics.median(cmd), statistics.median(base)


def importtime(args, top: int = 12) -> list[tuple[int, str]]:
    """(cumulative microseconds, module) of the costliest top-level imports of a command."""
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "txcalc", *args],
                       capture_output=True, text=True, env=_env())
    rows = []
    for line in r.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)", line)
        if m and len(m.group(2)) <= 3:  # top-level and first-level imports
            rows.append((int(m.group(1)), m.group(3)))
    return sorted(rows, reverse=True)[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--importtime", action="store_true")
    a = ap.parse_args()
    print(f"{'command':44s} {'txcalc':>8s} {'python -c pass':>15s} {'txcalc - pass':>14s} "
          f"{'ratio':>6s}  target")
    for args, target in COMMANDS:
        t, base = side_by_side(args, a.runs)
        print(f"txcalc {' '.join(args):37s} {t:7.3f}s {base:14.3f}s {t - base:13.3f}s "
              f"{t / base:5.1f}x  < {target:g} s: {'ok' if t < target else 'MISSED'}")
    if a.importtime:
        print(f"\nstart-up imports of txcalc {' '.join(COMMANDS[1][0])} (cumulative ms):")
        for us, mod in importtime(COMMANDS[1][0]):
            print(f"  {us / 1000:8.1f}  {mod}")


if __name__ == "__main__":
    main()
