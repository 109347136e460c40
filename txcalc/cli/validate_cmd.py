"""`txcalc validate MODEL`: run the reference PyTorch model and compare it with the engine."""

from __future__ import annotations

from pathlib import Path

import typer

from .typer_app import app
from .output import console, emit_json, strict_json, table
from .params_cmd import MODEL_HELP

STEPS = ("predict", "build", "params", "flops", "saved bytes", "kv cache", "memory")


def _import_reference():
    """torch and reference/ are optional: a missing one is a user error, not a traceback."""
    from ..errors import TxcalcError

    try:
        import torch  # noqa: F401
    except ImportError:
        raise TxcalcError("txcalc validate needs PyTorch (pip install 'txcalc[reference]'); "
                          "the other commands do not") from None
    try:
        from reference import validate as ref_validate
    except ImportError as e:
        raise TxcalcError(f"txcalc validate needs the reference/ package of the txcalc "
                          f"repository on the path ({e})") from None
    return ref_validate


@app.command()
def validate(model: str = typer.Argument(..., help=MODEL_HELP),
             device: str = typer.Option("meta", help="meta (any size: params, FLOPs, saved "
                                        "bytes) | cpu (small models, real run) | cuda."),
             batch: int = typer.Option(1, "--batch", "-b", help="Micro-batch size (sequences)."),
             seq: str = typer.Option("512", "--seq", "-s", help="Sequence length."),
             src_seq: str = typer.Option("0", "--src-seq", help="Encoder length (enc-dec; 0 = seq)."),
             attn: str = typer.Option("eager", help="Attention kernel: eager | sdpa | flash."),
             recompute: str = typer.Option("none", help="none | selective | full."),
             precision: str = typer.Option("bf16-mixed", help="fp32 | bf16-mixed | fp16-mixed | bf16."),
             kv_tokens: int = typer.Option(4, "--kv-tokens", help="cpu/cuda: tokens to generate "
                                           "for the KV-cache check (0 = skip)."),
             out: Path = typer.Option(Path("validation"), "--out",
                                      help="Folder for <model>-<device>.json and .md (default ./validation: never the committed reports/validation/, which only --out reports/validation replaces)."),
             json_out: bool = typer.Option(False, "--json", help="Print the JSON report.")):
    """Run the reference model; print predicted vs measured params, FLOPs and saved bytes per
    component and per layer; write validation/<model>-<device>.json and .md (--out)."""
    from rich.progress import Progress

    from .. import load
    from ..errors import WorkloadError
    from .options import options
    from ..engine.memory import PRECISIONS, _check
    from ..engine.workload import Workload, check_fits
    from ..atomic import check_out_folder, file_stem, write_files

    opts = options(device=device, batch=batch, seq=seq, src_seq=src_seq, attn=attn,
                   recompute=recompute, precision=precision, kv_tokens=kv_tokens, out=out)
    seq, src_seq = opts["seq"], opts["src_seq"]
    cfg = load(model)
    work = Workload(batch=batch, seq=seq, src_seq=src_seq, attn_impl=attn, recompute=recompute)
    check_fits(cfg, work)
    _check("precision", precision, PRECISIONS)
    from ..engine.fp8 import FP8_RECIPE
    if precision in FP8_RECIPE:
        from ..errors import WorkloadError
        raise WorkloadError(f"--precision {precision} cannot be validated: the reference model "
                            "has no fp8 (TransformerEngine) training path")
    if device == "cpu":
        _check_memory(cfg, work, precision, device, available_memory_bytes(), "available here")
    ref_validate = _import_reference()
    if device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise WorkloadError("--device cuda: no CUDA device is available here")
        _check_memory(cfg, work, precision, device, cuda_free_bytes(),
                      "free on the CUDA device")
    check_out_folder(out, "--out")  # before the run: a file or a device is refused at once
    stem = f"{file_stem(cfg.name, 'the model name')}-{device}"
    # no bar for --json, nor where it cannot be drawn and erased (a pipe, a file, a dumb
    # terminal: rich's Progress would end with an empty line there)
    real = console.real()
    with Progress(console=real, transient=True,
                  disable=json_out or not real.is_interactive) as progress:
        task = progress.add_task(f"validate {cfg.name}", total=len(STEPS))

        def step(name: str) -> None:
            progress.update(task, description=f"{cfg.name}: {name}", completed=STEPS.index(name))
        report = ref_validate.validate(cfg, work, device, precision, step, kv_tokens)
        progress.update(task, completed=len(STEPS))
    json_text = strict_json(report, separators=(",", ":"))
    md_text = ref_validate.to_markdown(report)
    # both texts are built before writing; each file is replaced atomically
    write_files(out, {f"{stem}.json": json_text, f"{stem}.md": md_text}, "--out")
    if json_out:
        emit_json(report)
        return
    _print(report)
    console.print(f"wrote {out / stem}.json and .md ({report['seconds']:.1f} s)")


