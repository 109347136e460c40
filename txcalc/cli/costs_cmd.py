"""`txcalc flops` and `txcalc memory`: one training step or inference, per component."""

from __future__ import annotations

import typer

from ..units import GB
from .typer_app import app
from .output import console, emit_json, human, table
from .params_cmd import HEAD_HELP, MODEL_HELP, STACK_HELP, WEIGHTS_HELP
from .fit_cmd import FT_OPTS, make_finetune


def _workload(batch, seq, src_seq, attn, recompute, dropout=False, stack=None,
              recompute_method="block", recompute_layers=0, loss="full", global_tokens=0):
    """The workload of flops / memory; ``stack`` (txcalc.engine.stacks) sets the fused kernels and,
    when ``attn`` is None, the attention kernel (else flash)."""
    from ..engine.workload import Workload
    prof = None
    if stack is not None:
        from ..engine.stacks import get_stack
        prof = get_stack(stack)
    attn = attn or (prof.attn_impl if prof else "flash")
    return Workload(batch=batch, seq=seq, src_seq=src_seq, attn_impl=attn, recompute=recompute,
                    dropout=dropout, fused=prof.fused if prof else (),
                    keeps=prof.keeps if prof else (),
                    loss_kernel=prof.loss_kernel if prof else "hf",
                    softmax_fp32=prof.softmax_fp32 if prof else True,
                    recompute_method=recompute_method, recompute_layers=recompute_layers,
                    loss=loss, global_tokens=global_tokens)


GLOBAL_HELP = ("Longformer: tokens per sequence with global attention (HF's "
               "global_attention_mask; default 0, the sequence classifier's first token at least).")
IMAGES_HELP = ("Vision-language models: images per sequence; their tokens (the rule of the "
               "config's family) join --seq / --context.")
IMAGE_SIZE_HELP = ("With --images on LLaVA-NeXT (anyres tiles) and Qwen-VL (dynamic "
                   "resolution): the images' side in pixels.")


def _image_tokens(cfg, images: int, image_size: int) -> int:
    """Tokens ``images`` images add to each sequence (0 without --images)."""
    return cfg.image_seq_tokens(images, image_size) if images else 0


def _cross_rows(cfg, images: int) -> int:
    """Mllama: vision-state rows its cross-attention layers read, those of --images N images
    (--src-seq overrides; without either they read --seq rows, as every command and the
    planner take an unset src_seq); 0 for other models."""
    return images * cfg.image_states if cfg.cross_layers else 0


_LABELS = {"total_bytes": "total (peak over the step)",
           "logits_bytes": "logits (the loss's T x V transient)"}
_PEAK_PARTS = {"param": "weights", "grad": "gradients", "opt": "optimizer states",
               "master": "fp32 master", "act": "activations", "temp": "temporaries"}


def _layer_type_table(title: str, rows: list[dict], columns: dict[str, str], unit: str):
    """Rows of ``by_layer_type``: one per kind of block, plus what lies outside the blocks."""
    return table(title, ["layer type", "layers", *columns.values()],
                 [(r["layer_type"], r["layers"] or "", *(human(r[k], unit) for k in columns))
                  for r in rows])


@app.command()
def flops(model: str = typer.Argument(..., help=MODEL_HELP),
          batch: int = typer.Option(1, "--batch", "-b", help="Micro-batch size (sequences)."),
          seq: int = typer.Option(2048, "--seq", "-s", help="Sequence length (decoder/target)."),
          src_seq: int = typer.Option(0, "--src-seq", help="Encoder length (enc-dec; 0 = seq)."),
          attn: str = typer.Option("flash", help="Attention kernel: eager | sdpa | flash (fused SDPA, the default)."),
          recompute: str = typer.Option("none", help="Activation recompute: none | selective | full."),
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
          global_tokens: int = typer.Option(0, "--global-tokens", help=GLOBAL_HELP),
          json_out: bool = typer.Option(False, "--json", help="Print JSON for scripts.")):
    """Matmul FLOPs of one training step (executed and model), and inference costs."""
    from .. import load
    from ..engine.accounting import count_flops
    from .options import options
    from ..engine.workload import check_fits

    context = options(batch=batch, seq=seq, src_seq=src_seq, attn=attn, recompute=recompute,
                      context=context, images=images, image_size=image_size,
                      global_tokens=global_tokens)["context"]
    cfg = load(model) if head is None else load(model, head)
    extra = _image_tokens(cfg, images, image_size)
    seq = options(seq=seq + extra)["seq"]
    src_seq = src_seq or _cross_rows(cfg, images)
    work = _workload(batch, seq, src_seq, attn, recompute, loss=loss,
                     global_tokens=global_tokens)
    check_fits(cfg, work)
    ft = make_finetune(finetune, lora_rank, lora_alpha, lora_targets, lora_dropout, trainable,
                       base_format)
    f = count_flops(cfg, work, ft)
    out = f.to_json()
    if ft is not None:
        from ..engine.finetune import dequant_bytes_moved
        out["finetune"] = ft.describe()
        out["dequant_bytes_per_step"] = dequant_bytes_moved(f.ops, 2, recompute)
    out["prefill_flops"] = f.prefill()
    if images:
        out["image_tokens"] = extra
    if context:
        if cfg.family == "encoder":
            from ..errors import WorkloadError
            raise WorkloadError(f"{cfg.name} is an encoder-only model: it does not decode")
        out["decode_context"] = context
        out["decode_flops_per_token"] = f.decode(context) // batch
    if json_out:
        emit_json(out)
        return
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


