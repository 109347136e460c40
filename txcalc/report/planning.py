"""The planner's answers as report data: training (GPUs, layout, days, cost, the GPUs-days
frontier, memory of the best layouts) and serving (replicas, concurrency, latency).

Every number here is the planner's (``txcalc.train.planner``), copied into plain data; nothing is
re-derived (the one product formed here is a serving cost per hour: GPUs x the given price). Rates (days, seconds, MFU) are floats rounded to 6 significant digits so that the
committed reports compare equal across numpy builds; byte and GPU counts stay exact ints.
"""

from __future__ import annotations

from collections.abc import Callable

from ..units import cdiv, gib, human, plural

#: best layouts shown in the memory plot and table
N_LAYOUTS = 5


def r6(x: float | None) -> float | None:
    """A float rounded to 6 significant digits (None stays None)."""
    return None if x is None else float(f"{x:.6g}")


def _row(r) -> dict:
    """One planner TrainRow as report data."""
    return {"layout": r.layout.short(), "gpus": int(r.gpus), "memory": dict(r.memory),
            "total_bytes": int(r.total_bytes), "step_time_s": r6(r.step_time_s),
            "mfu": r6(r.mfu), "days": r6(r.days), "gpu_hours": r6(r.gpu_hours),
            "cost": r6(r.cost), "tokens_per_s": r6(r.tokens_per_s),
            **{k: r6(v) for k, v in r.bands_json().items()
               if k.rsplit("_", 1)[0] in ("days", "gpu_hours", "cost", "mfu")}}


def train_plan(req, cfg, tokens: int, gpu, progress: Callable[[str], None],
               command: str = "txcalc report") -> dict:
    """The planner's answer for a training request, its GPUs-days frontier included (one
    search: ``TrainPlan.frontier`` reads the same screen as ``best``), and the files that
    launch its best layout (txcalc.emit; ``command``, the report's, heads each file)."""
    from ..answers.common import FULL_TRAINING, planner_recipe
    from ..emit import launch_files
    from ..engine.hardware import memory_words
    from ..train.planner import plan_train

    progress("planner: searching layouts")
    # plan train's setting for the same options (answers.plan): the optimizer and loss as
    # given (else full training's), a --recipe's fp32 upcast and optimizer kernel
    optimizer = req.optimizer or FULL_TRAINING["optimizer"]
    loss = req.loss or FULL_TRAINING["loss"]
    ft, kernel = planner_recipe(req.ft, req.recipe, optimizer, loss)
    p = plan_train(cfg, gpu, tokens, days=req.days, max_gpus=req.max_gpus, n_rows=N_LAYOUTS,
                   seq=req.seq, global_batch=req.global_batch, precision=req.precision,
                   optimizer=optimizer, price_per_gpu_hour=req.price, attn_impl=req.attn,
                   finetune=ft, loss=loss, optimizer_kernel=kernel)
    progress("planner: fastest layout per GPU count")
    frontier = [_row(r) for r in p.frontier]
    s = p.setting
    return {"gpu": s.gpu.name, "gpu_memory_bytes": int(s.gpu.memory_bytes),
            "gpu_usable_bytes": s.gpu.usable_bytes, "gpu_memory_words": memory_words(s.gpu, "GiB"),
            "tokens": tokens, "seq": s.seq, "global_batch": s.global_batch,
            "min_gpus_to_fit": p.min_gpus_to_fit, "gpus_for_deadline": p.gpus_for_deadline,
            "days_limit": req.days, "price_per_gpu_hour": req.price,
            "layouts_evaluated": p.layouts_evaluated, "goodput": s.goodput,
            "model_flops": r6(p.model_flops), "hardware_flops": r6(p.hardware_flops),
            "best": _row(p.best), "layouts": [_row(r) for r in p.rows],
            "communication": [{"group": g, "collective": c["collective"], "link": c["link"],
                               "bytes_per_step": int(c["bytes_per_step"]),
                               "time_s": r6(c["time_s"]), "exposed_s": r6(c["exposed_s"])}
                              for g, c in p.best.communication.items()],
            "frontier": frontier, "notes": list(p.notes),
            "launch": launch_files(p, command, ft),
            "assumptions": plan_assumptions(s.gpu, {"layouts_evaluated": p.layouts_evaluated,
                                                    "global_batch": s.global_batch,
                                                    "seq": s.seq}, serving=False)}


