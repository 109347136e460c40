"""`txcalc calibrate FILE`: fit the time model's efficiencies to a GPU validation report, a
torch.profiler trace or the published training runs (txcalc.train.calibrate)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..units import error_pct

from .typer_app import app
from .output import console, emit_json, strict_json, table


@app.command()
def calibrate(report: Path = typer.Argument(..., help="A GPU validation report "
                                            "(reference/gpu_validate.sh writes gpu_validation.json), "
                                            "a torch.profiler Chrome trace (with --model, --batch, "
                                            "--seq) or published runs (txcalc/data/training_runs.json)."),
              gpu: str = typer.Option("", "--gpu", help="GPU of the catalog whose peaks to use "
                                      "(default: the report's device name)."),
              out: Path = typer.Option(None, "--out", help="Device profile to write (a JSON "
                                       "file; default: none, the fit is only printed)."),
              model: str = typer.Option(None, "--model", help="Trace: the model profiled "
                                        "(preset, HF config.json or model id)."),
              batch: int = typer.Option(None, "--batch", help="Trace: sequences per step."),
              seq: str = typer.Option(None, "--seq", help="Trace: tokens per sequence."),
              attn: str = typer.Option("flash", "--attn", help="Trace: eager | sdpa | flash."),
              recompute: str = typer.Option("none", "--recompute", help="Trace: none | "
                                            "selective | full."),
              precision: str = typer.Option("bf16-mixed", "--precision", help="Trace: precision."),
              optimizer: str = typer.Option("adamw", "--optimizer", help="Trace: optimizer."),
              steps: int = typer.Option(None, "--steps", help="Trace: training steps it covers "
                                        "(default: its ProfilerStep# marks, else 1)."),
              json_out: bool = typer.Option(False, "--json", help="Print JSON for scripts.")):
    """Fit matmul/attention FLOP efficiencies and the bandwidth efficiency to measured step
    times (a validation report), kernel times (a trace) or published runs; print each case's
    error before and after (and a report's peak memory per phase); save a device profile."""
    from ..train import calibrate as C
    from ..engine.hardware import get_gpu
    from ..inputs import MAX_ROWS, integer
    from ..engine.timing import DeviceProfile
    from ..atomic import check_out_file

    from .options import options

    opts = options(gpu=gpu or None, out=out, batch=batch, seq=seq, attn=attn,
                   recompute=recompute, precision=precision, optimizer=optimizer)
    steps = integer("--steps", steps, 1, MAX_ROWS, none=True)
    kind, doc = C.read_input(report)
    memory = []
    if kind == "runs":
        if not gpu:
            raise C.CalibrationInputError("published runs: give --gpu (the GPU to fit)")
        fitted, fit, rows = C.fit_published(gpu, report)
        g = get_gpu(gpu)
        what, unit = "step time of the published fit runs", "s"
    elif kind == "trace":
        missing = [f for f, v in (("--model", model), ("--batch", batch), ("--seq", seq),
                                  ("--gpu", gpu)) if v is None or v == ""]
        if missing:
            raise C.CalibrationInputError(f"a torch.profiler trace needs the workload it ran: "
                                          f"give {', '.join(missing)}")
        from .. import load
        from ..engine.workload import Workload
        g = get_gpu(gpu)
        case = C.Case("trace", load(model), Workload(batch=opts["batch"], seq=opts["seq"],
                                                     attn_impl=opts["attn"],
                                                     recompute=opts["recompute"]),
                      opts["precision"], opts["optimizer"], 1.0)
        measured = C.read_trace(doc, f"trace {report}", steps)
        fitted, rows = C.fit_trace(case, measured, DeviceProfile.from_gpu(g))
        what, unit = (f"kernel time per step by class ({measured['steps']} steps in the "
                      "trace)"), "s"
    else:
        device, cases = C.read_report(report, doc)
        words = device.lower().replace("nvidia", "").split()  # "NVIDIA H200" -> h200
        if not gpu and not words:
            raise C.CalibrationInputError(f"{report}: the report's device ({device!r:.80}) names "
                                          "no GPU; give --gpu")
        g = get_gpu(gpu or words[0])
        fitted, rows = C.fit(cases, DeviceProfile.from_gpu(g))
        memory = C.memory_errors(doc)
        what, unit = "step time", "s"
    if out is not None:  # nothing is written unless asked: no profiles/ in the current folder
        check_out_file(out, "--out")  # a folder, a device, a link or a pipe is refused
    result = {"gpu": g.name, "input": kind, "profile": None if out is None else str(out),
              "flop_efficiency": fitted.flop_efficiency, "bw_efficiency": fitted.bw_efficiency,
              "matmul_half_dim": fitted.matmul_half_dim,
              "cases": [{"case": k, "measured_s": m, "before_s": b, "after_s": a,
                         "before_error_pct": error_pct(b, m) if m else None,
                         "after_error_pct": error_pct(a, m) if m else None}
                        for k, (m, b, a) in rows.items()],
              "memory": memory}
    if out is not None:
        text = strict_json(fitted.to_json(), indent=2)  # built before writing
        from ..atomic import write_files
        # a temporary file, then os.replace; write_files makes the missing folders
        write_files(out.parent, {out.name: text}, "--out")
    if json_out:
        emit_json(result)
        return
    fmt = lambda x: "-" if x is None else f"{x:+.1f}"
    console.print(table(f"{what} on {g.name}: measured vs the roofline before and after "
                        "calibration", ["case", f"measured {unit}", f"before {unit}", "err %",
                                        f"after {unit}", "err %"],
                        [(r["case"], f"{r['measured_s']:.4g}", f"{r['before_s']:.4g}",
                          fmt(r["before_error_pct"]), f"{r['after_s']:.4g}",
                          fmt(r["after_error_pct"])) for r in result["cases"]]))
    if memory:
        console.print(table("peak memory per phase: predicted vs max_memory_allocated "
                            "(GiB = 2^30 bytes)", ["case", "phase", "predicted GiB",
                                                   "measured GiB", "err %"],
                            [(m["case"], m["phase"], f"{m['predicted_bytes'] / 2**30:.2f}",
                              f"{m['measured_bytes'] / 2**30:.2f}", f"{m['error_pct']:+.1f}")
                             for m in memory]))
    eff = ", ".join(f"{k} {v:.3f}" for k, v in fitted.flop_efficiency.items())
    saved = f"wrote {out}" if out is not None else "not saved: --out FILE writes the profile"
    console.print(f"fitted: {eff}, bandwidth {fitted.bw_efficiency:.3f}; {saved}")
