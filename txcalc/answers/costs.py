"""``txcalc flops`` and ``txcalc memory``: the answers (one training step or inference, per
component)."""

from __future__ import annotations

from .common import (Answer, apply_recipe, cross_rows, default_recompute, half_precision,
                     image_tokens, load_model, make_finetune, recipe_precision,
                     text_only_said, workload)

#: the memory answer's peak categories in words (the CLI's sentence and the page's bars)
PEAK_LABELS = {"param": "weights", "grad": "gradients", "opt": "optimizer states",
               "master": "fp32 master", "act": "activations", "temp": "temporaries"}

#: the memory hierarchy every view of memory shows, in this order and these words (the CLI's
#: ``memory`` table, the page's bars and tables, reports): each category of an answer sits in
#: one group (MEMORY_PARTS); the fp32 master weights are optimizer states
MEMORY_GROUPS = {"weights": "weights", "gradients": "gradients",
                 "optimizer": "optimizer states", "activations": "activations",
                 "transients": "transients", "kv_cache": "KV cache", "framework": "framework"}

#: the rows of ``txcalc memory``'s table: (depth, key of its JSON, words); depth 0 a group
#: (MEMORY_GROUPS' words; key None: a heading over rows that are not all alive at once), depth
#: 1 what sits inside it. Sizes, each at its own largest: the peak of the step (the total) is
#: not their sum, and the sentence under the table says which are alive at the peak.
MEMORY_ROWS = (
    (0, "weights_bytes", "weights"),
    (1, "fp8_weight_copies_bytes", "plus their fp8 copies for the matmuls"),
    (1, "adapter_bytes", "of which adapters"),
    (0, "gradients_bytes", "gradients"),
    (0, "optimizer_bytes", "optimizer states"),
    (1, "master_weights_bytes", "of which fp32 master weights"),
    (1, "paged_optimizer_bytes", "of which paged (managed memory, outside the allocator)"),
    (0, "activations_bytes", "activations (saved for backward)"),
    (1, "inputs_bytes", "plus the batch and the loss beside them"),
    (0, None, "transients (each at its own largest)"),
    (1, "step_temporaries_bytes", "the optimizer step's temporaries"),
    (1, "logits_bytes", "the loss's logits (T x V)"),
    (1, "dequant_bytes", "a quantised weight dequantised"),
    (1, "recompute_bytes", "a block rerun in backward (full recompute)"),
    (0, "kv_cache_bytes", "KV cache"),
    (0, None, "framework"),
    (1, "cuda_context_bytes", "CUDA context"),
    (1, "cublas_workspace_bytes", "cuBLAS workspace"),
)

#: category key -> (group of MEMORY_GROUPS, the category in words), for each answer's
#: categories: ``memory``'s ``peak_by_category``, ``plan train``'s ``memory_bytes`` per GPU
#: and ``plan infer``'s ``kv_capacity`` per GPU (vLLM's profile of one GPU)
MEMORY_PARTS = {
    # memory --json: peak_by_category (TrainingMemory.phases)
    "param": ("weights", "weights"), "grad": ("gradients", "gradients"),
    "opt": ("optimizer", ("moments and step counters (at the optimizer step, with the "
                          "update's temporaries)")),
    "master": ("optimizer", "fp32 master weights"),
    "act": ("activations", "saved activations, the batch"),
    "temp": ("transients", "the step's temporaries and the loss's"),
    # plan train: best.memory_bytes (train.planner.CATEGORIES), one GPU's fullest stage
    "weights": ("weights", "weights"), "gradients": ("gradients", "gradients"),
    "optimizer": ("optimizer", "with the fp32 master weights"),
    "activations": ("activations", "activations saved for backward"),
    "inputs": ("activations", "the batch"),
    "logits": ("transients", "the loss's logits (T x V)"),
    "recompute": ("transients", "a recomputed block rerun in backward, above the logits"),
    "zero3_buffers": ("transients", "ZeRO-3 gather buffers"),
    "step": ("transients", "the optimizer step's temporaries"),
    "framework": ("framework", "CUDA context, allocator, communication buffers"),
    # plan infer: kv_capacity (one GPU of a replica), memory --inference
    "weights_bytes": ("weights", "weights"),
    "activation_peak_bytes": ("activations", "the largest step's activations"),
    "kv_cache_bytes": ("kv_cache", "KV cache"),
    "cuda_graph_bytes": ("framework", "CUDA graphs"),
    "non_torch_bytes": ("framework", "non-torch memory (CUDA context, NCCL)"),
    # reports (report.gather): the peak's categories of one GPU, serving's per GPU
    "temporaries": ("transients", "the step's temporaries and the loss's, at the peak"),
    "kv cache": ("kv_cache", "KV cache"),
    "prefill workspace": ("activations", "the chunked-prefill workspace"),
}


