"""What every answer shares: the Answer record, JSON text, a model resolved once, and the
workload and fine-tuning setup of flops, memory, fit and plan train."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import TxcalcError


@dataclass(frozen=True)
class Answer:
    """One command's answer: ``json`` is what its ``--json`` prints; ``parts`` the objects
    the command's tables are drawn from (a plan, the parameter counts, the GPU row)."""

    json: dict
    parts: dict = field(default_factory=dict)


def json_text(obj, **kw) -> str:
    """JSON text with ``allow_nan=False``: NaN and infinities are not JSON. Input validation
    (txcalc.inputs) keeps every figure finite; one that still is not becomes a TxcalcError
    (one line, exit 2), never invalid JSON. Python ints stay exact (no float round trip).
    ``json_text(answer.json, indent=2)`` is what a command's ``--json`` prints (and a
    newline)."""
    import json  # here: a table's command never needs it
    try:
        return json.dumps(obj, allow_nan=False, **kw)
    except ValueError as e:
        raise TxcalcError(f"a result is not a finite number, so it cannot be written as JSON "
                          f"({e}); please report the command") from None


def load_model(model, head: str | None = None):
    """The ModelConfig of a model argument (a preset, a config.json, a Hub id), read once."""
    from .. import load
    return load(model) if head is None else load(model, head)


def workload(batch, seq, src_seq, attn, recompute, dropout=False, stack=None,
             recompute_method="block", recompute_layers=0, loss="full", global_tokens=0,
             compiled=()):
    """The workload of flops / memory; ``stack`` (txcalc.engine.stacks) sets the fused kernels
    and, when ``attn`` is None, the attention kernel (else flash); ``compiled``: kernels
    torch.compile fuses beyond the stack's (--compile: ``apply_recipe``'s "compiled"). No
    ``src_seq`` (neither --images nor --src-seq): the batch is text (Workload.text_only)."""
    from ..engine.workload import Workload
    prof = None
    if stack is not None:
        from ..engine.stacks import get_stack
        prof = get_stack(stack)
    attn = attn or (prof.attn_impl if prof else "flash")
    return Workload(batch=batch, seq=seq, src_seq=src_seq, attn_impl=attn, recompute=recompute,
                    dropout=dropout,
                    fused=tuple(dict.fromkeys((prof.fused if prof else ()) + tuple(compiled))),
                    keeps=prof.keeps if prof else (),
                    loss_kernel=prof.loss_kernel if prof else "hf",
                    softmax_fp32=prof.softmax_fp32 if prof else True,
                    recompute_method=recompute_method, recompute_layers=recompute_layers,
                    loss=loss, global_tokens=global_tokens, text_only=not src_seq)


def text_only_said(cfg, work, images_option: bool = True) -> list[str]:
    """The sentence an answer assumes when Mllama's cross-attention blocks do not run
    (Workload.text_only); none for other models or with images. ``images_option``: the
    command takes --images (plan train does not)."""
    if not (cfg.cross_layers and work.text_only):
        return []
    return [f"text only (no --images): the {len(cfg.cross_layers)} cross-attention blocks do "
            "not run (HF's MllamaTextModel skips them without vision states, and the vision "
            "tower without images; their weights are counted, their gradients and optimizer "
            "states are not: torch leaves their .grad None and AdamW makes them no state)"
            + ("; --images N feeds them" if images_option else "")]


#: what fine-tuning and ``fit`` assume when --recompute is not given: gradient checkpointing,
#: as every fine-tuning recipe turns it on (HF ``gradient_checkpointing=True``: each decoder
#: block recomputed in backward from its input, txcalc's "full" recompute)
CHECKPOINTING_WORDS = ("recompute full (gradient checkpointing of every block, as the "
                       "fine-tuning recipes run it: HF gradient_checkpointing=True; "
                       "--recompute none for none)")


def default_recompute(recompute: str | None, finetune: str,
                      always: bool = False) -> tuple[str, list[str]]:
    """(recompute mode, the defaults assumed in words): the one asked for, else "full" when
    fine-tuning (``finetune`` other than full) or ``always`` (fit), else "none"."""
    if recompute is not None:
        return recompute, []
    if always or finetune != "full":
        return "full", [CHECKPOINTING_WORDS]
    return "none", []


#: what full training runs with where the options leave it (no recipe applies): a recipe's
#: choice that differs from these is stated among the defaults assumed
FULL_TRAINING = {"optimizer": "adamw", "loss": "full", "offload": "none"}


