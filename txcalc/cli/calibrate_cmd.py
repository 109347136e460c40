"""`txcalc calibrate REPORT`: fit the time model's efficiencies to a GPU validation report."""

from __future__ import annotations

from pathlib import Path

import typer

from ..units import error_pct

from .typer_app import app
from .output import console, emit_json, strict_json, table


@app.command()
def calibrate(report: Path = typer.Argument(..., help="A GPU validation report "
                                            "(reference/gpu_validate.sh writes gpu_validation.json)."),
              gpu: str = typer.Option("", "--gpu", help="GPU of the catalog whose peaks to use "
                                      "(default: the report's device name)."),
              out: Path = typer.Option(None, "--out", help="Device profile to write "
                                       "(default: profiles/<gpu>-calibrated.json)."),
              json_out: bool = typer.Option(False, "--json", help="Print JSON for scripts.")):
    """Fit matmul/attention FLOP efficiencies and the bandwidth efficiency to measured step
    times; print each case's time error before and after; save a device profile."""
    from ..calibrate import CalibrationInputError, fit, read_report
    from ..hardware import get_gpu
    from ..timing import DeviceProfile
    from ..atomic import check_out_file, write_files

    from .options import options

    options(gpu=gpu or None, out=out)
    device, cases = read_report(report)
    words = device.lower().replace("nvidia", "").split()  # "NVIDIA H200" -> h200
    if not gpu and not words:
        raise CalibrationInputError(f"{report}: the report's device ({device!r:.80}) names no GPU; "
                          "give --gpu")
    g = get_gpu(gpu or words[0])
    fitted, rows = fit(cases, DeviceProfile.from_gpu(g))
    out = out or Path("profiles") / f"{g.name}-calibrated.json"
    check_out_file(out, "--out")  # a folder, a device, a link or a pipe is refused
    result = {"gpu": g.name, "profile": str(out), "flop_efficiency": fitted.flop_efficiency,
              "bw_efficiency": fitted.bw_efficiency,
              "cases": [{"case": k, "measured_s": m, "before_s": b, "after_s": a,
                         "before_error_pct": error_pct(b, m), "after_error_pct": error_pct(a, m)}
                        for k, (m, b, a) in rows.items()]}
    text = strict_json(fitted.to_json(), indent=2)  # built before writing
    out.parent.mkdir(parents=True, exist_ok=True)
    write_files(out.parent, {out.name: text}, "--out")  # a temporary file, then os.replace
    if json_out:
        emit_json(result)
        return
    console.print(table(f"step time on {g.name}: measured vs the roofline before and after "
                        "calibration", ["case", "measured s", "before s", "err %", "after s",
                                        "err %"],
                        [(r["case"], f"{r['measured_s']:.4g}", f"{r['before_s']:.4g}",
                          f"{r['before_error_pct']:+.1f}", f"{r['after_s']:.4g}",
                          f"{r['after_error_pct']:+.1f}") for r in result["cases"]]))
    eff = ", ".join(f"{k} {v:.3f}" for k, v in fitted.flop_efficiency.items())
    console.print(f"fitted: {eff}, bandwidth {fitted.bw_efficiency:.3f}; wrote {out}")
