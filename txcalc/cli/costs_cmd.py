"""`txcalc flops` and `txcalc memory`: one training step or inference, per component."""

from __future__ import annotations

import typer

from ..units import GIB
from ..answers.costs import PEAK_LABELS as _PEAK_PARTS  # noqa: F401  (the page's words)
from .typer_app import app
from .output import console, emit_json, human, print_assumed, table
from .params_cmd import HEAD_HELP, MODEL_HELP, STACK_HELP
from .options import COMMON_OPTS, FT_OPTS, RECIPE_OPTS, SERVE_OPTS, TRAIN_OPTS


GLOBAL_HELP = ("Longformer: tokens per sequence with global attention (HF's "
               "global_attention_mask; default 0, the sequence classifier's first token at least).")
IMAGES_HELP = ("Vision-language models: images per sequence; their tokens (the rule of the "
               "config's family) join --seq / --context.")
IMAGE_SIZE_HELP = ("With --images on LLaVA-NeXT (anyres tiles) and Qwen-VL (dynamic "
                   "resolution): the images' side in pixels.")


_LABELS = {"total_bytes": "total (peak over the step)",
           "logits_bytes": "logits (the loss's T x V transient)",
           "allocated_bytes": "allocated (max_memory_allocated)",
           "reserved_bytes": "reserved (max_memory_reserved)",
           "device_bytes": "device (reserved + CUDA context: nvidia-smi)"}


def _layer_type_table(title: str, rows: list[dict], columns: dict[str, str], unit: str):
    """Rows of ``by_layer_type``: one per kind of block, plus what lies outside the blocks
    (bytes, ``unit`` "B", in GiB: memory is shown in GiB)."""
    def cell(v):
        return f"{v / GIB:,.2f} GiB" if unit == "B" else human(v, unit)
    return table(title, ["layer type", "layers", *columns.values()],
                 [(r["layer_type"], r["layers"] or "", *(cell(r[k]) for k in columns))
                  for r in rows])


def _formats(out: dict) -> str:
    """The table's title words: training's precision and optimizer; serving's weights (the
    stored format where quantised, else the precision) and the KV cache's dtype."""
    if "optimizer" in out:
        return f"{out['precision']}, {out['optimizer']}"
    if "kv_dtype" not in out:
        return out.get("precision", "")
    weights = out.get("weights", out["precision"].removesuffix("-mixed"))
    return f"weights {weights}, KV cache {out['kv_dtype']}"


def _memory_rows(out: dict) -> list[tuple[str, str, str]]:
    """The memory table in the hierarchy every view shows (answers.costs.MEMORY_ROWS): a
    group, what sits inside it indented; rows the answer does not have, or has at zero,
    left out (the groups themselves shown); then the total and what the device holds."""
    from ..answers.costs import MEMORY_ROWS

    def row(words, v):
        return (words, f"{v:,}", f"{v / GIB:,.2f} GiB") if v is not None else (words, "", "")
    rows, heading = [], None
    for depth, key, words in MEMORY_ROWS:
        v = out.get(key) if key else None
        if depth == 0:
            heading = None
            if key is None:
                heading = (words, "", "")
            elif key in out and (v or key == "weights_bytes"):
                rows.append(row(words, v))
            continue
        if not v:
            continue
        if heading is not None:
            rows.append(heading)
            heading = None
        rows.append(row("  " + words, v))
    labels = _LABELS if out.get("peak_phase") else _LABELS | {"total_bytes": "total"}
    if out.get("paged_optimizer_bytes"):  # managed memory: nvidia-smi counts it when resident
        labels = labels | {"device_bytes": "device (reserved + CUDA context + paged optimizer "
                                           "states: nvidia-smi)"}
    for k in ("total_bytes", "allocated_bytes", "reserved_bytes", "device_bytes"):
        if k in out:
            rows.append(row(labels[k], out[k]))
    for k, words in (("host_bytes", "in host memory (offloaded)"),):
        if out.get(k):
            rows.append(row(words, out[k]))
    return rows


def _peak_sentence(out: dict) -> str:
    """Which sizes are alive at the step's peak, in the hierarchy's groups (GiB)."""
    from ..answers.costs import MEMORY_GROUPS, MEMORY_PARTS
    groups: dict[str, list[str]] = {}
    for k, v in out["peak_by_category"].items():
        if k == "total" or not v:
            continue
        grp, words = MEMORY_PARTS[k]
        groups.setdefault(grp, []).append(f"{words} {v / GIB:,.2f}")
    parts = "; ".join(w[0] if w[0].startswith(MEMORY_GROUPS[g] + " ")
                      else f"{MEMORY_GROUPS[g]}: {', '.join(w)}" for g, w in groups.items())
    when = {"peak_forward": "the end of forward", "peak_backward": "backward",
            "peak_step": "the optimizer step"}.get(out["peak_phase"], out["peak_phase"])
    return (f"The peak is at {when} (GiB): {parts}; the sizes "
            "above are each at their own largest, not all alive at once.")


