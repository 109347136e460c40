"""Predicted (engine) vs measured (reference model) rows, joined by module path; the report
behind ``txcalc validate``.

    step            | predicted (txcalc)                 | measured (reference/)
    ----------------|------------------------------------|---------------------------------------
    parameters      | Op.params_total per op             | numel per owning module
    forward FLOPs   | Op.fwd_flops per op                | FlopCounterMode, innermost module
    backward FLOPs  | Op.bwd_flops + recompute (total)   | FlopCounterMode over loss.backward()
    saved bytes     | TrainingMemory.op_activations      | saved_tensors_hooks, unique storages
    KV cache (cpu)  | kvcache.kv_cache_bytes             | cache storages after generate()
    memory (cpu)    | TrainingMemory.phases              | MemTracker over a real training step

Error % is (predicted - measured) / measured * 100 (txcalc.units.error_pct; 0 when both
are 0).
"""

from __future__ import annotations

import platform
import time
from collections import defaultdict
from collections.abc import Callable

import torch

from txcalc.engine.accounting import count_flops
from txcalc.engine.components import model_ops
from txcalc.model.config import ModelConfig
from txcalc.engine.memory import PRECISIONS, TrainingMemory
from txcalc.units import error_pct  # (predicted - measured) / measured, one sign
from txcalc.engine.workload import Workload

from .measure import (flops_by_module, flops_under_fake, join, layer_of, make_inputs,
                      params_by_module, saved_by_module, saved_under_fake)
from .model import DTYPES, build
QUANTITIES = ("params", "forward_flops", "saved_bytes")




def _component(module: str) -> str:
    """A module path without its block index: layers.3.attn.q_proj -> attn.q_proj."""
    parts = module.split(".")
    if "layers" in parts:
        i = parts.index("layers")
        if i + 1 < len(parts) and parts[i + 1].isdigit():
            parts = parts[:i] + parts[i + 2:]
    return ".".join(parts) or "(model)"


def _rows(joined: dict[str, list[dict]], key: Callable[[str], object]) -> dict:
    out: dict = defaultdict(lambda: {q: [0, 0] for q in QUANTITIES})
    for q, rows in joined.items():
        for r in rows:
            cell = out[key(r["module"])][q]
            cell[0] += r["predicted"]
            cell[1] += r["measured"]
    return out


def _flat(key_name, key, cells) -> dict:
    row = {key_name: key}
    for q, (p, m) in cells.items():
        row[f"{q}_predicted"], row[f"{q}_measured"] = p, m
        row[f"{q}_error_pct"] = error_pct(p, m)
    return row


def validate(cfg: ModelConfig, work: Workload, device: str = "meta",
             precision: str = "bf16-mixed", step: Callable[[str], None] = lambda s: None,
             kv_tokens: int = 0) -> dict:
    """Run the reference model and join its measurements with the engine's predictions.

    ``step(name)`` is called as each phase starts (the CLI drives a progress bar with it).
    ``meta``: params, FLOPs, saved bytes at any size (fused attention runs under
    FakeTensorMode, on the CPU kernels). ``cpu``/``cuda``: the same on real tensors, plus the
    KV cache after generate() when ``kv_tokens`` > 0.
    """
    t0 = time.perf_counter()
    dtype = DTYPES[precision]
    step("predict")
    mem = TrainingMemory(cfg, work, precision, "adamw")
    ops = model_ops(cfg)
    flops = count_flops(cfg, work)
    predicted = {q: defaultdict(int) for q in QUANTITIES}
    for op in ops:
        if op.kind == "checkpoint":  # what recompute keeps: in activations_by_op below
            continue
        predicted["params"][op.path] += op.params_total
        predicted["forward_flops"][op.path] += op.fwd_flops(work)
    predicted["saved_bytes"].update(mem.activations_by_op())  # recompute-aware

    step("build")
    fused = work.attn_impl == "flash"
    impl = "sdpa" if work.attn_impl != "eager" else "eager"
    model = build(cfg, dtype, device, attn_impl=impl, recompute=work.recompute,
                  softmax_fp32=work.softmax_fp32)
    modules = [n for n, _ in model.named_modules()]
    measured: dict[str, dict[str, int]] = {}
    step("params")
    measured["params"] = params_by_module(model)
    step("flops")
    inputs = make_inputs(model, work.batch, work.seq, work.src_seq, device=device)
    if fused and device != "cuda":  # CPU flash is counted only on fake tensors (MEASURING.md)
        measured["forward_flops"], fwd, bwd = flops_under_fake(cfg, work, dtype)
    else:
        measured["forward_flops"], fwd, bwd = flops_by_module(model, inputs)
    step("saved bytes")
    if fused and device == "meta":
        measured["saved_bytes"], _ = saved_under_fake(cfg, work, dtype, work.softmax_fp32)
    else:
        model.zero_grad(set_to_none=True)
        measured["saved_bytes"], _ = saved_by_module(model, inputs)

    joined = {q: join(predicted[q], measured[q], modules) for q in QUANTITIES}
    first: dict[str, int] = {}
    for i, name in enumerate(modules):
        first.setdefault(_component(name), i)

    def order(component: str) -> int:  # forward order of the model's modules
        return first.get(component, len(first))
    totals = {q: [sum(predicted[q].values()), sum(measured[q].values())] for q in QUANTITIES}
    # recomputed forward work (selective/full) runs inside backward: FlopCounterMode counts it
    totals["backward_flops"] = [flops.backward + flops.recompute, bwd]
    totals["forward_flops"][1] = fwd
    report = {
        "model": cfg.name, "device": device, "precision": precision, "dtype": str(dtype),
        "batch": work.batch, "seq": work.seq, "src_seq": work.src_seq,
        "attn_impl": work.attn_impl, "recompute": work.recompute,
        "torch": torch.__version__, "python": platform.python_version(),
        "totals": {q: {"predicted": p, "measured": m, "error_pct": error_pct(p, m)}
                   for q, (p, m) in totals.items()},
        "components": [_flat("component", k, v) for k, v in
                       sorted(_rows(joined, _component).items(), key=lambda kv: order(kv[0]))],
        "layers": [_flat("layer", _layer_label(s, i), v) for (s, i), v in
                   sorted(_rows(joined, layer_of).items(), key=lambda kv: (kv[0][0], kv[0][1]))],
        "modules": {q: rows for q, rows in joined.items()},
    }
    if kv_tokens and device != "meta" and cfg.family != "encoder" and cfg.head == "lm":
        step("kv cache")
        report["kv_cache"] = _kv_cache(model, cfg, work, kv_tokens, precision)
    if device == "cpu":  # memory by phase of a real training step (MemTracker)
        step("memory")
        report["memory_phases"] = _memory_phases(cfg, work, precision)
    if device != "meta":  # per-op times of forward + backward (torch.profiler), top 20
        from .measure import op_times
        report["op_times"] = op_times(model, inputs)[:20]
    report["seconds"] = time.perf_counter() - t0
    return report


