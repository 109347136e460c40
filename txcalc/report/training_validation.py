"""reports/training-validation.md: the planner's step time and memory against published
measured training runs (txcalc/data/training_runs.json), before and after the fitted
efficiencies, with the fit/test split and the error band; and the planner's GPUs for a
deadline against the GPUs published runs used (txcalc/data/published_deadline_runs.json,
``train.deadline_runs``), whose answers are kept in reports/training-validation-deadline.json
with the fingerprint of what they depend on (reused only while it is unchanged).

    python3 -m txcalc.report.training_validation            # rewrite the report
    python3 -m txcalc.report.training_validation --check    # exit 1 if the file is stale
    python3 -m txcalc.report.training_validation --fit      # fit the efficiencies (minutes)
                                                             #   and print timing's constants

"before": the single efficiencies every GPU had until issue 17 (matmul 0.55, attention 0.45,
no shape dependence); "after": timing.GPU_EFFICIENCY, MATMUL_HALF_DIM and the FlashAttention
shape tables. The band is timing.TIME_RATIO_BAND; ``band_from_rows`` recomputes it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..train.deadline_runs import runs_path as deadline_runs_path
from ..train.published_runs import (Row, band, evaluate_runs, fit_efficiencies, load_runs,
                                    median_abs, runs_path)

REPORT = Path(__file__).resolve().parents[2] / "reports" / "training-validation.md"
#: the deadline table's answers with their keys (train.deadline_runs.evaluate's cache)
DEADLINE_CACHE = REPORT.with_name("training-validation-deadline.json")
#: the acceptance goals (issue 17): test-set median |throughput error| and every memory figure
GOAL_THROUGHPUT = 0.10
GOAL_MEMORY = 0.10


def before_profile(gpu_name: str):
    """The profile every GPU had before issue 17: one matmul and attention efficiency."""
    from ..engine.hardware import get_gpu
    from ..engine.timing import DEFAULT_FLOP_EFFICIENCY, DeviceProfile
    return DeviceProfile.from_gpu(get_gpu(gpu_name)).replace(
        flop_efficiency=dict(DEFAULT_FLOP_EFFICIENCY), matmul_half_dim=0.0,
        attention_shape=False)


def read_deadline_cache(path: Path = DEADLINE_CACHE) -> dict:
    """The kept deadline answers (``{}`` when the file is missing or unreadable: every answer
    is then searched again)."""
    import json
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("answers", {})
    except (OSError, ValueError, AttributeError):
        return {}


def write_deadline_cache(kept: dict, path: Path = DEADLINE_CACHE) -> None:
    import json
    doc = {"_doc": "Generated with reports/training-validation.md by python3 -m "
                   "txcalc.report.training_validation: the planner's answers to "
                   "txcalc/data/published_deadline_runs.json, each reused while its key "
                   "(train.deadline_runs.run_key) is unchanged. Do not edit by hand.",
           "answers": kept}
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def compute(runs=None, deadline_cache: dict | None = None) -> dict:
    """Rows before and after, the band recomputed from the test rows, the summary figures;
    the deadline rows (answers reused from ``deadline_cache``, default the committed file,
    where their key matches)."""
    from ..train import deadline_runs
    runs = runs if runs is not None else load_runs()
    before = evaluate_runs(runs, before_profile)
    after = evaluate_runs(runs)
    lo, hi, n = band(after, "test")
    cache = read_deadline_cache() if deadline_cache is None else deadline_cache
    deadline, kept = deadline_runs.evaluate(cache=cache)
    return {"runs": runs, "before": before, "after": after, "band": (lo, hi, n),
            "deadline": deadline, "deadline_cache": kept}


def summary(rows: list[Row], split: str) -> dict:
    sel = [r for r in rows if r.run.split == split and not r.pending]
    t = [r.throughput_error for r in sel if r.throughput_error is not None]
    m = [r.memory_error_counts for r in sel if r.memory_error_counts is not None]
    reserved = [r for r in sel if r.memory_error is not None and r.memory_error_counts is None]
    return {"n_time": len(t), "median_abs_throughput": median_abs(t),
            "n_memory": len(m), "max_abs_memory": max((abs(x) for x in m), default=None),
            "n_reserved": len(reserved)}


def inside_band(rows: list[Row], split: str, lo: float, hi: float) -> tuple[int, int]:
    ratios = [r.time_ratio for r in rows if r.run.split == split and r.time_ratio is not None]
    return sum(lo <= x <= hi for x in ratios), len(ratios)


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _abs_pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _tok(row: Row, measured: bool) -> str:
    s = row.run.setup
    if measured:
        t = row.measured_step_s
    else:
        t = None if row.predicted is None else row.predicted["step_time_s"]
    if t is None:
        return "-"
    return f"{s['global_batch'] * s['seq'] / (t * s['gpus']):,.0f}"


def _gib(b) -> str:
    return "-" if b is None else f"{b / 2**30:.1f}"


def render(data: dict) -> str:
    from ..engine import timing
    before, after = data["before"], data["after"]
    lo, hi, n = data["band"]
    out = ["# Training validation: published runs against the planner", "",
           "Generated by `python3 -m txcalc.report.training_validation` from "
           "`txcalc/data/training_runs.json` (each run's source, exact table row, setup and "
           "assumptions are listed below) and, for the last section (GPUs for a deadline), "
           "`txcalc/data/published_deadline_runs.json`. Do not edit by hand; "
           "`tests/published/test_training_validation.py` and "
           "`tests/published/test_deadline_runs.py` check that this file is current.", "",
           "Throughput is tokens/s per GPU; its error is predicted / measured - 1 (equal to "
           "measured / predicted step time - 1). **before**: one matmul efficiency (0.55) and "
           "one attention efficiency (0.45) for every GPU, no shape dependence. **after**: "
           "`timing.GPU_EFFICIENCY` (matmul fitted per GPU on the fit rows), "
           "`timing.MATMUL_HALF_DIM` (fitted), FlashAttention-2's speed by sequence length and "
           "head dimension (sourced tables). Fit rows were used to fit; test rows never were. "
           "Each row's `flags` name its setup features in the planner's words (a kernel stack "
           "`txcalc.engine.stacks`, communication overlap, partial or every-N-th-block recompute; "
           "`published_runs.FLAGS`); the status column lists those applied. A pending row "
           "(none today) would be predicted where possible but left out of every statistic. "
           "Fit and test rows alternate by model size within each published table (the "
           "split was fixed before any test result was looked at); the H100's fit rows are "
           "the 1.7B, 16B, 70B, 177B and 462B Megatron-Core rows. Throughput figures are "
           "benchmark step times: no goodput factor (`timing.GOODPUT` applies to the "
           "planner's wall-clock days and GPU-hours only).", "",
           "## Fitted constants", "",
           "| GPU | matmul (large GEMM) | fitted on | fused attention (hd 128, 8k) |",
           "|---|---:|---|---:|"]
    for gpu, e in timing.GPU_EFFICIENCY.items():
        n_fit = sum(1 for r in after if r.run.gpu == gpu and r.run.split == "fit"
                    and r.time_ratio is not None)
        how = f"{n_fit} fit rows" if n_fit else "nothing yet: the default (its runs are pending)"
        out.append(f"| {gpu} | {e['matmul']:.3f} | {how} | {e['attention']:.3f} (sourced) |")
    out += ["", f"MATMUL_HALF_DIM = {timing.MATMUL_HALF_DIM:g} (smallest GEMM dimension after "
            "TP at which a matmul keeps half its large-GEMM efficiency), the best of the "
            "searched grid (`published_runs.HALF_DIM_GRID`); the fit runs hardly constrain it "
            "(the large-GEMM efficiency absorbs it; their local GEMMs are wide), so shape "
            "dependence stays off until runs with narrower GEMMs are fitted.", "",
            "## Error band", "",
            f"Measured / predicted step time over the {n} test rows: 10th percentile (rounded outward to a measured ratio) "
            f"{lo:.3f}, 90th percentile {hi:.3f} (`timing.TIME_RATIO_BAND` = "
            f"({timing.TIME_RATIO_BAND[0]:.3f}, {timing.TIME_RATIO_BAND[1]:.3f}) from "
            f"{timing.TIME_BAND_RUNS} rows). A time, day or GPU-hour answer T is given as "
            "[T x low, T x high]; an MFU or throughput M as [M / high, M / low]. The band is "
            "taken from the test rows themselves, so their coverage (below) checks the "
            "wiring rather than proving the band; the fit rows are the out-of-band check "
            "(fitted, so tighter).",
            ""]
    for split in ("test", "fit"):
        k, m = inside_band(after, split, lo, hi)
        out.append(f"- {split} rows inside the band: {k} of {m}")
    out += ["", "## Summary", "",
            "| split | rows with time | median abs throughput error before | after | "
            "rows with allocated peak | max abs memory error | rows with reserved peak (not "
            "compared) |", "|---|---:|---:|---:|---:|---:|---:|"]
    for split in ("fit", "test"):
        sb, sa = summary(before, split), summary(after, split)
        out.append(f"| {split} | {sa['n_time']} | {_abs_pct(sb['median_abs_throughput'])} | "
                   f"{_abs_pct(sa['median_abs_throughput'])} | {sa['n_memory']} | "
                   f"{_abs_pct(sa['max_abs_memory'])} | {sa['n_reserved']} |")
    st = summary(after, "test")
    ok_t = st["median_abs_throughput"] is not None and st["median_abs_throughput"] < GOAL_THROUGHPUT
    ok_m = st["max_abs_memory"] is not None and st["max_abs_memory"] <= GOAL_MEMORY
    out += ["", f"Goals (issue 17), test rows: median abs throughput error under "
            f"{GOAL_THROUGHPUT:.0%}: **{'met' if ok_t else 'not met'}**; every memory figure "
            f"within {GOAL_MEMORY:.0%}: **{'met' if ok_m else 'not met'}**"
            f"{'' if st['n_memory'] else ' (no test row publishes an allocated peak)'}.", "",
            "Memory is compared like for like: txcalc predicts allocated bytes (live tensors, "
            "`torch.cuda.max_memory_allocated`), so only measured peaks of that statistic count "
            "towards the goal, and the prediction compared is the tensors alone (`predict`'s "
            "`allocated_bytes`), without the planner's framework allowance (NCCL and bucket "
            "buffers, which NCCL allocates outside PyTorch's allocator, and 5 % fragmentation "
            "slack, which is reserved, not allocated): the `planner GiB` column is the planner's "
            "per-GPU total with that allowance. A measured peak of the caching allocator's reserved bytes "
            "(`max_memory_reserved`: allocated plus cached, fragmented and rounded-up segments) "
            "is shown with its error but not compared: no published rule gives the "
            "reserved-allocated gap, and none is fitted here "
            "(`published_runs.PEAK_STATS`). nvidia-smi totals (reserved plus the CUDA "
            "context) would be treated the same way.", "",
            "Memory is never fitted, so every memory row is a test row. Published allocated "
            "peaks in the table: Megatron-LM's functional tests on H100 (each test case's "
            "model_config.yaml states every argument; golden_values_dev_dgx_h100.json holds "
            "`mem-max-allocated-bytes`, `torch.cuda.memory_stats()['allocated_bytes.all.peak']` "
            "of the last rank, so the last pipeline stage is predicted) and nanotron's "
            "bench_cluster runs of a 1.1B "
            "Llama (huggingface.co/nanotron/old_bench, each run's config.yaml and "
            "log_metrics.csv: `Peak allocated` is rank 0's `torch.cuda.max_memory_allocated`); "
            "only its pipeline-free runs are rows (nanotron places blocks on pipeline stages by "
            "compute cost with the embedding and head on the end stages, which txcalc's even "
            "split does not express). Published peaks looked for and not usable as rows yet: torchtitan's "
            "performance tables (its logger prints `max_reserved_gib`: read at 3faaa1a0d, "
            "d4c86e375 and today's main); Megatron-LM PR #482 "
            "(`tools/get_training_info/README.md`: "
            "`torch.cuda.max_memory_allocated()` of a \"Llama2 7B\" in four layouts on eight "
            "H800s, 28.8 to 69.1 GB, but its sequence length, vocabulary and norm are not "
            "stated, and picking them would be fitting); LitGPT's resource tables "
            "(`max_memory_allocated`, but LoRA and adapter finetunes on variable-length Alpaca "
            "samples: issue 14's); torchtune's README tables (\"based on GPU peak memory "
            "reserved\", fine-tuning on variable-length samples); Llama 3 (arXiv:2407.21783 "
            "section 3.3.2 describes the pipeline stages' memory imbalance but states no "
            "per-GPU peak).", "",
            "What the allocated rows needed: nanotron's `REDUCE_SCATTER` column "
            "linears all-gather their input and save the gathered T x D tensor (Megatron's "
            "sequence parallelism saves the T x D / t shard and gathers again in backward), "
            "and nanotron keeps its multi-head qkv copy alive through q and a copy of the "
            "attention output for o_proj: the `nanotron` stack's `stacks.KEEPS`, each "
            "measured on CPU with saved_tensors_hooks "
            "(`tests/published/test_training_validation.py::"
            "test_nanotron_attention_keeps_the_qkv_buffer_and_an_o_proj_copy`, "
            "`test_gathered_column_linear_saves_the_whole_input`); they are 82 % of what the "
            "megatron kernels missed per token, and the rest (about 2 KB a block a token, "
            "not traced to code) is not fitted, so those rows stay 6-7 % low. "
            "The Megatron rows train with dropout on: their model_config.yaml "
            "leaves `--hidden-dropout` and `--attention-dropout` at TransformerConfig's 0.1 "
            "(`setup.dropout`), so every hidden dropout keeps its mask and the unfused "
            "attention rows keep the S x S probabilities' mask and the dropped probabilities "
            "(without them the tiny GPT rows were 12-24 % low). "
            "Megatron's interleaved 7B row is measured on the last stage, "
            "where Megatron's interleaved schedule warms up (pp - r - 1) x 2 + (v - 1) x pp "
            "model chunks on rank r and holds one more (`forward_backward_pipelining_with_"
            "interleaving`): 29 of the last rank's 32 one-layer chunks, 3.625 micro-batches "
            "of its blocks' activations where plain 1F1B holds one; "
            "`train.evaluate.inflight_chunks` follows that schedule (checked against torch's "
            "`ScheduleInterleaved1F1B` in `tests/conformance/test_pipeline_inflight.py`).", "",
            "## Rows", "",
            "| run | split | GPU | GPUs | TP/PP/DP/CP | seq | batch | recompute | "
            "measured tok/s/GPU | before | err | after | err | measured GiB | predicted GiB | "
            "mem err | planner GiB | status |",
            "|---|---|---|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for b, a in zip(before, after):
        s = a.run.setup
        status = a.pending or ("memory only" if a.measured_step_s is None else "")
        if s.get("schedule", "1f1b") != "1f1b":
            status = (status + "; " if status else "") + \
                f"{s['schedule']} schedule, {s.get('virtual', 1)} virtual stages"
        if a.peak_stat == "reserved":
            status = (status + "; " if status else "") + "reserved peak: not compared"
        if a.applied_flags:
            status = (status + "; " if status else "") + "flags: " + ", ".join(a.applied_flags)
        not_applied = [f for f in s.get("flags", {}) if f not in a.applied_flags]
        if not_applied and not a.pending:
            status = (status + "; " if status else "") + "not applied: " + ", ".join(not_applied)
        out.append(
            f"| {a.run.id} | {a.run.split} | {s['gpu']} | {s['gpus']} | "
            f"{s['tp']}/{s['pp']}/{s['dp']}/{s.get('cp', 1)} | {s['seq']} | "
            f"{s['global_batch']} | {s['recompute']} | {_tok(a, True)} | {_tok(b, False)} | "
            f"{_pct(b.throughput_error) if not b.pending else '-'} | {_tok(a, False)} | "
            f"{_pct(a.throughput_error)} | {_gib(a.measured_peak)}"
            f"{' (' + a.peak_stat + ')' if a.peak_stat else ''} | "
            f"{_gib(a.predicted['allocated_bytes'] if a.predicted else None)} | "
            f"{_pct(a.memory_error)} | "
            f"{_gib(a.predicted['peak_bytes'] if a.predicted else None)} | {status} |")
    out += ["", "## Sources, quotes and assumptions", ""]
    seen = set()
    for r in data["runs"]:
        if r.source not in seen:
            seen.add(r.source)
            out.append(f"- **{r.source}**")
        out.append(f"  - `{r.id}` ({r.split}): \"{r.quote}\". Assumed: {r.assumed or 'nothing'}")
    out.append("")
    if "deadline" in data:
        from .deadline_table import render_section
        out.append(render_section(data["deadline"]))
    return "\n".join(out)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--fit" in argv:
        f = fit_efficiencies(load_runs())
        print(f"GPU_EFFICIENCY matmul: {f['matmul']}; MATMUL_HALF_DIM = {f['matmul_half_dim']}; "
              f"loss {f['loss']:.5f} over {f['runs']} fit runs")
        data = compute()
        print(f"TIME_RATIO_BAND = ({data['band'][0]:.4f}, {data['band'][1]:.4f}); "
              f"TIME_BAND_RUNS = {data['band'][2]}")
        return 0
    data = compute()
    text = render(data)
    if "--check" in argv:
        current = REPORT.read_text(encoding="utf-8") if REPORT.exists() else ""
        if current != text or read_deadline_cache() != data["deadline_cache"]:
            print(f"{REPORT} is stale: run python3 -m txcalc.report.training_validation",
                  file=sys.stderr)
            return 1
        return 0
    REPORT.write_text(text, encoding="utf-8")
    write_deadline_cache(data["deadline_cache"])
    print(f"wrote {REPORT} from {runs_path()} and {deadline_runs_path()}; the deadline answers "
          f"to {DEADLINE_CACHE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