def available_memory_bytes() -> int | None:
    """Memory this process can still allocate: /proc/meminfo's MemAvailable, capped by a
    cgroup v2 limit (containers); os.sysconf's free pages elsewhere; None when unknown."""
    found = []
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as f:
            used = int(f.read().strip())
        if limit != "max":
            found.append(max(0, int(limit) - used))
    except (OSError, ValueError):
        pass
    if not found:
        try:
            import os
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (AttributeError, OSError, ValueError):
            return None
    return min(found)


def cuda_free_bytes() -> int | None:
    """Bytes free on the current CUDA device as the driver sees them (``torch.cuda.
    mem_get_info``: the CUDA context and other processes already taken off); None when it
    cannot be asked."""
    import torch
    try:
        free, _ = torch.cuda.mem_get_info()
    except (RuntimeError, AssertionError, AttributeError):  # no driver, no device
        return None
    return int(free)


def _check_memory(cfg, work, precision: str, device: str, have: int | None,
                  where: str) -> None:
    """Refuse a cpu or cuda run the engine predicts will not fit in ``have`` bytes: its
    training peak (AdamW, as reference/validate.py runs it) plus the second copy of the
    weights the reference keeps for the parameter, FLOP and KV-cache checks. Without this
    torch allocates for minutes (cpu) or fails deep inside with an out-of-memory error."""
    from ..errors import WorkloadError
    from ..engine.memory import TrainingMemory

    mem = TrainingMemory(cfg, work, precision, "adamw")
    need = mem.total + mem.weights
    if have is not None and need > have:
        raise WorkloadError(f"validate --device {device}: {cfg.name} at batch {work.batch} x "
                            f"seq {work.seq} needs about {need / 2**30:,.1f} GiB (the engine's "
                            f"training peak {mem.total / 2**30:,.1f} GiB plus a copy of the "
                            f"weights), more than the {have / 2**30:,.1f} GiB {where}; use "
                            "--device meta or a smaller --batch/--seq")


def _print(r: dict) -> None:
    from .output import human

    console.print(f"[bold]{r['model']}[/bold] on {r['device']}: batch {r['batch']} x seq "
                  f"{r['seq']}, attention {r['attn_impl']}, recompute {r['recompute']}, "
                  f"{r['precision']}")
    rows = [(q, f"{t['predicted']:,}", f"{t['measured']:,}", f"{t['error_pct']:.4f}")
            for q, t in r["totals"].items()]
    if "kv_cache" in r:
        kv = r["kv_cache"]
        rows.append((f"kv_cache_bytes (context {kv['context']})", f"{kv['predicted']:,}",
                     f"{kv['measured']:,}", f"{kv['error_pct']:.4f}"))
    for phase, t in r.get("memory_phases", {}).items():
        rows.append((f"memory {phase}", f"{t['predicted']:,}", f"{t['measured']:,}",
                     f"{t['error_pct']:.4f}"))
    console.print(table("totals: predicted (engine) vs measured (reference model)",
                        ["quantity", "predicted", "measured", "error %"], rows))
    cols = ["params", "err %", "fwd FLOPs", "err %", "saved B", "err %"]

    def cells(row):  # predicted and error; the measured values are in the report files
        out = []
        for q in ("params", "forward_flops", "saved_bytes"):
            out += [human(row[q + "_predicted"]), f"{row[q + '_error_pct']:.2f}"]
        return out
    console.print(table("per component (summed over layers)", ["component"] + cols,
                        [(row["component"], *cells(row)) for row in r["components"]]))
    layers = r["layers"]
    if len(layers) > 12:  # the first and last blocks; all of them are in the report files
        layers = layers[:6] + layers[-6:]
    console.print(table("per layer", ["layer"] + cols,
                        [(row["layer"], *cells(row)) for row in layers]))
