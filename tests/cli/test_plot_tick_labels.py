"""Every plot's tick labels read as numbers (issue 29, item 1): the plots draw text with
mathtext off, so matplotlib's log-axis labels (``$\\mathdefault{10^{4}}$``) showed raw on
every log axis (frontier, activations, KV cache, serving load and validation), and the
frontier's GPU counts overlapped ("112", "128"). Each plot of the committed example reports is
drawn as ``draw`` draws it and its tick texts are read back."""

import copy
import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from txcalc.report import plots  # noqa: E402

REPORTS = Path(__file__).resolve().parents[2] / "reports"
EXAMPLES = ("llama-3.1-405b-train-h100", "llama-3.1-70b-serve-h100-load",
            "llama-3.1-70b-serve-h200-128k")


def _report(name: str) -> dict:
    return json.loads((REPORTS / name / "report.json").read_text())


def _drawn(rep: dict, kind: str):
    """The figure of one plot, laid out and drawn under draw()'s settings (no mathtext)."""
    from matplotlib import rc_context
    with rc_context({"text.parse_math": False, "text.usetex": False}):
        fig = plots.DRAW[kind](plots._cleaned(rep))
        fig.canvas.draw()
    return fig


def _labels(fig) -> list[tuple[str, str, list[str]]]:
    """(axis title, 'x' or 'y', the non-empty tick label texts, major and minor)."""
    out = []
    for ax in fig.axes:
        for which, get in (("x", ax.get_xticklabels), ("y", ax.get_yticklabels)):
            texts = [t.get_text() for t in get(which="both") if t.get_text()]
            out.append((ax.get_title(), which, texts))
    return out


CASES = [(name, spec["kind"]) for name in EXAMPLES
         for spec in plots.plot_specs(_report(name))]


def test_the_examples_cover_every_log_axis_plot():
    assert {k for _, k in CASES} >= {"activations", "kv", "frontier", "validation",
                                     "serve_load", "serve_pareto", "memory", "components"}


@pytest.mark.parametrize("name,kind", CASES)
def test_tick_labels_are_plain_numbers(name, kind):
    fig = _drawn(_report(name), kind)
    for title, which, texts in _labels(fig):
        for t in texts:
            assert "$" not in t and "mathdefault" not in t and "\\" not in t, \
                f"{kind} ({title!r}) {which} tick {t!r}"
    for ax in fig.axes:  # every log axis is labelled: at least two numbers
        for which, scale, get in (("x", ax.get_xscale(), ax.get_xticklabels),
                                  ("y", ax.get_yscale(), ax.get_yticklabels)):
            if scale == "log":
                texts = [t.get_text() for t in get(which="both") if t.get_text()]
                assert len(texts) >= 2, f"{kind}: log {which} axis shows {texts}"


def _overlaps(fig, ax) -> list[tuple[str, str]]:
    renderer = fig.canvas.get_renderer()
    boxes = sorted(((t.get_window_extent(renderer), t.get_text())
                    for t in ax.get_xticklabels() if t.get_text() and t.get_visible()),
                   key=lambda b: b[0].x0)
    return [(a[1], b[1]) for a, b in zip(boxes, boxes[1:]) if a[0].x1 > b[0].x0]


def test_frontier_gpu_labels_do_not_overlap():
    """A frontier with a point every 8 GPUs up to 128 (96, 104, 112, 120, 128 crowd the right
    end of a log axis): no two x labels overlap, and the ends are labelled."""
    rep = copy.deepcopy(_report("llama-3.1-405b-train-h100"))
    plan = rep["data"]["plan"]
    base = plan["frontier"][0]
    gpus = list(range(8, 129, 8))
    plan["frontier"] = [dict(base, gpus=g, days=1000 / g, days_low=900 / g, days_high=1100 / g)
                        for g in gpus]
    plan["best"] = dict(plan["best"], gpus=128, days=1000 / 128)
    plan["min_gpus_to_fit"] = 8
    fig = _drawn(rep, "frontier")
    ax = fig.axes[0]
    assert _overlaps(fig, ax) == []
    texts = [t.get_text() for t in ax.get_xticklabels()]
    assert texts[0] == "8" and texts[-1] == "128" and "" in texts
    assert _overlaps(fig, _drawn(_report("llama-3.1-405b-train-h100"), "frontier").axes[0]) == []


def test_thinned_keeps_the_largest_and_spaces_the_rest():
    labels = plots._thinned([8, 16, 32, 64, 96, 112, 128], str, most=4)
    assert labels[-1] == "128" and labels[0] == "8"
    assert labels[-2] == "" and labels.count("") >= 2


@pytest.mark.parametrize("v,text", [(0.01, "0.01"), (0.5, "0.5"), (10, "10"),
                                    (20000, "20,000"), (1e6, "1e6"), (1e12, "1e12"),
                                    (2e-5, "2e-5")])
def test_tick_text(v, text):
    assert plots._tick_text(v) == text


def test_one_form_along_an_axis():
    """The validation plot's axes span 1e3 to 1e16: every label in the 1eN form (not
    "10,000" beside "1e6")."""
    fig = _drawn(_report("llama-3.1-405b-train-h100"), "validation")
    for _, _, texts in _labels(fig):
        assert texts and all("e" in t and "," not in t for t in texts), texts
