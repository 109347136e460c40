"""Published measured fine-tuning peaks and maximum lengths
(txcalc/data/finetune_measurements.json) against txcalc: the committed report is current, every
row is sourced, quoted and split by the stated rule, each quoted table row says what the row's
setup says, and a bad row is refused naming what is wrong."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from txcalc.report import finetune_validation as fv
from txcalc.train.finetune_runs import (
    Measurement,
    MeasurementsError,
    load_measurements,
    measurements_path,
    predicted_figure,
    split_by_rule,
)


@pytest.fixture(scope="module")
def rows():
    from txcalc.train.finetune_runs import evaluate
    return evaluate()


def test_committed_report_equals_a_fresh_rendering(rows):
    assert fv.REPORT.read_text(encoding="utf-8") == fv.render(rows), \
        "reports/finetune-validation.md is stale: python3 -m txcalc.report.finetune_validation"


def test_at_least_12_rows_each_with_source_quote_setup_and_split():
    runs = load_measurements()
    assert len(runs) >= 12
    for m in runs:
        assert m.source.startswith("https://") and m.quote.strip() and m.context_quote.strip()
        assert m.assumptions.strip() and m.split in ("fit", "test"), m.id
        # a source pinned to a commit: the quote can be read again as it was
        assert re.search(r"/blob/[0-9a-f]{40}/", m.source), m.id


def test_split_rule_holds_and_about_a_third_fit():
    runs = load_measurements()
    by_table: dict[str, list[Measurement]] = {}
    for m in runs:
        by_table.setdefault(m.table, []).append(m)
    for table, ms in by_table.items():
        # orders are the rows' places in their source document: 0, 1, 2, ... in file order
        assert [m.order for m in ms] == list(range(len(ms))), table
        assert all(m.split == split_by_rule(m.order) for m in ms), table
    n_fit = sum(m.split == "fit" for m in runs)
    assert 0.25 <= n_fit / len(runs) <= 0.45
    # both kinds of figure are held out
    assert {m.is_length for m in runs if m.split == "test"} == {True, False}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_quoted_rows_state_the_measured_value_and_the_setup():
    """The numbers the predictions use are the quoted row's, not retyped ones."""
    from txcalc.engine.hardware import get_gpu
    for m in load_measurements():
        header, row = m.quote.split("\n")
        cell = dict(zip(_cells(header), _cells(row)))
        if m.recipe == "litgpt":
            unit = {"peak_gb": "GB", "peak_gib": "GiB"}[m.kind]
            assert cell["Peak memory"] == f"{m.measured['value']:.2f} {unit}", m.id
            assert int(cell["Max seq length"]) == m.seq, m.id
            assert int(cell["Micro batch size"]) == m.batch, m.id
            assert cell["Machine"] == "1xA10G" and m.gpu == "a10g", m.id
            assert cell["Model"] == m.model, m.id
            assert cell["Config"].endswith(f"/{m.method}.yaml"), m.id
        elif m.recipe == "torchtune":
            assert cell["Peak Memory per GPU"] == f"{m.measured['value']} GiB" and \
                m.kind == "peak_gib", m.id
            assert cell["Runnable On"] == "1x 4090" and m.gpu == "rtx-4090", m.id
            assert cell["Model"].lower().replace(" ", "-") == m.model, m.id
            assert cell["Finetuning Method"].lower().split()[0] == m.method, m.id
            assert "batch size 2" in m.context_quote and "sequence length 2048" in \
                m.context_quote and (m.batch, m.seq) == (2, 2048), m.id
        else:  # Unsloth's README: the Hugging Face + FA2 column is a longest length
            assert m.kind == "max_seq", m.id
            assert int(cell["Hugging Face + FA2"].replace(",", "")) == m.measured["value"]
            vram = int(cell["GPU VRAM"].removesuffix(" GB"))
            assert get_gpu(m.gpu).memory_bytes == vram * 2**30, m.id
            assert "batch size of 1" in m.context_quote and m.batch == 1, m.id
            assert "rank = 32" in m.context_quote and m.lora["rank"] == 32, m.id
            size = "8B" if m.model == "llama-3.1-8b" else "70B"
            assert f"({size}) Instruct" in m.context_quote, m.id


def test_compared_figure_matches_the_statistic_and_says_so(rows):
    for r in rows:
        fig, words = predicted_figure(r.run, r.predicted)
        assert fig == r.figure
        if r.run.is_length:
            assert fig == r.predicted["max_seq"]
        else:  # each statistic against its own figure (engine.device), none falling back
            own = {"max_memory_allocated": "allocated_bytes",
                   "max_memory_reserved": "reserved_bytes",
                   "nvidia-smi": "device_bytes"}[r.run.statistic]
            assert fig == r.predicted[own] and "no " not in words
            # allocated <= reserved <= device, and allocated is the tensors' peak plus the
            # cuBLAS workspaces
            p = r.predicted
            assert p["tensor_bytes"] < p["allocated_bytes"] <= p["reserved_bytes"] \
                < p["device_bytes"]


