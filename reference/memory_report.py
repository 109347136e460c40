"""Peak training-step memory of llama-3-8b, batch 1, 4k context, bf16-mixed AdamW, measured
with FakeTensorMode + MemTracker (about 90 s per step, no memory used), against
TrainingMemory.phases(); writes reports/validation/llama-3-8b-4k-memtracker.{json,md}.

    python -m reference.memory_report [--steps 1]

One step: optimizer state is created lazily inside it, so forward and backward are compared
with ``phases(first_step=True)``; the step itself holds the state in both cases.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import txcalc
from txcalc.engine.memory import TrainingMemory
from txcalc.units import error_pct
from txcalc.engine.workload import Workload

from .train import memory_by_phase

OUT = Path(__file__).parents[1] / "reports" / "validation"
PHASES = ("after_forward", "peak_forward", "after_backward", "peak_backward", "after_step",
          "peak")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-3-8b")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--precision", default="bf16-mixed")
    ap.add_argument("--optimizer", default="adamw")
    args = ap.parse_args(argv)
    cfg = txcalc.load(args.model)
    work = Workload(batch=args.batch, seq=args.seq)
    t0 = time.perf_counter()
    measured = memory_by_phase(cfg, work, args.precision, args.optimizer, fake=True,
                               steps=args.steps)
    seconds = time.perf_counter() - t0
    predicted = TrainingMemory(cfg, work, args.precision, args.optimizer).phases(
        first_step=args.steps == 1)
    rows = {}
    for phase in PHASES:
        m, p = measured[phase], predicted[phase]
        rows[phase] = {"measured": m["total"], "predicted": p["total"],
                       "error_pct": error_pct(p["total"], m["total"])}
    report = {"model": cfg.name, "batch": args.batch, "seq": args.seq, "steps": args.steps,
              "precision": args.precision, "optimizer": args.optimizer,
              "method": "FakeTensorMode + torch.distributed._tools.mem_tracker.MemTracker",
              "seconds": seconds, "measured": measured, "predicted": predicted,
              "totals": rows}
    OUT.mkdir(parents=True, exist_ok=True)
    stem = OUT / f"{cfg.name}-{args.seq // 1024}k-memtracker"
    Path(f"{stem}.json").write_text(json.dumps(report, indent=1))
    lines = [f"# {cfg.name}: training-step memory by phase, batch {args.batch}, seq {args.seq}, "
             f"{args.precision}, {args.optimizer}", "",
             f"Measured: {report['method']} ({seconds:.0f} s, step {args.steps}). Predicted: "
             "txcalc TrainingMemory.phases(). Bytes; GiB = 2^30.", "",
             "| phase | measured | predicted | error % | measured GiB |", "|---|---:|---:|---:|---:|"]
    for phase, r in rows.items():
        lines.append(f"| {phase} | {r['measured']:,} | {r['predicted']:,} | "
                     f"{r['error_pct']:.3f} | {r['measured'] / 2**30:.2f} |")
    lines += ["", "Peak by category (measured / predicted):", "",
              "| category | measured | predicted |", "|---|---:|---:|"]
    for cat in ("param", "grad", "opt", "master", "act", "temp"):
        lines.append(f"| {cat} | {measured['peak'].get(cat, 0):,} | "
                     f"{predicted['peak'][cat]:,} |")
    Path(f"{stem}.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {stem}.json/.md in {seconds:.0f} s")


if __name__ == "__main__":
    main()
