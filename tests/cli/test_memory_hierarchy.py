"""`txcalc memory`'s table in the hierarchy the page and the reports show (issue 29): weights;
gradients; optimizer states with the fp32 master weights inside; activations; transients (the
optimizer step's temporaries, the loss's logits); framework. The words are
txcalc.answers.costs's (MEMORY_ROWS, MEMORY_GROUPS, MEMORY_PARTS), one place for all three."""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stderr, redirect_stdout

import pytest

from txcalc.answers.costs import MEMORY_GROUPS, MEMORY_ROWS, memory_words
from txcalc.cli import main

GIB = 2**30


def run(argv: list[str]) -> str:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(argv)
    assert rc in (0, None), err.getvalue()
    return out.getvalue()


def table_rows(text: str) -> list[tuple[str, str]]:
    """(category cell with its indent, bytes cell) of each row of the first table."""
    rows = []
    for line in text.splitlines():
        if line.startswith("│"):
            cells = [c for c in line.strip("│").split("│")]
            rows.append((cells[0][1:].rstrip(), cells[1].strip()))
        elif rows and line.startswith("└"):
            break
    return rows


@pytest.fixture(scope="module")
def train():
    argv = ["memory", "llama-3.2-1b", "--seq", "1024", "--gpu", "h100-sxm"]
    return table_rows(run(argv)), json.loads(run([*argv, "--json"])), run(argv)


def test_the_rows_are_the_hierarchy_in_order(train):
    rows, out, _ = train
    names = [r[0] for r in rows]
    top = [n for n in names if not n.startswith(" ")]
    assert top[:7] == ["weights", "gradients", "optimizer states",
                       "activations (saved for backward)", "transients (each at its own largest)",
                       "framework", "total (peak over the step)"]
    # the fp32 master weights sit inside the optimizer states, directly under them
    i = names.index("optimizer states")
    assert names[i + 1] == "  of which fp32 master weights"
    assert rows[i + 1][1] == f"{out['master_weights_bytes']:,}"
    assert out["master_weights_bytes"] < out["optimizer_bytes"]
    # the step's temporaries and the loss's logits are transients, not optimizer states
    t = names.index("transients (each at its own largest)")
    assert names[t + 1: t + 3] == ["  the optimizer step's temporaries",
                                   "  the loss's logits (T x V)"]
    assert "fp8 weight copies" not in " ".join(names)  # none in bf16: no row at 0
    assert "KV cache" not in names  # training holds none
    for group in ("weights", "gradients", "optimizer", "activations", "transients",
                  "framework"):
        assert any(n.startswith(MEMORY_GROUPS[group]) for n in top), group


def test_the_step_temporaries_are_the_peaks_own(train):
    """The new step_temporaries_bytes against the engine's phase model: at the optimizer
    step's peak, what the temporaries (temp) and the states (opt, master) hold beyond the
    optimizer's own bytes (states, counters, master) is the step's temporaries."""
    _, out, _ = train
    peak = out["peak_by_category"]
    assert out["peak_phase"] == "peak_step"
    assert peak["temp"] + peak["opt"] + peak["master"] - out["optimizer_bytes"] \
        == out["step_temporaries_bytes"] > 0


def test_the_peak_sentence_names_the_groups(train):
    *_, text = train
    sentence = " ".join(text[text.index("The peak is at"):].split("\n\n")[0].split())
    assert sentence.startswith("The peak is at the optimizer step (GiB): weights ")
    assert "optimizer states: moments and step counters" in sentence
    assert "fp32 master weights" in sentence and "transients: " in sentence
    assert "fp32 master " not in sentence.replace("fp32 master weights", "")


def test_serving_states_its_formats_and_holds_weights_and_kv_only():
    text = run(["memory", "llama-3.2-1b", "--inference", "--context", "4k", "--concurrency",
                "2", "--weights", "int4"])
    title = " ".join(text.split("┏")[0].split())
    assert title == "llama-3.2-1b: memory (weights int4, KV cache bf16)"
    assert [r[0] for r in table_rows(text)] == ["weights", "KV cache", "total"]


def test_the_report_says_the_same_words():
    """A report's memory table heads its columns with the hierarchy's words."""
    from txcalc.report.sections import CATEGORY_LABELS
    assert CATEGORY_LABELS["optimizer"] == "optimizer states: fp32 master inside"
    assert CATEGORY_LABELS["step"] == "transients: optimizer step"
    assert CATEGORY_LABELS["logits"] == memory_words("logits", short=True)
    assert CATEGORY_LABELS["weights"] == "weights" == memory_words("weights")
    assert CATEGORY_LABELS["kv cache"] == "KV cache"
    for words in CATEGORY_LABELS.values():
        head = re.split(r"[:(]", words)[0].strip()
        assert any(head.lower().startswith(g.lower()) for g in MEMORY_GROUPS.values()), words
    assert {words for depth, _, words in MEMORY_ROWS if depth == 0} >= {
        "weights", "gradients", "optimizer states", "KV cache", "framework"}


def test_a_parameter_count_names_each_total():
    # its figures are wider than 80 columns: the narrow form, each row's name then its cells
    lines = run(["memory", "--params", "70B"]).splitlines()
    rows = [a for a, b in zip(lines, lines[1:]) if b.lstrip().startswith("bytes:")]
    assert rows[:3] == ["weights", "gradients", "optimizer states"]
    assert rows[-4:] == ["total", "allocated (max_memory_allocated)",
                         "reserved (max_memory_reserved)",
                         "device (reserved + CUDA context: nvidia-smi)"]
