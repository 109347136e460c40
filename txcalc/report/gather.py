"""Gathering the engine's numbers for a report: the GPU, parameters and FLOPs by component,
single-GPU memory by recompute mode, activation and KV-cache sweeps (serving: prefill and
decode FLOPs, weights). Plain data only; the text is written by ``answer.py``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..errors import WorkloadError
from ..units import GB, cdiv
from ..engine.workload import RECOMPUTE as RECOMPUTE_MODES
from .request import ReportRequest

#: sequence lengths of the activation plot, and contexts of the KV plot (powers of two)
SEQ_SWEEP = tuple(2**i for i in range(9, 18))  # 512 .. 131072
CONTEXT_SWEEP = tuple(2**i for i in range(7, 18))  # 128 .. 131072
CONCURRENCY_SWEEP = (1, 8, 32, 128)
DEFAULT_GPU_GB = 80  #: kept for scripts that import it; the default GPU is DEFAULT_GPU
DEFAULT_GPU = "h100-sxm"

Progress = Callable[[str], None]


def ceil_div(a: int, b: int) -> int:
    return cdiv(a, b)


# --- the GPU ----------------------------------------------------------------------------------
def resolve_gpu(req: ReportRequest):
    """(name, usable memory and source as data; the catalog's Gpu or None). ``--gpu`` picks a
    catalog row (its usable memory: CUDA's total, hardware.gpu_memory's rule) and ``--gpu-gb``
    overrides that; ``--gpu-gb`` alone is a GPU known only by its memory (no plan); neither
    is DEFAULT_GPU's memory (no plan)."""
    from ..engine.hardware import memory_words, with_usable_gb
    if req.gpu is not None:
        try:
            from ..engine.hardware import get_gpu
        except ImportError:  # pragma: no cover - a build without the GPU catalog
            get_gpu = None
        if get_gpu is not None:
            g = get_gpu(req.gpu, req.gpu_file)
            source = g.source or "GPU catalog"
            if req.gpu_gb is not None:
                g = with_usable_gb(g, req.gpu_gb)
                source = "--gpu-gb"
            return {"name": g.name, "usable_bytes": g.usable_bytes, "words": memory_words(g, "GiB"),
                    "source": source}, g
        if req.gpu_gb is None:
            raise WorkloadError(f"GPU {req.gpu!r}: no GPU catalog in this build; give its "
                                "memory with --gpu-gb")
    if req.gpu_gb is not None:
        usable = int(req.gpu_gb * GB)
        return {"name": req.gpu or f"{req.gpu_gb:g} GB GPU", "usable_bytes": usable,
                "words": memory_words(usable), "source": "--gpu-gb"}, None
    from ..engine.hardware import get_gpu  # the rule of every command: plan's default GPU
    g = get_gpu(DEFAULT_GPU)
    return {"name": g.name, "usable_bytes": g.usable_bytes, "words": memory_words(g, "GiB"),
            "source": f"default (no --gpu given: {DEFAULT_GPU}, as plan's)"}, None


# --- component grouping for the plot (labels only; the numbers are sums over op rows) ----------
def component_group(component: str) -> str:
    """'decoder.attn.q_proj' -> 'attention projections'; coarse groups for one bar chart."""
    parts = component.split(".")
    if parts[0] in ("encoder", "decoder"):
        parts = parts[1:]
    head, last = parts[0], parts[-1]
    if head in ("embed", "rel_bias"):
        return "embeddings"
    if head in ("lm_head", "proj_out", "pooler"):
        return "output head"
    if "norm" in last:
        return "norms"
    if "attn" in head:
        return "attention core (QK^T, PV)" if "core" in parts else "attention projections"
    if head == "moe":
        return "router" if "router" in parts else "experts (MoE)"
    return "MLP"


def _merge_components(params_rows: list[dict], flops_rows: list[dict]) -> list[dict]:
    """Rows keyed by component: params, active params and every FLOPs column of
    ``flops_rows`` (training: forward/backward/model; serving: prefill/decode); rows with no
    parameters and no FLOPs (activations, the loss) are dropped."""
    keys = [k for k in (flops_rows[0] if flops_rows else {}) if k != "component"]
    out: dict[str, dict] = {}
    for r in params_rows + flops_rows:
        row = out.setdefault(r["component"], {"component": r["component"],
                                              "group": component_group(r["component"]),
                                              "params": 0, "active_params": 0,
                                              **dict.fromkeys(keys, 0)})
        for k in ("params", "active_params", *keys):
            row[k] += r.get(k, 0)
    return [r for r in out.values() if r["params"] or any(r[k] for k in keys)]


# --- training ---------------------------------------------------------------------------------
def categories(mem) -> dict:
    """Per-GPU bytes by category at the peak of the step: a TrainingMemory's peak phase
    (``TrainingMemory.phases``), or a states-only dict."""
    if isinstance(mem, dict):
        return {"weights": mem["weights_bytes"], "gradients": mem["gradients_bytes"],
                "optimizer": mem["optimizer_bytes"], "activations": 0, "temporaries": 0}
    peak = mem.steady_phases["peak"]
    return {"weights": peak["param"], "gradients": peak["grad"],
            "optimizer": peak["opt"] + peak["master"], "activations": peak["act"],
            "temporaries": peak["temp"]}


def device_name(req: ReportRequest, gpu: dict) -> str | None:
    """The catalog name whose cuBLAS workspace ``memory`` counts for this request: the GPU's
    (the default's when none is given), None for a GPU known only by --gpu-gb."""
    return None if req.gpu is None and req.gpu_gb is not None else gpu["name"]


def device_figures(total: int, setup: dict, gpu_name: str | None) -> dict:
    """memory --json's allocated, reserved and device bytes of model states alone whose
    tensors total ``total`` bytes (engine.device.device_memory with the setting's allocator
    slack; a step's own: ``TrainingMemory.device``)."""
    from ..engine.device import device_memory
    return device_memory(total, gpu_name, setup["reserved_slack"]).to_json()


def training_data(req: ReportRequest, cfg, progress: Progress, gpu: dict) -> dict:
    """The engine's numbers of a training report: parameters and FLOPs by component, the
    single-GPU memory of each recompute mode (tensors, and what ``memory`` compares with the
    GPU: ``device_bytes``), activations against the sequence. The setting is the one
    ``memory`` takes for the same options (``ReportRequest.setup``: recompute, recipe)."""
    from ..answers.common import text_only_said, workload
    from ..engine.accounting import count_flops, count_params
    from ..engine.memory import TrainingMemory
    from ..engine.workload import check_fits, parse_count

    setup = req.setup
    work = workload(req.batch, req.seq, req.src_seq, req.attn, setup["recompute"],
                    loss=setup["loss"])  # as flops and memory: no source rows, no images
    check_fits(cfg, work)
    progress("parameters and FLOPs by component")
    ft = setup["finetune"]
    p = count_params(cfg)
    f = count_flops(cfg, work, ft)
    d = {"params": {"total": p.total, "active": p.active, "embedding": p.embedding},
         "components": _merge_components(p.by_component(), f.by_component()),
         "flops": {"tokens_per_step": work.rows("seq"), "forward": f.forward,
                   "backward": f.backward, "model": f.model, "recompute": f.recompute}}
    if req.tokens is not None:
        tokens = parse_count(req.tokens)
        d["flops"]["train_tokens"] = tokens
        # whole steps of B x S tokens: a budget that is not a multiple is rounded up
        d["flops"]["train_steps"] = ceil_div(tokens, work.rows("seq"))
        d["flops"]["train_model_flops"] = d["flops"]["train_steps"] * f.model
        d["flops"]["train_executed_flops"] = d["flops"]["train_steps"] * (f.forward + f.backward)
    progress("memory by category for each recompute mode")

    def memory(w):  # the TrainingMemory of answers.costs._training, as memory builds it
        return TrainingMemory(cfg, w, req.precision, setup["optimizer"], ft, setup["offload"],
                              setup["optimizer_kernel"])

    d["single_gpu"] = []
    name = device_name(req, gpu)
    for mode in RECOMPUTE_MODES:
        m = memory(dataclasses.replace(work, recompute=mode))
        if ft is not None and mode == setup["recompute"]:  # the adapters section's figures
            d["finetune"] = m.finetune_json() | {"weights_bytes": m.weights,
                                                 "gradients_bytes": m.gradients,
                                                 "optimizer_bytes": m.optimizer_total}
        cats = categories(m)
        d["single_gpu"].append({"label": f"1 GPU, recompute {mode}", "recompute": mode,
                                "categories": cats, "total": sum(cats.values()),
                                "device": m.device(name, setup["reserved_slack"]).to_json()})
    progress("activation memory against sequence length")
    limit = cfg.max_position if cfg.pos_type == "learned" else SEQ_SWEEP[-1]
    seqs = sorted({s for s in SEQ_SWEEP if s <= limit} | {req.seq})
    act: dict = {"seq": seqs, "batch": req.batch, "attn": req.attn}
    for mode in RECOMPUTE_MODES:
        act[mode] = [memory(dataclasses.replace(work, seq=s, src_seq=0, recompute=mode)
                            ).activations for s in seqs]
    d["activations_vs_seq"] = act
    d["assumed"] = setup["assumed"] + text_only_said(cfg, work)
    return d


# --- serving ----------------------------------------------------------------------------------
def kv_data(req: ReportRequest, cfg) -> dict | None:
    from ..engine.kvcache import kv_cache_bytes, kv_cache_bytes_per_token

    if cfg.family == "encoder":
        return None
    ctx = req.serve_context
    limit = max(cfg.max_position, ctx)
    contexts = sorted({c for c in CONTEXT_SWEEP if c <= limit} | {ctx})
    conc = sorted(set(CONCURRENCY_SWEEP) | {req.concurrency})
    return {"kv_dtype": req.kv_dtype, "context": ctx, "concurrency": req.concurrency,
            "bytes_per_token": kv_cache_bytes_per_token(cfg, req.kv_dtype),
            "bytes_at_request": kv_cache_bytes(cfg, ctx, req.concurrency, req.kv_dtype),
            "bytes_per_sequence": kv_cache_bytes(cfg, ctx, 1, req.kv_dtype),
            "contexts": contexts, "concurrencies": conc,
            "bytes": {str(c): [kv_cache_bytes(cfg, x, c, req.kv_dtype) for x in contexts]
                      for c in conc}}


def serving_data(req: ReportRequest, cfg, progress: Progress) -> dict:
    from ..engine.accounting import count_flops, count_params
    from ..engine.memory import PRECISIONS, _check
    from ..engine.workload import Workload

    if cfg.family == "encoder":
        raise WorkloadError(f"{cfg.name} is an encoder-only model: it has no KV cache to serve")
    progress("parameters and FLOPs by component")
    ctx = req.serve_context
    p = count_params(cfg)
    prompt = Workload(batch=1, seq=ctx, src_seq=req.src_seq, attn_impl=req.attn,
                      text_only=not req.src_seq)
    f = count_flops(cfg, prompt)
    rows: dict[str, dict] = {}  # the same op sums, grouped by component
    for op in f.ops:
        key = f"{op.stack}.{op.component}" if op.stack else op.component
        r = rows.setdefault(key, {"component": key, "prefill_flops": 0, "decode_flops": 0})
        r["prefill_flops"] += op.prefill_flops(prompt)
        r["decode_flops"] += op.decode_flops(1, ctx, prompt.src_seq)
    wbytes = PRECISIONS[_check("precision", req.precision, PRECISIONS)].weight
    d = {"params": {"total": p.total, "active": p.active, "embedding": p.embedding},
         "components": _merge_components(p.by_component(), list(rows.values())),
         "flops": {"prefill_per_sequence": f.prefill(),
                   "prefill_model_per_sequence": f.prefill(model=True),
                   "decode_per_token": f.decode(ctx)},
         "weights_bytes": p.total * wbytes}
    if req.weights_format is not None:  # the stored tensors: quantised weights and scales
        from ..engine.formats import model_checkpoint_bytes, scheme
        d["weights_bytes"] = model_checkpoint_bytes(cfg, scheme(req.weights_format))
    progress("KV cache against context and concurrency")
    d["kv_cache"] = kv_data(req, cfg)
    if req.precision_assumed:  # fp16 on a GPU without bf16 (T4, V100)
        d["assumed"] = req.precision_assumed
    return d
