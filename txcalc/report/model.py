"""The report model: one JSON-ready dict built from the engine (and the planner when present).

``build_report(request)`` returns ``{"data": exact numbers, "sections": display text}``. The
renderers (``render.py`` for Markdown and HTML, ``plots.py`` for the PNGs) read only this dict,
so the committed ``report.json`` holds everything a report shows and a test can compare it
with a fresh run. Numbers stay exact Python ints; units appear only in the section text
(memory in GiB = 2**30 bytes, FLOP counts with decimal prefixes).

Split by job: ``gather`` (the engine's numbers), ``answer`` (the answer and the sections'
text), ``validation`` (reading validation reports), ``assumptions``, ``planning`` (the
planner's answers); ``sections`` holds the plain section/table/plot records. This module
puts them together.
"""

from __future__ import annotations

import dataclasses

from .. import __version__
from ..errors import WorkloadError
from . import answer as text
from .assumptions import assumptions, conventions, sources
from .gather import (Progress, categories, device_figures, device_name, kv_data, resolve_gpu,
                     serving_data, training_data)
from .request import ReportRequest
from .sections import CATEGORY_LABELS, section  # noqa: F401 (CATEGORY_LABELS: plots.py)
from .validation import validation_rows, validation_section  # noqa: F401 (tests)

SCHEMA = 1


def _quiet(_: str) -> None:
    pass


def _plan(req: ReportRequest, cfg, gpu, progress: Progress,
          command: str) -> tuple[dict | None, str]:
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
        return planning.infer_plan(req, cfg, gpu, command), ""
    if req.tokens is None:
        return None, ("Planning (GPUs, layout, days, cost) needs the training token budget: "
                      "give --tokens N.")
    from ..engine.workload import parse_count
    return planning.train_plan(req, cfg, parse_count(req.tokens), gpu, progress, command), ""


def _serving_load(req: ReportRequest, cfg) -> dict:
    """TTFT/ITL against load and the layouts' Pareto front (``serving_report``) for the
    layout ``plan infer --input-len --output-len --concurrency C`` picks: its tp, pp and
    chunk budget."""
    from ..serve.plan import plan_serving
    from ..serve.load import serving_load_data
    kw = dict(weights=req.weights, kv_dtype=req.kv_dtype, gpu_file=req.gpu_file,
              precision=req.serve_precision)
    best = plan_serving(cfg, req.gpu, req.input_len, req.output_len,
                        concurrency=req.concurrency, **kw).best
    d = serving_load_data(cfg, req.gpu, req.input_len, req.output_len, tp=best.tp,
                          pp=best.pp, max_num_batched_tokens=best.max_num_batched_tokens, **kw)
    d["layout_from"] = {"concurrency": req.concurrency, "tp": best.tp, "pp": best.pp,
                        "max_num_batched_tokens": best.max_num_batched_tokens}
    return d


