"""Fine-tuning configurations from a ``fit`` answer: TRL SFT script arguments (SFTConfig and
PEFT's LoraConfig through TRL's ModelConfig), an Axolotl YAML and a LLaMA-Factory YAML. A
fine-tuning plan models one recipe's code path (engine.recipes: its fp32 upcasts, optimizer,
loss), so each format takes the plan made with its own recipe:

    txcalc (fit)          | TRL (trl sft)              | Axolotl              | LLaMA-Factory
    ----------------------|----------------------------|----------------------|-----------------
    recipe                | trl-sft                    | axolotl              | llama-factory
    max_seq               | --max_length               | sequence_len         | cutoff_len
    max_batch             | --per_device_train_batch_  | micro_batch_size     | per_device_train_
                          |   size                     |                      |   batch_size
    gpus N > 1 (ZeRO-3)   | --fsdp "full_shard auto_w" | fsdp_config (FSDP2)  | deepspeed z3 json
    lora r/alpha/dropout  | --lora_r --lora_alpha ...  | lora_r, lora_alpha   | lora_rank, lora_alpha
    targets all-linear    | --lora_target_modules      | lora_target_linear   | lora_target all
                          |   all-linear               |                      |
    qlora nf4/fp4, int8   | --load_in_4bit / 8bit      | load_in_4bit / 8bit  | quantization_bit
    dora                  | --use_dora                 | peft_use_dora        | use_dora
    recompute full        | --gradient_checkpointing   | gradient_checkpoint. | (on by default)
    loss fused-linear     | --use_liger_kernel         | liger plugin         | enable_liger_kernel
    precision             | --bf16 / --fp16            | bf16 / fp16          | bf16 / fp16
"""

from __future__ import annotations

from .common import (
    Emitted,
    comment,
    gib,
    header,
    hf_optim,
    lora_targets,
    refuse,
    shell_line,
    yaml,
)

#: the recipe each format's plan must have modelled (engine.recipes)
RECIPE = {"trl": "trl-sft", "axolotl": "axolotl", "llama-factory": "llama-factory"}


def _whole(x: float):
    """LoRA alpha as the int the frameworks' options take when it is whole (16.0 -> 16)."""
    return int(x) if float(x).is_integer() else x


class FitFacts:
    """What the emitters read off a ``fit`` answer."""

    def __init__(self, fmt: str, ans, command: str, model: str):
        j = ans.json
        self.fmt, self.model, self.json = fmt, model, j
        if not j["fits"]:
            refuse(fmt, "the plan", "nothing fits; apply a suggested change and fit again")
        self.ft = ans.parts["finetune"]
        recipe = (j.get("recipe") or {}).get("name")
        if self.ft is not None and recipe != RECIPE[fmt]:
            refuse(fmt, f"recipe {recipe}", f"the plan modelled {recipe}'s code path; fit with "
                   f"--recipe {RECIPE[fmt]} to plan what {fmt} runs")
        self.recipe_optim = ((j.get("recipe") or {}).get("optimizer_name")
                             if self.ft is not None and j["optimizer"] ==
                             j["recipe"]["optimizer"] else None)
        self.kernel = ans.parts["optimizer_kernel"]
        self.precision, self.gpus = j["precision"], j["gpus"]
        self.seq, self.batch = j["max_seq"], j["max_batch"]
        if self.precision not in ("bf16-mixed", "fp16-mixed", "fp32"):
            refuse(fmt, f"precision {self.precision}", "the HF Trainer runs bf16-mixed, "
                   "fp16-mixed or fp32")
        if j["recompute"] not in ("none", "full"):
            refuse(fmt, f"recompute {j['recompute']}", "the HF Trainer's gradient "
                   "checkpointing recomputes every block")
        if j["offload"] != "none":
            refuse(fmt, f"offload {j['offload']}", "not among this format's options")
        if j.get("fused"):
            refuse(fmt, "--compile", "the plan modelled each block compiled on its own "
                   "(torchtune's per-layer compile); fit without --compile to plan what "
                   f"{fmt} runs")
        if j.get("optimizer_in_backward"):
            refuse(fmt, "--optimizer-in-backward", "the HF Trainer steps after backward; "
                   "fit with --no-optimizer-in-backward")
        if j["loss"] not in ("full", "fused-linear"):
            refuse(fmt, f"loss {j['loss']}", "the HF loss or Liger's fused linear "
                   "cross-entropy")
        if self.ft is not None and self.ft.mode == "freeze":
            refuse(fmt, "--finetune freeze", "give lora, qlora, dora or full")
        self.figures = [(f"{j['model']} on {j['gpus']} x {j['gpu']}: batch {self.batch} x seq "
                        f"{self.seq:,}"), (f"peak memory per GPU {gib(j['total_bytes'])} "
                        "(reserved + CUDA context)")]
        self.header = header(command, self.figures)

    @property
    def optim(self) -> str:
        return hf_optim(self.fmt, self.json["optimizer"], self.kernel, self.recipe_optim)

    def quant_bits(self) -> int | None:
        if self.ft is None or self.ft.mode != "qlora":
            return None
        return 8 if self.ft.base_format == "int8" else 4


