"""What fits on one GPU: the longest sequence at a micro-batch, or the largest micro-batch at a
sequence length, and when nothing fits, the cheapest changes that make it fit.

A setup fits on one GPU when what nvidia-smi would show for the process fits the GPU:
engine.device.device_memory(peak).need_bytes <= GPU memory, i.e. the allocator's
reserved bytes (the step's peak, TrainingMemory.total, + 5 % slack, rounded to 2 MiB segments,
+ the cuBLAS workspaces' segments) + the CUDA context (400 MiB) + of paged optimizer states
(paged-adam8bit's, in CUDA managed memory) the largest tensor's, prefetched for its update:
the others are paged to the host when the GPU is full (``DeviceMemory.need_bytes``;
nvidia-smi shows them all when they fit, ``device_bytes``). The peak grows with the
sequence and the batch, so both are found by bisection.

Over N > 1 GPUs (``Setup.gpus``: ZeRO-3, data parallel N, TP = PP = 1) the bytes are the
planner's own per-rank evaluation of that layout (``Setup.planner_bytes``: train.evaluate,
what ``plan train --gpus N --zero 3 --tp 1 --pp 1`` reports): rank 0's padded shards
(FSDP2's ceiling division of dim 0), the gathered root unit and prefetched blocks, the
communication buffers. Those per-rank bytes are checked against torch.distributed in
tests/conformance/test_distributed.py: FSDP2 over two gloo ranks, model states byte for byte
(test_rank_bytes_equal_prediction[fsdp]), and llama-3-8b over a fake process group of 8
(test_fsdp_fake_pg_llama3_8b_peak_within_3_percent: states exact, the peak within 3 %); fit
against the planner in tests/unit/test_fit_zero3.py. On one GPU fit keeps the engine's peak over
the phases, which is not the planner's sum of categories (the planner is not built there).

Suggestions, tried cumulatively in this order (each on top of the ones before it; one that
adds bytes is skipped), until one fits: fused attention, the fused linear cross-entropy
(Liger's: no T x V logits, the same FLOPs; for a bias-free causal LM head), selective then
full recompute, 8-bit Adam; for a full fine-tune on one GPU, torchtune's single-GPU full
settings (bf16 without an fp32 master, the optimizer step inside backward, paged 8-bit AdamW),
shown only when together they make it fit (they change the numerics; otherwise the adapters
are tried from the setup before them); LoRA, QLoRA, optimizer offload, checkpoint offload,
then more GPUs (ZeRO-3 over N GPUs: the planner's per-rank bytes, as above). Each comes with its peak bytes and its step-time factor:
(hardware FLOPs at the GPU's bf16 peak + PCIe traffic at ``PCIE_BYTES_PER_S``) over the same
for the setup asked, which states compute and transfer at their peaks (an estimate of the
slowdown, not a measured time).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..engine.accounting import count_flops
from ..model.config import ModelConfig
from ..errors import WorkloadError
from ..engine.finetune import Finetune
from ..engine.memory import TrainingMemory
from ..engine.workload import Workload
from ..units import largest_within

from ..parallel.comm import PCIE_BYTES_PER_S  # noqa: E402,F401  (the host link, one place)


#: the most activation bytes the planner's int64 tables hold with room for the other terms
PLANNER_MAX_BYTES = 2**62


@dataclass(frozen=True)
class Setup:
    """One training setup on one GPU, or on each of ``gpus`` under ZeRO-3 (everything but the
    lengths being searched)."""

    cfg: ModelConfig
    precision: str = "bf16-mixed"
    optimizer: str = "adamw"
    attn: str = "flash"
    recompute: str = "none"
    finetune: Finetune | None = None
    offload: str = "none"
    gpus: int = 1  #: > 1: ZeRO-3 over this many GPUs (model states split)
    loss: str = "full"  #: the LM loss (Workload.loss: full | chunked[:N] | fused-linear)
    #: the optimizer step's kernel (memory.OPTIMIZER_STEPS): its fp32 gradient copy and
    #: temporaries, in the engine and the planner alike
    optimizer_kernel: str = "foreach"
    #: the catalog GPU (its cuBLAS workspace: overheads.cublas_workspace_bytes); None: a
    #: GPU given by its memory only
    gpu_name: str | None = None
    #: the caching allocator's slack over the tensors' peak (engine.device.device_memory)
    fragmentation: float = 0.05
    #: fused / compiled kernels (Workload.fused: "loss" compiles the cross-entropy)
    fused: tuple[str, ...] = ()
    #: each parameter's optimizer step inside backward (TrainingMemory.optimizer_in_backward):
    #: modelled on one GPU (the planner has no such mode)
    optimizer_in_backward: bool = False

    def __post_init__(self) -> None:
        if self.optimizer_in_backward and self.gpus > 1:
            raise WorkloadError(f"--optimizer-in-backward is modelled on one GPU, not --gpus "
                                f"{self.gpus} (plan train's ZeRO-3 has no such mode)")

    def memory(self, batch: int, seq: int) -> TrainingMemory:
        work = Workload(batch=batch, seq=seq, attn_impl=self.attn, recompute=self.recompute,
                        loss=self.loss, fused=self.fused, text_only=True)  # fit takes no images
        return TrainingMemory(self.cfg, work, self.precision, self.optimizer, self.finetune,
                              self.offload, self.optimizer_kernel, self.optimizer_in_backward)

    def need(self, batch: int, seq: int) -> int:
        """GPU bytes with the framework's share: on one GPU what nvidia-smi shows (``device``:
        reserved + CUDA context), the planner's per-rank total under ZeRO-3 over ``gpus`` > 1
        (``planner_bytes``: its Overheads' context, buffers and slack)."""
        if self.gpus > 1:
            # the planner tabulates every recompute mode at micro-batches 1 and 2 in int64:
            # eager attention's S x S scores overflow them at tens of millions of tokens, so
            # past PLANNER_MAX_BYTES the engine's exact activations stand in (a lower bound on
            # the need, beyond any GPU)
            worst = dataclasses.replace(self, recompute="none").memory(max(batch, 2), seq)
            if worst.activations > PLANNER_MAX_BYTES:
                return worst.activations
            return int(self.planner_bytes(batch, seq)["total_bytes"][0])
        return self.device(batch, seq).need_bytes

    def device(self, batch: int, seq: int):
        """One GPU: allocated, reserved and device bytes of the step
        (engine.device.device_memory, with the paged optimizer states)."""
        return self.memory(batch, seq).device(self.gpu_name, self.fragmentation)

    def planner_bytes(self, batch: int, seq: int) -> dict:
        """The planner's evaluation (``train.evaluate.evaluate_layouts``, every category,
        numpy arrays of one layout) of this setup as ZeRO-3 over ``gpus`` data-parallel ranks,
        micro-batch ``batch`` (one micro-batch a step), TP = PP = 1. Offload: optimizer (all)
        is ``TrainSetting.offload_optimizer``; activations (all) the planner's checkpoints in
        host memory, which it has under full recompute only (the engine's offload of other
        modes' checkpoints, T5's position bias, stays on the GPU here)."""
        from .setting import TrainSetting
        from .evaluate import evaluate_layouts
        from ..parallel.layout import Layout
        s = TrainSetting(self.cfg, _planner_gpu(), seq, batch * self.gpus, self.precision,
                         self.optimizer, self.attn, finetune=self.finetune, loss=self.loss,
                         offload_optimizer=self.offload in ("optimizer", "all"),
                         optimizer_kernel=self.optimizer_kernel, fused=self.fused)
        lay = Layout(dp=self.gpus, zero=3, micro_batch=batch, recompute=self.recompute,
                     offload_checkpoints=self.recompute == "full"
                     and self.offload in ("activations", "all"))
        return evaluate_layouts(s, [lay])

    def step_s(self, batch: int, seq: int, peak_flops: float) -> float:
        m = self.memory(batch, seq)
        f = count_flops(self.cfg, m.work, self.finetune)
        return f.hardware / peak_flops / self.gpus + m.pcie_bytes / PCIE_BYTES_PER_S


def _planner_gpu():
    """The GPU the planner's setting names: its step times need one, fit reads none of them,
    and no per-rank byte depends on a GPU's figures (hybrid sharding aside, not used here)."""
    from ..engine.hardware import get_gpu
    return get_gpu("h100")


@dataclass
class FitResult:
    fits: bool
    max_seq: int | None
    max_batch: int | None
    total_bytes: int  #: GPU bytes at the answer (or at the smallest try when nothing fits)
    gpu_bytes: int
    setup: Setup
    suggestions: list[dict] = field(default_factory=list)
    #: one GPU: overheads.DeviceMemory.to_json() at the answer (allocated, reserved, context)
    device: dict = field(default_factory=dict)
    #: the margin kept free (fit's --safety): the compared figure must stay within
    #: gpu_bytes - safety_bytes
    safety_bytes: int = 0

    @property
    def compared_as(self) -> str:
        """What ``total_bytes`` (the figure compared against the GPU) is, in words."""
        if self.setup.gpus > 1:
            return ("plan train's per-GPU total under ZeRO-3 (tensors, CUDA context, "
                    "communication buffers, allocator slack: parallel.overheads.Overheads)")
        if self.device.get("paged_optimizer_bytes"):
            return ("reserved + CUDA context + the largest tensor's paged optimizer states "
                    "(the other paged states wait on the host when the GPU is full; "
                    "engine.device.device_memory need_bytes)")
        return "reserved + CUDA context: what nvidia-smi shows (engine.device.device_memory)"

    def to_json(self) -> dict:
        s = self.setup
        return {"model": s.cfg.name, "fits": self.fits, "max_seq": self.max_seq,
                "max_batch": self.max_batch, "total_bytes": self.total_bytes,
                "gpu_bytes": self.gpu_bytes, **self.device,
                "compared_bytes": self.total_bytes, "compared_as": self.compared_as,
                "safety_bytes": self.safety_bytes,
                "limit_bytes": self.gpu_bytes - self.safety_bytes,
                "headroom_bytes": self.gpu_bytes - self.safety_bytes - self.total_bytes,
                "precision": s.precision,
                "optimizer": s.optimizer, "optimizer_in_backward": s.optimizer_in_backward,
                "attn_impl": s.attn, "recompute": s.recompute,
                "finetune": s.finetune.describe() if s.finetune else "full fine-tuning",
                "offload": s.offload, "loss": s.loss, "gpus": s.gpus,
                "fused": list(s.fused), "suggestions": self.suggestions}


def _seq_limit(cfg: ModelConfig) -> int:
    from ..inputs import MAX_SEQ
    return min(MAX_SEQ, cfg.max_position) if cfg.pos_type == "learned" else MAX_SEQ


def fit(setup: Setup, gpu_bytes: int, batch: int | None = None, seq: int | None = None,
        peak_flops: float = 1e15, safety_bytes: int = 0) -> FitResult:
    """Largest seq at ``batch`` (default 1), or largest batch at ``seq`` when it is given,
    whose bytes (``Setup.need``) stay within ``gpu_bytes`` less the margin ``safety_bytes``."""
    from ..inputs import MAX_BATCH
    if safety_bytes >= gpu_bytes:
        raise WorkloadError(f"--safety ({safety_bytes / 1e9:g} GB) leaves nothing of the GPU's "
                            f"{gpu_bytes / 1e9:,.2f} GB")
    full, gpu_bytes = gpu_bytes, gpu_bytes - safety_bytes
    if batch is not None and seq is not None:
        raise WorkloadError(f"give --batch ({batch}) or --seq ({seq}), not both: fit finds "
                            "the other")
    if seq is None:
        b = batch or 1
        best = largest_within(lambda s: setup.need(b, s), gpu_bytes, 1, _seq_limit(setup.cfg))
        fits, at = best >= 1, (b, max(best, 1))
        res = FitResult(fits, best if fits else None, b if fits else None,
                        setup.need(*at), full, setup, safety_bytes=safety_bytes)
    else:
        if seq > _seq_limit(setup.cfg):
            raise WorkloadError(f"--seq ({seq}) exceeds {setup.cfg.name}'s learned position "
                                f"table (max_position {setup.cfg.max_position})")
        best = largest_within(lambda b: setup.need(b, seq), gpu_bytes, 1, MAX_BATCH)
        fits, at = best >= 1, (max(best, 1), seq)
        res = FitResult(fits, seq if fits else None, best if fits else None,
                        setup.need(*at), full, setup, safety_bytes=safety_bytes)
    if setup.gpus == 1:
        d = setup.device(*at).to_json()
        res.device = {k: d[k] for k in ("allocated_bytes", "reserved_bytes",
                                        "cuda_context_bytes", "paged_optimizer_bytes",
                                        "paged_working_bytes")}
    if not fits:
        res.suggestions = suggestions(setup, gpu_bytes, *at, peak_flops)
    return res


def suggestions(setup: Setup, gpu_bytes: int, batch: int, seq: int,
                peak_flops: float) -> list[dict]:
    """Changes tried cumulatively (module docstring) until one fits, each with its bytes and
    step-time factor against the setup asked."""
    base_s = setup.step_s(batch, seq, peak_flops)
    steps: list[tuple[str, dict]] = []
    ft = setup.finetune
    if setup.attn != "flash":
        steps.append(("fused attention (--attn flash)", {"attn": "flash"}))
    if setup.loss != "fused-linear" and setup.cfg.head == "lm" and not setup.cfg.lm_head_bias:
        # no T x V logits kept, at no FLOPs: the head's backward moves into the forward
        steps.append(("fused linear cross-entropy (--loss fused-linear)",
                      {"loss": "fused-linear"}))
    if setup.recompute == "none":
        steps.append(("selective recompute", {"recompute": "selective"}))
    if setup.recompute != "full":
        steps.append(("full recompute", {"recompute": "full"}))
    if setup.optimizer in ("adamw", "adam"):
        steps.append(("8-bit Adam (--optimizer adam8bit)", {"optimizer": "adam8bit"}))
    # full fine-tuning kept, as torchtune's single-GPU full recipes run it (an 8B model on a
    # 24 GB card: engine.recipes' torchtune full config): bf16 weights and states with no
    # fp32 master, each parameter stepped inside backward (one gradient alive), bitsandbytes'
    # paged 8-bit AdamW (its states in CUDA managed memory). They change the training's
    # numerics, so they are shown only when together they make it fit; else the adapters
    # below are tried from the setup before them
    keep_full: list[tuple[str, dict]] = []
    if (ft is None or ft.mode == "full") and setup.gpus == 1:
        if setup.precision == "bf16-mixed":
            keep_full.append(("bf16 weights and states, no fp32 master (--precision bf16)",
                              {"precision": "bf16"}))
        if not setup.optimizer_in_backward:
            keep_full.append(("optimizer step inside backward (--optimizer-in-backward)",
                              {"optimizer_in_backward": True}))
        if setup.optimizer in ("adamw", "adam", "adam8bit"):
            keep_full.append(("paged 8-bit Adam (--optimizer paged-adam8bit)",
                              {"optimizer": "paged-adam8bit"}))
    adapters: list[tuple[str, dict]] = []
    # the recipe's in-place MLP kernel goes with the adapters it patches
    inplace = bool(ft and ft.mlp_inplace)
    if ft is None or ft.mode in ("full", "freeze"):
        adapters.append(("LoRA r=16 on all linear layers",
                         {"finetune": Finetune("lora", mlp_inplace=inplace)}))
    if ft is None or ft.mode != "qlora":
        adapters.append(("QLoRA (NF4 base, double quant)",
                         {"finetune": dataclasses.replace(ft, mode="qlora") if ft and ft.adapters
                          else Finetune("qlora", upcast=_default_upcast(), mlp_inplace=inplace),
                          "precision": "bf16-mixed"
                          if setup.precision == "fp32" else setup.precision}))
    if setup.offload in ("none", "activations"):
        adapters.append(("offload optimizer states and master weights to CPU",
                         {"offload": "optimizer" if setup.offload == "none" else "all"}))
    adapters.append(("offload recompute checkpoints to CPU", {"offload": "all"}))

    def walk(changes, cur, last, out):
        """Apply ``changes`` cumulatively from ``cur`` (bytes ``last``), each one kept only
        when it does not cost bytes here (QLoRA's fp32 upcasts can outweigh its 4-bit base at
        long sequences), its row added to ``out``, until one fits; returns (setup, bytes,
        fits)."""
        for label, change in changes:
            trial = dataclasses.replace(cur, **change)
            need = trial.need(batch, seq)
            if need > last:
                continue
            cur, last = trial, need
            out.append(_row(label, cur, need, gpu_bytes, batch, seq, peak_flops, base_s))
            if need <= gpu_bytes:
                return cur, last, True
        return cur, last, False

    out: list[dict] = []
    cur, last, done = walk(steps, setup, setup.need(batch, seq), out)
    if done:
        return out
    if keep_full:
        kept = list(out)
        _, _, done = walk(keep_full, cur, last, kept)
        if done:
            return kept
    cur, last, done = walk(adapters, cur, last, out)
    if done:
        return out
    need = last
    # more GPUs: ZeRO-3 splits the model states
    for n in (n for n in (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if n > setup.gpus):
        # the planner has no optimizer in backward: ZeRO-3 steps after backward
        more = dataclasses.replace(cur, gpus=n, optimizer_in_backward=False)
        need = more.need(batch, seq)
        if need <= gpu_bytes:
            after = ", the optimizer after backward" if cur.optimizer_in_backward else ""
            out.append(_row(f"{n} GPUs (ZeRO-3{after})", more, need, gpu_bytes, batch, seq,
                            peak_flops, base_s))
            return out
    out.append({"change": f"more than {max(1024, setup.gpus)} GPUs, or a shorter sequence",
                "fits": False, "total_bytes": need, "step_time_factor": None})
    return out


def _default_upcast() -> bool:
    """Whether the default fine-tuning recipe keeps QLoRA's unquantised parameters in fp32
    (engine.recipes): a suggested QLoRA is costed as fit's own QLoRA answers are."""
    from ..engine.recipes import DEFAULT_RECIPE, get_recipe
    return get_recipe(DEFAULT_RECIPE).upcast


def _row(label, setup, need, gpu_bytes, batch, seq, peak_flops, base_s) -> dict:
    return {"change": label, "fits": need <= gpu_bytes, "total_bytes": need,
            "step_time_factor": round(
                setup.step_s(batch, seq, peak_flops) / base_s, 4)}


def ways_to_fit(setting, gpus: int) -> list[str]:
    """What would fit a training run that fits no layout on ``gpus`` GPUs (``plan_train``'s
    refusal), by fit's reckoning of ZeRO-3 over them (``Setup.need``: the planner's per-rank
    bytes at micro-batch 1, TP = PP = 1, full recompute): 8-bit Adam, the optimizer offloaded
    to the CPU, both, or the fewest doublings of the GPUs; each "--option (GiB)" that fits
    the GPU's usable memory, the changes of one option before more GPUs."""
    base = Setup(setting.cfg, setting.precision, setting.optimizer, setting.attn_impl, "full",
                 setting.finetune, "optimizer" if setting.offload_optimizer else "none",
                 gpus, setting.loss, setting.optimizer_kernel, setting.gpu.name)
    room, seq = setting.gpu.usable_bytes, setting.seq
    tries = []
    if setting.optimizer in ("adamw", "adam"):
        tries.append(("--optimizer adam8bit", {"optimizer": "adam8bit"}))
    if base.offload == "none" and setting.optimizer != "none":
        tries.append(("--offload optimizer", {"offload": "optimizer"}))
    if len(tries) == 2:
        tries.append(("--optimizer adam8bit --offload optimizer",
                      {"optimizer": "adam8bit", "offload": "optimizer"}))
    out = []
    for words, change in tries:
        need = dataclasses.replace(base, **change).need(1, seq)
        if need <= room and not (out and len(change) > 1):  # both: only when neither alone
            out.append(f"{words} ({need / 2**30:,.1f} GiB)")
    for n in (gpus * 2**k for k in range(1, 11)):
        need = dataclasses.replace(base, gpus=n).need(1, seq)
        if need <= room:
            out.append(f"--gpus {n} ({need / 2**30:,.1f} GiB)")
            break
    return out
