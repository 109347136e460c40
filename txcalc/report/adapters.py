"""The report's fine-tuning section: what trains, the adapters, the frozen base and what that
changes (memory --json's finetune figures, TrainingMemory.finetune_json; nothing re-derived)."""

from __future__ import annotations

from ..units import gib
from .sections import section, table


def adapters_section(data: dict) -> dict:
    """Trainable and frozen parameters, adapter bytes, the frozen base's format, host memory
    and PCIe traffic of offload, QLoRA's dequantisation traffic."""
    f = data["finetune"]
    total = f["trainable_params"] + f["frozen_params"]
    rows = [["setup", f["finetune_setup"]],
            ["trainable parameters", f"{f['trainable_params']:,} "
                                     f"({f['trainable_params'] / total:.3%} of {total:,})"],
            ["adapter parameters", f"{f['adapter_params']:,}"],
            ["adapter weights", gib(f["adapter_bytes"])],
            ["frozen parameters", f"{f['frozen_params']:,}"],
            ["weights (frozen base in its format + trainable)", gib(f["weights_bytes"])],
            ["gradients (trainable only)", gib(f["gradients_bytes"])],
            ["optimizer states and master weights (trainable only)",
             gib(f["optimizer_bytes"])]]
    if f["dequant_bytes"]:
        rows.append(["dequantisation buffers (QLoRA)", gib(f["dequant_bytes"])])
    if f["host_bytes"]:
        rows.append(["host memory (offload)", gib(f["host_bytes"])])
        rows.append(["PCIe traffic per step", gib(f["pcie_bytes_per_step"])])
    text = ["Frozen parameters keep no gradient, fp32 master copy or optimizer state, and "
            "their Linears skip the weight gradient in backward (the input gradient still "
            "flows through them); the plan's ZeRO stages shard only what trains, except "
            "ZeRO-3, which shards the frozen base too."]
    return section("finetune", "Fine-tuning: adapters and the frozen base", text,
                   [table("Fine-tuning figures (single GPU, the asked recompute; GiB = 2^30 bytes)",
                          ["quantity", "value"], rows)])
