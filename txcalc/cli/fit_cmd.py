"""`txcalc fit`: the longest sequence (or largest micro-batch) one GPU (or each of N under
ZeRO-3) trains or fine-tunes, and when nothing fits the cheapest changes that make it fit."""

from __future__ import annotations

import typer

from ..units import GIB
from .typer_app import app
from .output import console, emit_json, table
from .options import COMMON_OPTS, FT_OPTS, MODEL_HELP, TRAIN_OPTS


@app.command()
def fit(model: str = typer.Argument(..., help=MODEL_HELP),
        gpu: str = typer.Option(None, "--gpu", help="GPU name from the catalog (rtx-4090, h100, ...)."),
        gpu_gb: float = typer.Option(None, "--gpu-gb", help="Usable GPU memory in GB (1e9), instead of --gpu: CUDA's total as torch.cuda.get_device_properties(0).total_memory reports it, nothing taken off (a catalog GPU's is its datasheet's x 0.99)."),
        batch: int = typer.Option(None, "--batch", "-b", help="Micro-batch: find the longest sequence (default 1)."),
        seq: str = typer.Option(None, "--seq", "-s", help="Sequence length: find the largest micro-batch."),
        gpus: int = typer.Option(1, "--gpus", help="GPUs the model states are sharded over (N > 1: ZeRO-3 / FSDP full shard, data parallel N, one micro-batch each): the per-GPU bytes of plan train --gpus N --zero 3 --tp 1 --pp 1."),
        precision: str = TRAIN_OPTS["precision"],
        optimizer: str = TRAIN_OPTS["optimizer"],
        attn: str = typer.Option("flash", help="eager | sdpa | flash."),
        recompute: str = typer.Option("none", help="none | selective | full."),
        finetune: str = FT_OPTS["finetune"],
        lora_rank: int = FT_OPTS["lora_rank"],
        lora_alpha: float = FT_OPTS["lora_alpha"],
        lora_targets: str = FT_OPTS["lora_targets"],
        lora_dropout: float = FT_OPTS["lora_dropout"],
        trainable: str = FT_OPTS["trainable"],
        base_format: str = FT_OPTS["base_format"],
        offload: str = FT_OPTS["offload"],
        loss: str = FT_OPTS["loss"],
        gpu_file: str = COMMON_OPTS["gpu_file"],
        json_out: bool = COMMON_OPTS["json"]):
    """Longest sequence at a micro-batch (or largest micro-batch at a sequence) on one GPU,
    or on each of --gpus N under ZeRO-3."""
    from ..answers.fit import fit as answer

    ans = answer(model, gpu, gpu_gb, batch, seq, gpus, precision, optimizer, attn, recompute,
                 finetune, lora_rank, lora_alpha, lora_targets, lora_dropout, trainable,
                 base_format, offload, loss, gpu_file)
    out = ans.json
    if json_out:
        emit_json(out)
        return
    from .output import print_defaults
    _print_fit(ans, gpus, loss, optimizer, attn, recompute)
    print_defaults(out)


def _print_fit(ans, gpus, loss, optimizer, attn, recompute) -> None:
    """fit's answer for people."""
    out = ans.json
    res, cfg = ans.parts["result"], ans.parts["cfg"]
    label, words = ans.parts["label"], ans.parts["words"]
    what = out["finetune"]
    if gpus > 1:
        label, words = f"{gpus:,} x {label}", f"each {words}; ZeRO-3"
    lossword = "" if loss == "full" else f", loss {loss}"
    if res.fits:
        console.print(f"[bold]{cfg.name}[/bold] on {label} ({words}), {what}, "
                      f"{out['precision']}, {optimizer}, attention {attn}, recompute {recompute}"
                      f"{lossword}: fits "
                      f"at batch {res.max_batch} x seq {res.max_seq:,} "
                      f"({res.total_bytes / GIB:,.2f} GiB with CUDA context and allocator slack)")
        return
    console.print(f"[bold]{cfg.name}[/bold] on {label} ({words}), {what}{lossword}: "
                  f"does NOT fit even at the smallest try ({res.total_bytes / GIB:,.2f} GiB). "
                  "Changes, each on top of the ones above it:")
    console.print(table("cheapest changes first", ["change", "GiB", "fits", "step time x"],
                        [(s["change"], f"{s['total_bytes'] / GIB:,.2f}",
                          "yes" if s["fits"] else "no",
                          "" if s["step_time_factor"] is None else f"{s['step_time_factor']:.2f}")
                         for s in res.suggestions]))
