"""Offline throughput of the serving simulator against TensorRT-LLM's published perf-overview
(trtllm-bench throughput, every request queued at once, fp8 weights and KV cache), before and
after calibrating two efficiency parameters per GPU on a disjoint subset; writes
reports/serving-validation.md.

Source: https://github.com/NVIDIA/TensorRT-LLM/blob/main/docs/source/performance/perf-overview.md
(Total Output Throughput, tokens/s; nvidia/Llama-3.1-8B-Instruct-FP8 on one GPU,
nvidia/Llama-3.3-70B-Instruct-FP8 at TP2 on H100 and TP1 on H200; the tables of
tests/published/test_serve_throughput.py). Fit rows: the 8B rows 128/128, 128/4096, 1000/1000,
2048/128, 5000/500 (every other); held out: the other five 8B rows and all ten 70B rows.
Parameters: the matmul efficiency of the DeviceProfile and the per-step overhead
(serving_sim.STEP_OVERHEAD_S), on a grid, minimising the worst log error of the fit rows.

Second sweep: TTFT, ITL and output tokens/s against concurrency, NVIDIA NIM's published
benchmark of Llama-3.3-70B-Instruct fp8 at TP2 on two H100s, 5000 input / 500 output tokens
(tests/data/nim_llama33_70b_h100_tp2.json, with its source and quote); the simulator's closed
loop (serving_sim.closed_loop_means), fp8 KV cache (an assumption: the profile is named "fp8").
Fit rows: concurrency 1, 25, 150; held out: 5, 50, 100, 200, 250; the same two parameters.

Run: python3 benchmarks/serving_validation.py [--quick]
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
import sys
import time
from pathlib import Path

import txcalc
from txcalc.engine.hardware import get_gpu
from txcalc.serve.infer import SERVE_MAX_BATCH
from txcalc.serve.sim import STEP_OVERHEAD_S, closed_loop_means, simulate, step_model
from txcalc.engine.timing import DeviceProfile

#: TensorRT-LLM's published perf-overview rows (tests/data/trtllm_perf_overview.json, one copy)
_PERF = json.loads((Path(__file__).resolve().parents[1] / "tests" / "data"
                    / "trtllm_perf_overview.json").read_text())
ISL_OSL = [tuple(r) for r in _PERF["isl_osl"]]
LLAMA_31_8B, LLAMA_33_70B, TP_70B = _PERF["llama-3.1-8b"], _PERF["llama-3.3-70b"], _PERF["tp_70b"]
#: trtllm-bench's default token budget per step (max_num_tokens)
MAX_NUM_TOKENS = 8192
MATMUL_GRID = (0.35, 0.45, 0.55, 0.65, 0.75)
OVERHEAD_GRID = (0.0005, 0.001, 0.002, 0.004, 0.008)


def rows(gpu: str):
    fit = [("llama-3-8b", 1, ISL_OSL[i], LLAMA_31_8B[gpu][i]) for i in range(0, 10, 2)]
    held = [("llama-3-8b", 1, ISL_OSL[i], LLAMA_31_8B[gpu][i]) for i in range(1, 10, 2)] + \
        [("llama-3.1-70b", TP_70B[gpu], ISL_OSL[i], LLAMA_33_70B[gpu][i]) for i in range(10)]
    return fit, held


def predict(model, gpu, tp, isl, osl, prof, overhead, cache) -> float:
    key = (model, gpu, tp, isl, osl, prof.flop_efficiency["matmul"], overhead)
    if key not in cache:
        sm = step_model(txcalc.load(model), gpu, tp=tp, weights="fp8", kv_dtype="fp8", profile=prof,
                        overhead_s=overhead, max_model_len=isl + osl,
                        max_num_batched_tokens=MAX_NUM_TOKENS, max_num_seqs=SERVE_MAX_BATCH)
        n = max(1000, min(4000, 2 * min(SERVE_MAX_BATCH, sm.kv_capacity_tokens // (isl + osl))))
        r = simulate(sm, n, isl, osl, rate=math.inf, max_num_batched_tokens=MAX_NUM_TOKENS,
                     max_num_seqs=SERVE_MAX_BATCH)
        cache[key] = r.output_tokens_per_s
    return cache[key]


_NIM = json.loads((Path(__file__).resolve().parents[1] / "tests" / "data"
                   / "nim_llama33_70b_h100_tp2.json").read_text())
NIM_FIT = (1, 25, 150)
NIM_METRICS = (("TTFT ms", "ttft_s", 1e3), ("ITL ms", "itl_s", 1e3),
               ("tok/s", "output_tokens_per_s", 1.0))


def nim_predict(c: int, prof, overhead: float, cache) -> dict:
    key = ("nim", c, prof.flop_efficiency["matmul"], overhead)
    if key not in cache:
        d = _NIM
        sm = step_model(txcalc.load(d["model"]), d["gpu"], tp=d["tp"], weights=d["weights"],
                        kv_dtype="fp8", profile=prof, overhead_s=overhead,
                        max_model_len=d["input_len"] + d["output_len"],
                        max_num_batched_tokens=MAX_NUM_TOKENS)
        cache[key] = closed_loop_means(sm, c, d["input_len"], d["output_len"],
                                       max_num_batched_tokens=MAX_NUM_TOKENS)
    return cache[key]


def nim_section(quick: bool, cache) -> list[str]:
    d = _NIM
    base = DeviceProfile.from_gpu(get_gpu(d["gpu"]))
    rows = [tuple(r) for r in d["rows"]]
    fit = [r for r in rows if r[0] in NIM_FIT]

    def errs(row, prof, ov):
        p = nim_predict(row[0], prof, ov, cache)
        return [p[k] * s / pub - 1 for (_, k, s), pub in zip(NIM_METRICS, row[1:])]

    def worst(mm, ov):
        prof = base.replace(flop_efficiency={"matmul": mm})
        return max(abs(math.log(1 + e)) for r in fit for e in errs(r, prof, ov))
    grid = list(itertools.product(MATMUL_GRID[1::2] if quick else MATMUL_GRID,
                                  OVERHEAD_GRID[1::2] if quick else OVERHEAD_GRID))
    mm, ov = min(grid, key=lambda p: worst(*p))
    cal = base.replace(flop_efficiency={"matmul": mm})
    lines = ["## Second sweep: TTFT / ITL / throughput against concurrency (NVIDIA NIM)", "",
             f"Source: {d['source']} ({d['what']}). txcalc model `{d['model']}` "
             f"({d['model_note']}), tp {d['tp']}, fp8 weights and KV cache, "
             f"{MAX_NUM_TOKENS} tokens per step, closed loop with the first 2 x concurrency "
             "requests as warm-up (`serving_sim.closed_loop_means`).", "",
             f"Fitted on concurrency {', '.join(map(str, NIM_FIT))}: matmul efficiency {mm}, "
             f"step overhead {ov * 1e3:g} ms (defaults 0.55, {STEP_OVERHEAD_S * 1e3:g} ms).",
             "", "| concurrency | set | metric | published | before | error | after | error |",
             "|---|---|---|---|---|---|---|---|"]
    held_b, held_a, all_b = [], [], []
    for r in rows:
        tag = "fit" if r[0] in NIM_FIT else "held out"
        pb, pa = nim_predict(r[0], base, STEP_OVERHEAD_S, cache), nim_predict(r[0], cal, ov,
                                                                              cache)
        for (name, k, s), pub in zip(NIM_METRICS, r[1:]):
            b, a = pb[k] * s, pa[k] * s
            all_b.append(abs(b / pub - 1))
            if tag == "held out":
                held_b.append(abs(b / pub - 1))
                held_a.append(abs(a / pub - 1))
            lines.append(f"| {r[0]} | {tag} | {name} | {pub:,.2f} | {b:,.2f} | "
                         f"{b / pub - 1:+.1%} | {a:,.2f} | {a / pub - 1:+.1%} |")
    lines += ["", f"Held-out median |error| (15 figures): before "
              f"{statistics.median(held_b):.1%}, after {statistics.median(held_a):.1%}; worst "
              f"after {max(held_a):.1%}; within 20 %: {sum(e <= 0.2 for e in held_a)} of "
              f"{len(held_a)}. All 24 figures uncalibrated: median "
              f"{statistics.median(all_b):.1%}.", ""]
    return lines


def main(quick: bool = False) -> str:
    lines = ["# Serving simulator against published load sweeps", "",
             "Four sweeps: TensorRT-LLM's offline throughput (first two sections), NVIDIA "
             "NIM's TTFT / ITL / throughput against concurrency (third section) and, in the "
             "last section (`benchmarks/serving_engines.py`), that NIM sweep, a vLLM V1 "
             "sweep (Qwen2.5-0.5B on an L4) and an SGLang sweep (DeepSeek-R1 fp8 at TP8 on "
             "H200, SemiAnalysis InferenceX) under each engine scheduler profile.", "",
             "Generated by `benchmarks/serving_validation.py`. Source of the published figures: "
             "https://github.com/NVIDIA/TensorRT-LLM/blob/main/docs/source/performance/"
             "perf-overview.md (trtllm-bench throughput, fp8 weights and KV cache; "
             "Llama-3.1-8B on one GPU, Llama-3.3-70B at TP2 on H100 and TP1 on H200).",
             "Simulator: `txcalc/serve/batching.py` (default scheduler), every request queued at once (`rate=inf`), "
             f"max {SERVE_MAX_BATCH} sequences, {MAX_NUM_TOKENS} tokens per step, the KV "
             "cache of `serving.kv_capacity`. Calibrated on the 8B rows 128/128, 128/4096, "
             "1000/1000, 2048/128, 5000/500; the other 15 rows per GPU are held out. "
             "Parameters: matmul efficiency (default 0.55) and the per-step overhead "
             f"(default {STEP_OVERHEAD_S * 1e3:g} ms), grid search minimising the worst log "
             "error of the fit rows.", ""]
    cache: dict = {}
    t0 = time.perf_counter()
    for gpu in ("h100", "h200"):
        base = DeviceProfile.from_gpu(get_gpu(gpu))
        fit, held = rows(gpu)
        grid = list(itertools.product(MATMUL_GRID[1::2] if quick else MATMUL_GRID,
                                      OVERHEAD_GRID[1::2] if quick else OVERHEAD_GRID))

        def worst(mm, ov):
            prof = base.replace(flop_efficiency={"matmul": mm})
            return max(abs(math.log(predict(m, gpu, tp, i, o, prof, ov, cache) / pub))
                       for m, tp, (i, o), pub in fit)
        mm, ov = min(grid, key=lambda p: worst(*p))
        cal = base.replace(flop_efficiency={"matmul": mm})
        lines += [f"## {gpu.upper()}: fitted matmul efficiency {mm}, step overhead "
                  f"{ov * 1e3:g} ms", "",
                  "| model | tp | ISL/OSL | set | published tok/s | before | error | after | "
                  "error |", "|---|---|---|---|---|---|---|---|---|"]
        errs_before, errs_after = [], []
        for tag, group in (("fit", fit), ("held out", held)):
            for m, tp, (i, o), pub in group:
                b = predict(m, gpu, tp, i, o, base, STEP_OVERHEAD_S, cache)
                a = predict(m, gpu, tp, i, o, cal, ov, cache)
                if tag == "held out":
                    errs_before.append(abs(b / pub - 1))
                    errs_after.append(abs(a / pub - 1))
                lines.append(f"| {m} | {tp} | {i}/{o} | {tag} | {pub:,} | {b:,.0f} | "
                             f"{b / pub - 1:+.1%} | {a:,.0f} | {a / pub - 1:+.1%} |")
        lines += ["", f"Held-out median |error|: before {statistics.median(errs_before):.1%}, "
                  f"after {statistics.median(errs_after):.1%}; worst after "
                  f"{max(errs_after):.1%}; within 20 %: "
                  f"{sum(e <= 0.2 for e in errs_after)} of {len(errs_after)}.", ""]
    lines += nim_section(quick, cache)
    from serving_engines import engines_section  # benchmarks/, beside this script
    lines += engines_section({}, quick)
    lines.append(f"({time.perf_counter() - t0:.0f} s to generate.)")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    text = main(quick="--quick" in sys.argv)
    out = Path(__file__).resolve().parent.parent / "reports" / "serving-validation.md"
    out.write_text(text)
    print(text)
