"""The report's PNG plots, drawn from the report model alone (never from the engine).

matplotlib is imported inside ``draw`` only, and through its object API (``Figure`` and the
Agg canvas): no pyplot, no global backend switch, nothing left open. Every string is drawn as
plain text (``draw``: no mathtext, no control characters). PNGs are deterministic: fixed size
and DPI, no ``Software`` metadata, no timestamps, so regenerating a report gives the same bytes
with the same matplotlib. ``Painter`` (what ``write_report`` uses) runs ``draw_each`` in two
helper processes started before the report is built, falling back to this process.
"""

from __future__ import annotations

import io

from ..units import GIB, plural, scale
from .sections import CATEGORY_LABELS

DPI = 100
SIZE = (9.0, 5.0)
#: one colour per memory category, reused by every plot that shows categories
CATEGORY_COLOURS = {"weights": "#4C72B0", "gradients": "#55A868", "optimizer": "#C44E52",
                    "activations": "#8172B2", "inputs": "#937860", "logits": "#C4AD66",
                    "recompute": "#B07AA1",
                    "temporaries": "#CCB974", "kv cache": "#64B5CD",
                    "zero3_buffers": "#DD8452", "prefill workspace": "#DA8BC3",
                    "step": "#E377C2", "framework": "#8C8C8C"}


COUNT_WORDS = {"T": "trillions", "G": "billions", "M": "millions", "k": "thousands"}


def require_matplotlib() -> None:
    """Fail before any work is done (and any file written) when matplotlib is missing."""
    import importlib.util

    from ..errors import TxcalcError
    if importlib.util.find_spec("matplotlib") is None:
        raise TxcalcError("txcalc report draws its plots with matplotlib, which is not "
                          "installed: pip install 'txcalc[plots]'")


def _figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=SIZE, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:
    # Lay out once here and drop the engine: savefig would otherwise draw the whole figure an
    # extra time (with drawing disabled) just to run the layout. Same layout, same pixels.
    import matplotlib as mpl

    fig.get_layout_engine().execute(fig)
    with mpl.rc_context({"figure.autolayout": False, "figure.constrained_layout.use": False}):
        fig.set_layout_engine(None)  # None under these rc values: no engine at all
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _gpu_line(ax, data: dict, label_prefix: str = "one") -> None:
    gpu = data["gpu"]
    ax.axhline(gpu["usable_bytes"] / GIB, color="black", linestyle="--", linewidth=1,
               label=f"{label_prefix} {gpu['name']} ({gpu['usable_bytes'] / GIB:,.1f} GiB usable)")


def _wrap(label: str, words: int = 3) -> str:
    """A long bar label on several lines: at its commas, else three words a line; a trailing
    "(N GPUs)" on its own line."""
    head, _, tail = label.partition(" (")
    if ", " in head:
        lines = head.split(", ")
    else:
        parts = head.split()
        lines = [" ".join(parts[i:i + words]) for i in range(0, len(parts), words)]
    return "\n".join(lines + ([f"({tail}"] if tail else []))


def _log2_ticks(ax, values: list[int], text=None, fontsize=None) -> None:
    """A base-2 log x axis with a tick at each of ``values``, labelled by ``text`` (default:
    4096 -> "4k") where the label does not crowd its left neighbour (``_thinned``)."""
    text = text or (lambda v: f"{v // 1024}k" if v >= 1024 and v % 1024 == 0 else f"{v:,}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(values)
    ax.set_xticklabels(_thinned(values, text), fontsize=fontsize)
    ax.minorticks_off()


#: labels a 9-inch-wide axis shows at most along a log axis (a label of up to 6 characters
#: at font size 8-10 is about 0.4 inch wide: fewer than one per 0.6 inch never touch)
MOST_TICK_LABELS = 14


def _thinned(values, text, most: int = MOST_TICK_LABELS) -> list[str]:
    """The label of each tick at ``values`` on a log axis, "" for a tick closer than 1/most of
    the axis's span (in log space) to the last labelled one to its left, so that no two
    labels overlap (the frontier's 112 and 128 GPUs did); the largest value keeps its label
    (its crowded neighbour loses it)."""
    import math
    order = sorted(range(len(values)), key=lambda i: values[i])
    logs = [math.log(values[i]) for i in order]
    gap = (logs[-1] - logs[0]) / most if len(logs) > 1 else 0.0
    labels = [""] * len(values)
    last = None  # the log of the last labelled tick, and its index
    for i, lg in zip(order, logs):
        if last is None or lg - last[0] >= gap:
            labels[i], last = text(values[i]), (lg, i)
    top = order[-1]
    if not labels[top]:
        labels[last[1]], labels[top] = "", text(values[top])
    return labels


def _tick_text(v: float, sci: bool = False) -> str:
    """A log axis's tick label as plain text (mathtext is off in every plot, so matplotlib's
    ``$\\mathdefault{10^{4}}$`` would show raw): 0.01, 0.5, 10, 20,000; past that range, or
    with ``sci`` (an axis that reaches past it: one form along the axis), 1e6, 2e-5."""
    if v == 0:
        return "0"
    if 1e-3 <= abs(v) < 1e5 and not sci:
        return f"{v:,.6g}"
    mant, _, exp = f"{v:.0e}".partition("e")
    return f"{mant}e{int(exp)}"


def _finish_log_log(ax, data: dict, xs: list[int], xlabel: str, ylabel: str,
                    title: str) -> None:
    """The shared frame of the memory-against-length plots: GPU line, log axes, legend."""
    _gpu_line(ax, data)
    _log2_ticks(ax, xs)
    _plain_log(ax, "y")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3, which="both")