#: a category's words where space is short (a report's table columns and plot legends): its
#: group's words, then a word or two of its own where the group has several
MEMORY_SHORT = {"optimizer": "fp32 master inside", "activations": "", "act": "",
                "inputs": "the batch", "logits": "logits", "recompute": "block rerun",
                "temporaries": "",
                "zero3_buffers": "ZeRO-3 gathers", "step": "optimizer step",
                "framework": "", "non_torch_bytes": "", "prefill workspace": "prefill",
                "temp": "", "opt": "moments", "master": "fp32 master"}


def memory_words(key: str, short: bool = False) -> str:
    """A category in the hierarchy's words: its group's, then (where they say more) its own
    (``optimizer``: "optimizer states: with the fp32 master weights"; short: "optimizer
    states: fp32 master inside")."""
    group, words = MEMORY_PARTS[key]
    head = MEMORY_GROUPS[group]
    if short:
        words = MEMORY_SHORT.get(key, words)
        return f"{head}: {words}" if words and words.lower() != head.lower() else head
    return words if words.lower().startswith(head.lower()) else f"{head}: {words}"


def flops(model: str, batch: int = 1, seq: int | str = 2048, src_seq: int | str = 0,
          attn: str = "flash",
          recompute: str | None = None, context: str = "0", finetune: str = "full",
          lora_rank: int = 16, lora_alpha: float | None = None,
          lora_targets: str = "all-linear", lora_dropout: float = 0.0,
          trainable: str = "head", base_format: str = "nf4", loss: str = "full",
          head: str | None = None, images: int = 0, image_size: int = 0,
          global_tokens: int | str = 0) -> Answer:
    """Matmul FLOPs of one training step (executed and model), and inference costs.
    Sequence lengths: ints, or text as ``--context`` reads it (``4k`` = 4096). ``recompute``
    None: "full" when fine-tuning (``default_recompute``), else "none", listed in the
    answer's ``assumed``."""
    from ..engine.accounting import count_flops
    from ..engine.workload import check_fits
    from .checks import checked

    opts = checked(batch=batch, seq=seq, src_seq=src_seq, attn=attn, recompute=recompute,
                   context=context, images=images, image_size=image_size,
                   global_tokens=global_tokens)
    context, seq, src_seq = opts["context"], opts["seq"], opts["src_seq"]
    global_tokens = opts["global_tokens"]
    recompute, assumed = default_recompute(recompute, finetune)
    cfg = load_model(model, head)
    extra = image_tokens(cfg, images, image_size)
    seq = checked(seq=seq + extra)["seq"]
    src_seq = src_seq or cross_rows(cfg, images)
    work = workload(batch, seq, src_seq, attn, recompute, loss=loss,
                    global_tokens=global_tokens)
    check_fits(cfg, work)
    ft = make_finetune(finetune, lora_rank, lora_alpha, lora_targets, lora_dropout, trainable,
                       base_format)
    f = count_flops(cfg, work, ft)  # text only: Mllama's cross blocks do not run
    assumed = [*assumed, *text_only_said(cfg, work)]
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
    out["assumed"] = assumed
    return Answer(out, {"cfg": cfg, "seq": seq, "context": context, "recompute": recompute})


