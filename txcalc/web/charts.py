"""The page's charts: each point the JSON answer of a CLI command (the panel's command with one
option changed), computed in this process as the panels are (``calc.answer_bytes``); the
browser draws them (static/app.js, SVG written there).

    task            | chart                                 | each point: the command of
    ----------------|---------------------------------------|--------------------------------
    train, finetune | memory against sequence length        | memory, --seq varied
    train           | the frontier: GPUs against days       | plan train --gpus N (best.days:
                    |                                       | TrainPlan.frontier, one search)
    serve           | KV cache against context              | memory --inference, --context
    serve           | latency against load                  | plan infer, --rate varied, the
                    |                                       | plan's layout pinned (--tp --pp
                    |                                       | --replicas)

A point whose command refuses its input (a sequence past a model's learned positions) is left
out and named in the chart's ``left_out``. Nothing here computes a figure: x and y are values
of the answers' JSON.
"""

from __future__ import annotations

import json

from ..errors import TxcalcError
from . import calc

#: the sequence lengths and contexts around the page's, as multiples of it
SPAN = (1 / 8, 1 / 4, 1 / 2, 1, 2, 4, 8)
#: the loads of the latency chart, as multiples of the plan's requests/s
LOADS = (0.25, 0.5, 0.75, 1, 1.25, 1.5, 2)


def _with(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with ``flag`` set to ``value`` (replaced, or added at the end)."""
    out = list(argv)
    if flag in out:
        out[out.index(flag) + 1] = value
    else:
        out += [flag, value]
    return out


def _without(argv: list[str], *flags: str) -> list[str]:
    out, i = [], 0
    while i < len(argv):
        if argv[i] in flags:
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def _answer(argv: list[str], cache: bool) -> dict | None:
    try:
        return json.loads(calc.answer_bytes(argv, cache))
    except TxcalcError:
        return None


def _sweep(argv: list[str], flag: str, xs: list[int | float], text, cache: bool,
           ys: dict[str, str]) -> tuple[list[dict], list[str]]:
    """Series {name: JSON key} of the answers of ``argv`` with ``flag`` at each x."""
    series = [{"name": name, "key": key, "points": []} for name, key in ys.items()]
    left_out = []
    for x in xs:
        a = _answer(_with(argv, flag, text(x)), cache)
        if a is None:
            left_out.append(f"{flag} {text(x)}")
            continue
        for s in series:
            if a.get(s["key"]) is not None:
                s["points"].append([x, a[s["key"]]])
    return series, left_out


def _around(n: int, floor: int) -> list[int]:
    return sorted({max(floor, int(n * f)) for f in SPAN})


def charts(form: dict, cache: bool = False) -> list[dict]:
    """The charts of a checked form (``calc.form_of``), as the page draws them."""
    cmds = calc.commands(form)
    if form["task"] == "serve":
        return [c for c in (_kv_chart(form, cmds, cache), _load_chart(cmds, cache)) if c]
    out = [_memory_chart(cmds, cache)]
    if form["task"] == "train":
        out.append(_frontier_chart(cmds))
    return [c for c in out if c]


def _bytes_chart(cmds: dict, cache: bool, cid: str, title: str, flag: str, floor: int,
                 ys: dict[str, str], limit: str) -> dict | None:
    """A memory command's bytes against its ``flag`` (--seq or --context) around the page's
    value, with the GPU's memory as a line (``limit``: its words, {gpu} the GPU's name)."""
    argv = cmds["memory"]
    first = _answer(argv, cache)
    if first is None:
        return None
    x = int(first["seq" if flag == "--seq" else "context"])
    series, left = _sweep(argv, flag, _around(x, floor), str, cache, ys)
    return {"id": cid, "title": title,
            "x": {"label": f"{flag[2:].replace('seq', 'sequence length')}, tokens",
                  "log": True, "unit": "tokens"},
            "y": {"label": "GiB", "log": False, "unit": "bytes"},
            "series": series, "limit": {"name": limit.format(gpu=first.get("gpu", "GPU")),
                                        "value": first.get("gpu_bytes")},
            "command": calc.shell_line(_with(argv, flag, "N")) + " --json", "left_out": left}


def _memory_chart(cmds: dict, cache: bool) -> dict | None:
    return _bytes_chart(cmds, cache, "memory-vs-seq", "Memory against sequence length (one GPU)",
                        "--seq", 128, {"on the device (peak of the step)": "device_bytes",
                                       "saved activations": "activations_bytes"},
                        "{gpu} usable")


def _kv_chart(form: dict, cmds: dict, cache: bool) -> dict | None:
    load = f"{form['concurrency']} sequences" + (", the concurrency control" if form["rate"]
                                                 else "")
    return _bytes_chart(cmds, cache, "kv-vs-context",
                        f"KV cache against context ({load}, whole model)", "--context", 256,
                        {"weights + KV cache": "total_bytes", "KV cache": "kv_cache_bytes"},
                        "one {gpu}")


def _load_chart(cmds: dict, cache: bool) -> dict | None:
    argv = cmds["answer"]
    plan = _answer(argv, cache)
    if not plan or plan.get("mode") not in ("colocated", None) or not plan.get("requests_per_s") \
            or plan.get("ttft_p99_s") is None:
        return None  # a capacity answer, an offline maximum or a disaggregated plan
    rps = plan["requests_per_s"]
    pinned = _without(argv, "--rate", "--concurrency", "--tp", "--pp", "--replicas")
    pinned += ["--tp", str(plan["tp"]), "--pp", str(plan["pp"]),
               "--replicas", str(plan["replicas"])]
    rates = [float(f"{rps * f:.4g}") for f in LOADS]
    series, left = _sweep(pinned, "--rate", rates, lambda r: f"{r:g}", cache,
                          {"TTFT p99": "ttft_p99_s", "ITL p99": "itl_p99_s"})
    return {"id": "latency-vs-load",
            "title": f"Latency against load ({plan['replicas']} x TP{plan['tp']} PP{plan['pp']})",
            "x": {"label": "requests/s", "log": False, "unit": "req/s"},
            "y": {"label": "seconds (log)", "log": True, "unit": "s"},
            "series": series, "limit": None,
            "command": calc.shell_line(_with(pinned, "--rate", "R")) + " --json",
            "left_out": left}


def _frontier_chart(cmds: dict) -> dict | None:
    fn, kw = calc.call_of(cmds["answer"])
    try:
        plan = fn(**kw).parts["plan"]
    except TxcalcError:
        return None
    rows = plan.frontier
    return {"id": "frontier", "title": "Training frontier: GPUs against days",
            "x": {"label": "GPUs", "log": True, "unit": "GPUs"},
            "y": {"label": "days (log)", "log": True, "unit": "days"},
            "series": [{"name": "fastest layout per GPU count", "key": "days",
                        "points": [[r.gpus, r.days] for r in rows]}],
            "limit": None, "command": calc.shell_line(_with(cmds["answer"], "--gpus", "N"))
            + " --json (best.days; TrainPlan.frontier reads the same search)", "left_out": []}
