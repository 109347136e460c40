"""Fine-tuning recipes: what the common LoRA / QLoRA training scripts run, declared once (as
``stacks`` declares the pre-training stacks), each item with the code it comes from.

    >>> from txcalc.engine.recipes import get_recipe
    >>> r = get_recipe("hf-peft"); r.upcast, r.optimizer, r.loss
    (True, 'adamw', 'full')

The one table (``RECIPES``), one row a recipe; ``DEFAULT_RECIPE`` is the most common (HF
Trainer + PEFT, QLoRA prepared by ``prepare_model_for_kbit_training``: the QLoRA repository,
PEFT's and most trainers' QLoRA examples). What each row changes in the accounting:

    item         | effect on memory (engine)                    | where
    -------------|----------------------------------------------|-----------------------------
    upcast       | QLoRA: every frozen parameter that is not    | Op.upcast, finetune.
                 |  quantised (embeddings, norms, lm_head, the  |  op_weight_bytes; the
                 |  quantised linears' biases) held in fp32;    |  checkpoint.input row's
                 |  the embedding output, hence the residual    |  "f32" tag (finetune.
                 |  stream and every block input a checkpoint   |  apply_finetune)
                 |  keeps, in fp32 (x + bf16 -> fp32)           |
    loss         | Workload.loss: full (HF's ForCausalLMLoss:   | lm_loss
                 |  T x V logits, cast to fp32), chunked:N,     |
                 |  fused-linear (no T x V logits kept)         |
    checkpointing| every recipe recomputes each block from its  | recompute "full"; offload
                 |  input (txcalc's "full"); unsloth keeps the  |  "activations" (unsloth)
                 |  inputs in host memory                       |
    slack        | the allocator's reserved-over-allocated     | engine.device; FITTED_SLACK
                 |  slack (5 % unless fitted on the fit rows)   |
    optimizer    | memory.OPTIMIZERS and OPTIMIZER_STEPS kernel | memory
                 |  (bitsandbytes' paged 32-bit AdamW: fp32     |
                 |  states, one fused kernel; paging to host    |
                 |  under pressure is not modelled)             |
    MLP kernel   | unsloth: its LoRA MLP kernel writes the     | Finetune.mlp_inplace
                 |  activation's gradients into the buffers it  |  (saved.mlp_backward_
                 |  saved: nothing above them in backward, where|  transient: 0 where it
                 |  it patches the MLP (LoRA on gate, up, down; |  patches)
                 |  no bias, LoRA dropout or DoRA)              |
    compiled     | what --compile fuses under the recipe: each  | Workload.fused "layers"
                 |  block compiled whole (norms, gated          |  (+ "loss": torchtune's
                 |  activations); torchtune compiles its loss   |  compile_loss)
                 |  too                                         |
    full         | a recipe's full fine-tune config, where it   | full_optimizer,
                 |  declares one: its optimizer (torchtune:     |  full_in_backward;
                 |  bitsandbytes' PagedAdamW8bit, paged states  |  engine.optimizers
                 |  outside the allocator) and whether it steps |
                 |  each parameter inside backward (torchtune's |
                 |  optimizer_in_bwd: one gradient alive)       |

Under autocast (the HF Trainer's bf16=True) the upcast lm_head still computes bf16 logits
(F.linear autocasts to bf16), which HF's loss then casts to fp32: the same bytes as without
the upcast, so the loss needs nothing more. Only the block inputs (the checkpoints of full
recompute) are modelled in fp32; under recompute none or selective the other saved tensors
of the fp32 residual stream stay at the policy's dtype (not modelled). PEFT also casts the
adapters to fp32 (get_peft_model's autocast_adapter_dtype=True): fp32 weights and gradients
where txcalc books 16-bit ones and an fp32 master, the same sum (4 + 4 = 2 + 2 + 4 per
parameter), left as it is.

Checked against HF + PEFT + bitsandbytes on the CPU (tests/conformance/test_recipes.py): the
parameter bytes prepare_model_for_kbit_training adds and the block inputs that gradient
checkpointing keeps, byte for byte.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import WorkloadError

#: the sources, each a file at a commit (or an installed release)
PEFT = "huggingface/peft 0.21.2 src/peft/utils/other.py prepare_model_for_kbit_training"
TRANSFORMERS = "huggingface/transformers 5.24.0 src/transformers/training_args.py"


class Recipe(NamedTuple):
    """One fine-tuning recipe (the table above)."""
    name: str
    #: QLoRA: frozen parameters that are not quantised held in fp32 (PEFT's
    #: prepare_model_for_kbit_training casts every float16/bfloat16 parameter but Params4bit)
    upcast: bool
    loss: str  #: Workload.loss
    checkpointing: str  #: the recipe's gradient-checkpointing mode, in words
    offload: str  #: memory.OFFLOADS: "activations" where the checkpoints live on the host
    optimizer: str  #: memory.OPTIMIZERS
    optimizer_kernel: str  #: memory.OPTIMIZER_STEPS
    optimizer_name: str  #: the recipe's own name for it
    sources: tuple[tuple[str, str], ...]  #: (item, code at a commit)
    #: the caching allocator's reserved-over-allocated slack, a fraction of the tensors' peak
    #: (engine.device.device_memory): ``FITTED_SLACK`` where fitted, else device.FRAGMENTATION
    reserved_slack: float = 0.05
    #: the recipe's full fine-tune config (None: it declares none, and full training takes no
    #: recipe): its optimizer (memory.OPTIMIZERS), that optimizer's own name, and whether it
    #: steps each parameter inside backward (TrainingMemory.optimizer_in_backward)
    full_optimizer: str | None = None
    full_optimizer_name: str = ""
    full_in_backward: bool = False
    #: the full config's precision where the options give none (memory.PRECISIONS)
    full_precision: str | None = None
    #: what the recipe's torch.compile switch (txcalc's --compile) runs fused
    #: (Workload.fused): the blocks compiled whole ("layers": their norms and gated
    #: activations), and the loss where the recipe compiles it too
    compiled: tuple[str, ...] = ("layers",)
    #: the recipe's MLP kernel writes the activation's input gradients into the buffers it
    #: saved (Finetune.mlp_inplace: no MLP backward transient, saved.mlp_backward_transient)
    mlp_inplace: bool = False

    def describe_full(self) -> str:
        """The full fine-tune config in words (``full_optimizer`` set)."""
        bwd = ", stepped inside backward (one gradient at a time)" if self.full_in_backward \
            else ""
        return (f"recipe {self.name} (full fine-tune): precision {self.full_precision}, "
                f"loss {self.loss}, {self.checkpointing} "
                f"gradient checkpointing, {self.full_optimizer_name}{bwd}, allocator slack "
                f"{100 * self.reserved_slack:g} %")

    def describe(self) -> str:
        up = ("QLoRA's unquantised parameters upcast to fp32" if self.upcast else
              "no fp32 upcast")
        return (f"recipe {self.name}: {up}, loss {self.loss}, {self.checkpointing} gradient "
                f"checkpointing, {self.optimizer_name}, allocator slack "
                f"{100 * self.reserved_slack:g} %")

    def to_json(self) -> dict:
        return {"name": self.name, "upcast_fp32": self.upcast, "loss": self.loss,
                "reserved_slack": self.reserved_slack,
                "checkpointing": self.checkpointing, "offload": self.offload,
                "optimizer": self.optimizer, "optimizer_kernel": self.optimizer_kernel,
                "optimizer_name": self.optimizer_name, "full_optimizer": self.full_optimizer,
                "full_optimizer_in_backward": self.full_in_backward,
                "full_precision": self.full_precision, "compiled": list(self.compiled),
                "mlp_inplace": self.mlp_inplace,
                "sources": dict(self.sources)}


#: reserved-over-allocated slack fitted on the fit rows of reports/finetune-validation.md
#: (``train.finetune_runs.fit_reserved_slack``: least squares over the recipe's fit rows whose
#: figure is a reserved, nvidia-smi or longest-length one; test rows never enter it;
#: tests/published/test_finetune_validation.py checks it is the fit's answer). hf-peft: the
#: two Unsloth "Hugging Face + FA2" longest lengths (16 and 48 GB cards). What it stands for:
#: the caching allocator's cached, split and rounded blocks under gradient checkpointing with
#: T x V loss buffers of alternating sizes (2 and 4 bytes a logit), not traced block by block.
#: torchtune's one fit row, a full fine-tune run with optimizer_in_bwd and paged 8-bit Adam, is
#: stated since those two are modelled (engine.optimizers; the recipe's full config); no slack
#: is fitted on it yet (one row, and the fit would move its LoRA and QLoRA test rows too)
FITTED_SLACK = {"hf-peft": 0.13}

#: the one table of fine-tuning recipes
RECIPES = {r.name: r for r in (
    Recipe("hf-peft", True, "full", "reentrant", "none", "adamw", "fused", "paged_adamw_32bit",
           (("upcast", PEFT + " (lines 204-209: every float16/bfloat16 parameter whose class is "
                              "not Params4bit to float32)"),
            ("checkpointing", PEFT + " (use_reentrant unless told otherwise: "
                                     "enable_input_require_grads); artidoro/qlora@7f4e95a "
                                     "qlora.py gradient_checkpointing=True"),
            ("loss", "transformers 5.24.0 loss/loss_utils.py ForCausalLMLoss (logits.float())"),
            ("optimizer", "artidoro/qlora@7f4e95a qlora.py optim='paged_adamw_32bit'"))),
    Recipe("trl-sft", False, "fused-linear", "non-reentrant", "none", "adamw", "fused",
           "adamw_torch_fused",
           (("upcast", "huggingface/trl@f2cd577 trl/trainer/sft_trainer.py: get_peft_model "
                       "without prepare_model_for_kbit_training (no fp32 cast of the base)"),
            ("checkpointing", "huggingface/trl@f2cd577 trl/trainer/base_config.py "
                              "gradient_checkpointing=True; transformers 5.24.0 "
                              "modeling_utils.py use_reentrant False by default"),
            ("loss", "huggingface/trl@f2cd577 trl/trainer/sft_config.py loss_type "
                     "'chunked_nll': lm_head over token chunks under checkpoint, no T x V "
                     "logits kept (txcalc's nearest: fused-linear)"),
            ("optimizer", TRANSFORMERS + " default optim adamw_torch_fused (torch >= 2.8)"))),
    Recipe("unsloth", False, "fused-linear", "offloaded (unsloth)", "activations", "adam8bit",
           "fused", "adamw_8bit",
           (("upcast", "unslothai/unsloth@015bdef unsloth/models/_utils.py "
                       "prepare_model_for_kbit_training: train_embedding, train_lm_head, "
                       "train_layernorms False (left in 16 bits; LoRA weights fp32)"),
            ("checkpointing", "unslothai/unsloth@015bdef unsloth/models/llama.py "
                              "use_gradient_checkpointing='unsloth': "
                              "Unsloth_Offloaded_Gradient_Checkpointer keeps block inputs on "
                              "the host"),
            ("loss", "unslothai/unsloth@015bdef unsloth/models/llama.py unsloth_fused_ce_loss "
                     "(lm_head and cross-entropy in chunks, no T x V logits kept)"),
            ("optimizer", "unslothai/unsloth@015bdef notebooks and tests optim='adamw_8bit'"),
            ("mlp", "unslothai/unsloth@0050c73e unsloth/kernels/swiglu.py _DWf_DW_dfg_kernel "
                    "('Reuse input buffers to store outputs h, df, de'), called by "
                    "fast_lora.py LoRA_MLP.backward")),
           mlp_inplace=True),
    Recipe("llama-factory", False, "full", "reentrant", "none", "adamw", "fused",
           "adamw_torch_fused",
           (("upcast", "hiyouga/LlamaFactory@ff6d4d1 src/llamafactory/hparams/model_args.py "
                       "upcast_layernorm=False, upcast_lmhead_output=False"),
            ("checkpointing", "hiyouga/LlamaFactory@ff6d4d1 model_args.py use_reentrant_gc=True;"
                              " model/model_utils/checkpointing.py"),
            ("loss", "HF's loss through the Trainer (transformers ForCausalLMLoss)"),
            ("optimizer", TRANSFORMERS + " default optim adamw_torch_fused (torch >= 2.8)"))),
    Recipe("axolotl", True, "full", "non-reentrant", "none", "adamw", "fused",
           "paged_adamw_32bit",
           (("upcast", "axolotl-ai-cloud/axolotl@067b021 src/axolotl/loaders/model.py "
                       "_prepare_model_for_quantization: prepare_model_for_kbit_training for "
                       "qlora; _convert_embedding_modules_dtype: norms and embeddings fp32"),
            ("checkpointing", "axolotl-ai-cloud/axolotl@067b021 src/axolotl/utils/schemas/"
                              "validation.py use_reentrant setdefault False"),
            ("loss", "HF's loss through the Trainer (transformers ForCausalLMLoss)"),
            ("optimizer", "axolotl-ai-cloud/axolotl@ba1be71 examples/llama-3/qlora.yml "
                          "optimizer: paged_adamw_32bit"))),
    Recipe("torchtune", False, "chunked:8", "non-reentrant", "none", "adamw", "fused",
           "torch.optim.AdamW(fused=True)",
           (("upcast", "pytorch/torchtune@0b3e04a recipes/configs/llama3_1/"
                       "8B_qlora_single_device.yaml dtype: bf16 (NF4Tensor base, no fp32 cast)"),
            ("checkpointing", "same file: enable_activation_checkpointing: True (torch "
                              "distributed checkpoint_wrapper, non-reentrant)"),
            ("loss", "same file: CEWithChunkedOutputLoss (8 chunks)"),
            ("optimizer", "same file: torch.optim.AdamW fused: True"),
            ("full", "pytorch/torchtune@30b8519e recipes/configs/llama3_1/"
                     "8B_full_single_device.yaml optimizer bitsandbytes.optim.PagedAdamW8bit, "
                     "optimizer_in_bwd: True, enable_activation_checkpointing: True, dtype: "
                     "bf16 (weights, gradients and states in bf16, no fp32 master); "
                     "recipes/full_finetune_single_device.py _setup_optimizer (one optimizer "
                     "per parameter) and torchtune/training/memory.py "
                     "register_optim_in_bwd_hooks (step, then zero_grad, in each parameter's "
                     "post-accumulate-grad hook)"),
            ("compile", "pytorch/torchtune@30b8519e torchtune/training/_compile.py "
                        "compile_model (each TransformerSelfAttentionLayer compiled, the "
                        "whole model before PyTorch 2.5) and compile_loss "
                        "(CEWithChunkedOutputLoss.compute_cross_entropy compiled), both "
                        "called by the recipes when compile: True")),
           full_optimizer="paged-adam8bit",
           full_optimizer_name="bitsandbytes.optim.PagedAdamW8bit", full_in_backward=True,
           full_precision="bf16", compiled=("layers", "loss")),
)}
RECIPES = {k: r._replace(reserved_slack=FITTED_SLACK.get(k, r.reserved_slack))
           for k, r in RECIPES.items()}
RECIPE_NAMES = tuple(RECIPES)
DEFAULT_RECIPE = "hf-peft"


def get_recipe(name: str) -> Recipe:
    """The recipe called ``name`` (RECIPES)."""
    if not isinstance(name, str) or name not in RECIPES:
        from ..inputs import show
        raise WorkloadError(f"--recipe {show(name)} is not a recipe; choose one of "
                            f"{', '.join(RECIPES)}")
    return RECIPES[name]