def memory(model: str | None = None, params: str | None = None, batch: int = 1,
           seq: int | str = 2048, src_seq: int | str = 0, precision: str | None = None,
           optimizer: str | None = None, attn: str | None = None,
           recompute: str | None = None,
           recompute_method: str = "block", recompute_layers: int = 0,
           stack: str | None = None, dropout: bool = False, inference: bool = False,
           weights: str | None = None, context: str = "0", concurrency: int = 1,
           kv_dtype: str = "bf16", gpu: str | None = None, gpu_gb: float | None = None,
           gpu_file: str | None = None, finetune: str = "full", lora_rank: int = 16,
           lora_alpha: float | None = None, lora_targets: str = "all-linear",
           lora_dropout: float = 0.0, trainable: str = "head", base_format: str = "nf4",
           offload: str | None = None, loss: str | None = None, head: str | None = None,
           images: int = 0, image_size: int = 0, global_tokens: int | str = 0,
           recipe: str | None = None, optimizer_in_backward: bool | None = None,
           compile: bool = False) -> Answer:
    """Bytes of training (weights, gradients, optimizer, activations) or serving (KV cache),
    and whether they fit one GPU: training's ``need_bytes`` (reserved + CUDA context,
    engine.device.device_memory, with ``allocated_bytes`` and ``reserved_bytes``),
    serving's ``total_bytes``. ``precision`` None: bf16-mixed, or fp16-mixed on a GPU
    without bf16 (``gpu`` T4, V100). ``recompute`` None: "full" when fine-tuning
    (``default_recompute``), else "none"; fine-tuning: ``recipe`` (None: the default recipe)
    sets the optimizer, loss and offload left None (``apply_recipe``); full training with a
    ``recipe`` that declares a full config takes its optimizer, loss and checkpointing.
    ``optimizer_in_backward`` None: the recipe's (torchtune's full config: each parameter
    stepped inside backward), else after backward. ``compile``: the model under torch.compile
    (each block compiled whole; the recipe's loss too where it compiles it: ``Recipe.
    compiled``). Every default taken is listed in the answer's ``assumed`` (a list of
    sentences, empty when none)."""
    from ..engine.hardware import get_gpu, gpu_memory
    from ..errors import WorkloadError
    from .checks import checked

    opts = checked(params=params, batch=batch, seq=seq, src_seq=src_seq, precision=precision,
                   optimizer=optimizer, attn=attn, recompute=recompute, context=context,
                   concurrency=concurrency, kv_dtype=kv_dtype, gpu_gb=gpu_gb, gpu_file=gpu_file,
                   images=images, image_size=image_size, stack=stack,
                   recompute_method=recompute_method, recompute_layers=recompute_layers,
                   global_tokens=global_tokens, **({"gpu": gpu} if gpu is not None else {}))
    context, seq, src_seq = opts["context"], opts["seq"], opts["src_seq"]
    global_tokens = opts["global_tokens"]
    # the catalog row, read once: the fit check's bytes and, in the CLI, its words
    row = get_gpu(gpu or "h100-sxm", gpu_file) if gpu is not None or opts["gpu_gb"] is None \
        else None
    gpu_bytes, gpu_label, _ = gpu_memory(row, opts["gpu_gb"], gpu_file)
    precision, said = half_precision(precision, row if gpu is not None else None)
    from ..engine.device import FRAGMENTATION
    slack = FRAGMENTATION  # the allocator's slack: a fine-tuning recipe's own (engine.recipes)
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
    cfg = None
    extra = 0
    if images:
        if model is None:
            raise WorkloadError(f"--images ({images}) needs MODEL (a vision-language config)")
        cfg = load_model(model, head)
        extra = image_tokens(cfg, images, image_size)
        src_seq = src_seq or cross_rows(cfg, images)
        seq = checked(seq=seq + extra)["seq"]
        context = checked(context=str(context + extra))["context"] if context else 0
    if (params is not None or inference) and compile:
        raise WorkloadError("--compile needs a training step of MODEL (not --params or "
                            "--inference)")
    if (params is not None or inference) and optimizer_in_backward:
        raise WorkloadError("--optimizer-in-backward needs a training step of MODEL (not "
                            "--params or --inference)")
    if params is not None:
        from ..engine.memory import model_states
        out = model_states(opts["params"], precision, optimizer or "adamw")
    elif inference:
        cfg = cfg or load_model(model, head)
        out = _inference(model, cfg, context or seq, concurrency, kv_dtype, precision, weights,
                         src_seq)
    else:
        from ..engine.memory import OFFLOADS
        from ..inputs import choice
        if offload is not None:
            choice("--offload", offload, OFFLOADS)
        ft = make_finetune(finetune, lora_rank, lora_alpha, lora_targets, lora_dropout,
                           trainable, base_format)
        cfg = cfg or load_model(model, head)
        recompute, assumed = default_recompute(recompute, finetune, recipe is not None)
        rec = apply_recipe(ft, recipe, optimizer, loss, offload, optimizer_in_backward)
        precision, said = recipe_precision(opts["precision"], precision, said, rec)
        out = _training(cfg, batch, seq, src_seq, attn, recompute, precision, rec["optimizer"],
                        dropout, rec["finetune"], rec["offload"], stack, recompute_method,
                        recompute_layers, rec["loss"], global_tokens,
                        None if stack else rec["optimizer_kernel"],
                        rec["optimizer_in_backward"], rec["compiled"] if compile else ())
        slack = rec["reserved_slack"]
        if compile:
            from .common import compile_said
            said = said + [compile_said(rec["compiled"])]
        if rec["recipe"] is not None:
            out["recipe"] = rec["recipe"]
        said += assumed + rec["assumed"] + out.pop("assumed")
    if images:
        out["image_tokens"] = extra
    out["gpu"] = gpu_label
    out["gpu_bytes"] = gpu_bytes
    need = out["total_bytes"]
    if not inference:  # what the allocator and nvidia-smi show (engine.device)
        from ..engine.device import device_memory
        out.update(device_memory(need, row.name if row is not None else None,
                                 slack, out.get("paged_optimizer_bytes", 0),
                                 out.get("paged_working_bytes", 0)).to_json())
        need = out["need_bytes"]
    out["fits_one_gpu"] = need <= gpu_bytes
    out["assumed"] = said
    return Answer(out, {"gpu_row": row, "gpu_gb": opts["gpu_gb"]})


