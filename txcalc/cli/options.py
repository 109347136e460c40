"""The CLI's options, declared once per group and shared by every command that takes them
(one help text per option). How a value is checked is the answers' business
(txcalc.answers.checks: ``options`` here is its ``checked``).

    group       | options                                                | commands
    ------------|--------------------------------------------------------|----------------------
    FT_OPTS     | --finetune --lora-rank --lora-alpha --lora-targets     | flops, memory, fit,
                | --lora-dropout --trainable --base-format --offload     | plan train, report
                | --loss                                                 |
    TRAIN_OPTS  | --precision --optimizer (training's)                   | memory, fit,
                |                                                        | plan train, report
    RECIPE_OPTS | --recipe, and --optimizer --loss --offload defaulting  | memory, fit
                | to the recipe's when fine-tuning                       |
    SERVE_OPTS  | --kv-dtype --weights                                   | params, memory,
                |                                                        | plan infer, report
    LAYOUT_OPTS | --tp --pp --ep (pins), --cuda-context-gib              | plan train,
                | --comm-buffer-gib --fragmentation                      | plan infer
    COMMON_OPTS | --gpu-file --json                                      | every command with them

Only typer is imported here: a command's module reads these at import time.
"""

from __future__ import annotations

import typer


def options(**given) -> dict:
    """Check options by their names (``batch=...`` is ``--batch``); None means not given
    (txcalc.answers.checks.checked)."""
    from ..answers.checks import checked
    return checked(**given)


MODEL_HELP = ("A preset name (see `txcalc presets`), a path to a Hugging Face config.json, or a Hub "
              "id (org/name: its config.json from the local HF cache, else downloaded).")
WEIGHTS_HELP = ("Weight format: bf16, int8, int4-g128 (GPTQ), awq-int4-g128, fp8, fp8-block, nf4, "
                "mxfp4, nvfp4, gguf:Q4_K_M ... (default: the config.json's quantization_config).")
HEAD_HELP = ("Encoder head of a config.json: none (base model) | mlm | seq_cls | token_cls | "
             "discriminator (ELECTRA's ForPreTraining; its generator is mlm) | "
             "auto (the class its 'architectures' names).")

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
#: the fine-tuning options (and the LM loss)
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

RECIPE_HELP = ("Fine-tuning recipe whose code path is modelled: hf-peft (default: HF Trainer + "
               "PEFT, QLoRA via prepare_model_for_kbit_training: unquantised parameters in fp32) | "
               "trl-sft | unsloth | llama-factory | axolotl | torchtune. It sets the fp32 "
               "upcasts, the optimizer and its kernel, the loss and where checkpoints live, "
               "unless given (txcalc.engine.recipes). Full fine-tuning takes a recipe's full "
               "config where it declares one (torchtune: bf16, bitsandbytes PagedAdamW8bit, "
               "the optimizer in backward, gradient checkpointing).")
#: a fine-tuning recipe, and the options whose default is the recipe's when fine-tuning
RECIPE_OPTS = {
    "recipe": typer.Option(None, "--recipe", help=RECIPE_HELP),
    "optimizer": typer.Option(None, help="adamw | adam | adam8bit | paged-adam8bit "
                              "(bitsandbytes PagedAdamW8bit: states of tensors of 1e5 elements or "
                              "more in CUDA managed memory, outside allocated/reserved, counted "
                              "on the device) | sgd | adafactor | none (default adamw; "
                              "fine-tuning: the recipe's)."),
    "optimizer_in_backward": typer.Option(
        None, "--optimizer-in-backward/--no-optimizer-in-backward",
        help="Step each parameter inside backward as soon as its gradient is accumulated, "
             "freeing it (torchtune's optimizer_in_bwd, torch register_post_accumulate_grad_"
             "hook): one gradient alive, not all; one GPU only. Default off; --recipe "
             "torchtune with full fine-tuning: on, as its full config."),
    "loss": typer.Option(None, "--loss", help=FT_HELP["loss"] + " Default full; fine-tuning: "
                         "the recipe's."),
    "compile": typer.Option(
        False, "--compile/--no-compile",
        help="The model under torch.compile: each block compiled whole, its norms and gated "
             "activations fused as Inductor runs them (torchtune's compile: True, per-layer "
             "compile); --recipe torchtune also compiles its loss (compile_loss). Default "
             "off."),
    "offload": typer.Option(None, "--offload", help=FT_HELP["offload"] + " Default none; "
                            "fine-tuning: the recipe's."),
}

#: the training precision and optimizer
TRAIN_OPTS = {
    "precision": typer.Option(None, help="fp32 | bf16-mixed | fp16-mixed | bf16 | fp16 | "
                              "fp8-mixed (TransformerEngine fp8); default bf16-mixed, "
                              "fp16-mixed on a GPU without bf16 (T4, V100)."),
    "optimizer": typer.Option("adamw", help="adamw | adam | adam8bit | paged-adam8bit | sgd | "
                              "adafactor | none."),
}

#: serving: the KV cache's dtype and the weights' stored format
SERVE_OPTS = {
    "kv_dtype": typer.Option("bf16", "--kv-dtype", help="bf16 | fp16 | fp8 | int8 | int4 | fp32."),
    "weights": typer.Option(None, "--weights", help=WEIGHTS_HELP),
}

#: the plans' layout pins and per-GPU overheads
LAYOUT_OPTS = {
    "tp": typer.Option(None, "--tp", help="Pin the tensor-parallel degree (plan infer: with "
                       "--input-len)."),
    "pp": typer.Option(None, "--pp", help="Pin the pipeline-parallel degree (plan infer: with "
                       "--input-len)."),
    "ep": typer.Option(None, "--ep", help="Pin the expert-parallel degree (plan infer: of a MoE "
                       "model over the tp GPUs, 1 or tp, with --input-len)."),
    "cuda_context_gib": typer.Option(None, "--cuda-context-gib",
                                     help="CUDA context and workspaces per GPU (default 1 GiB)."),
    "comm_buffer_gib": typer.Option(None, "--comm-buffer-gib",
                                    help="NCCL/bucket buffers per GPU (default 0.5 GiB)."),
    "fragmentation": typer.Option(None, "--fragmentation",
                                  help="Allocator slack, fraction of tensor bytes (default 0.05)."),
}

#: options every command that has them spells alike
COMMON_OPTS = {
    "gpu_file": typer.Option(None, "--gpu-file", help="CSV of extra GPUs (catalog columns)."),
    "json": typer.Option(False, "--json", help="Print JSON for scripts."),
}
