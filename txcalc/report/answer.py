"""The text of a report: the answer (what it takes, in words and key figures) and the sections
that show the gathered numbers (components, memory, activations, KV cache, frontier)."""

from __future__ import annotations

from ..units import gib, human, plural
from .gather import RECOMPUTE_MODES, ceil_div
from .request import ReportRequest
from .sections import CATEGORY_LABELS, plot, section, table


# --- the answer -------------------------------------------------------------------------------
def _fit(total: int, gpu: dict) -> dict:
    return {"total_bytes": total, "gpu_bytes": gpu["usable_bytes"],
            "fits_one_gpu": total <= gpu["usable_bytes"],
            "min_gpus_by_memory": ceil_div(total, gpu["usable_bytes"])}


def _key_figures(rows: list[list[str]]) -> dict:
    return table("Key figures", ["quantity", "value"], rows)


def training_fit(chosen: dict, gpu: dict, request: dict) -> dict:
    """The one-GPU answer of a training report, as ``memory --json`` gives it for the same
    options: ``total_bytes`` the tensors at the peak, ``need_bytes`` (reserved + CUDA
    context + the paged optimizer states resident at once, engine.device; ``device_bytes``
    where there are none) what is compared with the GPU; ``min_gpus_by_memory`` spreads the
    tensors alone (a lower bound: every GPU adds its own context and slack)."""
    dev = chosen["device"]
    return {**_fit(chosen["total"], gpu), **dev,
            "fits_one_gpu": dev["need_bytes"] <= gpu["usable_bytes"],
            **{k: request[k] for k in ("recompute", "optimizer", "recipe") if k in request}}


def answer_training(data: dict, req: ReportRequest, gpu: dict, name: str,
                     no_plan: str) -> dict:
    request = data["request"]
    chosen = next(m for m in data["single_gpu"] if m["recompute"] == request["recompute"])
    fit = training_fit(chosen, gpu, request)
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
    setting = ", ".join([req.precision] + ([f"recipe {fit['recipe']}"] if "recipe" in fit
                                           else []) + [fit["optimizer"]])
    paras = [f"**{name[:1].upper() + name[1:]} {verdict} on one {gpu['name']} "
             f"({gpu['words']})**: one training step needs "
             f"{gib(fit['device_bytes'])} on the device ({setting}"
             + (f", micro-batch {req.batch} x {req.seq} tokens, recompute {fit['recompute']}"
                if "activations_vs_seq" in data else "")
             + f"): {gib(fit['total_bytes'])} of tensors at the peak, plus the allocator's "
             "reserved slack, the cuBLAS workspaces and the CUDA context (what nvidia-smi "
             "shows, and what txcalc memory compares with the GPU)."]
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
    rows = [["weights", f"{c['weights']:,}", gib(c["weights"])],
            ["gradients", f"{c['gradients']:,}", gib(c["gradients"])],
            ["optimizer (with fp32 master)", f"{c['optimizer']:,}", gib(c["optimizer"])]]
    if c["activations"] or c["temporaries"]:
        rows += [["activations saved for backward", f"{c['activations']:,}",
                  gib(c["activations"])],
                 ["temporaries (logits buffers, optimizer step)", f"{c['temporaries']:,}",
                  gib(c["temporaries"])]]
    framework = [["allocator slack and cuBLAS workspaces (reserved - tensors)",
                  fit["reserved_bytes"] - fit["total_bytes"]],
                 ["CUDA context", fit["cuda_context_bytes"]],
                 ["on the device (reserved + context: compared with the GPU)",
                  fit["device_bytes"]]]
    rows += [["total of tensors (the peak)", f"{fit['total_bytes']:,}",
              gib(fit["total_bytes"])]] + [[k, f"{v:,}", gib(v)] for k, v in framework]
    return section("answer", "The answer", paras,
                   [table("Memory of one training step on one GPU", ["category", "bytes",
                                                                     "GiB (2^30)"], rows)])


