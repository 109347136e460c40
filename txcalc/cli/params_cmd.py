"""`txcalc presets` and `txcalc params MODEL`."""

from __future__ import annotations

import typer

from .typer_app import app
from .output import console, emit_json, human, table

from .options import COMMON_OPTS, HEAD_HELP, MODEL_HELP, SERVE_OPTS, WEIGHTS_HELP  # noqa: F401


def __getattr__(name: str):
    """``STACK_HELP`` (``--stack`` of memory and plan train), made from the stacks table when
    a command that has the option loads: ``params`` and ``presets`` never import it."""
    if name == "STACK_HELP":
        from ..engine.stacks import DEFAULT_OVERLAP, STACKS
        return (f"Framework profile: {' | '.join(STACKS)} (its attention kernel, fused kernels "
                "and overlapped collectives: txcalc/engine/stacks.py; default: flash attention, HF's "
                f"other kernels, {', '.join(DEFAULT_OVERLAP)} overlapped).")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@app.command()
def presets(json_out: bool = COMMON_OPTS["json"]):
    """List the named models and their parameter counts, and the config.json model types
    txcalc reads."""
    from ..answers.params import presets as answer

    out = answer().json
    if json_out:
        emit_json(out)
        return
    rows, types = out["presets"], out["model_types"]
    console.print(table("txcalc presets", ["name", "family", "layers", "d_model", "params",
                                           "active"],
                        [(r["name"], r["family"], r["layers"], r["d_model"],
                          human(r["total_params"]), human(r["active_params"])) for r in rows]))
    console.print(f"config.json model types ({len(types)}): {', '.join(types)}",
                  highlight=False)


@app.command()
def params(model: str = typer.Argument(..., help=MODEL_HELP),
           head: str = typer.Option(None, "--head", help=HEAD_HELP),
           weights: str = SERVE_OPTS["weights"],
           json_out: bool = COMMON_OPTS["json"],
           hf_class: str = typer.Option(
               None, "--hf-class", help="For a model_type txcalc has no converter for (counted "
               "by a module walk): the transformers class to build, e.g. AutoModelForCausalLM; "
               "default: the config's architectures[0], else AutoModel.")):
    """Exact parameter counts per component and per layer type, and the checkpoint's bytes."""
    from ..answers.params import params as answer

    ans = answer(model, head, weights, hf_class)
    if json_out:
        emit_json(ans.json)
        return
    if "walk" in ans.parts:
        _print_walk(ans.parts["walk"])
        return
    counts, fmt, mtp = ans.parts["counts"], ans.parts["format"], ans.parts["mtp"]
    ckpt = ans.parts["checkpoint_bytes"]
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


def _print_walk(w) -> None:
    """``txcalc params`` for a model_type without a converter: the module walk's rows."""
    total = w.total
    console.print(f"[bold]{w.name}[/bold]: {total:,} parameters ({human(total)}); "
                  f"method: module-walk of {w.model_class} ({w.class_source}), transformers "
                  f"{w.transformers_version}, model_type {w.model_type!r}")
    for k, v in w.exact().items():
        console.print(f"  {k}: {v}")
    ruled = w.ruled_params
    console.print(f"  {ruled:,} parameters ({ruled / total if total else 0:.2%}) sit in modules "
                  "with a FLOP rule")
    console.print(table("by module (layer indices folded as *)",
                        ["module", "class", "modules", "params/module", "params",
                         "fwd FLOPs/row"],
                        [(r["path"], r["class"], r["modules"], f"{r['params_per_module']:,}",
                          f"{r['params']:,}", "not counted" if r["flops_fwd_per_row"] is None
                          else f"{r['flops_fwd_per_row']:,}") for r in w.by_pattern()]))
    missing = w.not_counted()
    if missing:
        console.print(table("FLOPs not counted (no generic rule for the class)",
                            ["class", "modules", "params"],
                            [(r["class"], r["modules"], f"{r['params']:,}") for r in missing]))
