"""`txcalc presets` and `txcalc params MODEL`."""

from __future__ import annotations

import typer

from .typer_app import app
from .output import console, emit_json, human, table

MODEL_HELP = ("A preset name (see `txcalc presets`), a path to a Hugging Face config.json, or a Hub "
              "id (org/name: its config.json from the local HF cache, else downloaded).")
WEIGHTS_HELP = ("Weight format: bf16, int8, int4-g128 (GPTQ), awq-int4-g128, fp8, fp8-block, nf4, "
                "mxfp4, nvfp4, gguf:Q4_K_M ... (default: the config.json's quantization_config).")
HEAD_HELP = ("Encoder head of a config.json: none (base model) | mlm | seq_cls | token_cls | "
             "discriminator (ELECTRA's ForPreTraining; its generator is mlm) | "
             "auto (the class its 'architectures' names).")


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
def presets(json_out: bool = typer.Option(False, "--json", help="Print JSON for scripts.")):
    """List the named models and their parameter counts, and the config.json model types
    txcalc reads."""
    from ..engine.accounting import param_totals
    from ..model.hf import supported_types
    from ..model.presets import PRESETS

    rows = []
    for name, cfg in PRESETS.items():
        total, active = param_totals(cfg)  # count_params's sums, each kind of block built once
        rows.append({"name": name, "family": cfg.family, "layers": cfg.n_layers,
                     "d_model": cfg.d_model, "total_params": total, "active_params": active})
    types = supported_types()
    if json_out:
        emit_json({"presets": rows, "model_types": types})
        return
    console.print(table("txcalc presets", ["name", "family", "layers", "d_model", "params",
                                           "active"],
                        [(r["name"], r["family"], r["layers"], r["d_model"],
                          human(r["total_params"]), human(r["active_params"])) for r in rows]))
    console.print(f"config.json model types ({len(types)}): {', '.join(types)}",
                  highlight=False)


@app.command()
def params(model: str = typer.Argument(..., help=MODEL_HELP),
           head: str = typer.Option(None, "--head", help=HEAD_HELP),
           weights: str = typer.Option(None, "--weights", help=WEIGHTS_HELP),
           json_out: bool = typer.Option(False, "--json", help="Print JSON for scripts."),
           hf_class: str = typer.Option(
               None, "--hf-class", help="For a model_type txcalc has no converter for (counted "
               "by a module walk): the transformers class to build, e.g. AutoModelForCausalLM; "
               "default: the config's architectures[0], else AutoModel.")):
    """Exact parameter counts per component and per layer type, and the checkpoint's bytes."""
    from .. import load
    from ..engine.accounting import count_params
    from ..errors import ConfigError
    from ..engine.formats import model_checkpoint_bytes, resolve

    try:
        cfg = load(model) if head is None else load(model, head)
    except ConfigError as e:  # txcalc.model.hf (heavy) is imported only where a config.json is read
        from ..model.hf import UnsupportedModelType
        if not isinstance(e, UnsupportedModelType):
            raise
        if weights is not None:
            from ..errors import ConfigError
            raise ConfigError(f"--weights ({weights!r:.80}) needs a model_type txcalc has a "
                              f"converter for; {e.name} is counted by a module walk") from None
        _module_walk(e, hf_class, json_out)
        return
    if hf_class is not None:
        from ..errors import ConfigError
        raise ConfigError(f"--hf-class ({hf_class!r:.80}) applies only to a model_type txcalc "
                          f"has no converter for; {cfg.name} has one")
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


def _module_walk(e, hf_class: str | None, json_out: bool) -> None:
    """``txcalc params`` for a model_type without a converter: the module walk's rows."""
    from ..model.hf import CONVERTERS
    from ..inputs import text
    from ..model.modulewalk import walk_hf_dict

    if hf_class is not None:
        hf_class = text("--hf-class", hf_class, max_len=200)
    w = walk_hf_dict(e.raw, e.name, hf_class, supported=", ".join(sorted(CONVERTERS)))
    if json_out:
        emit_json(w.to_json())
        return
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
