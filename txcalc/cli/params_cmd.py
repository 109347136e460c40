"""`txcalc presets` and `txcalc params MODEL`."""

from __future__ import annotations

import typer

from .typer_app import app
from .output import console, emit_json, human, table

MODEL_HELP = "A preset name (see `txcalc presets`) or a path to a Hugging Face config.json."
HEAD_HELP = ("Encoder head of a config.json: none (base model) | mlm | seq_cls | token_cls | "
             "auto (the class its 'architectures' names).")


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
           head: str = typer.Option(None, "--head", help=HEAD_HELP),
           json_out: bool = typer.Option(False, "--json", help="Print JSON for scripts.")):
    """Exact parameter counts per component and per layer type."""
    from .. import load
    from ..accounting import count_params

    counts = count_params(load(model) if head is None else load(model, head))
    if json_out:
        emit_json(counts.to_json())
        return
    total = counts.total
    console.print(f"[bold]{counts.cfg.name}[/bold]: {total:,} parameters "
                  f"({human(total)}), {counts.active:,} active per token; "
                  f"{counts.embedding:,} in embedding tables")
    console.print(table("by component (summed over layers)",
                        ["component", "modules", "params", "share", "active"],
                        [(r["component"], r["count"], f"{r['params']:,}", f"{r['share']:.2%}",
                          f"{r['active_params']:,}") for r in counts.by_component()]))
    console.print(table("by layer type", ["layer type", "layers", "params/layer", "params"],
                        [(r["layer_type"], r["layers"] or "", f"{r['params_per_layer']:,}"
                          if r["layers"] else "", f"{r['params']:,}")
                         for r in counts.by_layer_type()]))