def trl(ans, command: str, model: str) -> Emitted:
    """``trl sft`` arguments (SFTConfig, TRL's ModelConfig)."""
    f = FitFacts("trl", ans, command, model)
    j, ft = f.json, f.ft
    flags = [("--model_name_or_path", model), ("--max_length", f.seq),
             ("--per_device_train_batch_size", f.batch),
             ("--gradient_checkpointing", j["recompute"] == "full"),
             ("--bf16", f.precision == "bf16-mixed"), ("--fp16", f.precision == "fp16-mixed"),
             ("--optim", f.optim), ("--use_liger_kernel", j["loss"] == "fused-linear")]
    if f.gpus > 1:
        flags.append(("--fsdp", "full_shard auto_wrap"))
    if ft is not None:
        t = lora_targets(ft.targets)
        flags += [("--use_peft", True), ("--lora_r", ft.rank), ("--lora_alpha", _whole(ft.alpha)),
                  ("--lora_dropout", ft.lora_dropout),
                  ("--lora_target_modules", t if isinstance(t, str) else " ".join(t)),
                  ("--use_dora", ft.mode == "dora")]
        bits = f.quant_bits()
        if bits == 4:
            flags += [("--load_in_4bit", True), ("--bnb_4bit_quant_type", ft.base_format),
                      ("--use_bnb_nested_quant", ft.double_quant)]
        elif bits == 8:
            flags.append(("--load_in_8bit", True))
    launch = ["accelerate", "launch", f"--num_processes={f.gpus}", "-m", "trl", "sft"] \
        if f.gpus > 1 else ["trl", "sft"]
    text = "#!/bin/sh\n" + comment(f.header) + shell_line(launch, flags)
    return Emitted("trl_sft.sh", {"trl_sft.sh": text})


def axolotl(ans, command: str, model: str) -> Emitted:
    """An Axolotl YAML (its AxolotlInputConfig schema names every key)."""
    f = FitFacts("axolotl", ans, command, model)
    j, ft = f.json, f.ft
    doc: dict = {"base_model": model, "sequence_len": f.seq, "micro_batch_size": f.batch,
                 "gradient_accumulation_steps": 1, "num_epochs": 1,
                 "gradient_checkpointing": j["recompute"] == "full",
                 "bf16": f.precision == "bf16-mixed", "fp16": f.precision == "fp16-mixed",
                 "optimizer": f.optim, "learning_rate": 2e-4, "flash_attention": True,
                 "datasets": [{"path": "your/dataset", "type": "alpaca"}],
                 "output_dir": "./outputs"}
    if ft is not None:
        bits = f.quant_bits()
        doc |= {"adapter": "qlora" if bits == 4 else "lora", "lora_r": ft.rank,
                "lora_alpha": _whole(ft.alpha), "lora_dropout": ft.lora_dropout,
                "load_in_4bit": bits == 4, "load_in_8bit": bits == 8}
        t = lora_targets(ft.targets)
        doc |= {"lora_target_linear": True} if isinstance(t, str) else \
            {"lora_target_modules": t}
        if ft.mode == "dora":
            doc["peft_use_dora"] = True
        if bits == 4 and ft.base_format != "nf4":
            refuse("axolotl", f"qlora base {ft.base_format}", "Axolotl's QLoRA loads nf4")
    if j["loss"] == "fused-linear":
        doc |= {"plugins": ["axolotl.integrations.liger.LigerPlugin"],
                "liger_fused_linear_cross_entropy": True}
    if f.gpus > 1:
        doc |= {"fsdp_version": 2, "fsdp_config": {
            "reshard_after_forward": True, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "state_dict_type": "SHARDED_STATE_DICT"}}
    text = comment(f.header) + yaml(doc)
    return Emitted("axolotl.yaml", {"axolotl.yaml": text})


def llamafactory(ans, command: str, model: str) -> Emitted:
    """A LLaMA-Factory training YAML (``llamafactory-cli train``; its hparams dataclasses name
    every key)."""
    f = FitFacts("llama-factory", ans, command, model)
    j, ft = f.json, f.ft
    doc: dict = {"model_name_or_path": model, "stage": "sft", "do_train": True,
                 "finetuning_type": "full" if ft is None else "lora",
                 "cutoff_len": f.seq, "per_device_train_batch_size": f.batch,
                 "gradient_accumulation_steps": 1,
                 "bf16": f.precision == "bf16-mixed", "fp16": f.precision == "fp16-mixed",
                 "optim": f.optim, "disable_gradient_checkpointing": j["recompute"] == "none",
                 "enable_liger_kernel": j["loss"] == "fused-linear",
                 "flash_attn": "fa2", "dataset": "your_dataset", "template": "default",
                 "output_dir": "./outputs"}
    if ft is not None:
        t = lora_targets(ft.targets)
        doc |= {"lora_rank": ft.rank, "lora_alpha": _whole(ft.alpha), "lora_dropout": ft.lora_dropout,
                "lora_target": "all" if isinstance(t, str) else ",".join(t),
                "use_dora": ft.mode == "dora"}
        bits = f.quant_bits()
        if bits:
            doc |= {"quantization_bit": bits, "quantization_method": "bnb"}
            if bits == 4:
                doc |= {"quantization_type": ft.base_format,
                        "double_quantization": ft.double_quant}
    if f.gpus > 1:
        doc["deepspeed"] = "examples/deepspeed/ds_z3_config.json"
    text = comment(f.header) + yaml(doc)
    return Emitted("llamafactory.yaml", {"llamafactory.yaml": text})