def apply_recipe(ft, recipe: str | None, optimizer: str | None, loss: str | None,
                 offload: str | None, in_backward: bool | None = None) -> dict:
    """What a fine-tuning recipe (txcalc.engine.recipes) sets where the options leave it:
    {finetune (with the recipe's fp32 upcast), optimizer, loss, offload, optimizer_kernel,
    optimizer_in_backward, reserved_slack (the allocator's, engine.device), recipe (its JSON,
    None for full training), assumed (the defaults taken, in words)}.
    Full training (``ft`` None) takes no recipe unless one is named that declares a full
    fine-tune config (``Recipe.full_optimizer``: ``full_recipe``); without one: adamw, the
    full loss, no offload, foreach, the optimizer after backward."""
    import dataclasses

    from ..engine.recipes import DEFAULT_RECIPE, get_recipe
    if ft is None:
        if recipe is not None:
            return full_recipe(get_recipe(recipe), optimizer, loss, offload, in_backward)
        given = {"optimizer": optimizer, "loss": loss, "offload": offload}
        from ..engine.device import FRAGMENTATION
        return {"finetune": None, **{k: FULL_TRAINING[k] if v is None else v
                                     for k, v in given.items()},
                "optimizer_kernel": "foreach", "optimizer_in_backward": bool(in_backward),
                "reserved_slack": FRAGMENTATION, "recipe": None, "precision": None,
                "compiled": ("layers",), "assumed": []}
    r = get_recipe(DEFAULT_RECIPE if recipe is None else recipe)
    assumed = [] if recipe is not None else [
        f"recipe {r.name} ({r.describe().partition(': ')[2]}; --recipe to change)"]
    for name, given, own, words in (
            ("optimizer", optimizer, r.optimizer, f"the recipe's {r.optimizer_name}"),
            ("loss", loss, r.loss, "the recipe's loss"),
            ("offload", offload, r.offload, "the recipe's checkpoints' place")):
        if given is None and (recipe is not None or own != FULL_TRAINING[name]):
            assumed.append(f"{name} {own} ({words})")
    if ft.mode == "qlora" and r.upcast:
        assumed.append("QLoRA's unquantised parameters (embeddings, norms, lm_head) in fp32, "
                       "and so the block inputs (PEFT's prepare_model_for_kbit_training)")
    return {"finetune": dataclasses.replace(ft, upcast=r.upcast, mlp_inplace=r.mlp_inplace),
            "optimizer": r.optimizer if optimizer is None else optimizer,
            "loss": r.loss if loss is None else loss,
            "offload": r.offload if offload is None else offload,
            "optimizer_kernel": r.optimizer_kernel, "optimizer_in_backward": bool(in_backward),
            "reserved_slack": r.reserved_slack, "recipe": r.to_json(), "precision": None,
            "compiled": r.compiled, "assumed": assumed}


def planner_recipe(ft, recipe: str | None, optimizer: str | None, loss: str | None,
                   stack: str | None = None) -> tuple:
    """(finetune, optimizer kernel) plan train takes from a --recipe: its fp32 upcast and its
    optimizer kernel (None: the planner's own; a stack's kernel wins, as in memory); without
    a recipe ``ft`` and None. The planner keeps its own optimizer and loss defaults."""
    if recipe is None:
        return ft, None
    rec = apply_recipe(ft, recipe, optimizer, loss, "none")
    return rec["finetune"], None if stack else rec["optimizer_kernel"]


def full_recipe(r, optimizer: str | None, loss: str | None, offload: str | None,
                in_backward: bool | None) -> dict:
    """``apply_recipe`` for full fine-tuning under the recipe ``r``: its full config's
    optimizer and optimizer-in-backward, its loss and kernel, where the options leave them,
    and its precision (``precision``: for the caller to take where --precision is not
    given, ``recipe_precision``); a recipe that declares no full config is refused."""
    from ..engine.recipes import RECIPES
    from ..errors import WorkloadError
    if r.full_optimizer is None:
        with_full = [k for k, v in RECIPES.items() if v.full_optimizer is not None]
        raise WorkloadError(f"--recipe {r.name} declares no full fine-tune config: give "
                            f"--finetune lora, qlora, dora or freeze, or a recipe that does "
                            f"({', '.join(with_full)})")
    assumed = [r.describe_full() + " (--recipe)"]
    for name, given, own in (("optimizer", optimizer, r.full_optimizer), ("loss", loss, r.loss),
                             ("offload", offload, r.offload)):
        if given is None:
            assumed.append(f"{name} {own} (the recipe's)")
    bwd = r.full_in_backward if in_backward is None else in_backward
    if in_backward is None and bwd:
        assumed.append("optimizer in backward: each parameter stepped, and its gradient "
                       "freed, as soon as it is accumulated (the recipe's; "
                       "--no-optimizer-in-backward to step after backward)")
    return {"finetune": None, "optimizer": optimizer or r.full_optimizer,
            "loss": loss or r.loss, "offload": offload or r.offload,
            "optimizer_kernel": r.optimizer_kernel, "optimizer_in_backward": bwd,
            "reserved_slack": r.reserved_slack, "recipe": r.to_json(),
            "precision": r.full_precision, "compiled": r.compiled, "assumed": assumed}