def answer_serving(data: dict, req: ReportRequest, gpu: dict, name: str,
                    no_plan: str) -> dict:
    kv = data["kv_cache"]
    total = data["weights_bytes"] + kv["bytes_at_request"]
    fit = _fit(total, gpu)
    n = fit["min_gpus_by_memory"]
    room = n * gpu["usable_bytes"] - data["weights_bytes"]
    fit["max_concurrency_on_min_gpus"] = max(room, 0) // kv["bytes_per_sequence"]
    plan = data.get("plan")
    data["answer"] = dict(fit, planner=plan is not None)
    data["single_gpu"] = [{"label": "1 GPU", "recompute": "none",
                           "categories": {"weights": data["weights_bytes"],
                                          "kv cache": kv["bytes_at_request"]}, "total": total}]
    verdict = "fits" if fit["fits_one_gpu"] else "does NOT fit"
    memory = (f"On one {gpu['name']} ({gpu['words']}) with no parallelism it "
              f"{verdict}: weights {gib(data['weights_bytes'])} ({req.weights_format or req.serve_precision}) + KV cache "
              f"{gib(kv['bytes_at_request'])} ({req.kv_dtype}, {gib(kv['bytes_per_sequence'])} "
              f"per sequence) = {gib(total)}.")
    fl = data["flops"]
    masked = fl.get("prefill_model_per_sequence")
    compute = (f"Compute: a prefill of one {kv['context']:,}-token prompt is "
               + (f"{human(masked, 'FLOP')} with the causally masked half of the attention "
                  f"scores skipped (what a causal flash kernel runs, and what the prefill "
                  f"time above assumes), {human(fl['prefill_per_sequence'], 'FLOP')} over the "
                  "full S x S" if masked is not None else
                  human(fl["prefill_per_sequence"], "FLOP"))
               + f"; each decoded token at that context is "
               f"{human(fl['decode_per_token'], 'FLOP')} per sequence.")
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
    rows = [["weights", f"{data['weights_bytes']:,}", gib(data["weights_bytes"])],
            ["KV cache", f"{kv['bytes_at_request']:,}", gib(kv["bytes_at_request"])],
            ["total", f"{total:,}", gib(total)]]
    return section("answer", "The answer", paras,
                   [table("Memory of serving (no parallelism)", ["category", "bytes",
                                                                 "GiB (2^30)"], rows)])


# --- the other sections -----------------------------------------------------------------------
def components_section(data: dict, inference: bool) -> dict:
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


def memory_section(data: dict, gpu: dict) -> dict:
    cats = list(data["memory"][0]["categories"])
    device = all("device" in m for m in data["memory"])  # one GPU: what memory compares
    rows = [[m["label"], *(gib(m["categories"][c]) for c in cats), gib(m["total"])]
            + ([gib(m["device"]["device_bytes"])] if device else []) for m in data["memory"]]
    if data.get("plan") is not None:
        text = (f"Per GPU (the fullest pipeline stage) for the best layouts the planner found; "
                f"the dashed line is one {gpu['name']} ({gpu['words']})."
                if "kv cache" not in cats else
                f"Per GPU for the serving layouts the planner found, at the asked load, with "
                f"everything the planner reserves: weights, KV cache, the chunked-prefill "
                f"workspace and framework memory (CUDA context, communication buffers, "
                f"allocator fragmentation); the dashed line is one {gpu['name']} "
                f"({gpu['words']}).")
    else:
        what = ("for each activation recompute mode" if len(rows) > 1
                else "serving the asked load" if "kv cache" in cats else "model states only")
        text = (f"Without a plan the layout shown is one GPU with no parallelism, {what}; the "
                f"dashed line is one {gpu['name']} ({gpu['words']})."
                + (" The last column adds the framework (the allocator's reserved slack, the "
                   "cuBLAS workspaces, the CUDA context: the grey bar): what nvidia-smi shows, "
                   "and what is compared with the GPU." if device else ""))
    return section("memory", "Memory per GPU by category", [text],
                   [table("Bytes per GPU (GiB = 2^30)",
                          ["layout", *(CATEGORY_LABELS.get(c, c) for c in cats), "total"]
                          + (["on the device"] if device else []), rows)],
                   [plot("memory.png", "memory", "Memory per GPU by category",
                         "Stacked bars of memory per GPU by category")])


