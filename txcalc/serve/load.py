"""Serving plots' data: TTFT and ITL against load on one layout, and the throughput-latency
Pareto front over layouts (drawn by ``report.plots``, kinds "serve_load" and "serve_pareto").

    serving_load_data(...)   -> {"load": {...}, "pareto": {...}}: plain numbers, no objects

``report.serving_load`` turns them into a report section and PNGs (``txcalc report
--inference --input-len I --output-len O``, ``plan infer --plot DIR``).

Load sweep: Poisson arrivals at LOAD_FRACTIONS of the layout's offline capacity (its
requests/s with every request queued at once), per replica. Pareto: every tp layout of the
model on the GPU at closed-loop concurrencies PARETO_CONCURRENCY: output tokens/s per GPU
against ITL p50; a point is on the front when no other point has both more tokens/s per GPU
and a shorter ITL. Each point is one ``serving_plan.plan_serving`` answer with the layout,
one replica and the chunk budget pinned (its own simulated request count and seed), so the
plots show the numbers ``plan infer --json`` gives for the same flags.
"""

from __future__ import annotations

import math

LOAD_FRACTIONS = (0.1, 0.25, 0.5, 0.7, 0.85, 0.95, 1.05)
PARETO_CONCURRENCY = (1, 4, 16, 64, 256)


def pareto_front(points: list[tuple[float, float]]) -> list[bool]:
    """For (throughput, latency) points: True where no other point has throughput >= and
    latency <= with one of them strict."""
    out = []
    for i, (x, y) in enumerate(points):
        out.append(not any((x2 >= x and y2 <= y and (x2 > x or y2 < y))
                           for j, (x2, y2) in enumerate(points) if j != i))
    return out


def _point(model, gpu, input_len: int, output_len: int, *, tp: int, pp: int, chunk: int,
           kw: dict, **load):
    """One point: the best row of ``plan_serving`` pinned to this layout, one replica and
    this chunk budget: exactly what ``txcalc plan infer --tp T --pp P --replicas 1
    --max-num-batched-tokens C (--rate R | --concurrency N) --json`` answers."""
    from .plan import plan_serving
    return plan_serving(model, gpu, input_len, output_len, tp=tp, pp=pp, replicas=1,
                        max_num_batched_tokens=chunk, **kw, **load).best


def serving_load_data(model, gpu, input_len: int, output_len: int, *, tp: int = 1,
                      pp: int = 1, weights: str | None = None, kv_dtype: str = "bf16",
                      max_num_batched_tokens: int = 8192, tps=None, gpu_file=None,
                      precision: str = "bf16") -> dict:
    """The two plots' numbers (see the module docstring). ``tps``: the layouts of the
    Pareto plot (default: every tp that divides the heads, up to a node). Every point is a
    ``plan_serving`` answer pinned to its layout, one replica and the chunk budget
    (``_point``), so a plotted number equals the matching ``plan infer --json`` field."""
    from .kv import ServingError
    from .plan import ServePlanError
    from .setting import serve_setting
    s = serve_setting(model, gpu, kv_dtype=kv_dtype, precision=precision, weights=weights,
                      gpu_file=gpu_file)
    cfg, g = s.cfg, s.gpu
    kw = dict(weights=weights, kv_dtype=kv_dtype, gpu_file=gpu_file, precision=precision)
    chunk = max_num_batched_tokens
    cap = _point(cfg, g, input_len, output_len, tp=tp, pp=pp, chunk=chunk, kw=kw,
                 rate=math.inf)
    load_pts = []
    for f in LOAD_FRACTIONS:
        rate = f * cap.requests_per_s
        r = _point(cfg, g, input_len, output_len, tp=tp, pp=pp, chunk=chunk, kw=kw,
                   rate=rate)
        load_pts.append({"fraction": f, "rate": rate,
                         "ttft_p50_s": r.ttft_p50_s, "ttft_p99_s": r.ttft_p99_s,
                         "itl_p50_s": r.itl_p50_s, "itl_p99_s": r.itl_p99_s})
    if tps is None:
        tps = [t for t in range(1, g.gpus_per_node + 1) if cfg.n_heads % t == 0
               and (cfg.n_kv_heads % t == 0 or t % cfg.n_kv_heads == 0)]
    pts = []
    for t in tps:
        for c in PARETO_CONCURRENCY:
            try:
                r = _point(cfg, g, input_len, output_len, tp=t, pp=1, chunk=chunk,
                           kw=kw, concurrency=c)
            except (ServingError, ServePlanError):  # the layout does not hold one request
                break
            pts.append({"tp": t, "concurrency": c,
                        "tokens_per_s_per_gpu": r.output_tokens_per_s / r.total_gpus,
                        "itl_p50_s": r.itl_p50_s})
    front = pareto_front([(p["tokens_per_s_per_gpu"], p["itl_p50_s"]) for p in pts])
    for p, on in zip(pts, front):
        p["pareto"] = on
    return {"model": cfg.name, "gpu": g.name, "input_len": input_len,
            "output_len": output_len, "max_num_batched_tokens": chunk,
            "weights": weights, "kv_dtype": kv_dtype, "precision": precision,
            "load": {"tp": tp, "pp": pp, "capacity_requests_per_s": cap.requests_per_s,
                     "points": load_pts},
            "pareto": {"points": pts}}
