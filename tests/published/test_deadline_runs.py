"""Published training runs asked as "how many GPUs for D days" (txcalc/data/
published_deadline_runs.json): every run is sourced, quoted and split by the stated rule, its
model and GPU are ones txcalc knows, and the committed table in reports/training-validation.md
is a fresh rendering (the kept answers are reused only under an unchanged key, and a few are
searched again here to show the kept ones are the planner's)."""

from __future__ import annotations

import json

import pytest

from txcalc.report import training_validation as tv
from txcalc.report.deadline_table import render_section
from txcalc.train import deadline_runs as dr
from txcalc.train.published_runs import RunsError

RUNS = dr.load_runs()
#: runs whose two searches take well under a second each: answered live below
QUICK = ("falcon-7b", "falcon-180b", "tinyllama-1.1b")


def test_every_run_has_a_source_a_quote_a_split_and_at_least_12_runs():
    assert len(RUNS) >= 12
    for r in RUNS:
        assert r.source.strip() and r.quote.strip() and r.assumptions.strip(), r.id
        assert r.split in dr.SPLITS, r.id
        assert r.gpus_used > 0 and r.tokens > 0 and r.seq > 0 and r.days > 0, r.id
        assert r.global_batch is None or r.global_batch > 0, r.id
        # an architecture that is not a preset names where its config.json fields come from
        assert "preset" in r.model or r.model.get("config_source"), r.id


def test_split_is_the_stated_rule_and_about_a_third_fit():
    assert {r.id: r.split for r in RUNS} == dr.fit_rule([r.id for r in RUNS])
    fit = sum(r.split == "fit" for r in RUNS)
    assert 0.25 <= fit / len(RUNS) <= 0.45
    # the fit rows span the GPU types of the test rows that have more than one run
    assert {r.gpu for r in RUNS if r.split == "fit"} >= {"a100-40gb", "a100-80gb", "h100"}


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.id)
def test_model_and_gpu_are_known_to_txcalc(run):
    from txcalc.engine.hardware import get_gpu
    cfg = run.config()
    assert cfg.n_layers > 0
    get_gpu(run.gpu)


def test_days_derived_from_gpu_hours_say_so():
    """Where a run's days are GPU-hours / GPUs / 24, its assumptions show the division."""
    for r in RUNS:
        if "days derived" in r.assumptions:
            assert "/ 24" in r.assumptions and f"{r.days:.1f}" in r.assumptions, r.id


def test_committed_table_equals_a_fresh_rendering():
    """The deadline section of the committed report is what the current planner answers,
    and the kept answers file holds exactly the answers rendered."""
    cache = tv.read_deadline_cache()
    fp = dr.code_fingerprint()
    stale = [r.id for r in RUNS if cache.get(r.id, {}).get("key") != dr.run_key(r, fp)]
    # a kept answer whose key moved (the planner's source or the run changed) is stale: say
    # so at once rather than search every run again (minutes) before failing
    assert not stale, (f"kept answers stale for {stale}: python3 -m "
                       "txcalc.report.training_validation")
    rows, kept = dr.evaluate(cache=cache)
    committed = tv.REPORT.read_text(encoding="utf-8")
    section = render_section(rows)
    assert committed.endswith(section), \
        "the deadline table is stale: python3 -m txcalc.report.training_validation"
    assert tv.read_deadline_cache() == kept, \
        "reports/training-validation-deadline.json is stale: python3 -m " \
        "txcalc.report.training_validation"


@pytest.mark.parametrize("run_id", QUICK)
def test_kept_answers_are_the_planners_answers(run_id):
    """Searched again, without the cache, a few runs give the kept answers exactly."""
    run = next(r for r in RUNS if r.id == run_id)
    kept = tv.read_deadline_cache()[run_id]
    assert kept["key"] == dr.run_key(run, dr.code_fingerprint())
    for published, name in ((True, "published"), (False, "default")):
        a = dr._answer.__wrapped__(run, run.global_batch if published else None)
        assert dr._answer_json(a) == kept[name], (run_id, name)


def test_a_changed_question_is_searched_again():
    """A cached answer whose key does not match (here: other days) is not reused."""
    run = next(r for r in RUNS if r.id == "tinyllama-1.1b")
    fake = {run.id: {"key": "0" * 64, "published": {"global_batch": 1, "gpus": 1},
                     "default": {"global_batch": None, "gpus": 1}}}
    rows, kept = dr.evaluate([run], cache=fake)
    assert rows[0].published.gpus != 1 and kept[run.id]["key"] != "0" * 64


def test_ratio_and_meets_follow_the_issue_27_target():
    run = next(r for r in RUNS if r.id == "pythia-6.9b")  # 128 GPUs used
    ok = dr.Answer(1024, 1024, gpus=256, mfu=0.20)
    assert dr.Row.ratio(ok, run) == 2.0 and dr.Row.meets(ok, run)
    assert not dr.Row.meets(dr.Answer(1024, 1024, gpus=257, mfu=0.5), run)
    assert not dr.Row.meets(dr.Answer(1024, 1024, gpus=128, mfu=0.19), run)
    assert not dr.Row.meets(dr.Answer(1024, error="no layout"), run)


def test_a_run_without_a_quote_or_with_a_bad_split_is_a_runs_error(tmp_path):
    doc = json.loads(dr.runs_path().read_text(encoding="utf-8"))
    doc["runs"][0]["quote"] = ""
    doc["runs"][1]["split"] = "train"
    p = tmp_path / "runs.json"
    p.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(RunsError, match=r"empty quote.*|split 'train'"):
        dr.load_runs(p)
    del doc["runs"][2]["source"]
    p.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(RunsError, match="no 'source'"):
        dr.load_runs(p)
