"""Serving throughput with fp8 weights (serve.infer.serve_throughput) against TensorRT-LLM's
published perf-overview (Total Output Throughput, tokens/s, trtllm-bench throughput, PyTorch
backend, nvidia/Llama-3.1-8B-Instruct-FP8 and nvidia/Llama-3.3-70B-Instruct-FP8, fp8 KV cache),
https://github.com/NVIDIA/TensorRT-LLM/blob/main/docs/source/performance/perf-overview.md

Calibration on a disjoint subset, per GPU: the matmul efficiency and the bandwidth efficiency
of the device profile are fitted (grid, least worst log error) on the 8B rows 128/128,
128/4096, 1000/1000, 2048/128, 5000/500; every other row (the other five 8B rows and all ten
70B rows, 70B at TP2 on H100, TP1 on H200) is then predicted.

Engine settings: trtllm-bench picks max_batch_size and max_num_tokens by its heuristic
(serve.infer.trtllm_bench_settings, after tensorrt_llm/bench/build/tuning.py calc_engine_setting /
finetune_setting): on the H200 it caps 8B 128/2048 at 896 sequences where txcalc's KV cache
holds 932, and 128/128 at 4096 on both GPUs (it was a flat 2048 here before).

Time model: each decode step is serving_sim.StepModel.step_s (the one step model plan_infer
and the simulator use): a roofline per kernel class, the GEMMs against the weights and the
attention against the KV cache read (they run one after the other, so the KV read does not
hide under the GEMMs' compute), plus serving_sim.STEP_OVERHEAD_S (4 ms). The prompts ride in
those steps and are timed by the same StepModel.step_s (a step of k whole prompts and B - k
decodes; attention core in bf16: fp8 context FMHA is an opt-in build flag of TensorRT-LLM's
TensorRT backend, ``use_fp8_context_fmha``, applied only to FP8 checkpoints,
tensorrt_llm/builder.py; what the PyTorch backend of these tables runs is not documented that
we could find).

Measured (this commit): H100 fit (matmul 0.6, bandwidth 0.8), H200 fit (0.45, 0.8); all 30
held-out rows within 25 %: worst on H100 70B 1000/1000 +21.6 % (median 11.4 %), on H200 8B
20000/2000 -22.1 % (median 9.1 %). With the prompts' own per-op formula (before the prompts
went through StepModel) they were +24.0 % / 11.5 % and -23.7 % / 9.1 %.
"""

import itertools
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from txcalc import load
from txcalc.cli import app

from txcalc.errors import TxcalcError
from txcalc.engine.hardware import get_gpu
from txcalc.errors import PlanError
from txcalc.serve.infer import serve_throughput
from txcalc.serve.sim import STEP_OVERHEAD_S, step_model
from txcalc.engine.timing import DeviceProfile

#: TensorRT-LLM's published perf-overview rows (tests/data/trtllm_perf_overview.json, one copy)
_PERF = json.loads((Path(__file__).resolve().parents[2] / "tests" / "data"
                    / "trtllm_perf_overview.json").read_text())
ISL_OSL = [tuple(r) for r in _PERF["isl_osl"]]
LLAMA_31_8B, LLAMA_33_70B, TP_70B = _PERF["llama-3.1-8b"], _PERF["llama-3.3-70b"], _PERF["tp_70b"]


def _tok_s(model, gpu, tp, isl, osl, prof):
    return serve_throughput(load(model), gpu, isl, osl, tp=tp, weights="fp8", kv_dtype="fp8",
                            profile=prof)["output_tokens_per_s"]


