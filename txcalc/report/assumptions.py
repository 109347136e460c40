"""What a report assumed: the request's settings, the planner's defaults (read from the
planner), the conventions (GiB, FLOPs) and the sources of the numbers."""

from __future__ import annotations

from .request import ReportRequest

CONVENTIONS = [
    "Memory is in GiB (2^30 bytes, as nvidia-smi and torch count it: an H100 has 80 GiB); "
    "GB (10^9 bytes) only where a figure was given in GB (--gpu-gb) or is a link's GB/s.",
    "A multiply-add is 2 FLOPs. FLOPs are matmul FLOPs (what tensor cores run and what "
    "torch's FlopCounterMode counts); elementwise work (norms, softmax, activations, loss) is "
    "not counted.",
    "Executed FLOPs run attention over the full S x S; model FLOPs skip causally masked pairs "
    "and respect sliding windows (the numerator of MFU). Backward is 2x forward per matmul; a "
    "fused attention kernel (flash) counts 2.5x for the attention core.",
    "Mixed precision keeps bf16/fp16 weights and gradients and fp32 master weights, reported "
    "with the optimizer (Adam: 2 + 2 + 12 bytes per parameter).",
]
SOURCES = [
    "Model shapes: the preset table (txcalc/model/presets.py, one cited config.json or paper per "
    "row) or the given config.json.",
    "Activation memory: the tensors PyTorch keeps for backward in the eager implementation, "
    "tested byte for byte against torch.autograd.graph.saved_tensors_hooks.",
    "Parameters and FLOPs: tested exactly against Hugging Face models on the meta device and "
    "torch.utils.flop_counter.FlopCounterMode.",
    "Recompute: selective as in Korthikanti et al. 2022 (arXiv:2205.05198); mixed-precision "
    "Adam states as in Rajbhandari et al. 2020 (ZeRO, arXiv:1910.02054).",
]


#: entries that concern training only (optimizer states, saved activations, recompute): a
#: serving report leaves them out
_TRAINING_ONLY = ("Mixed precision keeps", "Activation memory:", "Recompute:")


def conventions(inference: bool = False) -> list[str]:
    if not inference:
        return list(CONVENTIONS)
    return [c for c in CONVENTIONS if not c.startswith(_TRAINING_ONLY)] + [
        "Serving: weights stay in their stored dtype (no gradients, no optimizer states, no "
        "master weights); the KV cache holds keys and values of every cached token."]


def sources(inference: bool = False) -> list[str]:
    return [s for s in SOURCES if not (inference and s.startswith(_TRAINING_ONLY))]


def assumptions(req: ReportRequest, gpu: dict, plan: dict | None,
                data: dict | None = None) -> list[str]:
    """The report's assumptions in words; ``data`` (the report's) gives the training setting
    taken (``request``) and the defaults assumed (``assumed``: the answers' sentences)."""
    data = data or {}
    request = data.get("request") or {"recompute": req.recompute or "none",
                                      "optimizer": req.optimizer or "adamw"}
    out = [f"GPU: {gpu['name']}, {gpu['words']}"
           + ("." if gpu["source"] == "--gpu-gb" else f" ({gpu['source']})."),
           f"Precision {req.serve_precision if req.inference else req.precision}"
           + ("." if req.inference else f", optimizer {request['optimizer']}.")]
    out += [f"Assumed (not given): {s}." for s in data.get("assumed", [])]
    from ..engine.fp8 import FP8_RECIPE
    if req.precision in FP8_RECIPE and not req.inference:
        r = FP8_RECIPE[req.precision]
        out.append(f"fp8 training (TransformerEngine, DelayedScaling, txcalc/engine/memory.py "
                   f"Fp8Recipe): {r.weight_copies} bytes of fp8 weight copies per block-Linear "
                   f"weight, {r.amax_history}-entry amax histories, Linear inputs saved in fp8, "
                   "block Linears on the fp8 peak; embeddings, head, norms and router in bf16.")
    if req.inference:
        out.append(f"Serving: context {req.serve_context:,} tokens, {req.concurrency:,} "
                   f"concurrent sequences, KV cache in {req.kv_dtype}; weights "
                   + (f"stored as {req.weights_format} (txcalc/engine/formats.py: quantised tensors "
                      "and their scales)" if req.weights_format else
                      "in the precision's weight dtype")
                   + "; no activation memory beyond the KV cache.")
    elif req.model is not None:
        out.append(f"Single-GPU figures: micro-batch {req.batch} x {req.seq} tokens, attention "
                   f"kernel {req.attn}, recompute {request['recompute']}, dropout off (no masks "
                   "saved); memory is shown at the peak of the step, the largest of: the end of "
                   "forward (with the logits buffers), either end of backward, and the optimizer "
                   "step (with its temporaries); categories not alive there show 0.")
    else:
        out.append("Only the parameter count is known: model states (weights, gradients, "
                   "optimizer) only, no activations.")
    if plan is None:
        dev = next((m["device"] for m in data.get("single_gpu", []) if "device" in m), None)
        if dev is None:
            out.append("Not included (no plan): CUDA context, communication buffers, allocator "
                       "fragmentation.")
        else:
            from ..engine.device import TRAIN_CUBLAS_HANDLES
            out.append(f"One GPU's framework memory, as txcalc memory counts it "
                       f"(txcalc/engine/device.py): the caching allocator's reserved slack "
                       f"({req.setup['reserved_slack']:.0%} of the tensors, rounded to its "
                       f"2 MiB segments), {TRAIN_CUBLAS_HANDLES} cuBLAS workspaces "
                       f"({dev['cublas_workspace_bytes'] / 2**20:,.1f} MiB together) and the "
                       f"CUDA context ({dev['cuda_context_bytes'] // 2**20:,} MiB); the "
                       "answer compares the tensors plus these (reserved + context, what "
                       "nvidia-smi shows) with the GPU. Not included: communication buffers "
                       "(one GPU has none).")
        return out
    return out + plan["assumptions"]