# --- the whole report -------------------------------------------------------------------------
def build_report(req: ReportRequest, out_dir: str = "DIR", validation_dir=None,
                 progress: Progress = _quiet, runner=None) -> dict:
    """The report of ``req`` as plain data (see the module docstring). ``runner(argv,
    label) -> dict`` answers the options of ``req.compare`` (txcalc.report.compare)."""
    from .. import load
    from ..engine.workload import parse_count

    progress("model and GPU")
    cfg = load(req.model) if req.model is not None else None
    if cfg is not None and req.seq is None and not (req.inference and req.serve_context):
        # the planner's default sequence, recorded in the command (serving needs it only as
        # the context when none is given)
        from ..train.planner import default_seq
        req = req.replaced(seq=default_seq(cfg))
    gpu, gpu_spec = resolve_gpu(req)
    if cfg is None:
        from ..engine.memory import model_states
        if req.inference:
            raise WorkloadError("a serving report needs MODEL (the KV cache needs its shapes)")
        setup = req.setup
        states = model_states(parse_count(req.params), req.precision, setup["optimizer"])
        name = f"{states['params']:,}-parameter model"
        model = {"name": name, "params": states["params"]}
        cats = categories(states)
        total = sum(cats.values())
        data = {"params": {"total": states["params"]},
                "single_gpu": [{"label": "1 GPU", "recompute": setup["recompute"],
                                "categories": cats, "total": total,
                                "device": device_figures(total, setup,
                                                         device_name(req, gpu))}],
                "assumed": setup["assumed"]}
    else:
        name = cfg.name
        model = {"name": cfg.name, "source": cfg.source, "family": cfg.family,
                 "n_layers": cfg.n_layers, "d_model": cfg.d_model, "n_heads": cfg.n_heads,
                 "n_kv_heads": cfg.n_kv_heads, "vocab_size": cfg.vocab_size,
                 "n_experts": cfg.n_experts, "top_k": cfg.top_k}
        data = serving_data(req, cfg, progress) if req.inference else \
            training_data(req, cfg, progress, gpu)
        if not req.inference:
            progress("KV cache against context and concurrency")
            data["kv_cache"] = kv_data(req, cfg)
    plan, no_plan = _plan(req, cfg, gpu_spec, progress, req.command(out_dir))
    request = dataclasses.asdict(req)
    if request.get("weights") is None:  # reports without a weight format read as before
        request.pop("weights", None)
    if request.get("compare") is None:  # and reports without --compare
        request.pop("compare", None)
    if request.get("engine") is None:  # and reports without --engine
        request.pop("engine", None)
    if not request.get("input_len"):  # serving reports without the load section read as before
        request.pop("input_len", None)
        request.pop("output_len", None)
    if not req.inference:  # the setting the figures assumed (memory's defaults), as given
        setup = req.setup  # before these options defaulted to None
        request.update(recompute=setup["recompute"], optimizer=setup["optimizer"],
                       loss=setup["loss"])
        if setup["recipe"] is not None:  # fine-tuning: the recipe's name
            request["recipe"] = setup["recipe"]["name"]
    else:
        request.update(recompute=req.recompute or "none", optimizer=req.optimizer or "adamw",
                       loss=req.loss or "full")
    if request.get("recipe") is None:  # and reports without fine-tuning read as before
        request.pop("recipe", None)
    if request.get("loss") == "full":  # and training reports with the full loss
        request.pop("loss")
    if request.get("finetune") == "full":  # and training reports without fine-tuning too
        for k in ("finetune", "lora_rank", "lora_alpha", "lora_targets", "lora_dropout",
                  "trainable", "base_format"):
            request.pop(k, None)
    data = {"model": model, "gpu": gpu, "request": request, **data}
    if plan is not None:
        data["plan"] = plan
    if req.compare is not None:
        from .compare import compare_report
        progress(f"side by side: {req.compare}")
        data["compare"] = compare_report(req, runner)
    if req.inference and req.input_len and plan is not None:
        progress("latency against load (simulated)")
        data["serving_load"] = _serving_load(req, cfg)
    progress("assembling sections")
    if req.inference:
        answer = text.answer_serving(data, req, gpu, name, no_plan)
    else:
        answer = text.answer_training(data, req, gpu, name, no_plan)
    if plan is None:
        data["memory"] = data["single_gpu"]
    else:
        from .planning import layout_memory, serving_memory
        data["memory"] = serving_memory(plan) if req.inference else layout_memory(plan)
    kind = "serving" if req.inference else "training"
    sections = [answer] + ([text.components_section(data, req.inference)] if cfg is not None
                           else []) + [text.memory_section(data, gpu)]
    if "compare" in data:
        from .compare import section_for
        sections.insert(1, section_for(data["compare"], req.compare.partition("=")[0].strip()))
    if "activations_vs_seq" in data:
        sections.append(text.activations_section(data))
    if cfg is not None:
        sections.append(text.kv_section(data, name))
    if "serving_load" in data:
        from .serving_load import serving_load_section
        sections.append(serving_load_section(data["serving_load"]))
    if "finetune" in data:
        from .adapters import adapters_section
        sections.append(adapters_section(data))
    if not req.inference and plan is not None:  # no plan: the answer says why, once
        sections.append(text.frontier_section(data, no_plan))
    if plan is not None:
        sections.append(text.launch_section(plan, req.inference))
    if cfg is not None:
        sections.append(validation_section(data, name, validation_dir))
    sections.append(section("assumptions", "Assumptions, conventions and sources",
                            bullets=assumptions(req, gpu, plan, data)
                            + conventions(req.inference) + sources(req.inference)))
    command = req.command(out_dir)
    sections.append(section("provenance", "How this report was made",
                            [f"txcalc {__version__}, command: `{command}`"]))
    return {"schema": SCHEMA, "title": f"Capacity report: {kind} {name}",
            "txcalc_version": __version__, "command": command, "data": data,
            "sections": sections}