def _held_out_errors(gpu):
    """(fitted profile, sorted |error| of the 15 held-out rows) of one GPU."""
    base = DeviceProfile.from_gpu(get_gpu(gpu))
    fit = [("llama-3-8b", 1, ISL_OSL[i], LLAMA_31_8B[gpu][i]) for i in range(0, 10, 2)]
    held = [("llama-3-8b", 1, ISL_OSL[i], LLAMA_31_8B[gpu][i]) for i in range(1, 10, 2)] + \
        [("llama-3.1-70b", TP_70B[gpu], ISL_OSL[i], LLAMA_33_70B[gpu][i]) for i in range(10)]

    def worst(prof, rows):
        return max(abs(math.log(_tok_s(m, gpu, tp, i, o, prof) / pub))
                   for m, tp, (i, o), pub in rows)
    grid = [base.replace(flop_efficiency={"matmul": mm}, bw_efficiency=bw)
            for mm, bw in itertools.product((0.3, 0.45, 0.6), (0.55, 0.65, 0.8))]
    prof = min(grid, key=lambda p: worst(p, fit))
    return prof, sorted(abs(_tok_s(m, gpu, tp, i, o, prof) / pub - 1)
                        for m, tp, (i, o), pub in held)


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_fp8_throughput_vs_tensorrt_llm(gpu):
    _, errors = _held_out_errors(gpu)
    assert errors[-1] <= 0.40
    assert errors[len(errors) // 2] <= 0.20


def test_serve_throughput_prefill_bound_row_uncalibrated():
    """A prefill-dominated row (2048 in, 128 out) is compute-bound on the fp8 peak: within 10 %
    of TensorRT-LLM's 3,450 tokens/s on one H100 with the default profile (measured +3.6 %)."""
    r = serve_throughput(load("llama-3-8b"), "h100", 2048, 128, weights="fp8", kv_dtype="fp8")
    assert abs(r["output_tokens_per_s"] / 3450 - 1) <= 0.10


def test_fp8_throughput_every_held_out_row_within_25_percent():
    """Issue 15's acceptance: every held-out row (calibration on the other five 8B rows per
    GPU) within 25 % of TensorRT-LLM's figure (measured: worst 21.6 % on H100, 22.1 % on H200)."""
    assert max(_held_out_errors(gpu)[1][-1] for gpu in ("h100", "h200")) <= 0.25


@pytest.mark.parametrize("model,gpu,tp,isl,osl", [("llama-3-8b", "h100", 1, 1000, 1000),
                                                  ("llama-3.1-70b", "h100", 2, 128, 2048),
                                                  ("llama-3.1-70b", "h200", 1, 5000, 500)])
def test_decode_step_agrees_with_the_step_simulator(model, gpu, tp, isl, osl):
    """One step model: serve_throughput's decode step, plan_infer's decode step and the step
    simulator's StepModel (coefficients read from the engine separately) at the same batch and
    mean context are the same number (they were within 0.4 % as three formulas), all with the
    one constant serving_sim.STEP_OVERHEAD_S; without it serve_throughput's step is that much
    shorter."""
    from txcalc.serve.infer import plan_infer
    r = serve_throughput(load(model), gpu, isl, osl, tp=tp, weights="fp8", kv_dtype="fp8")
    b, ctx = r["batch"], isl + osl // 2
    sm = step_model(load(model), gpu, tp=tp, weights="fp8", kv_dtype="fp8", max_model_len=isl + osl)
    assert r["step_overhead_s"] == sm.overhead_s == STEP_OVERHEAD_S
    assert r["decode_step_s"] == pytest.approx(sm.step_s(b, b, b * ctx, b * ctx), rel=1e-12)
    row = plan_infer(load(model), gpu, ctx, b, weights="fp8", kv_dtype="fp8",
                     layouts={(tp, 1)}).best
    assert row.replicas == 1
    assert 1 / row.decode_tokens_per_s_per_seq == pytest.approx(r["decode_step_s"], rel=1e-12)
    r0 = serve_throughput(load(model), gpu, isl, osl, tp=tp, weights="fp8", kv_dtype="fp8",
                          overhead_s=0)
    assert r0["decode_step_s"] == pytest.approx(r["decode_step_s"] - STEP_OVERHEAD_S)
    assert r0["output_tokens_per_s"] > r["output_tokens_per_s"]
    p0 = plan_infer(load(model), gpu, ctx, b, weights="fp8", kv_dtype="fp8", layouts={(tp, 1)},
                    overhead_s=0).best
    assert 1 / p0.decode_tokens_per_s_per_seq == pytest.approx(r0["decode_step_s"], rel=1e-12)


@pytest.mark.parametrize("model,gpu,tp,isl,osl,kw", [
    ("llama-3-8b", "h100", 1, 2048, 128, dict(weights="fp8", kv_dtype="fp8")),
    ("llama-3.1-70b", "h200", 2, 5000, 500, dict(weights="fp8", kv_dtype="fp8")),
    ("mixtral-8x7b", "h100", 4, 1000, 1000, {}),
    ("llama-3-8b", "a100", 1, 20000, 2000, dict(weights="int4-g128")),
    ("llama-3-8b", "h100", 1, 5000, 500, dict(weights="fp8", attention_dtype="fp8"))])
def test_prompts_are_timed_by_the_step_model(model, gpu, tp, isl, osl, kw):
    """One rule for a step's time, prompts included: every step of serve_throughput's cycle,
    k whole prompts of isl tokens (isl tokens, one logit row, isl (isl + 1) / 2 causal pairs,
    nothing cached read each) beside B - k decodes at the mean context isl + osl // 2, takes
    exactly the seconds StepModel.step_s gives that composition (the step simulator's
    accounting), with q = B // osl prompts in osl - B mod osl steps and q + 1 in the others;
    throughput is B x osl over the cycle. Covers dense, MoE, TP, weight-only int4 and fp8
    attention. The prompts had their own per-op formula before (op_efficiency per op, no step
    overhead, no weight read): these equalities fail on it."""
    from txcalc.serve.infer import trtllm_bench_settings
    r = serve_throughput(load(model), gpu, isl, osl, tp=tp, **kw)
    sm = step_model(load(model), gpu, tp=tp, kv_capacity_tokens=0, **kw)
    b, ctx = r["batch"], isl + osl // 2
    s = trtllm_bench_settings(load(model), gpu, isl, osl, tp=tp, weights=kw.get("weights"),
                              kv_dtype=kw.get("kv_dtype", "bf16"))
    assert b <= s["max_num_tokens"] * osl // (isl + osl)
    q, extra = divmod(b, osl)
    want = [(osl - extra, q)] + ([(extra, q + 1)] if extra else [])
    assert [(c["count"], c["prompts"]) for c in r["cycle_steps"]] == want
    cycle = 0.0
    for count, k in want:
        sec = sm.step_s((b - k) + k * isl, b, (b - k) * ctx + k * isl * (isl + 1) // 2,
                        (b - k) * ctx)
        step = next(c for c in r["cycle_steps"] if c["prompts"] == k)
        assert step["step_s"] == sec  # the same float: one rule
        cycle += count * sec
    assert r["output_tokens_per_s"] == pytest.approx(b * osl / cycle, rel=1e-12)
    assert r["decode_step_s"] == sm.step_s(b, b, b * ctx, b * ctx)
    assert r["prefill_s_per_request"] == pytest.approx((cycle - osl * r["decode_step_s"]) / b,
                                                       rel=1e-9)


@pytest.mark.parametrize("model,gpu,kw", [("llama-3-8b", "h100", {}),
                                           ("llama-3.1-70b", "h200", dict(weights="fp8")),
                                           ("mixtral-8x7b", "a100", {})])
def test_plan_infer_prefill_latency_is_step_model_chunks(model, gpu, kw):
    """plan_infer's prefill latency of one 20,000-token prompt is three steps of the serving
    step model, as the simulator composes chunks of 8,192 (PREFILL_CHUNK) tokens: 8,192 fresh
    tokens; 8,192 after 8,192 cached; 3,616 after 16,384 with the one logit row. The same
    float (it had its own per-op roofline before, 5-14 % longer)."""
    from txcalc.serve.infer import PREFILL_CHUNK, plan_infer
    assert PREFILL_CHUNK == 8192
    row = plan_infer(load(model), gpu, 20000, 1, **kw).best
    sm = step_model(load(model), gpu, tp=row.tp, kv_capacity_tokens=0, **kw)
    c = 8192
    want = sm.step_s(c, 0, c * (c + 1) // 2, 0) \
        + sm.step_s(c, 0, c * c + c * (c + 1) // 2, c) \
        + sm.step_s(3616, 1, 3616 * 2 * c + 3616 * 3617 // 2, 2 * c)
    assert row.prefill_latency_s == want


def test_step_is_a_roofline_per_kernel_class():
    """At a large decode batch the GEMMs are compute-bound and the attention is bound by the
    KV read, one kernel after the other: the step is their sum (plus the overhead), longer
    than one roofline over the whole step. Llama 3 8B fp8 on one H100, 512 sequences of 2,048
    tokens: compute 512 x 2 x (Linear parameters) FLOPs at the fp8 matmul rate, KV 512 x
    2,048 x 64 KiB (fp8: 2 x 32 layers x 8 heads x 128) at the achievable bandwidth."""
    sm = step_model(load("llama-3-8b"), "h100", weights="fp8", kv_dtype="fp8", max_model_len=4096)
    assert sm.kv_bytes_per_token == 2 * 32 * 8 * 128
    # Llama 3 8B: 8,030,261,248 parameters = two 128,256 x 4,096 matrices (embedding, head)
    # + 266,240 norm weights + the blocks' Linears; 2 FLOPs per weight per token
    assert sm.lin_flops_per_token == 2 * (8_030_261_248 - 2 * 128_256 * 4096 - 266_240)
    assert sm.head_flops_per_row == 2 * 128_256 * 4096
    assert sm.logit_bytes_per_row == 128_256 * 4  # fp32 logits
    b, ctx = 512, 2048
    lin = (b * sm.lin_flops_per_token + b * sm.head_flops_per_row) / sm.matmul_flops_per_s
    kv = b * ctx * sm.kv_bytes_per_token / sm.bytes_per_s
    attn = max(b * ctx * sm.attn_flops_per_pair / sm.attn_flops_per_s, kv)
    assert lin > (sm.dense_weight_bytes + b * sm.logit_bytes_per_row) / sm.bytes_per_s
    assert sm.step_s(b, b, b * ctx, b * ctx) == pytest.approx(sm.overhead_s + lin + attn)
    assert sm.step_s(b, b, b * ctx, b * ctx) > sm.overhead_s + max(lin, kv) * 1.2


def test_serve_throughput_attention_dtype():
    """fp8 attention speeds a long prompt's prefill (the attention core on the fp8 peak);
    a dtype the GPU has no peak for is refused, naming it."""
    kw = dict(weights="fp8", kv_dtype="fp8")
    bf16 = serve_throughput(load("llama-3-8b"), "h100", 20000, 2000, **kw)
    fp8 = serve_throughput(load("llama-3-8b"), "h100", 20000, 2000, attention_dtype="fp8", **kw)
    assert fp8["prefill_s_per_request"] < bf16["prefill_s_per_request"]
    with pytest.raises(PlanError, match="fp4"):
        serve_throughput(load("llama-3-8b"), "a100", 128, 128, attention_dtype="fp4")
    with pytest.raises(TxcalcError, match=r"overhead_s \(-1\)"):
        serve_throughput(load("llama-3-8b"), "h100", 128, 128, overhead_s=-1)


def _cli(*args):
    return CliRunner().invoke(app, ["plan", "infer", *args])


def test_cli_plan_infer_rate_inf_is_serve_throughput():
    """``txcalc plan infer MODEL --weights fp8 --input-len I --output-len O --rate inf`` (the
    offline max-throughput mode) answers serve_throughput's output tokens/s: for Llama 3.1 8B
    fp8 on one H200 at 128/2048 (a held-out row) within 10 % of TensorRT-LLM's 26,221
    tokens/s (perf-overview.md, Llama 3.1 8B table, H200 TP1 FP8) at the default efficiencies
    (measured -1.7 %); unpinned, it picks TP 1 for the 8B and TP 2 for Llama 3.3 70B on H100,
    the perf-overview's own layouts, 70B 128/2048 within 25 % of its 6,651 (measured +12.5 %)."""
    r = _cli("llama-3-8b", "--gpu", "h200", "--weights", "fp8", "--kv-dtype", "fp8",
             "--input-len", "128", "--output-len", "2048", "--rate", "inf", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    want = serve_throughput(load("llama-3-8b"), "h200", 128, 2048, weights="fp8", kv_dtype="fp8")
    assert d["tp"] == 1 and d["rate"] == "inf"
    assert d["output_tokens_per_s"] == want["output_tokens_per_s"]
    assert abs(d["output_tokens_per_s"] / LLAMA_31_8B["h200"][ISL_OSL.index((128, 2048))] - 1) \
        <= 0.10
    r70 = _cli("llama-3.1-70b", "--gpu", "h100", "--weights", "fp8", "--kv-dtype", "fp8",
               "--input-len", "128", "--output-len", "2048", "--rate", "inf", "--json")
    assert r70.exit_code == 0, r70.output
    d70 = json.loads(r70.output)
    assert d70["tp"] == TP_70B["h100"] == 2
    assert abs(d70["output_tokens_per_s"] / LLAMA_33_70B["h100"][1] - 1) <= 0.25
    text = _cli("llama-3-8b", "--gpu", "h200", "--weights", "fp8", "--kv-dtype", "fp8",
                "--input-len", "128", "--output-len", "2048", "--rate", "inf", "--tp", "1")
    assert text.exit_code == 0 and "output tokens/s" in text.output


def test_cli_plan_infer_rate_inf_bad_tp(capsys):
    from tests.cli.test_bad_input import check_cli_error
    check_cli_error(capsys, ["plan", "infer", "llama-3-8b", "--gpu", "h200", "--input-len",
                             "128", "--output-len", "2048", "--rate", "inf", "--tp", "3"],
                    "tp (3)", "32 attention heads")


def test_trtllm_bench_settings_h200_8b():
    """trtllm-bench's heuristic by hand for Llama 3.1 8B fp8 (fp8 KV) on one H200 at 128/2048
    (tensorrt_llm/bench/build/tuning.py): 2 x 32 layers x 8 KV heads x 128 x 1 byte = 64 KiB
    per token; engine 8,030,261,248 parameters x 1 byte = 7.479 GiB; CUDA's total 0.99 x 141
    GiB = 139.59 GiB; requests = (139.59 - 7.479) x 0.9 / (64 KiB x 2176 / GiB = 0.1328) =
    895.2 -> max_bs 128 ceil(895.2 / 128) = 896 (below the 932 txcalc's KV cache holds);
    tokens 895.2 x (1 + 128/2048) = 951 -> 2048 (its floor)."""
    from txcalc.serve.infer import trtllm_bench_settings
    s = trtllm_bench_settings(load("llama-3-8b"), "h200", 128, 2048, weights="fp8", kv_dtype="fp8")
    assert s["kv_cache_max_requests"] == pytest.approx(895.2, abs=0.05)
    assert (s["max_batch_size"], s["max_num_tokens"]) == (896, 2048)
    # a format trtllm-bench does not tune: TensorRT-LLM's BuildConfig defaults
    d = trtllm_bench_settings(load("llama-3-8b"), "h200", 128, 2048, weights="int4-g128")
    assert (d["max_batch_size"], d["max_num_tokens"]) == (2048, 8192)