@app.command()
def flops(model: str = typer.Argument(..., help=MODEL_HELP),
          batch: int = typer.Option(1, "--batch", "-b", help="Micro-batch size (sequences)."),
          seq: str = typer.Option("2048", "--seq", "-s", help="Sequence length (decoder/target)."),
          src_seq: str = typer.Option("0", "--src-seq", help="Encoder length (enc-dec; 0 = seq)."),
          attn: str = typer.Option("flash", help="Attention kernel: eager | sdpa | flash (fused SDPA, the default)."),
          recompute: str = typer.Option(None, help="Activation recompute: none | selective | full (default none; full, gradient checkpointing, with --finetune other than full)."),
          context: str = typer.Option("0", "--context", help="Also show decode FLOPs per token at this cached length (8192, 128k = 131072)."),
          finetune: str = FT_OPTS["finetune"],
          lora_rank: int = FT_OPTS["lora_rank"],
          lora_alpha: float = FT_OPTS["lora_alpha"],
          lora_targets: str = FT_OPTS["lora_targets"],
          lora_dropout: float = FT_OPTS["lora_dropout"],
          trainable: str = FT_OPTS["trainable"],
          base_format: str = FT_OPTS["base_format"],
          loss: str = FT_OPTS["loss"],
          head: str = typer.Option(None, "--head", help=HEAD_HELP),
          images: int = typer.Option(0, "--images", help=IMAGES_HELP),
          image_size: int = typer.Option(0, "--image-size", help=IMAGE_SIZE_HELP),
          global_tokens: str = typer.Option("0", "--global-tokens", help=GLOBAL_HELP),
          json_out: bool = COMMON_OPTS["json"]):
    """Matmul FLOPs of one training step (executed and model), and inference costs."""
    from ..answers.costs import flops as answer

    ans = answer(model, batch, seq, src_seq, attn, recompute, context, finetune, lora_rank,
                 lora_alpha, lora_targets, lora_dropout, trainable, base_format, loss, head,
                 images, image_size, global_tokens)
    out = ans.json
    if json_out:
        emit_json(out)
        return
    cfg, seq, context = ans.parts["cfg"], ans.parts["seq"], ans.parts["context"]
    recompute = ans.parts["recompute"]
    console.print(f"[bold]{cfg.name}[/bold], batch {batch} x seq {seq}, attention {attn}, "
                  f"recompute {recompute}: one training step")
    console.print(f"  executed: forward {out['forward_flops']:,} + backward "
                  f"{out['backward_flops']:,} = {human(out['forward_flops'] + out['backward_flops'], 'FLOP')}")
    console.print(f"  model (causal/window-masked pairs skipped): {out['model_flops']:,} "
                  f"({human(out['model_flops'], 'FLOP')}); recompute {out['recompute_flops']:,}")
    console.print(f"  prefill of the batch (forward, head on the last token): "
                  f"{human(out['prefill_flops'], 'FLOP')}")
    if context:
        console.print(f"  decode at context {context:,}: "
                      f"{human(out['decode_flops_per_token'], 'FLOP')} per token per sequence")
    console.print(table("by component (executed)", ["component", "forward", "backward", "model"],
                        [(r["component"], human(r["forward_flops"]), human(r["backward_flops"]),
                          human(r["model_flops"])) for r in out["by_component"]]))
    console.print(_layer_type_table("by layer type (all layers of the type)", out["by_layer_type"],
                                    {"forward_flops": "forward", "backward_flops": "backward",
                                     "model_flops": "model"}, "FLOP"))
    print_assumed(out)