def infer_plan(req, cfg, gpu, command: str = "txcalc report") -> dict:
    """The planner's answer for a serving request: plan infer's own (answers.plan's
    capacity_answer, the serving precision of the request's), and the files that launch its
    best layout, as ``plan infer --emit FORMAT`` writes them (txcalc.emit; ``command``, the
    report's, heads each file)."""
    from ..answers.plan import capacity_answer
    from ..emit import serve_launch_files
    from ..engine.hardware import memory_words
    from ..serve.kv import kv_options

    ans = capacity_answer(cfg, gpu, req.serve_context, req.concurrency, kv_dtype=req.kv_dtype,
                          precision=req.serve_precision, weights=req.weights,
                          tokens_per_s=req.tokens_per_s, gpu_file=req.gpu_file,
                          kv_opts=kv_options(engine=req.engine))
    p = ans.parts["plan"]
    rows = []
    for r in p.rows:
        d = r.to_json()
        for k in ("prefill_latency_s", "decode_tokens_per_s", "decode_tokens_per_s_per_seq"):
            d[k] = r6(d[k])
        d["gpus_per_replica"] = r.tp * r.pp
        # sequences one replica holds at the asked load; the KV bytes per GPU are per sequence
        d["seqs_per_replica"] = cdiv(req.concurrency, r.replicas)
        d["memory_at_load"] = r.memory_at(d["seqs_per_replica"])
        rows.append(d)
    return {"gpu": p.gpu.name, "gpu_memory_bytes": int(p.gpu.memory_bytes),
            "gpu_usable_bytes": p.gpu.usable_bytes, "gpu_memory_words": memory_words(p.gpu, "GiB"),
            "best": rows[0], "options": rows,
            "launch": serve_launch_files(ans, command, req.model),
            "assumptions": plan_assumptions(p.gpu, {}, serving=True)}


def plan_assumptions(gpu, plan: dict, serving: bool) -> list[str]:
    """What the planner assumed, read from its own defaults (never retyped here)."""
    from ..parallel.overheads import Overheads
    from ..engine.timing import DeviceProfile

    ov, prof = Overheads(), DeviceProfile.from_gpu(gpu)
    eff = prof.flop_efficiency
    out = [f"Time model (txcalc/engine/timing.py): a roofline per op on {gpu.name}'s datasheet peaks "
           f"(source above), at {eff.get('matmul', 1):.0%} of the dense peak "
           f"for matmuls, {eff.get('attention', 1):.0%} for attention and "
           f"{prof.bw_efficiency:.0%} of HBM bandwidth; communication per collective over "
           "the intra- and inter-node links (txcalc/parallel/comm.py).",
           f"Framework memory per GPU (txcalc/parallel/overheads.py, Overheads): CUDA context "
           f"{gib(ov.cuda_context_bytes)}, communication buffers {gib(ov.comm_buffer_bytes)} "
           f"when more than one GPU, allocator fragmentation {ov.fragmentation:.0%} of the "
           "tensors."]
    if serving:
        out.append("Serving layouts: TP x PP per replica, KV heads split over min(TP, K), a "
                   "chunked-prefill workspace per GPU; every step, a decode step and each "
                   "chunk of one prompt's prefill, is the serving step model, a roofline per "
                   "kernel class (the Linears against reading the weights, the attention "
                   "against reading the caches) plus a fixed overhead per step "
                   "(txcalc/serve/sim.py, StepModel; txcalc/train/planner.py, plan_infer).")
    else:
        out.append(f"Training search: {plan['layouts_evaluated']:,} layouts (TP x PP x DP x CP "
                   "x EP x ZeRO stage x micro-batch x recompute); global batch "
                   f"{plan['global_batch']:,} sequences of {plan['seq']:,} tokens "
                   "(txcalc/train/planner.py, plan_train).")
    return out


# --- sections --------------------------------------------------------------------------------
_ZERO_WORDS = {"0": "no ZeRO sharding (every data-parallel rank keeps whole optimizer states, "
                    "gradients and weights)",
               "1": "ZeRO stage 1 (optimizer states sharded over the data-parallel ranks)",
               "2": "ZeRO stage 2 (optimizer states and gradients sharded over the "
                    "data-parallel ranks)",
               "3": "ZeRO stage 3 / FSDP (optimizer states, gradients and weights sharded over "
                    "the data-parallel ranks, weights gathered layer by layer)",
               "3h": "ZeRO-3 hybrid shard (states sharded within a node, replicated across "
                     "nodes)"}


