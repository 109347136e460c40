"""The serving report's load section: TTFT and ITL against load, and the layouts'
throughput-latency Pareto front, from ``serving_report.serving_load_data`` (drawn by
``plots.py``, kinds "serve_load" and "serve_pareto")."""

from __future__ import annotations

from .sections import plot, section


def serving_load_section(data: dict) -> dict:
    """A report section showing both plots (``data`` from serving_load_data, stored in the
    report's data as "serving_load")."""
    from ..serve.load import LOAD_FRACTIONS, PARETO_CONCURRENCY
    d = data
    return section(
        "serving_load", "Latency against load, and the layouts' Pareto front",
        [f"Simulated continuous batching (txcalc.serve.sim) of {d['input_len']:,}-token "
         f"prompts with {d['output_len']:,}-token outputs, Poisson arrivals at "
         f"{', '.join(f'{f:g}' for f in LOAD_FRACTIONS)} of the tp "
         f"{d['load']['tp']} x pp {d['load']['pp']} replica's offline capacity "
         f"({d['load']['capacity_requests_per_s']:.2f} requests/s, every request queued at "
         f"once), chunks of up to {d.get('max_num_batched_tokens', 8192):,} tokens per step."
         + (f" The layout is the one `plan infer` picks for "
            f"{d['layout_from']['concurrency']:,} concurrent clients."
            if "layout_from" in d else ""),
         "The Pareto plot runs each tensor-parallel layout at closed-loop concurrencies "
         f"{', '.join(str(c) for c in PARETO_CONCURRENCY)}. Every point is the answer of "
         "`txcalc plan infer --input-len I --output-len O --tp T --pp P --replicas 1 "
         "--max-num-batched-tokens C (--rate R | --concurrency N) --json`; the numbers are "
         "in report.json under serving_load."],
        plots=[plot("serve_load.png", "serve_load", "TTFT and ITL against load",
                    "time to first token and inter-token latency, p50 and p99, against "
                    "the request rate"),
               plot("serve_pareto.png", "serve_pareto", "Throughput against latency",
                    "output tokens/s per GPU against inter-token latency for each layout "
                    "and concurrency, Pareto front marked")])


def write_serving_plots(data: dict, out_dir, what: str = "--plot") -> list[str]:
    """Draw both plots, then write them into ``out_dir`` (made when missing), each file
    atomically (``atomic.write_files``: none half-written); returns the paths written."""
    from ..atomic import check_out_folder, write_files
    from . import plots
    plots.require_matplotlib()
    check_out_folder(out_dir, what)
    report = {"data": {"model": {"name": data["model"]}, "serving_load": data}}
    files = {spec["file"]: plots.draw(report, spec)
             for spec in serving_load_section(data)["plots"]}
    return [str(p) for p in write_files(out_dir, files, what)]
