"""The what-if page's answer time per change: in-process answers against the old path (one
``python -m txcalc ... --json`` subprocess per panel), side by side.

Run: python3 benchmarks/web_speed.py [--runs N]

Starts ``txcalc serve``'s server on 127.0.0.1, port 0 (any free port), in this process, and
for each CHANGE sends what the page sends when a control changes (app.js: /api/commands and
the four panels at once, /api/params, /api/flops, /api/memory, /api/answer), timing each
request and the whole change (the slowest of the five). The server's answer cache is emptied
before every change, so each figure is a cold answer. The baseline is the same panels' argv
run the old way, ``txcalc.web.calc.run_cli`` (a CLI subprocess each, four at once as the
old server ran them). Each figure is the minimum of N runs (default 3): on a loaded machine
every figure inflates, the minimum least. The ``change`` rows add the CPU time of the whole
change (this process's, all threads, for the in-process answers; the children's for the old
path): on a loaded machine the wall time waits for a core, the CPU time hardly does.

Targets (issues 26 and 29): under 0.3 s per change for the params, flops, memory and fit
panels, under 1.5 s for a plan (plan train, plan infer). The ``charts`` row is the page's
/api/charts, asked for after the panels (several answers each: memory at seven sequence
lengths, plan train's frontier, plan infer at seven rates); it has no target and no old way.
"""

from __future__ import annotations

import argparse
import resource
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from txcalc.web import calc  # noqa: E402
from txcalc.web.server import make_server  # noqa: E402

#: typical changes on the page: (what changed, the form after it)
CHANGES = [
    ("train: seq 4096 -> 8192", {"model": "llama-3.1-8b", "seq": "8192"}),
    ("train: gpu h100 -> h200, 70B", {"model": "llama-3.1-70b", "gpu": "h200",
                                       "tokens": "15T"}),
    ("finetune: qlora on rtx-4090", {"model": "llama-3.1-8b", "task": "finetune",
                                     "finetune": "qlora", "gpu": "rtx-4090"}),
    ("serve: concurrency 8 -> 32", {"model": "llama-3.1-8b", "task": "serve",
                                    "concurrency": "32"}),
    ("serve: 70B on h200, rate 2/s", {"model": "llama-3.1-70b", "task": "serve",
                                      "gpu": "h200", "rate": "2"}),
]
PANELS = ("params", "flops", "memory", "answer")


def _get(url: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=600) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        e.read()
        status = e.code
    return time.perf_counter() - t0, status


def page_change(srv, form: dict, pool) -> dict:
    """One change as the page sends it: /api/commands and the four panels at once."""
    calc._CACHE.clear()
    q = urlencode(form)
    paths = {"commands": f"/api/commands?{q}", **{p: f"/api/{p}?{q}" for p in PANELS}}
    t0, c0 = time.perf_counter(), time.process_time()
    got = dict(zip(paths, pool.map(lambda p: _get(srv.url.rstrip("/") + p), paths.values())))
    out = {k: t for k, (t, _) in got.items()}
    out["change"] = time.perf_counter() - t0
    out["cpu"] = time.process_time() - c0
    bad = [k for k, (_, s) in got.items() if s != 200]
    # then the charts, as the page asks for them once the panels are drawn
    out["charts"], status = _get(srv.url.rstrip("/") + f"/api/charts?{q}")
    if status != 200:
        bad.append("charts")
    if bad:
        raise SystemExit(f"{form}: panels {bad} did not answer 200")
    return out


def old_change(form: dict, pool) -> dict:
    """The same panels the old way: a CLI subprocess each, four at once."""
    argvs = calc.commands(calc.form_of(form))
    t0, c0 = time.perf_counter(), _children_cpu()

    def run(argv):
        t = time.perf_counter()
        calc.run_cli(argv)
        return time.perf_counter() - t

    out = dict(zip(argvs, pool.map(run, argvs.values())))
    out["change"] = time.perf_counter() - t0
    out["cpu"] = _children_cpu() - c0
    return out


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def target(form: dict, panel: str) -> float:
    """0.3 s for params, flops, memory and fit; 1.5 s for a plan."""
    return 1.5 if panel == "answer" and form.get("task", "train") != "finetune" else 0.3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    srv = make_server("127.0.0.1", 0)
    th = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                          daemon=True)
    th.start()
    try:
        with ThreadPoolExecutor(5) as pool:
            _get(srv.url + "api/options")  # the page's first request
            page_change(srv, CHANGES[0][1], pool)  # warm: the engine's modules imported once
            print(f"server {srv.url}; minimum of {args.runs} runs, seconds; "
                  "old = one CLI subprocess per panel")
            print(f"{'change':32} {'panel':8} {'in-process':>10} {'old':>8} {'ratio':>7} "
                  f"{'target':>7}  ok")
            missed = 0
            for label, form in CHANGES:
                new = [page_change(srv, form, pool) for _ in range(args.runs)]
                old = [old_change(form, pool) for _ in range(args.runs)]
                for panel in (*PANELS, "change", "cpu", "charts"):
                    n = min(r[panel] for r in new)
                    if panel == "charts":  # new: no old way to compare with, no target
                        print(f"{label:32} {panel:8} {n:10.3f}")
                        continue
                    o = min(r[panel] for r in old)
                    t = target(form, panel) if panel in PANELS else None
                    ok = "" if t is None else ("yes" if n < t else "NO")
                    missed += ok == "NO"
                    print(f"{label:32} {panel:8} {n:10.3f} {o:8.3f} {o / n:6.1f}x "
                          f"{'' if t is None else f'{t:7.1f}'}  {ok}")
            print(f"targets missed: {missed}")
    finally:
        srv.shutdown()
        srv.server_close()


if __name__ == "__main__":
    main()