def compile_said(compiled: tuple) -> str:
    """--compile in words: what the compiled model runs fused (``apply_recipe``'s
    "compiled")."""
    loss = " and the loss (the recipe's compile_loss)" if "loss" in compiled else ""
    return ("torch.compile (--compile): each block compiled whole, its norms and gated "
            f"activations fused (what Inductor keeps for backward){loss}; the final norm "
            "eager")


def recipe_precision(given: str | None, default: str, said: list[str], rec: dict
                     ) -> tuple[str, list[str]]:
    """(precision, the defaults assumed in words): the recipe's (``rec["precision"]``) where
    --precision was not ``given`` and the GPU took the plain default (``said`` empty: a GPU
    without bf16 keeps half_precision's fp16), else ``default`` and ``said``."""
    if given is not None or not rec["precision"] or said:
        return default, said
    words = f"precision {rec['precision']} (the recipe's dtype; --precision to change)"
    return rec["precision"], [words]


def make_finetune(mode: str, rank: int, alpha: float | None, targets: str, dropout: float,
                  trainable: str, base: str):
    """The Finetune the fine-tuning options describe (None for full fine-tuning)."""
    from ..engine.finetune import finetune_from_options
    return finetune_from_options(mode, rank, alpha, targets, dropout, trainable, base)


def image_tokens(cfg, images: int, image_size: int) -> int:
    """Tokens ``images`` images add to each sequence (0 without --images)."""
    return cfg.image_seq_tokens(images, image_size) if images else 0


def cross_rows(cfg, images: int) -> int:
    """Mllama: vision-state rows its cross-attention layers read, those of --images N images
    (--src-seq overrides; without either they read --seq rows, as every command and the
    planner take an unset src_seq); 0 for other models."""
    return images * cfg.image_states if cfg.cross_layers else 0


def overheads(context_gib, comm_gib, fragmentation):
    """The per-GPU overheads of ``--cuda-context-gib``, ``--comm-buffer-gib`` and
    ``--fragmentation`` (None: the default of each)."""
    from ..parallel.overheads import Overheads
    return Overheads.from_gib(context_gib, comm_gib, fragmentation)


#: a training precision -> the serving precision of the same weights: the dtype they are held
#: and run in (mixed precision's fp32 master copy, gradients and optimizer are training
#: states). A serving report takes the training default (bf16-mixed) and asks plan infer
#: with this (txcalc.report.request.ReportRequest.serve_precision).
SERVING_PRECISION = {"bf16-mixed": "bf16", "fp16-mixed": "fp16"}


def serving_kv_dtype(precision: str) -> str:
    """The KV cache dtype a serving answer assumes when none is given: the weights' 16-bit
    dtype (fp16 with fp16 weights, else bf16), as vLLM's kv_cache_dtype auto keeps it."""
    return "fp16" if SERVING_PRECISION.get(precision, precision) == "fp16" else "bf16"


def half_precision(precision: str | None, gpu, gpu_file=None, *, serving: bool = False
                   ) -> tuple[str, list[str]]:
    """(precision, the defaults assumed in words) of an answer: ``precision`` when given, else
    bf16-mixed (serving: bf16), or, on a GPU without a bf16 tensor path (T4, V100:
    ``Gpu.half_dtype``), fp16-mixed (serving: fp16), as the HF Trainer (``--fp16``) and vLLM
    (``dtype="auto"`` casts a bf16 checkpoint to fp16 there) run on it. ``gpu``: a name, a Gpu
    or None (no GPU: the bf16 default)."""
    if precision is not None:
        return precision, []
    base = "bf16" if serving else "bf16-mixed"
    if gpu is None:
        return base, []
    from ..engine.hardware import Gpu, get_gpu
    if not isinstance(gpu, Gpu):
        from .checks import checked
        checked(gpu=gpu, gpu_file=gpu_file)
        gpu = get_gpu(gpu, gpu_file)
    if gpu.half_dtype != "fp16":
        return base, []
    if serving:
        return "fp16", [f"weights, activations and KV cache in fp16: {gpu.name} has no bf16 "
                        "tensor cores (vLLM's dtype auto runs a bf16 checkpoint in fp16 there); "
                        "--precision and --kv-dtype to change"]
    return "fp16-mixed", [f"precision fp16-mixed: {gpu.name} has no bf16 tensor cores (the HF "
                          "Trainer's --fp16, with loss scaling); --precision to change"]


def serving_weights_note(cfg, weights: str | None) -> list[str]:
    """The weight format a serving answer assumed, in words, when the user gave none and the
    model names one: a preset's released checkpoint format (``ModelConfig.released_weights``,
    as formats.resolve reads it)."""
    if weights is not None or getattr(cfg, "loaded_from", "") or not cfg.released_weights:
        return []
    return [f"weights {cfg.released_weights}: the format {cfg.name} is released in (its "
            f"checkpoint's quantization_config); --weights bf16 for 16-bit weights"]