def activations_section(data: dict) -> dict:
    a = data["activations_vs_seq"]
    rows = [[f"{s:,}", *(gib(a[m][i]) for m in RECOMPUTE_MODES)] for i, s in enumerate(a["seq"])]
    text = [f"Bytes saved for backward over the whole model, micro-batch {a['batch']}, "
            f"attention kernel {a['attn']}, for each recompute mode (none: everything; "
            "selective: the attention softmax is recomputed; full: each block keeps only its "
            "input)."]
    if a["selective"] == a["none"]:
        text.append(f"With the {a['attn']} kernel no S x S softmax is stored, so selective "
                    "recompute saves nothing here: its line lies on top of none.")
    return section("activations", "Activation memory against sequence length", text,
                   [table("Activations (GiB = 2^30)", ["sequence", *RECOMPUTE_MODES], rows)],
                   [plot("activations.png", "activations",
                         "Activation memory against sequence length",
                         "Lines of activation memory against sequence length per recompute mode")])


def kv_section(data: dict, name: str) -> dict:
    kv = data.get("kv_cache")
    if kv is None:
        return section("kv", "KV cache against context and concurrency",
                       [f"{name} has no KV cache (encoder-only)."])
    rows = [[f"{x:,}", *(gib(kv["bytes"][str(c)][i]) for c in kv["concurrencies"])]
            for i, x in enumerate(kv["contexts"])]
    return section("kv", "KV cache against context and concurrency",
                   [f"{kv['bytes_per_token']:,} bytes per token ({kv['kv_dtype']}); at "
                    f"{kv['context']:,} tokens x {kv['concurrency']:,} sequences: "
                    f"{gib(kv['bytes_at_request'])}."],
                   [table(f"KV cache ({kv['kv_dtype']}, GiB = 2^30)",
                          ["context", *(plural(c, "seq") for c in kv["concurrencies"])], rows)],
                   [plot("kv_cache.png", "kv", "KV cache against context and concurrency",
                         "Lines of KV-cache memory against context per concurrency")])


def frontier_section(data: dict, no_plan: str) -> dict:
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


def launch_section(plan: dict, serving: bool = False) -> dict:
    """The files that launch the plan's best layout, as ``txcalc plan train --emit FORMAT``
    (a serving plan: ``plan infer --emit FORMAT``) writes them (txcalc.emit), or the one line
    saying why a framework cannot express it."""
    launch = plan.get("launch", [])
    rows, files = [], []
    for e in launch:
        if "refused" in e:
            rows.append([e["format"], "-", e["refused"]])
            continue
        rows.append([e["format"], ", ".join(e["files"]), "written below"])
        files += [{"name": f"{e['format']}: {name}", "text": body}
                  for name, body in e["files"].items()]
    best = plan["best"]
    if serving:
        layout = (f"TP {best['tp']} x PP {best['pp']}, {plural(best['replicas'], 'replica')} "
                  f"on {plural(best['total_gpus'], 'GPU')}")
        command, figures = "plan infer", "memory per GPU, KV cache tokens, prefill and decode"
    else:
        layout = f"{best['layout']} on {best['gpus']:,} GPUs"
        command, figures = "plan train", "peak memory per GPU, tokens/s, MFU, days"
    text = (f"The configuration each framework needs to run the best layout ({layout}), as "
            f"`txcalc {command} --emit FORMAT --out FILE` writes it from the same plan; each "
            f"file's header states the figures this report expects ({figures}). Where a "
            "framework cannot express what the plan assumed, the row says which setting, and "
            "no file is given.")
    return section("launch", "Launch: the files that run this plan", [text],
                   [table("Each framework's files", ["format", "files", "status"], rows)],
                   files=files)
