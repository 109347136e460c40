"""`txcalc fit`: the longest sequence (or largest micro-batch) one GPU (or each of N under
ZeRO-3) trains or fine-tunes, and when nothing fits the cheapest changes that make it fit."""

from __future__ import annotations

import typer

from ..units import GB, GIB
from .typer_app import app
from .output import console, emit_json, print_assumed, table
from .options import COMMON_OPTS, FT_OPTS, MODEL_HELP, RECIPE_OPTS, TRAIN_OPTS
from .emit_opts import OUT_OPT, emit_option, need_out


@app.command()
def fit(ctx: typer.Context, model: str = typer.Argument(..., help=MODEL_HELP),
        gpu: str = typer.Option(None, "--gpu", help="GPU name from the catalog (rtx-4090, h100, ...)."),
        gpu_gb: float = typer.Option(None, "--gpu-gb", help="Usable GPU memory in GB (1e9), instead of --gpu: CUDA's total as torch.cuda.get_device_properties(0).total_memory reports it, nothing taken off (a catalog GPU's is its datasheet's x 0.99)."),
        batch: int = typer.Option(None, "--batch", "-b", help="Micro-batch: find the longest sequence (default 1)."),
        seq: str = typer.Option(None, "--seq", "-s", help="Sequence length: find the largest micro-batch."),
        gpus: int = typer.Option(1, "--gpus", help="GPUs the model states are sharded over (N > 1: ZeRO-3 / FSDP full shard, data parallel N, one micro-batch each): the per-GPU bytes of plan train --gpus N --zero 3 --tp 1 --pp 1."),
        precision: str = TRAIN_OPTS["precision"],
        optimizer: str = RECIPE_OPTS["optimizer"],
        attn: str = typer.Option("flash", help="eager | sdpa | flash."),
        recompute: str = typer.Option(None, help="none | selective | full (default full: gradient checkpointing, as the fine-tuning recipes run it)."),
        finetune: str = FT_OPTS["finetune"],
        lora_rank: int = FT_OPTS["lora_rank"],
        lora_alpha: float = FT_OPTS["lora_alpha"],
        lora_targets: str = FT_OPTS["lora_targets"],
        lora_dropout: float = FT_OPTS["lora_dropout"],
        trainable: str = FT_OPTS["trainable"],
        base_format: str = FT_OPTS["base_format"],
        offload: str = RECIPE_OPTS["offload"],
        loss: str = RECIPE_OPTS["loss"],
        recipe: str = RECIPE_OPTS["recipe"],
        optimizer_in_backward: bool = RECIPE_OPTS["optimizer_in_backward"],
        compile: bool = RECIPE_OPTS["compile"],
        safety: float = typer.Option(0.0, "--safety", help="GB (1e9 bytes) to keep free on each GPU: the answer's bytes (reserved + CUDA context on one GPU) must stay within the GPU's memory less this margin."),
        gpu_file: str = COMMON_OPTS["gpu_file"],
        emit: str = emit_option("fit"),
        out_file: str = OUT_OPT,
        json_out: bool = COMMON_OPTS["json"]):
    """Longest sequence at a micro-batch (or largest micro-batch at a sequence) on one GPU,
    or on each of --gpus N under ZeRO-3."""
    from ..answers.fit import fit as answer
    need_out(emit, out_file, "fit")

    ans = answer(model, gpu, gpu_gb, batch, seq, gpus, precision, optimizer, attn, recompute,
                 finetune, lora_rank, lora_alpha, lora_targets, lora_dropout, trainable,
                 base_format, offload, loss, gpu_file, recipe, safety, optimizer_in_backward,
                 compile)
    out = ans.json
    if emit is not None:
        from .emit_opts import emit_answer
        emit_answer(ctx, emit, "fit", ans, model, out_file, json_out)
        if out_file is None:
            return
    if json_out:
        emit_json(out)
        return
    _print_fit(ans, gpus, loss, optimizer, attn, recompute)


def _print_fit(ans, gpus, loss, optimizer, attn, recompute) -> None:
    """fit's answer for people."""
    out = ans.json
    res, cfg = ans.parts["result"], ans.parts["cfg"]
    label, words = ans.parts["label"], ans.parts["words"]
    what = out["finetune"]
    if gpus > 1:
        label, words = f"{gpus:,} x {label}", f"each {words}; ZeRO-3"
    lossword = "" if out["loss"] == "full" else f", loss {out['loss']}"
    recompute, optimizer = out["recompute"], out["optimizer"]
    if out.get("optimizer_in_backward"):
        optimizer += " in backward"
    if res.fits:
        console.print(f"[bold]{cfg.name}[/bold] on {label} ({words}), {what}, "
                      f"{out['precision']}, {optimizer}, attention {attn}, recompute {recompute}"
                      f"{lossword}: fits "
                      f"at batch {res.max_batch} x seq {res.max_seq:,} "
                      f"({res.total_bytes / GIB:,.2f} GiB with CUDA context and allocator slack)")
        _margin(out)
        print_assumed(out)
        return
    console.print(f"[bold]{cfg.name}[/bold] on {label} ({words}), {what}{lossword}: "
                  f"does NOT fit even at the smallest try ({res.total_bytes / GIB:,.2f} GiB). "
                  "Changes, each on top of the ones above it:")
    console.print(table("cheapest changes first", ["change", "GiB", "fits", "step time x"],
                        [(s["change"], f"{s['total_bytes'] / GIB:,.2f}",
                          "yes" if s["fits"] else "no",
                          "" if s["step_time_factor"] is None else f"{s['step_time_factor']:.2f}")
                         for s in res.suggestions]))
    _margin(out)
    print_assumed(out)


def _margin(out: dict) -> None:
    """The figure compared against the GPU and the margin kept: GiB, with --safety also in the
    GB it was given in."""
    safety = out["safety_bytes"]
    given = f"--safety {safety / GB:,.2f} GB, as given" if safety else "--safety"
    console.print(f"Compared: {out['compared_bytes'] / GIB:,.2f} GiB ({out['compared_as']}) "
                  f"against {out['limit_bytes'] / GIB:,.2f} GiB = the GPU's "
                  f"{out['gpu_bytes'] / GIB:,.2f} GiB less a margin of "
                  f"{safety / GIB:,.2f} GiB ({given}); headroom "
                  f"{out['headroom_bytes'] / GIB:,.2f} GiB.")
