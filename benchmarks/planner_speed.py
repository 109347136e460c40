"""Speed of the planner's layout search: vectorised (numpy over the grid) vs a plain-Python
loop over the same layouts, then the commands of issue 27 timed as a user runs them.

    python benchmarks/planner_speed.py [MODEL] [GPU]

The loop evaluates each layout on its own (the same ``evaluate`` on one-layout arrays: the
same formulas without vectorisation) for a sample and reports its rate; the vectorised rate
is over the whole grid, tables excluded (they are built once per query and timed apart).
Rates are per second of process CPU time (one core: numpy's elementwise kernels are single-
threaded), so that other jobs on a shared machine do not distort them; wall times are shown.

The commands run as subprocesses (CLI start-up included), best of 3, each shown with the CPU
seconds of the child (user + system: one core) and its wall time:

    the README's first command, the global batch searched (targets: < 1 s; 3.7 s and 594,538
      layouts before issue 27, the batch pinned at 1,024 sequences), and the same with
      --global-batch 1024 (the batch pinned: the old search on the old grid, less the GPU
      counts that are not whole nodes), their ratio
    degenerate inputs (target: an answer or a one-line refusal, exit 2, in < 1 s): seq 1,
      10^18 tokens, --max-gpus 2^20
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

README = ["llama-3.1-405b", "--tokens", "15T", "--gpu", "h100", "--days", "90", "--price",
          "2.5"]
DEGENERATE = {
    "seq 1": ["llama-3-8b", "--tokens", "1T", "--gpu", "a100", "--seq", "1"],
    "10^18 tokens": ["llama-3-8b", "--tokens", "1000000000000000000", "--gpu", "a100"],
    "--max-gpus 2^20": ["llama-3-8b", "--tokens", "1T", "--gpu", "a100", "--max-gpus",
                        "1048576"],
    "405B, 10^18 tokens, 2^20 GPUs": ["llama-3.1-405b", "--tokens", "1000000000000000000",
                                      "--gpu", "h100", "--max-gpus", "1048576"],
    "405B, 10^18 tokens in 90 days (refused)": ["llama-3.1-405b", "--tokens",
                                                "1000000000000000000", "--gpu", "h100",
                                                "--days", "90"],
}
#: the README command before issue 27 (issue 27's figures, on the same kind of machine)
BEFORE = {"wall_s": 3.7, "layouts": 594_538}


def timed(args: list[str]) -> tuple[float, float, int, dict | None]:
    """(CPU s of the child, wall s, exit code, its --json or None): best of 3 by CPU."""
    cmd = [sys.executable, "-m", "txcalc", "plan", "train", *args, "--json"]
    best = None
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        out = json.loads(r.stdout) if r.returncode == 0 else None
        if r.returncode not in (0, 2):
            raise SystemExit(r.stderr)
        if best is None or cpu < best[0]:
            best = (cpu, wall, r.returncode, out)
    return best


def grid_rates(model: str, gpu_name: str) -> None:
    import numpy as np

    from txcalc import load
    from txcalc.engine.hardware import get_gpu
    from txcalc.parallel.overheads import Overheads
    from txcalc.train.setting import TrainSetting, shard_groups
    from txcalc.train.evaluate import build_tables, evaluate
    from txcalc.train.grid import layout_grid
    from txcalc.train.planner import default_seq

    cfg, gpu = load(model), get_gpu(gpu_name)
    seq = default_seq(cfg)
    s = TrainSetting(cfg, gpu, seq, round(2**22 / seq), overheads=Overheads())
    g, axes = layout_grid(cfg, gpu, seq, s.global_batch, 2**17)
    n = len(g["tp"])
    t0 = time.perf_counter()
    shard, shard_e = shard_groups(g, gpu)
    tables = build_tables(s, *axes, np.unique(np.concatenate([shard, shard_e])))
    t_tables = time.perf_counter() - t0
    best = cpu = float("inf")
    for _ in range(7):
        t0, c0 = time.perf_counter(), time.process_time()
        evaluate(s, tables, g, detail=False)
        best = min(best, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    vec_rate = n / cpu
    sample = np.random.default_rng(0).choice(n, size=min(n, 2000), replace=False)
    c0 = time.process_time()
    for i in sample:
        evaluate(s, tables, {k: v[i:i + 1] for k, v in g.items()}, detail=False)
    loop_rate = len(sample) / (time.process_time() - c0)
    print(f"{model} on {gpu.name}, batch pinned at {s.global_batch}: {n:,} valid layouts; "
          f"tables built once in {t_tables:.3f} s")
    print(f"  vectorised : {vec_rate:>14,.0f} layouts/s of CPU time on one core "
          f"({cpu:.3f} s CPU, {best:.3f} s wall for the grid)")
    print(f"  python loop: {loop_rate:>14,.0f} layouts/s  ({len(sample):,} layouts sampled)")
    print(f"  ratio      : {vec_rate / loop_rate:>14,.0f} x")


def commands() -> None:
    new = timed(README)
    pinned = timed([*README, "--global-batch", "1024"])
    print(f"`txcalc plan train {' '.join(README)}` (CPU s of one core / wall s, best of 3):")
    rows = [("before issue 27 (issue's figure)", None, BEFORE["wall_s"], BEFORE["layouts"],
             None),
            ("batch pinned at 1,024 (old grid)", *pinned[:2],
             pinned[3]["layouts_evaluated"], pinned[3]),
            ("batch searched (now)", *new[:2], new[3]["layouts_evaluated"], new[3])]
    for name, cpu, wall, layouts, out in rows:
        answer = "" if out is None else (
            f"  -> {out['total_gpus']:,} GPUs, MFU {out['mfu']:.1%}, batch "
            f"{out['global_batch']:,} ({out['global_batch_source']})")
        print(f"  {name:34} {'-' if cpu is None else f'{cpu:5.2f}':>5} / {wall:5.2f} s  "
              f"{layouts:>9,} layouts{answer}")
    print(f"  ratio before / now: {BEFORE['wall_s'] / new[0]:.1f} x (CPU); pinned / searched: "
          f"{pinned[0] / new[0]:.1f} x; target < 1 s: {'met' if new[0] < 1 else 'MISSED'}")
    print("degenerate inputs (target: answer or refuse in < 1 s):")
    for name, args in DEGENERATE.items():
        cpu, wall, rc, out = timed(args)
        what = (f"{out['total_gpus']:,} GPUs, {out['layouts_evaluated']:,} layouts"
                if out else "refused, exit 2")
        print(f"  {name:40} {cpu:5.2f} / {wall:5.2f} s  {what}"
              f"{'' if cpu < 1 else '  (over 1 s)'}")


def main(model: str = "llama-3.1-405b", gpu_name: str = "h100") -> None:
    grid_rates(model, gpu_name)
    commands()


if __name__ == "__main__":
    main(*sys.argv[1:])