def test_a_reserved_prediction_is_picked_for_a_reserved_row_once_predict_gives_one():
    """The one switch for issue 28 item 2: a reserved figure in the prediction is compared
    with a reserved measurement, an nvidia-smi one with reserved plus context."""
    runs = {m.statistic: m for m in load_measurements()}
    pred = {"allocated_bytes": 1, "reserved_bytes": 2, "device_bytes": 3}
    assert predicted_figure(runs["max_memory_allocated"], pred) == (1.0, "allocated")
    assert predicted_figure(runs["max_memory_reserved"], pred) == (2.0, "reserved")
    nvsmi = dataclasses.replace(runs["max_memory_reserved"],
                                measured={**runs["max_memory_reserved"].measured,
                                          "statistic": "nvidia-smi"})
    assert predicted_figure(nvsmi, pred) == (3.0, "reserved + context")
    assert predicted_figure(nvsmi, {"allocated_bytes": 1}) == \
        (1.0, "allocated (no reserved + context model yet)")


def test_memory_rows_predict_what_txcalc_memory_answers():
    """The report's figures are the CLI's for the same options: ``total_bytes`` (the
    tensors' peak) and the allocated, reserved and device bytes it compares. torchtune's rows
    ran compiled (--compile: its blocks and its loss); the deduced offload is --offload."""
    from txcalc.answers.costs import memory
    from txcalc.train.finetune_runs import predict
    m = next(r for r in load_measurements() if r.id == "torchtune-llama-3.1-8b-qlora-4090")
    for offload, setup in (("none", m.setup(stated=True)), (m.deduced["offload"], m.setup())):
        ans = memory(m.model, batch=m.batch, seq=m.seq, precision=m.precision,
                     optimizer=m.optimizer, attn=m.attn, recompute=m.recompute,
                     finetune=m.method, lora_rank=m.lora["rank"], lora_alpha=m.lora["alpha"],
                     lora_targets=m.lora["targets"], loss=m.loss, gpu=m.gpu,
                     recipe=m.recipe, offload=offload, compile=True)
        pred = predict(m, setup)
        assert ans.json["total_bytes"] == pred["tensor_bytes"]
        for k in ("allocated_bytes", "reserved_bytes", "device_bytes"):  # same GPU
            assert ans.json[k] == pred[k], k
        assert ans.json["fused"] == ["layers", "loss"]
    # without --compile: the row without its compiled blocks and loss, more bytes
    plain = memory(m.model, batch=m.batch, seq=m.seq, precision=m.precision,
                   optimizer=m.optimizer, attn=m.attn, recompute=m.recompute,
                   finetune=m.method, lora_rank=m.lora["rank"], lora_alpha=m.lora["alpha"],
                   lora_targets=m.lora["targets"], loss=m.loss, gpu=m.gpu, recipe=m.recipe,
                   offload="none")
    pred = predict(dataclasses.replace(m, compiled_loss=False, compiled_layers=False),
                   dataclasses.replace(m, compiled_loss=False, compiled_layers=False).setup(
                       stated=True))
    assert plain.json["total_bytes"] == pred["tensor_bytes"] > predict(
        m, m.setup(stated=True))["tensor_bytes"]


def test_a_bad_row_is_refused_naming_each_problem(tmp_path):
    doc = json.loads(measurements_path().read_text(encoding="utf-8"))
    row = doc["runs"][1]
    row.update(split="fit", gpu="no-such-gpu", quote="")
    row["measured"]["statistic"] = "oom_boundary"
    bad = tmp_path / "rows.json"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(MeasurementsError) as e:
        load_measurements(bad)
    msg = str(e.value)
    for part in ("split 'fit' but the split rule gives 'test'", "'no-such-gpu'",
                 "quote is empty", "statistic 'oom_boundary'"):
        assert part in msg