@app.command()
def memory(model: str = typer.Argument(None, help=MODEL_HELP + " Omit with --params."),
           params: str = typer.Option(None, "--params", help="Only a parameter count (80e9, 70B, 1.5T): model states only."),
           batch: int = typer.Option(1, "--batch", "-b", help="Micro-batch size (sequences)."),
           seq: int = typer.Option(2048, "--seq", "-s", help="Sequence length."),
           src_seq: int = typer.Option(0, "--src-seq", help="Encoder length (enc-dec; 0 = seq)."),
           precision: str = typer.Option("bf16-mixed", help="fp32 | bf16-mixed | fp16-mixed | bf16 | fp8-mixed (TransformerEngine fp8)."),
           optimizer: str = typer.Option("adamw", help="adamw | adam | adam8bit | sgd | adafactor | none."),
           attn: str = typer.Option(None, help="Attention kernel: eager | sdpa | flash (fused SDPA, the default; or the stack's)."),
           recompute: str = typer.Option("none", help="none | selective | full | op (torchtitan's op-level)."),
           recompute_method: str = typer.Option("block", "--recompute-method", help="Which blocks recompute: block (the first N), uniform (all, N per checkpoint), every (every N-th)."),
           recompute_layers: int = typer.Option(0, "--recompute-layers", help="N of --recompute-method (0: every block)."),
           stack: str = typer.Option(None, "--stack", help=STACK_HELP),
           dropout: bool = typer.Option(False, "--dropout", help="Train with the model's dropout on: its masks are saved (1 byte per element, CUDA)."),
           inference: bool = typer.Option(False, "--inference", help="Serving: weights + KV cache."),
           weights: str = typer.Option(None, "--weights", help="Inference: " + WEIGHTS_HELP),
           context: str = typer.Option("0", "--context", help="Inference: tokens per sequence in the cache (8192, 128k = 131072; 0 = seq)."),
           concurrency: int = typer.Option(1, "--concurrency", help="Inference: sequences served at once."),
           kv_dtype: str = typer.Option("bf16", "--kv-dtype", help="bf16 | fp16 | fp8 | int8 | int4 | fp32."),
           gpu: str = typer.Option(None, "--gpu", help="GPU of the fit check (catalog name; default h100-sxm, as plan): its usable memory, CUDA's total (the datasheet's x 0.99)."),
           gpu_gb: float = typer.Option(None, "--gpu-gb", help="Usable memory of one GPU in GB (1e9) for the fit check: CUDA's total as torch.cuda.get_device_properties(0).total_memory reports it, nothing taken off; overrides --gpu's."),
           gpu_file: str = typer.Option(None, "--gpu-file", help="CSV of extra GPUs (catalog columns)."),
           finetune: str = FT_OPTS["finetune"],
           lora_rank: int = FT_OPTS["lora_rank"],
           lora_alpha: float = FT_OPTS["lora_alpha"],
           lora_targets: str = FT_OPTS["lora_targets"],
           lora_dropout: float = FT_OPTS["lora_dropout"],
           trainable: str = FT_OPTS["trainable"],
           base_format: str = FT_OPTS["base_format"],
           offload: str = FT_OPTS["offload"],
           loss: str = FT_OPTS["loss"],
           head: str = typer.Option(None, "--head", help=HEAD_HELP),
           images: int = typer.Option(0, "--images", help=IMAGES_HELP),
           image_size: int = typer.Option(0, "--image-size", help=IMAGE_SIZE_HELP),
           global_tokens: int = typer.Option(0, "--global-tokens", help=GLOBAL_HELP),
           json_out: bool = typer.Option(False, "--json", help="Print JSON for scripts.")):
    """Bytes of training (weights, gradients, optimizer, activations) or serving (KV cache)."""
    from ..errors import WorkloadError
    from .options import options

    opts = options(params=params, batch=batch, seq=seq, src_seq=src_seq, precision=precision,
                   optimizer=optimizer, attn=attn, recompute=recompute, context=context,
                   concurrency=concurrency, kv_dtype=kv_dtype, gpu_gb=gpu_gb, gpu_file=gpu_file,
                   images=images, image_size=image_size, stack=stack,
                   recompute_method=recompute_method, recompute_layers=recompute_layers,
                   global_tokens=global_tokens, **({"gpu": gpu} if gpu is not None else {}))
    context = opts["context"]
    from ..engine.hardware import get_gpu, gpu_memory
    # the catalog row, read once: the fit check's bytes and, below, its words
    row = get_gpu(gpu or "h100-sxm", gpu_file) if gpu is not None or opts["gpu_gb"] is None \
        else None
    gpu, gpu_label, _ = gpu_memory(row, opts["gpu_gb"], gpu_file)
    if (model is None) == (params is None):
        raise WorkloadError("give either MODEL or --params N, not both or neither")
    if params is not None and inference:
        # the KV cache depends on the layers, KV heads and head width: a count cannot say
        raise WorkloadError(f"--inference needs MODEL (a preset or config.json): the KV cache "
                            f"depends on the model's layers and KV heads, which --params "
                            f"({params}) does not give")
    if weights is not None and not inference:
        raise WorkloadError(f"--weights ({weights!r:.60}) applies to --inference; training with "
                            "quantised frozen weights is QLoRA (txcalc's fine-tuning commands)")
    extra = 0
    if images:
        if model is None:
            raise WorkloadError(f"--images ({images}) needs MODEL (a vision-language config)")
        from .. import load
        vlm = load(model) if head is None else load(model, head)
        extra = _image_tokens(vlm, images, image_size)
        src_seq = src_seq or _cross_rows(vlm, images)
        seq = options(seq=seq + extra)["seq"]
        context = options(context=str(context + extra))["context"] if context else 0
    if params is not None:
        out = _states_only(opts["params"], precision, optimizer)
    elif inference:
        out = _inference(model, context or seq, concurrency, kv_dtype, precision, weights,
                         src_seq)
    else:
        from ..inputs import choice
        from ..engine.memory import OFFLOADS
        choice("--offload", offload, OFFLOADS)
        ft = make_finetune(finetune, lora_rank, lora_alpha, lora_targets, lora_dropout,
                           trainable, base_format)
        out = _training(model, batch, seq, src_seq, attn, recompute, precision, optimizer,
                        dropout, ft, offload, head, stack, recompute_method, recompute_layers,
                        loss, global_tokens)
    if images:
        out["image_tokens"] = extra
    out["gpu"] = gpu_label
    out["gpu_bytes"] = gpu
    out["fits_one_gpu"] = out["total_bytes"] <= gpu
    if json_out:
        emit_json(out)
        return
    labels = _LABELS if out.get("peak_phase") else {}
    rows = [(labels.get(k, k.removesuffix("_bytes").replace("_", " ")), f"{v:,}",
             f"{v / GB:,.2f} GB")
            for k, v in out.items() if k.endswith("_bytes")
            and k not in ("gpu_bytes", "master_weights_bytes", "kv_cache_bytes_per_token")
            and (v or k not in ("adapter_bytes", "host_bytes", "dequant_bytes"))]
    if out.get("master_weights_bytes"):
        rows.insert(3, ("  of which fp32 master", f"{out['master_weights_bytes']:,}",
                        f"{out['master_weights_bytes'] / GB:,.2f} GB"))
    console.print(table(f"{out['model']}: memory ({out.get('precision', '')}, "
                        f"{out.get('optimizer', 'inference')})", ["category", "bytes", "GB (1e9)"],
                        rows))
    if out.get("trainable_params") is not None and out.get("finetune") != "full":
        console.print(f"{out['finetune_setup']}: {out['trainable_params']:,} trainable of "
                      f"{out['params']:,} parameters ({out['trainable_params'] / out['params']:.3%});"
                      f" host memory {out['host_bytes'] / GB:,.2f} GB, PCIe "
                      f"{out['pcie_bytes_per_step'] / GB:,.2f} GB per step")
    if out.get("peak_phase"):
        parts = ", ".join(f"{_PEAK_PARTS[k]} {v / GB:,.2f}" for k, v in out["peak_by_category"].items()
                          if k != "total" and v)
        console.print(f"The peak is at {out['peak_phase'].replace('_', ' ')} (GB): {parts}; "
                      "the sizes above are not all alive at once.")
    if out.get("activations_by_layer_type"):
        console.print(_layer_type_table(
            f"activations saved for backward by layer type (attention {out['attn_impl']}, "
            f"recompute {out['recompute']})", out["activations_by_layer_type"],
            {"activations_bytes": "saved"}, "B"))
    verdict = "fits" if out["fits_one_gpu"] else "does NOT fit"
    from ..engine.hardware import memory_words
    words = memory_words(gpu if opts["gpu_gb"] is not None else row, "GB")  # its total is in GB
    console.print(f"Total {out['total_bytes'] / GB:,.1f} GB: {verdict} on one {gpu_label} ({words})"
                  + ("" if out["fits_one_gpu"] else
                     f"; needs at least {-(-out['total_bytes'] // gpu)} such GPUs by memory alone,"
                     " so it must be distributed (see `txcalc plan`)."))


