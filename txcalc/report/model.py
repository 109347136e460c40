"""The report model: one JSON-ready dict built from the engine (and the planner when present).

``build_report(request)`` returns ``{"data": exact numbers, "sections": display text}``. The
renderers (``render.py`` for Markdown and HTML, ``plots.py`` for the PNGs) read only this dict,
so the committed ``report.json`` holds everything a report shows and a test can compare it
with a fresh run. Numbers stay exact Python ints; units appear only in the section text
(GB = 10**9 bytes, FLOP counts with decimal prefixes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .. import __version__
from ..errors import WorkloadError
from ..units import GB, error_pct, gb, human, plural
from .request import ReportRequest

SCHEMA = 1
from ..workload import RECOMPUTE as RECOMPUTE_MODES  # noqa: E402
#: sequence lengths of the activation plot, and contexts of the KV plot (powers of two)
SEQ_SWEEP = tuple(2**i for i in range(9, 18))  # 512 .. 131072
CONTEXT_SWEEP = tuple(2**i for i in range(7, 18))  # 128 .. 131072
CONCURRENCY_SWEEP = (1, 8, 32, 128)
DEFAULT_GPU_GB = 80
#: display names of memory categories (the data keeps the engine's and planner's keys)
CATEGORY_LABELS = {"zero3_buffers": "ZeRO-3 gather buffers",
                   "temporaries": "temporaries at the peak"}

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


# --- sections: plain structures the renderers turn into Markdown or HTML ----------------------
def section(sid: str, title: str, paragraphs=(), tables=(), plots=(), bullets=()) -> dict:
    """A report section. Paragraph and cell strings are plain text (escaped by the renderers);
    ``**bold**`` spans are the only markup."""
    return {"id": sid, "title": title, "paragraphs": list(paragraphs), "bullets": list(bullets),
            "tables": list(tables), "plots": list(plots)}


def table(caption: str, columns: list[str], rows: list[list]) -> dict:
    return {"caption": caption, "columns": columns, "rows": [[str(c) for c in r] for r in rows]}


def plot(file: str, kind: str, title: str, alt: str) -> dict:
    return {"file": file, "kind": kind, "title": title, "alt": alt}


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# --- the GPU ----------------------------------------------------------------------------------
def resolve_gpu(req: ReportRequest):
    """(name, memory and source as data; the catalog's Gpu or None). ``--gpu`` picks a
    catalog row and ``--gpu-gb`` overrides its memory; ``--gpu-gb`` alone is a GPU known only
    by its memory (no plan); neither is an 80 GB GPU."""
    if req.gpu is not None:
        try:
            from ..hardware import get_gpu
        except ImportError:  # pragma: no cover - a build without the GPU catalog
            get_gpu = None
        if get_gpu is not None:
            g = get_gpu(req.gpu, req.gpu_file)
            source = g.source or "GPU catalog"
            if req.gpu_gb is not None:
                g = dataclasses.replace(g, memory_bytes=int(req.gpu_gb * GB))
                source = "--gpu-gb"
            return {"name": g.name, "memory_bytes": g.memory_bytes, "source": source}, g
        if req.gpu_gb is None:
            raise WorkloadError(f"GPU {req.gpu!r}: no GPU catalog in this build; give its "
                                "memory with --gpu-gb")
    if req.gpu_gb is not None:
        return {"name": req.gpu or f"{req.gpu_gb:g} GB GPU",
                "memory_bytes": int(req.gpu_gb * GB), "source": "--gpu-gb"}, None
    return {"name": f"{DEFAULT_GPU_GB} GB GPU", "memory_bytes": DEFAULT_GPU_GB * GB,
            "source": "default (no --gpu given)"}, None


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
def _categories(mem) -> dict:
    """Per-GPU bytes by category at the peak of the step: a TrainingMemory's peak phase
    (``TrainingMemory.phases``), or a states-only dict."""
    if isinstance(mem, dict):
        return {"weights": mem["weights_bytes"], "gradients": mem["gradients_bytes"],
                "optimizer": mem["optimizer_bytes"], "activations": 0, "temporaries": 0}
    peak = mem.steady_phases["peak"]
    return {"weights": peak["param"], "gradients": peak["grad"],
            "optimizer": peak["opt"] + peak["master"], "activations": peak["act"],
            "temporaries": peak["temp"]}


def _training_data(req: ReportRequest, cfg, progress: Progress) -> dict:
    from ..accounting import count_flops, count_params
    from ..memory import TrainingMemory
    from ..workload import Workload, check_fits, parse_count

    work = Workload(batch=req.batch, seq=req.seq, src_seq=req.src_seq, attn_impl=req.attn,
                    recompute=req.recompute)
    check_fits(cfg, work)
    progress("parameters and FLOPs by component")
    p = count_params(cfg)
    f = count_flops(cfg, work)
    d = {"params": {"total": p.total, "active": p.active, "embedding": p.embedding},
         "components": _merge_components(p.by_component(), f.by_component()),
         "flops": {"tokens_per_step": work.rows("seq"), "forward": f.forward,
                   "backward": f.backward, "model": f.model, "recompute": f.recompute}}
    if req.tokens is not None:
        tokens = parse_count(req.tokens)
        d["flops"]["train_tokens"] = tokens
        # whole steps of B x S tokens: a budget that is not a multiple is rounded up
        d["flops"]["train_steps"] = _ceil_div(tokens, work.rows("seq"))
        d["flops"]["train_model_flops"] = d["flops"]["train_steps"] * f.model
        d["flops"]["train_executed_flops"] = d["flops"]["train_steps"] * (f.forward + f.backward)
    progress("memory by category for each recompute mode")
    d["single_gpu"] = []
    for mode in RECOMPUTE_MODES:
        m = TrainingMemory(cfg, dataclasses.replace(work, recompute=mode), req.precision,
                           req.optimizer)
        cats = _categories(m)
        d["single_gpu"].append({"label": f"1 GPU, recompute {mode}", "recompute": mode,
                                "categories": cats, "total": sum(cats.values())})
    progress("activation memory against sequence length")
    limit = cfg.max_position if cfg.pos_type == "learned" else SEQ_SWEEP[-1]
    seqs = sorted({s for s in SEQ_SWEEP if s <= limit} | {req.seq})
    act: dict = {"seq": seqs, "batch": req.batch, "attn": req.attn}
    for mode in RECOMPUTE_MODES:
        act[mode] = [TrainingMemory(cfg, dataclasses.replace(work, seq=s, src_seq=0,
                                                             recompute=mode),
                                    req.precision, req.optimizer).activations for s in seqs]
    d["activations_vs_seq"] = act
    return d


# --- serving ----------------------------------------------------------------------------------
def _kv_data(req: ReportRequest, cfg) -> dict | None:
    from ..memory import kv_cache_bytes, kv_cache_bytes_per_token

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


def _serving_data(req: ReportRequest, cfg, progress: Progress) -> dict:
    from ..accounting import count_flops, count_params
    from ..memory import PRECISIONS, _check
    from ..workload import Workload

    if cfg.family == "encoder":
        raise WorkloadError(f"{cfg.name} is an encoder-only model: it has no KV cache to serve")
    progress("parameters and FLOPs by component")
    ctx = req.serve_context
    p = count_params(cfg)
    prompt = Workload(batch=1, seq=ctx, src_seq=req.src_seq, attn_impl=req.attn)
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
         "flops": {"prefill_per_sequence": f.prefill(), "decode_per_token": f.decode(ctx)},
         "weights_bytes": p.total * wbytes}
    progress("KV cache against context and concurrency")
    d["kv_cache"] = _kv_data(req, cfg)
    return d


# --- the answer -------------------------------------------------------------------------------
def _fit(total: int, gpu: dict) -> dict:
    return {"total_bytes": total, "gpu_bytes": gpu["memory_bytes"],
            "fits_one_gpu": total <= gpu["memory_bytes"],
            "min_gpus_by_memory": _ceil_div(total, gpu["memory_bytes"])}


def _key_figures(rows: list[list[str]]) -> dict:
    return table("Key figures", ["quantity", "value"], rows)


def _answer_training(data: dict, req: ReportRequest, gpu: dict, name: str,
                     no_plan: str) -> dict:
    chosen = next(m for m in data["single_gpu"] if m["recompute"] == req.recompute)
    fit = _fit(chosen["total"], gpu)
    plan = data.get("plan")
    data["answer"] = dict(fit, planner=plan is not None)
    if plan is not None:
        from .planning import communication_table, train_answer
        b = plan["best"]
        data["answer"].update(total_gpus=b["gpus"], days=b["days"], gpu_hours=b["gpu_hours"],
                              cost=b["cost"], min_gpus_to_fit=plan["min_gpus_to_fit"],
                              gpus_for_deadline=plan["gpus_for_deadline"])
        paras, rows = train_answer(plan, name, chosen)
        comm = communication_table(plan)
        return section("answer", "The answer", paras,
                       [_key_figures(rows)] + ([comm] if comm else []))
    c = chosen["categories"]
    verdict = "fits" if fit["fits_one_gpu"] else "does NOT fit"
    paras = [f"**{name[:1].upper() + name[1:]} {verdict} on one {gpu['name']} "
             f"({gb(gpu['memory_bytes'])})**: one training step needs "
             f"{gb(fit['total_bytes'])} ({req.precision}, {req.optimizer}"
             + (f", micro-batch {req.batch} x {req.seq} tokens, recompute {req.recompute}"
                if "activations_vs_seq" in data else "") + ")."]
    if not fit["fits_one_gpu"]:
        paras.append(f"By memory alone it needs at least **{fit['min_gpus_by_memory']:,} such "
                     "GPUs** (every byte spread evenly, nothing replicated): training must be "
                     "distributed. Real layouts replicate some state and need more.")
    fl = data.get("flops", {})
    if "train_model_flops" in fl:
        paras.append(f"Training on {fl['train_tokens']:,} tokens ({fl['train_steps']:,} steps "
                     f"of {fl['tokens_per_step']:,} tokens) needs "
                     f"{human(fl['train_model_flops'], 'FLOP')} (model FLOPs; "
                     f"{human(fl['train_executed_flops'], 'FLOP')} executed).")
    paras.append(no_plan)
    rows = [["weights", f"{c['weights']:,}", gb(c["weights"])],
            ["gradients", f"{c['gradients']:,}", gb(c["gradients"])],
            ["optimizer (with fp32 master)", f"{c['optimizer']:,}", gb(c["optimizer"])]]
    if c["activations"] or c["temporaries"]:
        rows += [["activations saved for backward", f"{c['activations']:,}",
                  gb(c["activations"])],
                 ["temporaries (logits buffers, optimizer step)", f"{c['temporaries']:,}",
                  gb(c["temporaries"])]]
    rows.append(["total", f"{fit['total_bytes']:,}", gb(fit["total_bytes"])])
    return section("answer", "The answer", paras,
                   [table("Memory of one training step on one GPU", ["category", "bytes",
                                                                     "GB (1e9)"], rows)])


def _answer_serving(data: dict, req: ReportRequest, gpu: dict, name: str,
                    no_plan: str) -> dict:
    kv = data["kv_cache"]
    total = data["weights_bytes"] + kv["bytes_at_request"]
    fit = _fit(total, gpu)
    n = fit["min_gpus_by_memory"]
    room = n * gpu["memory_bytes"] - data["weights_bytes"]
    fit["max_concurrency_on_min_gpus"] = max(room, 0) // kv["bytes_per_sequence"]
    plan = data.get("plan")
    data["answer"] = dict(fit, planner=plan is not None)
    data["single_gpu"] = [{"label": "1 GPU", "recompute": "none",
                           "categories": {"weights": data["weights_bytes"],
                                          "kv cache": kv["bytes_at_request"]}, "total": total}]
    verdict = "fits" if fit["fits_one_gpu"] else "does NOT fit"
    memory = (f"On one {gpu['name']} ({gb(gpu['memory_bytes'])}) with no parallelism it "
              f"{verdict}: weights {gb(data['weights_bytes'])} ({req.precision}) + KV cache "
              f"{gb(kv['bytes_at_request'])} ({req.kv_dtype}, {gb(kv['bytes_per_sequence'])} "
              f"per sequence) = {gb(total)}.")
    compute = (f"Compute: a prefill of one {kv['context']:,}-token prompt is "
               f"{human(data['flops']['prefill_per_sequence'], 'FLOP')}; each decoded token "
               f"at that context is {human(data['flops']['decode_per_token'], 'FLOP')} per "
               "sequence.")
    if plan is not None:
        from .planning import infer_answer
        b = plan["best"]
        data["answer"].update(total_gpus=b["total_gpus"], replicas=b["replicas"],
                              max_concurrency=b["max_concurrency"],
                              prefill_latency_s=b["prefill_latency_s"],
                              decode_tokens_per_s=b["decode_tokens_per_s"])
        paras, rows = infer_answer(plan, name, kv["context"], kv["concurrency"], req.price)
        return section("answer", "The answer", paras + [memory, compute], [_key_figures(rows)])
    paras = [f"**Serving {name} at {kv['context']:,} tokens of context for "
             f"{kv['concurrency']:,} concurrent sequences {verdict} on one {gpu['name']}**. "
             + memory,
             f"By memory alone: at least **{n:,} GPUs**, on which the KV cache leaves room for "
             f"**{fit['max_concurrency_on_min_gpus']:,} sequences** of {kv['context']:,} "
             "tokens.", compute, no_plan]
    rows = [["weights", f"{data['weights_bytes']:,}", gb(data["weights_bytes"])],
            ["KV cache", f"{kv['bytes_at_request']:,}", gb(kv["bytes_at_request"])],
            ["total", f"{total:,}", gb(total)]]
    return section("answer", "The answer", paras,
                   [table("Memory of serving (no parallelism)", ["category", "bytes",
                                                                 "GB (1e9)"], rows)])


# --- the other sections -----------------------------------------------------------------------
def _components_section(data: dict, inference: bool) -> dict:
    if "components" not in data:
        return section("components", "Parameters and FLOPs by component",
                       [f"Only a parameter count was given ({data['params']['total']:,}): "
                        "components and FLOPs need the model's shapes (give MODEL)."])
    total = data["params"]["total"]
    if inference:
        cols = ["component", "params", "share", "prefill FLOPs (one prompt)",
                "decode FLOPs (one token)"]
        rows = [[r["component"], f"{r['params']:,}", f"{r['params'] / total:.2%}",
                 human(r["prefill_flops"]), human(r["decode_flops"])]
                for r in data["components"]]
        text = (f"{total:,} parameters, {data['params']['active']:,} active per token. FLOPs "
                "of the prefill of one prompt (output head on its last token) and of one "
                "decoded token at the full context.")
    else:
        fl = data["flops"]
        cols = ["component", "params", "share", "forward FLOPs", "backward FLOPs",
                "model FLOPs"]
        rows = [[r["component"], f"{r['params']:,}", f"{r['params'] / total:.2%}",
                 human(r["forward_flops"]), human(r["backward_flops"]),
                 human(r["model_flops"])] for r in data["components"]]
        text = (f"{total:,} parameters, {data['params']['active']:,} active per token. One "
                f"training step of {fl['tokens_per_step']:,} tokens: forward "
                f"{fl['forward']:,} + backward {fl['backward']:,} executed FLOPs; "
                f"{fl['model']:,} model FLOPs; recompute adds {fl['recompute']:,}.")
    return section("components", "Parameters and FLOPs by component", [text],
                   [table("Summed over layers", cols, rows)],
                   [plot("components.png", "components", "Parameters and FLOPs by component",
                         "Bar charts of parameters and FLOPs per component group")])


def _memory_section(data: dict, gpu: dict) -> dict:
    cats = list(data["memory"][0]["categories"])
    rows = [[m["label"], *(gb(m["categories"][c]) for c in cats), gb(m["total"])]
            for m in data["memory"]]
    if data.get("plan") is not None:
        text = (f"Per GPU (the fullest pipeline stage) for the best layouts the planner found; "
                f"the dashed line is one {gpu['name']} ({gb(gpu['memory_bytes'])})."
                if "kv cache" not in cats else
                f"Per GPU for the serving layouts the planner found, at the asked load (the "
                f"planner also reserves a prefill workspace and framework memory, not shown); "
                f"the dashed line is one {gpu['name']} ({gb(gpu['memory_bytes'])}).")
    else:
        what = ("for each activation recompute mode" if len(rows) > 1
                else "serving the asked load" if "kv cache" in cats else "model states only")
        text = (f"Without a plan the layout shown is one GPU with no parallelism, {what}; the "
                f"dashed line is one {gpu['name']} ({gb(gpu['memory_bytes'])}).")
    return section("memory", "Memory per GPU by category", [text],
                   [table("Bytes per GPU (GB = 1e9)",
                          ["layout", *(CATEGORY_LABELS.get(c, c) for c in cats), "total"], rows)],
                   [plot("memory.png", "memory", "Memory per GPU by category",
                         "Stacked bars of memory per GPU by category")])


def _activations_section(data: dict) -> dict:
    a = data["activations_vs_seq"]
    rows = [[f"{s:,}", *(gb(a[m][i]) for m in RECOMPUTE_MODES)] for i, s in enumerate(a["seq"])]
    text = [f"Bytes saved for backward over the whole model, micro-batch {a['batch']}, "
            f"attention kernel {a['attn']}, for each recompute mode (none: everything; "
            "selective: the attention softmax is recomputed; full: each block keeps only its "
            "input)."]
    if a["selective"] == a["none"]:
        text.append(f"With the {a['attn']} kernel no S x S softmax is stored, so selective "
                    "recompute saves nothing here: its line lies on top of none.")
    return section("activations", "Activation memory against sequence length", text,
                   [table("Activations (GB = 1e9)", ["sequence", *RECOMPUTE_MODES], rows)],
                   [plot("activations.png", "activations",
                         "Activation memory against sequence length",
                         "Lines of activation memory against sequence length per recompute mode")])


def _kv_section(data: dict, name: str) -> dict:
    kv = data.get("kv_cache")
    if kv is None:
        return section("kv", "KV cache against context and concurrency",
                       [f"{name} has no KV cache (encoder-only)."])
    rows = [[f"{x:,}", *(gb(kv["bytes"][str(c)][i]) for c in kv["concurrencies"])]
            for i, x in enumerate(kv["contexts"])]
    return section("kv", "KV cache against context and concurrency",
                   [f"{kv['bytes_per_token']:,} bytes per token ({kv['kv_dtype']}); at "
                    f"{kv['context']:,} tokens x {kv['concurrency']:,} sequences: "
                    f"{gb(kv['bytes_at_request'])}."],
                   [table(f"KV cache ({kv['kv_dtype']}, GB = 1e9)",
                          ["context", *(plural(c, "seq") for c in kv["concurrencies"])], rows)],
                   [plot("kv_cache.png", "kv", "KV cache against context and concurrency",
                         "Lines of KV-cache memory against context per concurrency")])


def _frontier_section(data: dict, no_plan: str) -> dict:
    plan = data.get("plan")
    if plan is None or not plan["frontier"]:
        return section("frontier", "GPUs against days to train",
                       ["Not available: " + no_plan[:1].lower() + no_plan[1:]])
    from .planning import frontier_rows
    text = [f"The fastest layout on each GPU count (the planner's search pinned to that many "
            f"GPUs), for {plan['tokens']:,} tokens."]
    plots = [plot("frontier.png", "frontier", "GPUs against days to train",
                  "Days to train against the number of GPUs")]
    if len(plan["frontier"]) < 2:
        text.append("Only one GPU count is allowed here (--max-gpus), so there is no curve "
                    "to plot.")
        plots = []
    return section("frontier", "GPUs against days to train", text,
                   [table("Fastest layout per GPU count", ["GPUs", "layout", "days",
                                                           "GPU-hours", "MFU",
                                                           "memory per GPU"],
                          frontier_rows(plan))], plots)


MAX_VALIDATION_ROWS = 40


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _pairs(obj: dict) -> list[tuple[str, object, object]]:
    """(quantity suffix, predicted, measured) of a dict: ``predicted``/``measured``,
    ``predicted_x``/``measured_x`` or ``x_predicted``/``x_measured``."""
    out = []
    for k, v in obj.items():
        if k.startswith("predicted"):
            q, m = k[len("predicted"):].strip("_"), obj.get("measured" + k[len("predicted"):])
        elif k.endswith("_predicted"):
            q, m = k[:-len("_predicted")], obj.get(k[:-len("predicted")] + "measured")
        else:
            continue
        if _number(v) and _number(m):
            out.append((q, v, m))
    return out


def _zip_trees(pred: dict, meas: dict, path: list[str]) -> list[dict]:
    """Rows from parallel ``predicted``/``measured`` trees (memory by phase and category:
    ``predicted.after_forward.act`` against ``measured.after_forward.act``)."""
    rows = []
    for k, p in pred.items():
        m = meas.get(k)
        if isinstance(p, dict) and isinstance(m, dict):
            rows += _zip_trees(p, m, path + [str(k)])
        elif _number(p) and _number(m):
            rows.append({"label": " ".join(path + [str(k)]), "quantity": "bytes by phase",
                         "predicted": p, "measured": m})
    return rows


def validation_rows(obj, where: str = "") -> list[dict]:
    """Every predicted/measured pair in a validation report, wherever it sits (``txcalc
    validate`` writes totals, components, layers and modules). A row is labelled by its dict's
    names (component, module, layer) and the quantity: the key suffix, else the nearest key
    of the path (``modules.params[3]`` -> params)."""
    rows: list[dict] = []
    if isinstance(obj, dict):
        names = [f"layer {v}" if k == "layer" and str(v).isdigit() else str(v)
                 for k, v in obj.items() if isinstance(v, str)
                 and k not in ("model", "device", "unit", "dtype", "precision", "torch",
                               "python", "attn_impl", "recompute")]
        context = where.split("[")[0].split(".")
        for q, pred, meas in _pairs(obj):
            quantity = q or context[-1] or "value"
            label = " ".join(names) if names else ".".join(c for c in context if c)
            rows.append({"label": f"{label} {quantity}" if names or q else label,
                         "quantity": quantity, "predicted": pred, "measured": meas})
        if isinstance(obj.get("predicted"), dict) and isinstance(obj.get("measured"), dict):
            rows += _zip_trees(obj["predicted"], obj["measured"], [])
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and not (
                    k in ("predicted", "measured") and isinstance(obj.get("predicted"), dict)):
                rows += validation_rows(v, f"{where}.{k}" if where else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            rows += validation_rows(v, f"{where}[{i}]")
    return rows


def find_validation(name: str, validation_dir) -> tuple[str, dict, list[dict]] | None:
    """The first validation report (``<dir>/*.json``, sorted) made for model ``name``."""
    import json
    from pathlib import Path

    if validation_dir is None or not Path(validation_dir).is_dir():
        return None
    for p in sorted(Path(validation_dir).glob("*.json")):
        try:
            raw = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(raw, dict) and (raw.get("model") == name
                                      or p.stem.startswith(f"{name}-")):
            rows = validation_rows(raw)
            if rows:
                return p.name, raw, rows
    return None


def _validation_section(data: dict, name: str, validation_dir) -> dict:
    where = str(validation_dir) if validation_dir else "reports/validation"
    found = find_validation(name, validation_dir)
    if found is None:
        return section("validation", "Predicted against measured",
                       [f"No validation report for {name} in {where}/ (run `txcalc validate "
                        f"{name}` to make one)."])
    file, raw, rows = found
    setup = ", ".join(f"{k} {raw[k]}" for k in ("device", "batch", "seq", "attn_impl",
                                                "recompute", "precision")
                      if isinstance(raw.get(k), (str, int)) and not isinstance(raw[k], bool))
    for r in rows:
        r["error_pct"] = (error_pct(r["predicted"], r["measured"])
                          if r["measured"] else (0.0 if r["predicted"] == 0 else None))
    by_q: dict[str, dict] = {}
    for r in rows:
        q = by_q.setdefault(r["quantity"], {"quantity": r["quantity"], "pairs": 0, "exact": 0,
                                            "max_abs_error_pct": 0.0})
        q["pairs"] += 1
        q["exact"] += r["predicted"] == r["measured"]
        if r["error_pct"] is not None:
            q["max_abs_error_pct"] = max(q["max_abs_error_pct"], abs(r["error_pct"]))
    # stable sort: ties (all exact) keep the report's order, totals and components first
    shown = sorted(rows, key=lambda r: -abs(r["error_pct"] or 0))[:MAX_VALIDATION_ROWS]
    data["validation"] = {"file": file, "setup": setup, "rows": len(rows),
                          "exact": sum(q["exact"] for q in by_q.values()),
                          "by_quantity": list(by_q.values()), "shown": shown}
    v = data["validation"]
    return section("validation", "Predicted against measured",
                   [f"From {where}/{file}" + (f" ({setup})" if setup else "") + ": "
                    f"{v['rows']:,} predicted/measured pairs, {v['exact']:,} exactly equal "
                    "(error = (predicted - measured) / measured)."],
                   [table("By quantity", ["quantity", "pairs", "exact", "largest |error|"],
                          [[q["quantity"], f"{q['pairs']:,}", f"{q['exact']:,}",
                            f"{q['max_abs_error_pct']:.2f}%"] for q in v["by_quantity"]]),
                    table(f"The {len(shown)} largest errors" if v["exact"] < v["rows"]
                          else f"Every pair is exact; the first {len(shown)} rows",
                          ["row", "predicted", "measured", "error"],
                          [[r["label"], f"{r['predicted']:,}", f"{r['measured']:,}",
                            "n/a" if r["error_pct"] is None else f"{r['error_pct']:+.2f}%"]
                           for r in shown])],
                   [plot("validation.png", "validation", "Predicted against measured",
                         "Predicted against measured values, one point per row")])


CONVENTIONS = [
    "GB means 10^9 bytes everywhere in this report; GiB (2^30) is not used.",
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
    "Model shapes: the preset table (txcalc/presets.py, one cited config.json or paper per "
    "row) or the given config.json.",
    "Activation memory: the tensors PyTorch keeps for backward in the eager implementation, "
    "tested byte for byte against torch.autograd.graph.saved_tensors_hooks.",
    "Parameters and FLOPs: tested exactly against Hugging Face models on the meta device and "
    "torch.utils.flop_counter.FlopCounterMode.",
    "Recompute: selective as in Korthikanti et al. 2022 (arXiv:2205.05198); mixed-precision "
    "Adam states as in Rajbhandari et al. 2020 (ZeRO, arXiv:1910.02054).",
]


def _assumptions(req: ReportRequest, gpu: dict, plan: dict | None) -> list[str]:
    out = [f"GPU: {gpu['name']}, {gb(gpu['memory_bytes'])} ({gpu['source']}).",
           f"Precision {req.precision}, optimizer {req.optimizer}."]
    if req.inference:
        out.append(f"Serving: context {req.serve_context:,} tokens, {req.concurrency:,} "
                   f"concurrent sequences, KV cache in {req.kv_dtype}; weights in the "
                   "precision's weight dtype; no activation memory beyond the KV cache.")
    elif req.model is not None:
        out.append(f"Single-GPU figures: micro-batch {req.batch} x {req.seq} tokens, attention "
                   f"kernel {req.attn}, recompute {req.recompute}, dropout off (no masks "
                   "saved); memory is shown at the peak of the step, the largest of: the end of "
                   "forward (with the logits buffers), either end of backward, and the optimizer "
                   "step (with its temporaries); categories not alive there show 0.")
    else:
        out.append("Only the parameter count is known: model states (weights, gradients, "
                   "optimizer) only, no activations.")
    if plan is None:
        out.append("Not included (no plan): CUDA context, communication buffers, allocator "
                   "fragmentation.")
        return out
    return out + plan["assumptions"]


def _plan(req: ReportRequest, cfg, gpu, progress: Progress) -> tuple[dict | None, str]:
    """The planner's answer, or None and the reason there is none (said in the report)."""
    if cfg is None:
        return None, ("Planning (layouts, days, cost) needs the model's shapes: give MODEL, "
                      "not only --params.")
    try:
        from . import planning
    except ImportError:  # pragma: no cover - a build without the planner
        return None, ("Planning needs the planner, which is not available in this build: "
                      "this report gives no time or cost figure rather than an invented one.")
    if gpu is None:
        return None, ("Planning needs a GPU from the catalog (bandwidths, peak FLOP/s): give "
                      "--gpu NAME.")
    if req.inference:
        progress("planner: serving layouts")
        return planning.infer_plan(req, cfg, gpu), ""
    if req.tokens is None:
        return None, ("Planning (GPUs, layout, days, cost) needs the training token budget: "
                      "give --tokens N.")
    from ..workload import parse_count
    return planning.train_plan(req, cfg, parse_count(req.tokens), gpu, progress), ""


# --- the whole report -------------------------------------------------------------------------
def build_report(req: ReportRequest, out_dir: str = "DIR", validation_dir=None,
                 progress: Progress = _quiet) -> dict:
    """The report of ``req`` as plain data (see the module docstring)."""
    from .. import load
    from ..workload import parse_count

    progress("model and GPU")
    cfg = load(req.model) if req.model is not None else None
    if cfg is not None and req.seq is None and not (req.inference and req.context):
        # the planner's default sequence, recorded in the command (serving needs it only as
        # the context when none is given)
        from ..planner import default_seq
        req = dataclasses.replace(req, seq=default_seq(cfg))
    gpu, gpu_spec = resolve_gpu(req)
    if cfg is None:
        from ..memory import model_states
        if req.inference:
            raise WorkloadError("a serving report needs MODEL (the KV cache needs its shapes)")
        states = model_states(parse_count(req.params), req.precision, req.optimizer)
        name = f"{states['params']:,}-parameter model"
        model = {"name": name, "params": states["params"]}
        cats = _categories(states)
        data = {"params": {"total": states["params"]},
                "single_gpu": [{"label": "1 GPU", "recompute": req.recompute,
                                "categories": cats, "total": sum(cats.values())}]}
    else:
        name = cfg.name
        model = {"name": cfg.name, "source": cfg.source, "family": cfg.family,
                 "n_layers": cfg.n_layers, "d_model": cfg.d_model, "n_heads": cfg.n_heads,
                 "n_kv_heads": cfg.n_kv_heads, "vocab_size": cfg.vocab_size,
                 "n_experts": cfg.n_experts, "top_k": cfg.top_k}
        data = (_serving_data if req.inference else _training_data)(req, cfg, progress)
        if not req.inference:
            progress("KV cache against context and concurrency")
            data["kv_cache"] = _kv_data(req, cfg)
    plan, no_plan = _plan(req, cfg, gpu_spec, progress)
    data = {"model": model, "gpu": gpu, "request": dataclasses.asdict(req), **data}
    if plan is not None:
        data["plan"] = plan
    progress("assembling sections")
    if req.inference:
        answer = _answer_serving(data, req, gpu, name, no_plan)
    else:
        answer = _answer_training(data, req, gpu, name, no_plan)
    if plan is None:
        data["memory"] = data["single_gpu"]
    else:
        from .planning import layout_memory, serving_memory
        data["memory"] = serving_memory(plan) if req.inference else layout_memory(plan)
    kind = "serving" if req.inference else "training"
    sections = [answer, _components_section(data, req.inference), _memory_section(data, gpu)]
    if "activations_vs_seq" in data:
        sections.append(_activations_section(data))
    if cfg is not None:
        sections.append(_kv_section(data, name))
    if not req.inference:
        sections.append(_frontier_section(data, no_plan))
    if cfg is not None:
        sections.append(_validation_section(data, name, validation_dir))
    sections.append(section("assumptions", "Assumptions, conventions and sources",
                            bullets=_assumptions(req, gpu, plan) + CONVENTIONS + SOURCES))
    command = req.command(out_dir)
    sections.append(section("provenance", "How this report was made",
                            [f"txcalc {__version__}, command: `{command}`"]))
    return {"schema": SCHEMA, "title": f"Capacity report: {kind} {name}",
            "txcalc_version": __version__, "command": command, "data": data,
            "sections": sections}
