"""Serving plots' data: TTFT and ITL against load on one layout, and the throughput-latency
Pareto front over layouts (drawn by ``report.plots``, kinds "serve_load" and "serve_pareto").

    serving_load_data(...)   -> {"load": {...}, "pareto": {...}}: plain numbers, no objects
    serving_load_section(d)  -> a report section (``report.sections.section``) with both plots
    write_serving_plots(...) -> the two PNGs written into a folder (``plan infer --plot DIR``)

Load sweep: Poisson arrivals at LOAD_FRACTIONS of the layout's offline capacity (its
requests/s with every request queued at once), per replica. Pareto: every tp layout of the
model on the GPU at closed-loop concurrencies PARETO_CONCURRENCY: output tokens/s per GPU
against ITL p50; a point is on the front when no other point has both more tokens/s per GPU
and a shorter ITL.
"""

from __future__ import annotations

import math

LOAD_FRACTIONS = (0.1, 0.25, 0.5, 0.7, 0.85, 0.95, 1.05)
PARETO_CONCURRENCY = (1, 4, 16, 64, 256)
#: requests per simulated point (the offline run, each rate, each concurrency at least)
POINT_REQUESTS = 300


def pareto_front(points: list[tuple[float, float]]) -> list[bool]:
    """For (throughput, latency) points: True where no other point has throughput >= and
    latency <= with one of them strict."""
    out = []
    for i, (x, y) in enumerate(points):
        out.append(not any((x2 >= x and y2 <= y and (x2 > x or y2 < y))
                           for j, (x2, y2) in enumerate(points) if j != i))
    return out


def serving_load_data(model, gpu, input_len: int, output_len: int, *, tp: int = 1,
                      pp: int = 1, weights: str | None = None, kv_dtype: str = "bf16",
                      max_num_batched_tokens: int = 8192, tps=None, gpu_file=None) -> dict:
    """The two plots' numbers (see the module docstring). ``tps``: the layouts of the
    Pareto plot (default: every tp that divides the heads, up to a node)."""
    from . import load
    from .hardware import get_gpu
    from .serving import ServingError
    from .serving_sim import simulate, step_model
    cfg = load(model)
    g = get_gpu(gpu, gpu_file)
    seq = input_len + output_len
    kw = dict(weights=weights, kv_dtype=kv_dtype, max_model_len=seq,
              max_num_batched_tokens=max_num_batched_tokens, gpu_file=gpu_file)
    sim = dict(max_num_batched_tokens=max_num_batched_tokens)
    sm = step_model(model, g, tp=tp, pp=pp, **kw)
    cap = simulate(sm, POINT_REQUESTS, input_len, output_len, rate=math.inf, **sim)
    load_pts = []
    for f in LOAD_FRACTIONS:
        r = simulate(sm, POINT_REQUESTS, input_len, output_len,
                     rate=f * cap.requests_per_s, seed=1, **sim)
        load_pts.append({"fraction": f, "rate": f * cap.requests_per_s,
                         "ttft_p50_s": r.ttft(50), "ttft_p99_s": r.ttft(99),
                         "itl_p50_s": r.itl(50), "itl_p99_s": r.itl(99)})
    if tps is None:
        tps = [t for t in range(1, g.gpus_per_node + 1) if cfg.n_heads % t == 0
               and (cfg.n_kv_heads % t == 0 or t % cfg.n_kv_heads == 0)]
    pts = []
    for t in tps:
        try:
            smt = step_model(model, g, tp=t, **kw)
        except ServingError:
            continue
        if smt.kv_capacity_tokens < seq:
            continue
        for c in PARETO_CONCURRENCY:
            r = simulate(smt, max(POINT_REQUESTS // 3, 2 * c), input_len, output_len,
                         concurrency=c, **sim)
            pts.append({"tp": t, "concurrency": c,
                        "tokens_per_s_per_gpu": r.output_tokens_per_s / t,
                        "itl_p50_s": r.itl(50)})
    front = pareto_front([(p["tokens_per_s_per_gpu"], p["itl_p50_s"]) for p in pts])
    for p, on in zip(pts, front):
        p["pareto"] = on
    return {"model": cfg.name, "gpu": g.name, "input_len": input_len,
            "output_len": output_len,
            "load": {"tp": tp, "pp": pp, "capacity_requests_per_s": cap.requests_per_s,
                     "points": load_pts},
            "pareto": {"points": pts}}


def serving_load_section(data: dict) -> dict:
    """A report section showing both plots (``data`` from serving_load_data, stored in the
    report's data as "serving_load")."""
    from .report.sections import plot, section
    d = data
    return section(
        "serving_load", "Latency against load, and the layouts' Pareto front",
        [f"Simulated continuous batching (txcalc.serving_sim) of {d['input_len']:,}-token "
         f"prompts with {d['output_len']:,}-token outputs, Poisson arrivals at "
         f"{', '.join(f'{f:g}' for f in LOAD_FRACTIONS)} of the tp "
         f"{d['load']['tp']} replica's offline capacity "
         f"({d['load']['capacity_requests_per_s']:.2f} requests/s)."],
        plots=[plot("serve_load.png", "serve_load", "TTFT and ITL against load",
                    "time to first token and inter-token latency, p50 and p99, against "
                    "the request rate"),
               plot("serve_pareto.png", "serve_pareto", "Throughput against latency",
                    "output tokens/s per GPU against inter-token latency for each layout "
                    "and concurrency, Pareto front marked")])


def write_serving_plots(data: dict, out_dir, what: str = "--plot") -> list[str]:
    """Draw both plots, then write them into ``out_dir`` (made when missing), each file
    atomically (``atomic.write_files``: none half-written); returns the paths written."""
    from .atomic import check_out_folder, write_files
    from .report import plots
    plots.require_matplotlib()
    check_out_folder(out_dir, what)
    report = {"data": {"model": {"name": data["model"]}, "serving_load": data}}
    files = {spec["file"]: plots.draw(report, spec)
             for spec in serving_load_section(data)["plots"]}
    return [str(p) for p in write_files(out_dir, files, what)]
