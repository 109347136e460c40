"""`txcalc report`: a capacity report (Markdown, self-contained HTML, PNG plots, JSON)."""

from __future__ import annotations

import typer

from .typer_app import app
from .output import console, emit_json
from .options import COMMON_OPTS, FT_OPTS, MODEL_HELP, RECIPE_OPTS, SERVE_OPTS, TRAIN_OPTS


@app.command()
def report(model: str = typer.Argument(None, help=MODEL_HELP + " Omit with --params."),
           out: str = typer.Option(..., "--out", "-o", help="Folder to write the report to."),
           params: str = typer.Option(None, "--params", help="Only a parameter count (80e9, 70B): model states only."),
           inference: bool = typer.Option(False, "--inference", help="A serving report (weights + KV cache) instead of training."),
           weights: str = SERVE_OPTS["weights"],
           engine: str = typer.Option(None, "--engine", help="Serving: the engine whose rule sizes the KV cache of the Launch files, as plan infer's --engine: vllm (default), vllm-0.6.5, vllm-0.6, vllm-0.2, trtllm (TensorRT-LLM's files need it)."),
           gpu: str = typer.Option(None, "--gpu", help="GPU name (h100, h200, ...)."),
           gpu_gb: float = typer.Option(None, "--gpu-gb", help="GPU memory in GB (1e9); overrides the catalog."),
           gpu_file: str = COMMON_OPTS["gpu_file"],
           precision: str = TRAIN_OPTS["precision"],
           optimizer: str = RECIPE_OPTS["optimizer"],
           batch: int = typer.Option(1, "--batch", "-b", help="Micro-batch (sequences) of the single-GPU figures."),
           seq: str = typer.Option(None, "--seq", "-s", help="Training sequence length (default 4096, or the model's learned-position limit)."),
           src_seq: str = typer.Option("0", "--src-seq", help="Encoder length (enc-dec; 0 = seq)."),
           attn: str = typer.Option("flash", help="Attention kernel: eager | sdpa | flash."),
           recompute: str = typer.Option(None, help="none | selective | full (single-GPU figures; default none, fine-tuning: full, gradient checkpointing as the recipes run it)."),
           tokens: str = typer.Option(None, "--tokens", help="Training token budget (15T, 1e12)."),
           days: float = typer.Option(None, "--days", help="Deadline in days (planner)."),
           max_gpus: int = typer.Option(None, "--max-gpus", help="Most GPUs allowed (planner)."),
           global_batch: int = typer.Option(None, "--global-batch", help="Global batch in sequences (planner)."),
           price: float = typer.Option(None, "--price", help="Price of one GPU-hour, for the cost (training run or serving per hour)."),
           context: str = typer.Option("0", "--context", help="Serving: tokens per sequence, 128k = 131072 (0 = seq)."),
           concurrency: int = typer.Option(1, "--concurrency", help="Serving: sequences at once."),
           kv_dtype: str = typer.Option(None, "--kv-dtype", help="bf16 | fp16 | fp8 | int8 | int4 | fp32 (default bf16; a serving report's: the weights' 16-bit dtype, as plan infer's)."),
           tokens_per_s: float = typer.Option(None, "--tokens-per-s", help="Serving: decode tokens/s required (planner)."),
           input_len: str = typer.Option("0", "--input-len", help="Serving: prompt tokens per request; with --output-len adds TTFT/ITL against load and the layouts' throughput-latency Pareto front (simulated)."),
           output_len: str = typer.Option("0", "--output-len", help="Serving: output tokens per request (with --input-len)."),
           finetune: str = FT_OPTS["finetune"],
           lora_rank: int = FT_OPTS["lora_rank"],
           lora_alpha: float = FT_OPTS["lora_alpha"],
           lora_targets: str = FT_OPTS["lora_targets"],
           lora_dropout: float = FT_OPTS["lora_dropout"],
           trainable: str = FT_OPTS["trainable"],
           base_format: str = FT_OPTS["base_format"],
           loss: str = RECIPE_OPTS["loss"],
           recipe: str = RECIPE_OPTS["recipe"],
           compare: str = typer.Option(None, "--compare", help="A section with options side by side: KEY=V1,V2,... (gpu=h100,h200; precision=bf16-mixed,fp8-mixed; model=a,b; 2 to 6 values), each the report's command (plan infer, plan train with --tokens, else memory) run as txcalc compare runs it."),
           validation_dir: str = typer.Option("reports/validation", "--validation-dir", help="Where to look for validation reports."),
           json_out: bool = typer.Option(False, "--json", help="Print the answer and the files written as JSON (no progress bar).")):
    """Write a capacity report: the answer, breakdowns, plots, assumptions (md, html, png)."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)
    from rich.text import Text

    from ..report.request import ReportRequest
    from ..report.writer import write_report
    from .narrow import say
    from ..errors import WorkloadError
    from .options import options
    from .. import inputs as I

    if kv_dtype is None:  # a serving report's is plan infer's: fp16 with fp16 weights (V100, T4)
        from ..answers.common import half_precision, serving_kv_dtype
        # precision None: the request takes bf16-mixed, or fp16-mixed on a GPU without bf16
        # (T4, V100), and says so (ReportRequest.setup)
        kv_dtype = serving_kv_dtype(precision or half_precision(None, gpu, gpu_file)[0]) \
            if inference else "bf16"
    n_in = I.parse_context(input_len, "--input-len")
    n_out = I.parse_context(output_len, "--output-len")
    opts = options(out=out, params=params, gpu=gpu, gpu_gb=gpu_gb, gpu_file=gpu_file,
                   precision=precision, optimizer=optimizer, batch=batch, seq=seq,
                   src_seq=src_seq, attn=attn, recompute=recompute, tokens=tokens, days=days,
                   max_gpus=max_gpus, global_batch=global_batch, price=price, context=context,
                   concurrency=concurrency, kv_dtype=kv_dtype, tokens_per_s=tokens_per_s,
                   validation_dir=validation_dir)
    if params is not None and inference:
        raise WorkloadError(f"--inference needs MODEL (a preset or config.json): the KV cache "
                            f"depends on the model's layers and KV heads, which --params "
                            f"({params}) does not give")
    req = ReportRequest(model=model, params=params, inference=inference, gpu=gpu,
                        gpu_gb=gpu_gb, gpu_file=gpu_file, precision=precision, optimizer=optimizer, batch=batch,
                        seq=opts["seq"], src_seq=opts["src_seq"], attn=attn,
                        recompute=recompute,
                        tokens=tokens, days=days, max_gpus=max_gpus,
                        global_batch=global_batch, price=price,
                        context=opts["context"],
                        concurrency=concurrency, kv_dtype=kv_dtype, tokens_per_s=tokens_per_s,
                        input_len=n_in, output_len=n_out, weights=weights, engine=engine,
                        finetune=finetune, lora_rank=lora_rank,
                        lora_alpha=lora_alpha, lora_targets=lora_targets,
                        lora_dropout=lora_dropout, trainable=trainable,
                        base_format=base_format, loss=loss, recipe=recipe, compare=compare)
    from .compare_cmd import run_option
    if json_out:
        rep = write_report(req, out, validation_dir=validation_dir, runner=run_option)
        emit_json({"title": rep["title"], "out": str(out),
                   "files": sorted(["report.md", "report.html", "report.json"]
                                   + [p["file"] for s in rep["sections"] for p in s["plots"]]),
                   "answer": rep["data"]["answer"], "headline": headline(rep)})
        return
    # the bar only where it can be drawn and erased: on a pipe, a file or a dumb terminal a
    # transient bar shows nothing, and rich's Progress would end with an empty line
    real = console.real()
    with Progress(TextColumn("{task.description:<40}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(),
                  console=real, transient=True, disable=not real.is_interactive) as bar:
        task = bar.add_task("report", total=None)

        def progress(desc: str, done: int, total: int | None) -> None:
            bar.update(task, description=desc, completed=done, total=total)

        rep = write_report(req, out, validation_dir=validation_dir, progress=progress,
                           runner=run_option)
    files = [p["file"] for s in rep["sections"] for p in s["plots"]]
    # user strings (a model name, a path) are printed as plain text, never as rich markup
    console.print(Text(rep["title"], style="bold"))
    # the answer itself, not only where it went; broken between words (no trailing spaces)
    say(console, headline(rep).split(" "), indent="", sep=" ")
    console.print(Text(f"  wrote {out}/: report.md, report.html, report.json and "
                       f"{len(files)} plot{'' if len(files) == 1 else 's'}"))


def headline(rep: dict) -> str:
    """The first paragraph of the report's "The answer" section as plain text (its Markdown
    bold and code marks dropped): what ``report`` prints above the files it wrote."""
    section = next((s for s in rep["sections"] if s.get("id") == "answer"), None)
    paragraphs = (section or {}).get("paragraphs") or [""]
    return paragraphs[0].replace("**", "").replace("`", "")