@app.command()
def memory(model: str = typer.Argument(None, help=MODEL_HELP + " Omit with --params."),
           params: str = typer.Option(None, "--params", help="Only a parameter count (80e9, 70B, 1.5T): model states only."),
           batch: int = typer.Option(1, "--batch", "-b", help="Micro-batch size (sequences)."),
           seq: str = typer.Option("2048", "--seq", "-s", help="Sequence length."),
           src_seq: str = typer.Option("0", "--src-seq", help="Encoder length (enc-dec; 0 = seq)."),
           precision: str = TRAIN_OPTS["precision"],
           optimizer: str = RECIPE_OPTS["optimizer"],
           attn: str = typer.Option(None, help="Attention kernel: eager | sdpa | flash (fused SDPA, the default; or the stack's)."),
           recompute: str = typer.Option(None, help="none | selective | full | op (torchtitan's op-level); default none, or full (gradient checkpointing) with --finetune other than full."),
           recompute_method: str = typer.Option("block", "--recompute-method", help="Which blocks recompute: block (the first N), uniform (all, N per checkpoint), every (every N-th)."),
           recompute_layers: int = typer.Option(0, "--recompute-layers", help="N of --recompute-method (0: every block)."),
           stack: str = typer.Option(None, "--stack", help=STACK_HELP),
           dropout: bool = typer.Option(False, "--dropout", help="Train with the model's dropout on: its masks are saved (1 byte per element, CUDA)."),
           inference: bool = typer.Option(False, "--inference", help="Serving: weights + KV cache."),
           weights: str = SERVE_OPTS["weights"],
           context: str = typer.Option("0", "--context", help="Inference: tokens per sequence in the cache (8192, 128k = 131072; 0 = seq)."),
           concurrency: int = typer.Option(1, "--concurrency", help="Inference: sequences served at once."),
           kv_dtype: str = SERVE_OPTS["kv_dtype"],
           gpu: str = typer.Option(None, "--gpu", help="GPU of the fit check (catalog name; default h100-sxm, as plan): its usable memory, CUDA's total (the datasheet's x 0.99)."),
           gpu_gb: float = typer.Option(None, "--gpu-gb", help="Usable memory of one GPU in GB (1e9) for the fit check: CUDA's total as torch.cuda.get_device_properties(0).total_memory reports it, nothing taken off; overrides --gpu's."),
           gpu_file: str = COMMON_OPTS["gpu_file"],
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
           head: str = typer.Option(None, "--head", help=HEAD_HELP),
           images: int = typer.Option(0, "--images", help=IMAGES_HELP),
           image_size: int = typer.Option(0, "--image-size", help=IMAGE_SIZE_HELP),
           global_tokens: str = typer.Option("0", "--global-tokens", help=GLOBAL_HELP),
           json_out: bool = COMMON_OPTS["json"]):
    """Bytes of training (weights, gradients, optimizer, activations) or serving (KV cache)."""
    from ..answers.costs import memory as answer

    ans = answer(model, params, batch, seq, src_seq, precision, optimizer, attn, recompute,
                 recompute_method, recompute_layers, stack, dropout, inference, weights,
                 context, concurrency, kv_dtype, gpu, gpu_gb, gpu_file, finetune, lora_rank,
                 lora_alpha, lora_targets, lora_dropout, trainable, base_format, offload, loss,
                 head, images, image_size, global_tokens, recipe, optimizer_in_backward,
                 compile)
    out = ans.json
    if json_out:
        emit_json(out)
        return
    gpu, gpu_label = out["gpu_bytes"], out["gpu"]
    console.print(table(f"{out['model']}: memory ({_formats(out)})",
                        ["category", "bytes", "GiB (2^30)"], _memory_rows(out)))
    if out.get("trainable_params") is not None and out.get("finetune") != "full":
        console.print(f"{out['finetune_setup']}: {out['trainable_params']:,} trainable of "
                      f"{out['params']:,} parameters ({out['trainable_params'] / out['params']:.3%});"
                      f" host memory {out['host_bytes'] / GIB:,.2f} GiB, PCIe "
                      f"{out['pcie_bytes_per_step'] / GIB:,.2f} GiB per step")
    if out.get("peak_phase"):
        console.print(_peak_sentence(out))
    if out.get("activations_by_layer_type"):
        console.print(_layer_type_table(
            f"activations saved for backward by layer type (attention {out['attn_impl']}, "
            f"recompute {out['recompute']})", out["activations_by_layer_type"],
            {"activations_bytes": "saved"}, "B"))
    verdict = "fits" if out["fits_one_gpu"] else "does NOT fit"
    from ..engine.hardware import memory_words
    words = memory_words(gpu if ans.parts["gpu_gb"] is not None else ans.parts["gpu_row"],
                         "GiB")
    shown = out.get("need_bytes", out["total_bytes"])
    paged = " + the largest tensor's paged optimizer states" \
        if out.get("paged_optimizer_bytes") else ""
    what = f"On the device (reserved + CUDA context{paged})" if "need_bytes" in out \
        else "Total"
    console.print(f"{what} {shown / GIB:,.1f} GiB: {verdict} on one {gpu_label} ({words})"
                  + ("" if out["fits_one_gpu"] else
                     f"; needs at least {-(-shown // gpu)} such GPUs by memory alone,"
                     " so it must be distributed (see `txcalc plan`)."))
    print_assumed(out)