def layout_in_words(short: str) -> str:
    """``tp8 pp16 dp32 cp4 z2 sp v4 mb1 sel`` (``parallel.Layout.short``) in words."""
    words, without = [], []
    names = {"tp": "tensor", "pp": "pipeline", "dp": "data", "cp": "context", "ep": "expert"}
    for tok in short.split():
        num = tok.lstrip("abcdefghijklmnopqrstuvwxyz")
        head = tok[:len(tok) - len(num)]
        if head in names and num == "1":
            without.append(names[head])
        elif head == "tp":
            words.append(f"tensor parallelism over {num} GPUs (each matmul split across them)")
        elif head == "pp":
            words.append(f"a pipeline of {num} stages (consecutive layers on different GPUs)")
        elif head == "dp":
            words.append(f"{num} data-parallel replicas (each on its own share of the batch)")
        elif head == "cp":
            words.append(f"context parallelism over {num} GPUs (each sequence split along its "
                         "tokens)")
        elif head == "ep":
            words.append(f"expert parallelism over {num} GPUs (the MoE experts spread across "
                         "them)")
        elif tok.startswith("z"):
            words.append(_ZERO_WORDS.get(tok[1:], f"ZeRO {tok[1:]}"))
        elif tok == "sp":
            words.append("sequence parallelism (norm and dropout activations split over the "
                         "tensor-parallel GPUs)")
        elif head == "v":
            words.append(f"the interleaved 1F1B schedule with {num} virtual stages per GPU "
                         "(a smaller pipeline bubble)")
        elif head == "mb":
            words.append(f"micro-batches of {num} sequence{'' if num == '1' else 's'}")
        elif tok == "sel":
            words.append("selective activation recompute (the attention core recomputed in "
                         "backward)")
        elif tok == "full":
            words.append("full activation recompute (each block recomputed in backward)")
        else:
            words.append(tok)
    if without:
        words.insert(0, "no " + ", ".join(without[:-1]) + (" or " if len(without) > 1 else "")
                     + without[-1] + " parallelism")
    return "; ".join(words)


def _range(row: dict, key: str, fmt: str) -> str:
    """" (low-high)" of a banded answer, "" when the row has no band (a given throughput)."""
    lo, hi = row.get(f"{key}_low"), row.get(f"{key}_high")
    if lo is None or hi is None or lo == hi:
        return ""
    return f" ({lo:{fmt}}-{hi:{fmt}})"


def _band_text(b: dict) -> str:
    if b.get("days_low") is None or b["days_low"] == b["days_high"]:
        return ""
    return (f" Error band: {b['days_low']:,.1f} to {b['days_high']:,.1f} days, MFU "
            f"{b['mfu_low']:.1%} to {b['mfu_high']:.1%} (the 10th-90th percentile of measured / "
            "predicted step time over published test runs, reports/training-validation.md).")


def train_answer(plan: dict, name: str, single: dict) -> tuple[list[str], list[list[str]]]:
    """Paragraphs and key-figure rows of a planned training answer."""
    b = plan["best"]
    cost = ""
    if b["cost"] is not None:
        cost = f", cost {b['cost']:,.0f} at {plan['price_per_gpu_hour']:g} per GPU-hour"
    deadline = ""
    if plan["gpus_for_deadline"] is not None:
        deadline = (f" To finish within {plan['days_limit']:g} days it needs "
                    f"**{plural(plan['gpus_for_deadline'], 'GPU')}**.")
    paras = [f"**Train {name} on {plan['tokens']:,} tokens: "
             f"{plural(b['gpus'], plan['gpu'] + ' GPU')} for {b['days']:,.1f} days** "
             f"({b['gpu_hours']:,.0f} GPU-hours{cost}), layout `{b['layout']}`."
             + _band_text(b),
             f"The layout `{b['layout']}` in words: {layout_in_words(b['layout'])}.",
             f"Training fits on as few as **{plural(plan['min_gpus_to_fit'], 'GPU')}** "
             f"(each {plan['gpu_memory_words']}).{deadline} On one GPU with no "
             f"parallelism one step would need {gib(single['total'])}.",
             f"Best layout: {gib(b['total_bytes'])} per GPU, step {b['step_time_s']:,.2f} s for "
             f"{plan['global_batch']:,} x {plan['seq']:,} tokens, MFU {b['mfu']:.1%}, "
             f"{b['tokens_per_s']:,.0f} tokens/s; the whole run is "
             f"{human(plan['model_flops'], 'FLOP')} (model FLOPs; "
             f"{plan['layouts_evaluated']:,} layouts searched).",
             f"Days, GPU-hours and cost are wall-clock: the throughput time divided by a "
             f"goodput of {plan['goodput']:.0%} (the share of elapsed time spent on useful "
             f"training: Llama 3's \"higher than 90% effective training time\", "
             f"arXiv:2407.21783 section 3.3.4); step time, MFU and tokens/s are throughput."]
    paras += plan["notes"]
    rows = [["GPUs (best layout)", f"{b['gpus']:,}"],
            ["fewest GPUs that fit", f"{plan['min_gpus_to_fit']:,}"],
            ["GPUs for the deadline", "no deadline given" if plan["gpus_for_deadline"] is None
             else f"{plan['gpus_for_deadline']:,}"],
            ["layout", b["layout"]],
            ["days", f"{b['days']:,.1f}" + _range(b, "days", ",.1f")],
            ["GPU-hours", f"{b['gpu_hours']:,.0f}" + _range(b, "gpu_hours", ",.0f")],
            ["cost", "no price given" if b["cost"] is None else f"{b['cost']:,.0f}"],
            ["MFU", f"{b['mfu']:.1%}" + _range(b, "mfu", ".1%")],
            ["memory per GPU", gib(b["total_bytes"])]]
    return paras, rows


