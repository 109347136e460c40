"""`txcalc fit`: the longest sequence (or largest micro-batch) one GPU (or each of N under
ZeRO-3) trains or fine-tunes, and when nothing fits the cheapest changes that make it fit.
Also the fine-tuning options shared with `memory` and `flops`."""

from __future__ import annotations

import typer

from ..units import GB
from .typer_app import app
from .output import console, emit_json, table
from .params_cmd import MODEL_HELP

FT_HELP = {
    "finetune": "full | lora | qlora | dora | freeze.",
    "rank": "LoRA rank r (lora, qlora, dora).",
    "alpha": "LoRA alpha (scaling alpha / r; no memory or FLOPs effect).",
    "targets": "all-linear | attn | mlp | module names (q_proj,v_proj).",
    "dropout": "LoRA dropout probability (saves a mask and the dropped input per adapter).",
    "trainable": "freeze: what trains, comma-separated: last:N (blocks), head, norms, embeddings.",
    "base": "qlora: the frozen base's format: nf4 | fp4 (block 64, double quant) | int8.",
    "offload": "none | optimizer (states, master weights: CPU) | activations (checkpoints) | all.",
    "loss": "LM loss: full (the T x V logits at once), chunked[:N] (torchtune's chunked "
            "cross-entropy, N sequence chunks, default 8) or fused-linear (Liger's fused "
            "linear cross-entropy: no logits kept, the head's gradients in the forward).",
}
#: the fine-tuning options (and the LM loss), declared once for fit, memory, flops, plan train
#: and report
FT_OPTS = {
    "finetune": typer.Option("full", "--finetune", help=FT_HELP["finetune"]),
    "lora_rank": typer.Option(16, "--lora-rank", help=FT_HELP["rank"]),
    "lora_alpha": typer.Option(None, "--lora-alpha", help=FT_HELP["alpha"]),
    "lora_targets": typer.Option("all-linear", "--lora-targets", help=FT_HELP["targets"]),
    "lora_dropout": typer.Option(0.0, "--lora-dropout", help=FT_HELP["dropout"]),
    "trainable": typer.Option("head", "--trainable", help=FT_HELP["trainable"]),
    "base_format": typer.Option("nf4", "--base-format", help=FT_HELP["base"]),
    "offload": typer.Option("none", "--offload", help=FT_HELP["offload"]),
    "loss": typer.Option("full", "--loss", help=FT_HELP["loss"]),
}


def make_finetune(mode: str, rank: int, alpha: float | None, targets: str, dropout: float,
                  trainable: str, base: str):
    """The Finetune the options describe (None for full fine-tuning)."""
    from ..engine.finetune import finetune_from_options
    return finetune_from_options(mode, rank, alpha, targets, dropout, trainable, base)


@app.command()
def fit(model: str = typer.Argument(..., help=MODEL_HELP),
        gpu: str = typer.Option(None, "--gpu", help="GPU name from the catalog (rtx-4090, h100, ...)."),
        gpu_gb: float = typer.Option(None, "--gpu-gb", help="Usable GPU memory in GB (1e9), instead of --gpu: CUDA's total as torch.cuda.get_device_properties(0).total_memory reports it, nothing taken off (a catalog GPU's is its datasheet's x 0.99)."),
        batch: int = typer.Option(None, "--batch", "-b", help="Micro-batch: find the longest sequence (default 1)."),
        seq: int = typer.Option(None, "--seq", "-s", help="Sequence length: find the largest micro-batch."),
        gpus: int = typer.Option(1, "--gpus", help="GPUs the model states are sharded over (N > 1: ZeRO-3 / FSDP full shard, data parallel N, one micro-batch each): the per-GPU bytes of plan train --gpus N --zero 3 --tp 1 --pp 1."),
        precision: str = typer.Option("bf16-mixed", help="fp32 | bf16-mixed | fp16-mixed | bf16."),
        optimizer: str = typer.Option("adamw", help="adamw | adam | adam8bit | sgd | adafactor | none."),
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
        gpu_file: str = typer.Option(None, "--gpu-file", help="CSV of extra GPUs (catalog columns)."),
        json_out: bool = typer.Option(False, "--json", help="Print JSON for scripts.")):
    """Longest sequence at a micro-batch (or largest micro-batch at a sequence) on one GPU,
    or on each of --gpus N under ZeRO-3."""
    from .. import load
    from ..errors import WorkloadError
    from ..engine.finetune import check_precision
    from ..train.fit import Setup, fit as fit_one
    from ..inputs import choice
    from ..engine.memory import OFFLOADS
    from .options import options

    options(batch=batch, seq=seq, gpus=gpus, precision=precision, optimizer=optimizer,
            attn=attn, recompute=recompute, gpu_gb=gpu_gb, gpu_file=gpu_file,
            **({"gpu": gpu} if gpu is not None else {}))
    choice("--offload", offload, OFFLOADS)
    if (gpu is None) == (gpu_gb is None):
        raise WorkloadError("give --gpu NAME or --gpu-gb N, one of them")
    peak = 1e15
    if gpu is not None:
        from ..engine.hardware import get_gpu, memory_words
        g = get_gpu(gpu, gpu_file)
        gpu_bytes, label, words = g.usable_bytes, g.name, memory_words(g, "GB")  # totals in GB
        peak = g.peak_flops.get("bf16") or g.peak_flops.get("fp32") or peak
    else:
        from ..engine.hardware import memory_words
        gpu_bytes, label = int(gpu_gb * GB), f"{gpu_gb:g} GB GPU"
        words = memory_words(gpu_bytes)
    ft = make_finetune(finetune, lora_rank, lora_alpha, lora_targets, lora_dropout, trainable,
                       base_format)
    check_precision(ft, precision)
    cfg = load(model)
    setup = Setup(cfg, precision, optimizer, attn, recompute, ft, offload, gpus, loss)
    setup.memory(1, 1).ops  # refuses bad targets and ranks before the search
    res = fit_one(setup, gpu_bytes, batch, seq, peak)
    out = res.to_json() | {"gpu": label}
    if json_out:
        emit_json(out)
        return
    what = out["finetune"]
    if gpus > 1:
        label, words = f"{gpus:,} x {label}", f"each {words}; ZeRO-3"
    lossword = "" if loss == "full" else f", loss {loss}"
    if res.fits:
        console.print(f"[bold]{cfg.name}[/bold] on {label} ({words}), {what}, "
                      f"{precision}, {optimizer}, attention {attn}, recompute {recompute}"
                      f"{lossword}: fits "
                      f"at batch {res.max_batch} x seq {res.max_seq:,} "
                      f"({res.total_bytes / GB:,.2f} GB with CUDA context and allocator slack)")
        return
    console.print(f"[bold]{cfg.name}[/bold] on {label} ({words}), {what}{lossword}: "
                  f"does NOT fit even at the smallest try ({res.total_bytes / GB:,.2f} GB). "
                  "Changes, each on top of the ones above it:")
    console.print(table("cheapest changes first", ["change", "GB", "fits", "step time x"],
                        [(s["change"], f"{s['total_bytes'] / GB:,.2f}",
                          "yes" if s["fits"] else "no",
                          "" if s["step_time_factor"] is None else f"{s['step_time_factor']:.2f}")
                         for s in res.suggestions]))