def _components(report: dict):
    data = report["data"]
    groups: dict[str, list[int]] = {}
    for r in data["components"]:
        g = groups.setdefault(r["group"], [0, 0])
        g[0] += r["params"]
        g[1] += (r["prefill_flops"] if "prefill_flops" in r
                 else r["forward_flops"] + r["backward_flops"])
    names = sorted(groups, key=lambda k: tuple(groups[k]))
    fig = _figure()
    ax_p, ax_f = fig.subplots(1, 2, sharey=True)
    serving = data["request"]["inference"]
    for ax, idx, what in ((ax_p, 0, "parameters"),
                          (ax_f, 1, "FLOPs, prefill of one prompt" if serving
                           else "FLOPs, one step (fwd + bwd, executed)")):
        vals = [groups[n][idx] for n in names]
        div, prefix = scale(max(vals) or 1)
        bars = ax.barh(names, [v / div for v in vals],
                       color="#4C72B0" if idx == 0 else "#DD8452", label=what)
        ax.bar_label(bars, labels=["0" if not v else "<0.01" if v / div < 0.01
                                   else f"{v / div:,.3g}" for v in vals], padding=3, fontsize=8)
        ax.margins(x=0.15)
        ax.legend(loc="lower right", fontsize="small")
        unit = COUNT_WORDS.get(prefix, prefix) if idx == 0 else f"{prefix}FLOP"
        ax.set_xlabel(f"{what} ({unit})" if unit else what)
        ax.grid(axis="x", alpha=0.3)
    ax_p.set_title("Parameters")
    ax_f.set_title("Prefill FLOPs" if serving else "Training FLOPs per step")
    fig.suptitle(f"{data['model']['name']}: where the parameters and FLOPs are")
    return fig


def _memory(report: dict):
    data = report["data"]
    fig = _figure()
    ax = fig.subplots()
    labels = [_wrap(m["label"]) for m in data["memory"]]
    bottom = [0.0] * len(labels)
    # one GPU: the framework (reserved slack, workspaces, context) on top of the tensors, up
    # to the device bytes compared with the GPU
    stacks = [m["categories"] | ({"framework": m["device"]["device_bytes"] - m["total"]}
                                 if "device" in m else {}) for m in data["memory"]]
    for cat, colour in CATEGORY_COLOURS.items():
        vals = [c.get(cat, 0) / GIB for c in stacks]
        if not any(vals):
            continue
        ax.bar(labels, vals, bottom=bottom, color=colour, label=CATEGORY_LABELS.get(cat, cat),
               width=0.6)
        bottom = [b + v for b, v in zip(bottom, vals)]
    _gpu_line(ax, data)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("memory per GPU (GiB = 2^30 bytes)")
    ax.set_xlabel("layout")
    ax.tick_params(axis="x", labelsize=8)
    ax.set_title(f"{data['model']['name']}: memory per GPU by category")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="y", alpha=0.3)
    return fig