def communication_table(plan: dict) -> dict | None:
    """Collectives of one step of the best layout (the planner's communication model)."""
    from .sections import table
    if not plan["communication"]:
        return None
    return table("Communication per step of the best layout (per GPU)",
                 ["group", "collective", "link", "bytes", "time", "exposed"],
                 [[c["group"].upper(), c["collective"], c["link"], gib(c["bytes_per_step"]),
                   f"{c['time_s']:,.3f} s", f"{c['exposed_s']:,.3f} s"]
                  for c in plan["communication"]])


def infer_answer(plan: dict, name: str, context: int, concurrency: int, price: float | None
                 ) -> tuple[list[str], list[list[str]]]:
    b = plan["best"]
    cost = None if price is None else b["total_gpus"] * price
    paras = [f"**Serve {name} at {context:,} tokens of context for {concurrency:,} concurrent "
             f"sequences: {plural(b['total_gpus'], plan['gpu'] + ' GPU')}**, "
             f"{plural(b['replicas'], 'replica')} of {plural(b['gpus_per_replica'], 'GPU')} "
             f"(TP {b['tp']} x PP {b['pp']}), room for **{b['max_concurrency']:,} sequences** "
             "in the KV cache.",
             f"Prefill of one {context:,}-token prompt: {b['prefill_latency_s']:,.2f} s; decode: "
             f"{b['decode_tokens_per_s']:,.0f} tokens/s in all, "
             f"{b['decode_tokens_per_s_per_seq']:,.1f} tokens/s per sequence."
             + ("" if cost is None else f" Cost: {cost:,.2f} per hour at {price:g} per "
                "GPU-hour.")]
    rows = [["GPUs", f"{b['total_gpus']:,}"], ["replicas", f"{b['replicas']:,}"],
            ["GPUs per replica", f"{b['gpus_per_replica']} (TP {b['tp']} x PP {b['pp']})"],
            ["max concurrent sequences", f"{b['max_concurrency']:,}"],
            ["prefill latency (one prompt)", f"{b['prefill_latency_s']:,.2f} s"],
            ["decode tokens/s (all)", f"{b['decode_tokens_per_s']:,.0f}"],
            ["decode tokens/s per sequence", f"{b['decode_tokens_per_s_per_seq']:,.1f}"],
            ["cost per hour", "no price given" if cost is None else f"{cost:,.2f}"]]
    return paras, rows


def layout_memory(plan: dict) -> list[dict]:
    """The best layouts as memory bars (per GPU, by category)."""
    return [{"label": f"{r['layout']} ({plural(r['gpus'], 'GPU')})", "recompute": None,
             "categories": dict(r["memory"]), "total": r["total_bytes"]}
            for r in plan["layouts"]]


def serving_memory(plan: dict, n: int = N_LAYOUTS) -> list[dict]:
    """Per-GPU memory (at the asked load) of the first serving options, by the planner's own
    categories (``InferRow.memory_at``): weights, KV cache, prefill workspace, framework."""
    out = []
    for r in plan["options"][:n]:
        cats = dict(r["memory_at_load"])
        out.append({"label": f"TP {r['tp']} x PP {r['pp']}, {plural(r['replicas'], 'replica')} "
                             f"({plural(r['total_gpus'], 'GPU')})",
                    "recompute": None, "categories": cats, "total": sum(cats.values())})
    return out


def frontier_rows(plan: dict) -> list[list[str]]:
    return [[f"{r['gpus']:,}", r["layout"], f"{r['days']:,.1f}", f"{r['gpu_hours']:,.0f}",
             f"{r['mfu']:.1%}", gib(r["total_bytes"])] for r in plan["frontier"]]