def test_fitted_slack_is_the_fit_rows_answer_and_no_test_row_enters_it():
    """engine.recipes.FITTED_SLACK is what fit_reserved_slack answers from the fit rows; the
    answer does not move when every test row is changed (their measured figures doubled)."""
    from txcalc.engine.recipes import FITTED_SLACK, RECIPES
    from txcalc.train.finetune_runs import fit_reserved_slack
    runs = load_measurements()
    for recipe, slack in FITTED_SLACK.items():
        assert RECIPES[recipe].reserved_slack == slack
        assert fit_reserved_slack(recipe, runs) == slack, recipe
        moved = [m if m.split == "fit" else dataclasses.replace(
            m, measured={**m.measured, "value": 2 * m.measured["value"]}) for m in runs]
        assert fit_reserved_slack(recipe, moved) == slack, recipe
    # the recipes not fitted keep the device's default slack
    from txcalc.engine.device import FRAGMENTATION
    assert all(r.reserved_slack == FRAGMENTATION for k, r in RECIPES.items()
               if k not in FITTED_SLACK)


def test_every_deduced_setting_is_forced_by_the_rows_floor():
    """A row deduces a setting only where its recipe offers it and its measured peak is below
    what its stated setup holds when the forward ends; a memory row below that floor without
    a deduction would be an impossible setup. Holds on every row."""
    from txcalc.train.finetune_runs import deduction_problems
    runs = load_measurements()
    assert [p for m in runs for p in deduction_problems(m)] == []
    assert any(m.deduced for m in runs)


def test_the_deduction_rule_refuses_what_the_floor_does_not_force():
    from txcalc.train.finetune_runs import deduction_problems, stated_floor_bytes
    runs = {m.id: m for m in load_measurements()}
    lora = runs["torchtune-llama-3.1-8b-lora-4090"]
    # the floor: what the stated setup keeps at the forward's end, above the measured figure
    floor = stated_floor_bytes(lora)
    assert floor > lora.measured_bytes
    assert floor == lora.setup(stated=True).memory(lora.batch, lora.seq).phases()[
        "after_forward"]["total"]
    # without its deduction the row states an impossible setup
    assert deduction_problems(dataclasses.replace(lora, deduced=None)) == [
        f"{lora.id}: measured below what its stated setup holds when the forward ends, "
        "with nothing deduced"]
    # a deduction the figure does not force (the full row sits above its floor), with a flag
    # the full recipe does not offer
    full = runs["torchtune-llama-3.1-8b-full-4090"]
    assert full.measured_bytes > stated_floor_bytes(full)
    probs = deduction_problems(dataclasses.replace(full, deduced={"offload": "activations"}))
    assert len(probs) == 2 and "does not offer" in probs[0] and "not below" in probs[1]
    # a setting the recipe does not offer, on a row the floor does force
    probs = deduction_problems(dataclasses.replace(lora, deduced={"offload": "all"}))
    assert probs == [f"{lora.id}: deduced offload 'all', which recipe torchtune (lora) does "
                     "not offer"]


def test_deduced_offload_moves_the_checkpoints_to_the_host():
    """The deduced setting is the engine's offload 'activations': the prediction drops by
    exactly the checkpoints' bytes (every block's input under full recompute), which the
    stated setup keeps on the GPU."""
    from txcalc.train.finetune_runs import predict
    m = next(r for r in load_measurements() if r.id == "torchtune-llama-3.1-8b-lora-4090")
    with_, without = m.setup(), m.setup(stated=True)
    assert (with_.offload, without.offload) == ("activations", "none")
    mem = with_.memory(m.batch, m.seq)
    cfg = with_.cfg
    checkpoints = cfg.n_layers * m.batch * m.seq * cfg.d_model * 2  # bf16 block inputs
    assert mem.offloaded_activations == checkpoints
    assert predict(m, without)["tensor_bytes"] - predict(m)["tensor_bytes"] == checkpoints


def test_compiled_layers_fuse_the_blocks_norms_and_products_not_the_final_norm():
    from txcalc.engine.ops import LAYER_FUSED
    m = next(r for r in load_measurements() if r.id == "torchtune-llama-3.1-8b-lora-4090")
    s = m.setup()
    assert "layers" in s.fused and "loss" in s.fused and LAYER_FUSED == ("norm", "act")
    plain = dataclasses.replace(m, compiled_layers=False).setup()
    w = s.memory(m.batch, m.seq).work
    ops = s.memory(m.batch, m.seq).ops
    fused_norms = {op.path for op in ops if op.kind == "norm" and op.runs_fused(w)}
    assert "final_norm" not in fused_norms and len(fused_norms) == 2 * s.cfg.n_layers
    # what the recomputed block keeps in backward, and everything without recompute, shrink
    assert s.memory(m.batch, m.seq).recompute_bytes < plain.memory(m.batch, m.seq).recompute_bytes
    none, plain_none = (dataclasses.replace(x, recompute="none") for x in (s, plain))
    assert none.memory(m.batch, m.seq).activations < plain_none.memory(m.batch, m.seq).activations
