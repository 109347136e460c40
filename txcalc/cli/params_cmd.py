"""`txcalc presets` and `txcalc params MODEL`."""

from __future__ import annotations

import typer

from .typer_app import app
from .output import console, emit_json, human, table

MODEL_HELP = "A preset name (see `txcalc presets`) or a path to a Hugging Face config.json."
WEIGHTS_HELP = ("Weight format: bf16, int8, int4-g128 (GPTQ), awq-int4-g128, fp8, fp8-block, nf4, "
                "mxfp4, nvfp4, gguf:Q4_K_M ... (default: the config.json's quantization_config).")


@app.command()
def presets(json_out: bool = typer.Option(False, "--json", help="Print JSON for scripts.")):
    """List the named models and their parameter counts."""
    from ..accounting import count_params
    from ..presets import PRESETS

    rows = []
    for name, cfg in PRESETS.items():
        p = count_params(cfg)
        rows.append({"name": name, "family": cfg.family, "layers": cfg.n_layers,
                     "d_model": cfg.d_model, "total_params": p.total,
                     "active_params": p.active})
    if json_out:
        emit_json({"presets": rows})
        return
    console.print(table("txcalc presets", ["name", "family", "layers", "d_model", "params",
                                           "active"],
                        [(r["name"], r["family"], r["layers"], r["d_model"],
                          human(r["total_params"]), human(r["active_params"])) for r in rows]))


@app.command()
def params(model: str = typer.Argument(..., help=MODEL_HELP),
           weights: str = typer.Option(None, "--weights", help=WEIGHTS_HELP),
           json_out: bool = typer.Option(False, "--json", help="Print JSON for scripts.")):
    """Exact parameter counts per component and per layer type, and the checkpoint's bytes."""
    from .. import load
    from ..accounting import count_params
    from ..formats import model_checkpoint_bytes, resolve

    cfg = load(model)
    counts = count_params(cfg)
    sch, mtp = resolve(model, weights)
    ckpt = model_checkpoint_bytes(cfg, sch, mtp)
    fmt = sch.name if sch is not None else "bf16"
    if json_out:
        emit_json(counts.to_json() | {"weights": fmt, "checkpoint_bytes": ckpt})
        return
    total = counts.total
    console.print(f"[bold]{counts.cfg.name}[/bold]: {total:,} parameters "
                  f"({human(total)}), {counts.active:,} active per token; "
                  f"{counts.embedding:,} in embedding tables")
    console.print(f"checkpoint ({fmt}{f', {mtp} MTP layer(s)' if mtp else ''}): {ckpt:,} bytes "
                  f"({ckpt / 1e9:,.2f} GB), every stored tensor, tied weights once")
    console.print(table("by component (summed over layers)",
                        ["component", "modules", "params", "share", "active"],
                        [(r["component"], r["count"], f"{r['params']:,}", f"{r['share']:.2%}",
                          f"{r['active_params']:,}") for r in counts.by_component()]))
    console.print(table("by layer type", ["layer type", "layers", "params/layer", "params"],
                        [(r["layer_type"], r["layers"] or "", f"{r['params_per_layer']:,}"
                          if r["layers"] else "", f"{r['params']:,}")
                         for r in counts.by_layer_type()]))