def _memory_phases(cfg, work, precision: str) -> dict:
    from .train import memory_by_phase

    measured = memory_by_phase(cfg, work, precision, "adamw")
    predicted = TrainingMemory(cfg, work, precision, "adamw").phases()
    return {phase: {"predicted": predicted[phase]["total"], "measured": measured[phase]["total"],
                    "error_pct": error_pct(predicted[phase]["total"], measured[phase]["total"])}
            for phase in ("after_forward", "peak_forward", "after_backward", "peak_backward",
                          "after_step", "peak")}


def _layer_label(stack: str, layer: int) -> str:
    name = str(layer) if layer >= 0 else "outside blocks"
    return f"{stack} {name}" if stack else name


def _kv_cache(model, cfg, work, new_tokens: int, precision: str) -> dict:
    from txcalc.engine.kvcache import kv_cache_bytes

    from .measure import kv_cache_after_generate

    kv_dtype = {4: "fp32", 2: "bf16"}[PRECISIONS[precision].act]
    nbytes, context = kv_cache_after_generate(model.eval(), work.batch, work.seq, new_tokens,
                                              work.src_seq)
    model.train()
    pred = kv_cache_bytes(cfg, context, work.batch, kv_dtype, src_seq=work.src_seq)
    return {"context": context, "predicted": pred, "measured": nbytes,
            "error_pct": error_pct(pred, nbytes)}


def to_markdown(report: dict) -> str:
    """The report as Markdown: totals, per component, per layer."""
    r = report
    lines = [f"# txcalc validate: {r['model']} on {r['device']}", "",
             f"batch {r['batch']}, seq {r['seq']}"
             + (f", src_seq {r['src_seq']}" if r["src_seq"] != r["seq"] else "")
             + f", attention {r['attn_impl']}, recompute {r['recompute']}, {r['precision']}"
             f" ({r['dtype']}), torch {r['torch']}; {r['seconds']:.1f} s", "",
             "Predicted: the txcalc engine. Measured: the reference PyTorch model "
             "(reference/model.py): numel, FlopCounterMode, saved_tensors_hooks"
             + (", KV cache after generate()" if "kv_cache" in r else "") + ".",
             "Error % = (predicted - measured) / measured.", "",
             "## Totals", "", "| quantity | predicted | measured | error % |", "|---|---:|---:|---:|"]
    for q, t in r["totals"].items():
        lines.append(f"| {q} | {t['predicted']:,} | {t['measured']:,} | {t['error_pct']:.4f} |")
    if "kv_cache" in r:
        kv = r["kv_cache"]
        lines.append(f"| kv_cache_bytes (context {kv['context']}) | {kv['predicted']:,} | "
                     f"{kv['measured']:,} | {kv['error_pct']:.4f} |")
    if r.get("memory_phases"):
        lines += ["", "## Memory of a training step (AdamW; MemTracker, real CPU run)", "",
                  "| phase | predicted | measured | error % |", "|---|---:|---:|---:|"]
        for phase, t in r["memory_phases"].items():
            lines.append(f"| {phase} | {t['predicted']:,} | {t['measured']:,} | "
                         f"{t['error_pct']:.4f} |")
    if r.get("op_times"):
        lines += ["", "## Time per op (torch.profiler, forward + backward, self time)", "",
                  "| op | calls | CPU µs | device µs | input shapes |", "|---|---:|---:|---:|---|"]
        for t in r["op_times"]:
            lines.append(f"| {t['op']} | {t['calls']} | {t['cpu_us']:.0f} | "
                         f"{t['device_us']:.0f} | {t['shapes'][:60]} |")
    for title, rows, key in (("Per component (summed over layers)", r["components"],
                              "component"), ("Per layer", r["layers"], "layer")):
        lines += ["", f"## {title}", "",
                  f"| {key} | params pred | params meas | err % | fwd FLOPs pred | "
                  "fwd FLOPs meas | err % | saved B pred | saved B meas | err % |",
                  "|---|" + "---:|" * 9]
        for row in rows:
            cells = []
            for q in QUANTITIES:
                cells += [f"{row[q + '_predicted']:,}", f"{row[q + '_measured']:,}",
                          f"{row[q + '_error_pct']:.4f}"]
            lines.append(f"| {row[key]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
