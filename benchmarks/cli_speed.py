"""Wall time of simple txcalc commands against the bare interpreter, side by side.

Run: python3 benchmarks/cli_speed.py [--runs N] [--importtime]

A *simple command* (issue 18) is one of ``presets``, ``params``, ``flops``, ``memory`` (and
``gpus`` where the catalog command exists) given a preset name (no config.json to read, no
Hub, no plot, no planner search), with or without ``--json``: SIMPLE below. Its target is an
overhead (the command's wall time minus ``python3 -c pass``'s, what txcalc itself costs on
top of the interpreter) under 0.1 s. ``flops``/``memory``/``params`` of the largest presets
(HEAVY) are listed too, against 0.5 s of overhead. Issue 14's ``fit llama-3.1-8b --gpu
rtx-4090 --finetune qlora`` (ANSWER) must answer in under 1 s: its target is the whole
command's time, interpreter start-up included, not an overhead.

For each command, side by side: the minimum of N runs (default 9) of ``python3 -c pass``,
of the table form ``python3 -m txcalc ...`` and of its ``--json`` form, run in turn (the
minimum is the figure least inflated by other work on the machine; the three see the same
load), the two overheads and the target, in CPU time and in wall time (user + system of the child: on a loaded machine the wall time waits for a core, the CPU
time hardly does). Bytecode is compiled once into a temporary folder (PYTHONPYCACHEPREFIX),
as an installed package's is: with PYTHONDONTWRITEBYTECODE=1 every import would compile its
source and measure that instead. ``--importtime`` adds
the modules that cost most at start-up (``python3 -X importtime``, cumulative) for one
command. The machine should be otherwise idle: on a loaded machine every figure inflates.
"""

import argparse
import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the simple commands, each run as a table and with --json: target overhead 0.1 s
SIMPLE = [["presets"], ["params", "gpt2"], ["params", "llama-3-8b"],
          ["params", "llama-3.1-405b"], ["flops", "llama-3-8b", "--seq", "4096"],
          ["memory", "llama-3-8b", "--seq", "4096"], ["gpus"]]
#: the largest presets: target overhead 0.5 s
HEAVY = [["params", "deepseek-v3"], ["flops", "llama-3.1-405b", "--seq", "8192"],
         ["memory", "llama-3.1-405b", "--seq", "8192"]]
#: whole commands with a target on their total time (issue 14: "answers in under 1 s")
ANSWER = [["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--finetune", "qlora"]]
#: issue 28: one fit answer, with the recipe and checkpointing it assumes, under 0.5 s
FIT_ONE = [["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--finetune", "qlora", "--seq", "4096"]]
#: issue 28: fit over N GPUs (ZeRO-3: each length tried is a planner evaluation) under 1 s
FIT_GPUS = [["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--finetune", "qlora", "--gpus", "8"]]
#: (args, target seconds, what the target bounds: the overhead or the whole command)
COMMANDS = ([(a, 0.1, "overhead") for a in SIMPLE] + [(a, 0.5, "overhead") for a in HEAVY]
            + [(a, 1.0, "total") for a in ANSWER] + [(a, 0.5, "total") for a in FIT_ONE]
            + [(a, 1.0, "total") for a in FIT_GPUS])


#: compiled bytecode in a folder of its own (nothing written into the checkout), kept for
#: the whole run: an installed txcalc imports .pyc files, and where PYTHONDONTWRITEBYTECODE
#: is set every import would compile its source (a third of txcalc's start-up)
PYCACHE = tempfile.mkdtemp(prefix="txcalc-bench-pycache-")
atexit.register(shutil.rmtree, PYCACHE, True)


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = PYCACHE
    return env


def timed(argv, check: bool = True) -> tuple[float, float] | None:
    """(wall seconds, CPU seconds: user + system) ``argv`` ran; None when ``check`` is off
    and it failed (a command this checkout lacks). The CPU time is the figure to read on a
    loaded machine: waiting for a core inflates the wall time, hardly the CPU time."""
    t = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env())
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    p.stderr.close()
    if p.returncode != 0:
        if check:
            raise SystemExit(f"{' '.join(argv)} failed: {err.decode()[-300:]}")
        return None
    return wall, usage.ru_utime + usage.ru_stime


def side_by_side(args, runs: int):
    """((wall, CPU) of ``python -c pass``, of the table form, of the ``--json`` form), each
    the minimum of ``runs``, the three run in turn so that they see the same machine load;
    None for a command this checkout lacks (``gpus`` before the catalog command)."""
    forms = [[sys.executable, "-c", "pass"], [sys.executable, "-m", "txcalc", *args],
             [sys.executable, "-m", "txcalc", *args, "--json"]]
    for argv in forms[1:]:  # (these runs also compile the bytecode the timed runs read)
        if timed(argv, check=False) is None:
            return None
    got = [[] for _ in forms]
    for _ in range(runs):
        for argv, out in zip(forms, got):
            out.append(timed(argv))
    return [(min(w for w, _ in g), min(c for _, c in g)) for g in got]


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
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--importtime", action="store_true")
    a = ap.parse_args()
    print(f"min of {a.runs} runs each; overhead = txcalc - python -c pass, in CPU time (user + "
          "sys: the figure to read when the machine is loaded) and in wall time")
    print(f"{'command':40s} {'python -c pass':>15s} | {'table':>7s} {'overhead':>8s} | "
          f"{'--json':>7s} {'overhead':>8s} | target")
    for args, target, bound in COMMANDS:
        got = side_by_side(args, a.runs)
        name = "txcalc " + " ".join(args)
        if got is None:
            print(f"{name:40s} (no such command in this checkout)")
            continue
        (base_w, base_c), (tab_w, tab_c), (js_w, js_c) = got
        for kind, i, base, tab, js in (("CPU", 1, base_c, tab_c, js_c),
                                       ("wall", 0, base_w, tab_w, js_w)):
            over = (tab - base, js - base)
            worst = max(over) if bound == "overhead" else max(tab, js)
            verdict = "ok" if worst < target else "MISSED"
            print(f"{name if i else '':40s} {kind:>4s} {base:9.3f}s | {tab:6.3f}s {over[0]:7.3f}s"
                  f" | {js:6.3f}s {over[1]:7.3f}s | {bound} < {target:g} s: {verdict}")
    if a.importtime:
        print(f"\nstart-up imports of txcalc {' '.join(SIMPLE[2])} (cumulative ms):")
        for us, mod in importtime(SIMPLE[2]):
            print(f"  {us / 1000:8.1f}  {mod}")


if __name__ == "__main__":
    main()
