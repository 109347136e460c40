"""The "GPUs for a deadline" section of reports/training-validation.md: the rows of
``train.deadline_runs`` (published runs asked as a user would) as markdown, with each row's
error, the summary per split, and each run's source, quote and assumptions."""

from __future__ import annotations

from ..train.deadline_runs import MIN_MFU, RATIO_BOUNDS, SPLITS, Answer, DeadlineRun, Row, summary


def _tok(n: int) -> str:
    for unit, div in (("T", 10**12), ("B", 10**9), ("M", 10**6)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:,}"


def _cells(a: Answer, run: DeadlineRun) -> str:
    if a.gpus is None:
        return "none | - | - | no"
    ok = "yes" if Row.meets(a, run) else "no"
    return f"{a.gpus:,} | {Row.ratio(a, run):.2f} | {100 * a.mfu:.1f}% | {ok}"


def render_section(rows: list[Row]) -> str:
    """The section: one row per run, its error,
    the summary per split, and each run's source, quote and assumptions."""
    lo, hi = RATIO_BOUNDS
    out = ["## GPUs for a deadline: published runs asked as a user would", "",
           "Each run is asked as a user would ask it: model, training tokens, sequence length, "
           "GPU type and the wall-clock days the run took (`plan_train(cfg, gpu, tokens, "
           "seq=..., days=...)`), and the planner's `gpus_for_deadline` is set against the GPUs "
           "the run used; **ratio** = answered / used GPUs, MFU is the answer's best layout's. "
           "**published batch**: the run's published global batch is passed (`global_batch`, "
           "sequences; the planner's default, about 4M tokens, where the run published none: "
           "batch column `-`); **default batch**: no batch given. "
           f"**meets**: ratio within {lo:g}x-{hi:g}x at MFU >= {MIN_MFU:.0%} (issue 27's "
           "acceptance, read on the test rows). `none`: no layout on up to 2^17 GPUs meets the "
           "deadline (or fits); the reason is listed below the table. Days derived from "
           "published GPU-hours are hours / GPUs / 24 (each run's assumptions say so). The "
           "planner's days include its goodput factor (`timing.GOODPUT`), so a run's published "
           "wall clock, restarts included, is the deadline as asked; where the days are GPU-hours "
           "or 'continuous training' (restarts excluded: Pythia, OPT, DeepSeek-V3, LLaMA), the "
           "goodput factor makes the answer conservative by 1 / goodput.", "",
           "Data: `txcalc/data/published_deadline_runs.json`; code: "
           "`txcalc/train/deadline_runs.py`. Split: fit rows may be used to tune the planner's "
           "defaults later, test rows never; it was fixed before any answer was computed, by a "
           "rule blind to the answers (ids sorted alphabetically, every third from the first "
           "is fit: `deadline_runs.fit_rule`), which spreads the fit rows over the GPU types "
           "(A100 40GB and 80GB, H100) and sizes (1.1B to 405B).", "",
           "GPU counts come from the divisors of one global batch times TP x PP (mostly powers "
           "of two), so ratios cluster at 0.5, 0.75, 1 and 2, and a ratio of 1.00 can hide a "
           "speed error of up to 2x; the **days on used** column is the finer check: the "
           "planner's days for the run's tokens on exactly the GPUs the run used (its fastest "
           "layout there, published batch), and in brackets those days / the run's days (`-`: "
           "the searched grid has no layout on that count).", "",
           "| run | split | model | GPU | tokens | seq | days | batch | GPUs used | "
           "published batch: GPUs | ratio | MFU | meets | days on used | default batch: GPUs | "
           "ratio | MFU | meets |",
           "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|"]
    for row in rows:
        r = row.run
        batch = "-" if r.global_batch is None else f"{r.global_batch:,}"
        d = row.published.days_on_used
        on_used = "-" if d is None else f"{d:.1f} ({d / r.days:.2f})"
        out.append(f"| {r.id} | {r.split} | {r.model_name} | {r.gpu} | {_tok(r.tokens)} | "
                   f"{r.seq:,} | {r.days:g} | {batch} | {r.gpus_used:,} | "
                   f"{_cells(row.published, r)} | {on_used} | {_cells(row.default, r)} |")
    out += ["", "| split | rows | published batch: answered | meets | ratio range | "
            "default batch: answered | meets | ratio range |",
            "|---|---:|---:|---:|---|---:|---:|---|"]
    for split in SPLITS:
        cells = []
        for pub in (True, False):
            s = summary(rows, split, pub)
            rng = "-" if s["min_ratio"] is None else f"{s['min_ratio']:.2f}-{s['max_ratio']:.2f}"
            cells.append(f"{s['answered']} | {s['meets']} | {rng}")
        out.append(f"| {split} | {summary(rows, split)['rows']} | {cells[0]} | {cells[1]} |")
    st, sd = summary(rows, "test"), summary(rows, "test", published_batch=False)
    met = st["meets"] == st["rows"]
    missed = [r.run.id for r in rows if r.run.split == "test" and not Row.meets(r.default, r.run)]
    out += ["", f"Issue 27's acceptance on the test rows (published batch): "
            f"**{'met' if met else 'not met'}** ({st['meets']} of {st['rows']} rows within "
            f"{lo:g}x-{hi:g}x at MFU >= {MIN_MFU:.0%}). With the planner's default batch (no "
            f"batch given): {sd['meets']} of {sd['rows']}"
            + (f" (not: {', '.join(missed)})" if missed else "")
            + ". The default batch is searched (``train.batch``: from ~4M tokens up to the "
            "critical batch at the run's compute) and GPU counts are whole nodes. Before the "
            "batch search (a fixed ~4M-token default batch, counts from the divisors of one "
            "batch) the default-batch column missed two rows: DeepSeek-V3 answered 16,384 GPUs "
            "at 7.9% MFU (8.0x) and Llama 3.1 405B found no layout within its 78.4 days.",
            "", "Layouts of the answers (published batch):", ""]
    for row in rows:
        a = row.published
        if a.gpus is not None:
            out.append(f"- `{row.run.id}`: {a.layout}, global batch {a.batch_used:,}, "
                       f"{a.days:.1f} days")
        else:
            out.append(f"- `{row.run.id}`: no answer: {a.error}")
    from ..train.deadline_runs import load_left_out
    out += ["", "Runs looked for and not rows:", ""]
    out += [f"- {x['run']}: {x['why']}." for x in load_left_out()]
    out += ["", "### Sources, quotes and assumptions", ""]
    for row in rows:
        r = row.run
        arch = r.model.get("config_source")
        out.append(f"- `{r.id}` ({r.split}): {r.source}: \"{r.quote}\". Assumed: "
                   f"{r.assumptions}." + (f" Architecture: {arch}." if arch else ""))
    out.append("")
    return "\n".join(out)