def _activations(report: dict):
    data = report["data"]
    a = data["activations_vs_seq"]
    fig = _figure()
    ax = fig.subplots()
    # selective equals none under a fused kernel (no S x S to drop): dashed, so both show
    for mode, marker, style in (("none", "o", "-"), ("selective", "s", "--"),
                                ("full", "^", "-")):
        ax.plot(a["seq"], [v / GIB for v in a[mode]], marker=marker, linestyle=style,
                markersize=8 if mode == "none" else 5, label=f"recompute {mode}")
    _finish_log_log(ax, data, a["seq"], "sequence length (tokens)",
                    "activation memory (GiB = 2^30 bytes)",
                    f"{data['model']['name']}: activations saved for backward, micro-batch "
                    f"{a['batch']}, attention {a['attn']}")
    return fig


def _kv(report: dict):
    data = report["data"]
    kv = data["kv_cache"]
    fig = _figure()
    ax = fig.subplots()
    for c in kv["concurrencies"]:
        ax.plot(kv["contexts"], [v / GIB for v in kv["bytes"][str(c)]], marker="o",
                markersize=3, label=plural(c, "sequence"))
    ax.plot([kv["context"]], [kv["bytes_at_request"] / GIB], marker="*", markersize=14,
            color="black", linestyle="none",
            label=f"asked: {kv['context']:,} tokens x {kv['concurrency']:,}")
    _finish_log_log(ax, data, kv["contexts"], "context (tokens per sequence)",
                    f"KV cache (GiB = 2^30 bytes, {kv['kv_dtype']})",
                    f"{data['model']['name']}: KV cache against context and concurrency")
    return fig


def _frontier(report: dict):
    data = report["data"]
    plan = data["plan"]
    pts = plan["frontier"]
    fig = _figure()
    ax = fig.subplots()
    ax.plot([p["gpus"] for p in pts], [p["days"] for p in pts], marker="o",
            label="fastest layout on that many GPUs")
    if all(p.get("days_low") is not None for p in pts) and any(
            p["days_low"] != p["days_high"] for p in pts):
        ax.fill_between([p["gpus"] for p in pts], [p["days_low"] for p in pts],
                        [p["days_high"] for p in pts], alpha=0.2, linewidth=0,
                        label="10th-90th percentile of published test runs")
    b = plan["best"]
    ax.plot([b["gpus"]], [b["days"]], marker="*", markersize=16, color="black",
            linestyle="none", label=f"chosen: {plural(b['gpus'], 'GPU')}, {b['days']:,.1f} days")
    ax.axvline(plan["min_gpus_to_fit"], color="#C44E52", linestyle=":",
               label=f"fewest GPUs that fit ({plan['min_gpus_to_fit']:,})")
    if plan["days_limit"]:
        ax.axhline(plan["days_limit"], color="black", linestyle="--", linewidth=1,
                   label=f"deadline ({plan['days_limit']:g} days)")
    _log2_ticks(ax, [p["gpus"] for p in pts], lambda v: f"{v:,}", fontsize=8)
    _plain_log(ax, "y")
    ax.set_xlabel(f"GPUs ({plan['gpu']})")
    ax.set_ylabel("days to train (wall clock)")
    ax.set_title(f"{data['model']['name']}: GPUs against days for {plan['tokens']:,} tokens")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3, which="both")
    return fig


def _validation(report: dict):
    data = report["data"]
    v = data["validation"]
    fig = _figure()
    ax = fig.subplots()
    lo, hi = float("inf"), 0.0
    for q in v["by_quantity"]:
        pts = [(r["measured"], r["predicted"]) for r in v["shown"]
               if r["quantity"] == q["quantity"] and r["measured"] > 0 and r["predicted"] > 0]
        if not pts:
            continue
        ax.scatter(*zip(*pts), s=30, alpha=0.8,
                   label=f"{q['quantity']} ({q['exact']:,}/{q['pairs']:,} exact)")
        lo, hi = min(lo, *(min(p) for p in pts)), max(hi, *(max(p) for p in pts))
    if hi > 0:
        ax.plot([lo / 2, hi * 2], [lo / 2, hi * 2], color="black", linewidth=0.8,
                linestyle="--", label="predicted = measured")
    _plain_log(ax, "x")
    _plain_log(ax, "y")
    ax.set_xlabel("measured (parameters, FLOPs or bytes)")
    ax.set_ylabel("predicted (same unit)")
    ax.set_title(f"{data['model']['name']}: predicted against measured\n{v['exact']:,} of "
                 f"{v['rows']:,} pairs exact ({v['file']})")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3, which="both")
    return fig


