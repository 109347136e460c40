"""``txcalc fit``: the longest sequence (or largest micro-batch) one GPU (or each of N under
ZeRO-3) trains or fine-tunes, and when nothing fits the cheapest changes that make it fit."""

from __future__ import annotations

from ..units import GB
from .common import (Answer, apply_recipe, default_recompute, half_precision, load_model,
                     make_finetune, recipe_precision, text_only_said)


def fit(model: str, gpu: str | None = None, gpu_gb: float | None = None,
        batch: int | None = None, seq: int | str | None = None, gpus: int = 1,
        precision: str | None = None, optimizer: str | None = None, attn: str = "flash",
        recompute: str | None = None, finetune: str = "full", lora_rank: int = 16,
        lora_alpha: float | None = None, lora_targets: str = "all-linear",
        lora_dropout: float = 0.0, trainable: str = "head", base_format: str = "nf4",
        offload: str | None = None, loss: str | None = None, gpu_file: str | None = None,
        recipe: str | None = None, safety: float = 0.0,
        optimizer_in_backward: bool | None = None, compile: bool = False) -> Answer:
    """Longest sequence at a micro-batch (or largest micro-batch at a sequence) on one GPU,
    or on each of ``gpus`` under ZeRO-3. ``precision`` None: bf16-mixed, or fp16-mixed on a
    GPU without bf16 (T4, V100). ``recompute`` None: gradient checkpointing ("full"), as the
    recipes run it; fine-tuning: ``recipe`` (None: recipes.DEFAULT_RECIPE) sets the optimizer,
    loss and offload left None (``apply_recipe``; full training: a recipe's full config, where
    it declares one, and ``optimizer_in_backward`` None takes its choice). Every default taken
    is listed in the
    answer's ``assumed`` (a list of sentences). ``safety``: GB (1e9 bytes) kept free on each
    GPU. ``compile``: the model under torch.compile (``Recipe.compiled``: each block compiled
    whole, the recipe's loss too where it compiles it). ``parts``: the FitResult, the
    ModelConfig, the GPU's label and memory words, the Finetune (None: full) and the
    optimizer kernel."""
    from ..engine.finetune import check_precision
    from ..engine.hardware import memory_words
    from ..engine.memory import OFFLOADS
    from ..errors import WorkloadError
    from ..inputs import choice
    from ..train.fit import Setup, fit as fit_one
    from .checks import checked

    opts = checked(batch=batch, seq=seq, gpus=gpus, precision=precision, optimizer=optimizer,
                   attn=attn, recompute=recompute, gpu_gb=gpu_gb, gpu_file=gpu_file,
                   safety=safety, **({"gpu": gpu} if gpu is not None else {}))
    seq, safety = opts["seq"], opts["safety"]
    if offload is not None:
        choice("--offload", offload, OFFLOADS)
    recompute, assumed = default_recompute(recompute, finetune, always=True)
    if (gpu is None) == (gpu_gb is None):
        raise WorkloadError("give --gpu NAME or --gpu-gb N, one of them")
    peak = 1e15
    said: list[str] = []
    if gpu is not None:
        from ..engine.hardware import get_gpu
        g = get_gpu(gpu, gpu_file)
        gpu_bytes, label, words = g.usable_bytes, g.name, memory_words(g, "GiB")
        precision, said = half_precision(precision, g)
        peak = g.peak_flops.get(g.half_dtype) or g.peak_flops.get("fp32") or peak
    else:
        precision = precision or "bf16-mixed"
        gpu_bytes, label = int(gpu_gb * GB), f"{gpu_gb:g} GB GPU"
        words = memory_words(gpu_bytes)
    ft = make_finetune(finetune, lora_rank, lora_alpha, lora_targets, lora_dropout, trainable,
                       base_format)
    check_precision(ft, precision)
    rec = apply_recipe(ft, recipe, optimizer, loss, offload, optimizer_in_backward)
    precision, said = recipe_precision(opts["precision"], precision, said, rec)
    check_precision(ft, precision)
    assumed = said + assumed + rec["assumed"]
    if compile:
        from .common import compile_said
        assumed.append(compile_said(rec["compiled"]))
    cfg = load_model(model)
    setup = Setup(cfg, precision, rec["optimizer"], attn, recompute, rec["finetune"],
                  rec["offload"], gpus, rec["loss"], rec["optimizer_kernel"],
                  g.name if gpu is not None else None,
                  fragmentation=rec["reserved_slack"],
                  fused=tuple(rec["compiled"]) if compile else (),
                  optimizer_in_backward=rec["optimizer_in_backward"])
    probe = setup.memory(1, 1)
    probe.ops  # refuses bad targets and ranks before the search
    assumed += text_only_said(cfg, probe.work, images_option=False)
    res = fit_one(setup, gpu_bytes, batch, seq, peak, int(safety * GB))
    return Answer(res.to_json() | {"gpu": label, "precision": precision,
                                   "recipe": rec["recipe"], "assumed": assumed},
                  {"result": res, "cfg": cfg, "label": label, "words": words,
                   "finetune": rec["finetune"], "optimizer_kernel": rec["optimizer_kernel"]})