def _states_only(n_params: int, precision: str, optimizer: str) -> dict:
    from ..engine.memory import model_states

    return model_states(n_params, precision, optimizer)


def _training(model, batch, seq, src_seq, attn, recompute, precision, optimizer,
              dropout=False, ft=None, offload="none", head=None, stack=None,
              recompute_method="block", recompute_layers=0, loss="full",
              global_tokens=0) -> dict:
    from .. import load
    from ..engine.memory import TrainingMemory
    from ..engine.workload import check_fits

    cfg = load(model) if head is None else load(model, head)
    work = _workload(batch, seq, src_seq, attn, recompute, dropout, stack, recompute_method,
                     recompute_layers, loss, global_tokens)
    check_fits(cfg, work)
    kernel = "foreach"
    if stack is not None:  # the stack's optimizer step (memory.OPTIMIZER_STEPS), as plan train
        from ..engine.stacks import get_stack
        kernel = get_stack(stack).optimizer_kernel
    m = TrainingMemory(cfg, work, precision, optimizer, ft, offload, kernel)
    return m.to_json() | m.finetune_json()


def _inference(model, context, concurrency, kv_dtype, precision, weights=None,
               src_seq: int = 0) -> dict:
    from .. import load
    from ..errors import WorkloadError
    from ..engine.kvcache import kv_cache_bytes, kv_cache_bytes_per_token
    from ..engine.memory import PRECISIONS, _check
    from ..engine.accounting import count_params

    cfg = load(model)
    if concurrency <= 0 or context <= 0:
        raise WorkloadError(f"--concurrency ({concurrency}) and --context ({context}) must be positive")
    wbytes = PRECISIONS[_check("precision", precision, PRECISIONS)].weight
    n = count_params(cfg).total
    kv = kv_cache_bytes(cfg, context, concurrency, kv_dtype, src_seq=src_seq)
    from ..engine.formats import model_checkpoint_bytes, resolve
    sch, _ = resolve(model, weights)
    if sch is not None:  # the stored tensors (quantised weights and scales) stay resident
        stored = model_checkpoint_bytes(cfg, sch)
        return {"model": cfg.name, "precision": precision, "weights": sch.name,
                "context": context, "concurrency": concurrency, "kv_dtype": kv_dtype,
                "params": n, "weights_bytes": stored, "gradients_bytes": 0,
                "optimizer_bytes": 0, "activations_bytes": 0, "kv_cache_bytes": kv,
                "kv_cache_bytes_per_token": kv_cache_bytes_per_token(cfg, kv_dtype),
                "total_bytes": stored + kv}
    return {"model": cfg.name, "precision": precision, "context": context,
            "concurrency": concurrency, "kv_dtype": kv_dtype, "params": n,
            "weights_bytes": n * wbytes, "gradients_bytes": 0, "optimizer_bytes": 0,
            "activations_bytes": 0, "kv_cache_bytes": kv,
            "kv_cache_bytes_per_token": kv_cache_bytes_per_token(cfg, kv_dtype),
            "total_bytes": n * wbytes + kv}