def _plain_log(ax, which: str) -> None:
    """A log axis with plain numbers on its ticks (``_tick_text``: mathtext is off in every
    plot, so the default formatter's ``$\\mathdefault{10^{4}}$`` would be drawn as written)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    lo, hi = (ax.get_xlim() if which == "x" else ax.get_ylim())
    sci = hi >= 1e5 or lo < 1e-3
    axis.set_major_formatter(FuncFormatter(lambda v, _: _tick_text(v, sci)))
    if hi < 30 * lo:  # under a decade and a half: label the 2s and 5s too
        axis.set_minor_formatter(FuncFormatter(
            lambda v, _: _tick_text(v, sci) if f"{v:.0e}"[0] in "25" else ""))
    else:
        axis.set_minor_formatter(NullFormatter())


def _serve_load(report: dict):
    """TTFT and ITL (p50, p99) against the request rate (txcalc.serve.load)."""
    d = report["data"]["serving_load"]
    pts = d["load"]["points"]
    rates = [p["rate"] for p in pts]
    fig = _figure()
    ax1, ax2 = fig.subplots(1, 2)
    for ax, key, unit, scale_by in ((ax1, "ttft", "s", 1.0), (ax2, "itl", "ms", 1e3)):
        for q, style in (("p50", "-"), ("p99", "--")):
            ax.plot(rates, [p[f"{key}_{q}_s"] * scale_by for p in pts], marker="o",
                    markersize=3, linestyle=style, label=q)
        ax.axvline(d["load"]["capacity_requests_per_s"], color="#8C8C8C", linestyle=":",
                   label="offline capacity")
        ax.set_xlabel("requests/s per replica")
        ax.set_ylabel(f"{key.upper()} ({unit})")
        _plain_log(ax, "y")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize="small")
    fig.suptitle(f"{d['model']} on {d['gpu']} (tp {d['load']['tp']}): {d['input_len']:,} in / "
                 f"{d['output_len']:,} out tokens")
    return fig


def _serve_pareto(report: dict):
    """Output tokens/s per GPU against ITL p50, one series per tp, the front joined."""
    d = report["data"]["serving_load"]
    pts = d["pareto"]["points"]
    fig = _figure()
    ax = fig.subplots()
    for t in sorted({p["tp"] for p in pts}):
        mine = [p for p in pts if p["tp"] == t]
        ax.plot([p["itl_p50_s"] * 1e3 for p in mine], [p["tokens_per_s_per_gpu"] for p in mine],
                marker="o", markersize=4, linestyle=":", label=f"tp {t}")
    front = sorted((p for p in pts if p["pareto"]), key=lambda p: p["itl_p50_s"])
    ax.plot([p["itl_p50_s"] * 1e3 for p in front], [p["tokens_per_s_per_gpu"] for p in front],
            color="black", linewidth=1.5, label="Pareto front")
    _plain_log(ax, "x")
    _plain_log(ax, "y")
    ax.set_xlabel("inter-token latency p50 (ms)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title(f"{d['model']} on {d['gpu']}: throughput against latency, concurrency "
                 f"{', '.join(str(c) for c in sorted({p['concurrency'] for p in pts}))}")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3, which="both")
    return fig


def _compare(report: dict):
    """The report's --compare section: one bar chart per differing quantity, one bar per
    option (txcalc.report.compare.draw_panels, as txcalc compare --out draws them)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from .compare import draw_panels, numeric_differ, panel_grid

    data = report["data"]["compare"]
    keys = numeric_differ(data)
    nrows, cols = panel_grid(len(keys))
    fig = Figure(figsize=(4.2 * cols, 2.8 * nrows), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    draw_panels(fig, data, keys)
    return fig


DRAW = {"components": _components, "memory": _memory, "activations": _activations,
        "kv": _kv, "frontier": _frontier, "validation": _validation,
        "serve_load": _serve_load, "serve_pareto": _serve_pareto, "compare": _compare}


def plot_specs(report: dict) -> list[dict]:
    """Every plot the report's sections show, in order."""
    return [p for s in report["sections"] for p in s["plots"]]


def _cleaned(v):
    """``v`` with every string clean()ed (no control or bidi characters reach a plot)."""
    from .render import clean

    if isinstance(v, str):
        return clean(v)
    if isinstance(v, dict):
        return {k: _cleaned(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_cleaned(x) for x in v]
    return v


def draw(report: dict, spec: dict) -> bytes:
    """The PNG bytes of one plot of the report. Names are untrusted text: control and bidi
    characters are dropped and no string is read as mathtext (``$...$``) or TeX, so a model
    named ``$\\foo{$`` is drawn as written instead of failing the report."""
    return next(draw_each(report, [spec]))


def draw_each(report: dict, specs: list[dict]):
    """``draw`` of each spec, in order (a generator), with the report cleaned once (cleaning
    the whole report for every plot was a twentieth of the drawing time)."""
    from matplotlib import rc_context

    cleaned = _cleaned(report)
    for spec in specs:
        with rc_context({"text.parse_math": False, "text.usetex": False}):
            png = _png(DRAW[spec["kind"]](cleaned))
        yield png  # outside the rc_context: the caller never runs under its settings


# --- drawing in a helper process ---------------------------------------------------------------
#: The helper: imports matplotlib at once (while the parent still builds the report), then
#: reads (sys.path, module, report, specs) and, where the system can fork, forks: the two
#: processes share the one import (copy-on-write; importing matplotlib twice was a sixth of
#: the report's CPU time) and draw alternate plots, the parent's on stdout, the child's on
#: the file descriptor given as argv[1]. Each writes a plot's PNG bytes as it is drawn. It
#: prints nothing (stderr goes to /dev/null) and exits when its input closes.
_HELPER = """
import os, pickle, sys
try:
    import matplotlib.backends.backend_agg, matplotlib.figure
except Exception:
    pass
path, module, report, specs = pickle.load(sys.stdin.buffer)
sys.path[:] = path
import importlib
draw_each = importlib.import_module(module).draw_each
second = int(sys.argv[1])
child = os.fork()
if child == 0:
    out = os.fdopen(second, "wb")
    try:
        for png in draw_each(report, specs[1::2]):
            pickle.dump(png, out)
            out.flush()
        out.close()
    finally:
        os._exit(0)
os.close(second)
for png in draw_each(report, specs[0::2]):
    pickle.dump(png, sys.stdout.buffer)
    sys.stdout.buffer.flush()
os.waitpid(child, 0)
"""


class Painter:
    """Draws the plots in a helper process started before the report is built, so that
    matplotlib's import (about a fifth of ``txcalc report``'s time) overlaps the planner; the
    helper forks once its input arrives, and the two draw side by side (plot i on stream i mod
    2). Each runs this module's ``draw_each`` on a copy of the report: the same bytes. If the
    helper cannot start (or the system cannot fork) or fails in any way, the plots not yet
    received are drawn here instead (``draw``'s own errors then surface as they would have).
    Use as a context manager: no helper outlives it.
    """

    def __init__(self) -> None:
        import os
        import subprocess
        import sys

        self.proc = None
        self.streams: list = []  # the helper's two outputs: its stdout, then its child's
        if not hasattr(os, "fork"):
            return
        try:
            r, w = os.pipe()
        except OSError:
            return
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", _HELPER, str(w)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, pass_fds=(w,))
            self.streams = [self.proc.stdout, os.fdopen(r, "rb")]
        except (OSError, ValueError):
            os.close(r)
        finally:
            os.close(w)

    def __enter__(self) -> Painter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        proc, self.proc = self.proc, None
        streams, self.streams = self.streams, []
        for f in ([proc.stdin] if proc is not None else []) + streams:
            try:
                f.close()
            except OSError:
                pass
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()

    def draw_all(self, report: dict, specs: list[dict], before=lambda spec: None) -> list[bytes]:
        """The PNG bytes of each spec, in order; ``before(spec)`` is called before each."""
        import pickle
        import sys

        out: list[bytes] = []
        announced = 0  # specs already passed to before()
        if self.proc is not None:
            try:
                self.proc.stdin.write(pickle.dumps((list(sys.path), __name__, report, specs)))
                self.proc.stdin.close()
                for i, spec in enumerate(specs):
                    before(spec)
                    announced += 1
                    png = pickle.load(self.streams[i % 2])
                    if not isinstance(png, bytes):
                        raise ValueError("a helper sent something other than PNG bytes")
                    out.append(png)
            except Exception:  # a helper failed: what is left is drawn here
                pass
            finally:
                self.close()
        rest = specs[len(out):]
        pngs = draw_each(report, rest)
        for i, spec in enumerate(rest, len(out)):
            if i >= announced:
                before(spec)
            out.append(next(pngs))
        return out