def _training(cfg, batch, seq, src_seq, attn, recompute, precision, optimizer,
              dropout=False, ft=None, offload="none", stack=None,
              recompute_method="block", recompute_layers=0, loss="full",
              global_tokens=0, kernel=None, in_backward=False, compiled=()) -> dict:
    from ..engine.memory import TrainingMemory
    from ..engine.workload import check_fits

    work = workload(batch, seq, src_seq, attn, recompute, dropout, stack, recompute_method,
                    recompute_layers, loss, global_tokens, compiled)
    check_fits(cfg, work)
    kernel = kernel or "foreach"
    if stack is not None:  # the stack's optimizer step (memory.OPTIMIZER_STEPS), as plan train
        from ..engine.stacks import get_stack
        kernel = get_stack(stack).optimizer_kernel
    m = TrainingMemory(cfg, work, precision, optimizer, ft, offload, kernel, in_backward)
    # the step's temporaries (fp32 gradient copies for the masters, the update's scratch),
    # which the peak's categories file under temp and opt; on the host when offloaded; in
    # backward, one tensor's
    step = 0 if offload in ("optimizer", "all") else sum(m.in_backward_bytes[1:]) \
        if in_backward else m.master_grad_copies + m.optimizer_temporaries
    return m.to_json() | {"step_temporaries_bytes": step} | m.finetune_json() | \
        {"assumed": text_only_said(cfg, work)}


def _inference(model, cfg, context, concurrency, kv_dtype, precision, weights=None,
               src_seq: int = 0) -> dict:
    from ..engine.accounting import count_params
    from ..engine.formats import model_checkpoint_bytes, resolve
    from ..engine.kvcache import kv_cache_bytes, kv_cache_bytes_per_token
    from ..engine.memory import PRECISIONS, _check
    from ..errors import WorkloadError

    if concurrency <= 0 or context <= 0:
        raise WorkloadError(f"--concurrency ({concurrency}) and --context ({context}) must be positive")
    wbytes = PRECISIONS[_check("precision", precision, PRECISIONS)].weight
    n = count_params(cfg).total
    kv = kv_cache_bytes(cfg, context, concurrency, kv_dtype, src_seq=src_seq)
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
