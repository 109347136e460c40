"""txcalc compare (issue 18 item 2): options side by side give the single commands' numbers."""

import json

import pytest

from txcalc.cli import main


def _json(capsys, argv):
    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


SERVE = ["plan", "infer", "llama-3.1-70b", "--context", "8k", "--concurrency", "16"]


def test_h100_vs_h200_serving_equals_the_single_commands(capsys):
    cmp = _json(capsys, ["compare", *SERVE, "--vs", "--gpu h100", "--vs", "--gpu h200",
                         "--json"])
    alone = [_json(capsys, [*SERVE, "--gpu", g, "--json"]) for g in ("h100", "h200")]
    assert [o["result"] for o in cmp["options"]] == alone
    assert [o["result"]["gpu"] for o in cmp["options"]] == ["h100-sxm", "h200"]
    assert {"gpu", "total_gpus", "prefill_latency_s", "decode_tokens_per_s"} <= set(cmp["differ"])
    assert "model" not in cmp["differ"]
    assert cmp["options"][1]["argv"] == ["txcalc", *SERVE, "--gpu", "h200", "--json"]


@pytest.mark.parametrize("command", [["memory", "llama-3-8b", "--seq", "4096"],
                                     ["fit", "llama-3-8b", "--gpu", "h100"],
                                     ["plan", "train", "llama-3-8b", "--tokens", "1T",
                                      "--max-gpus", "64"]])
def test_bf16_vs_fp8_training_equals_the_single_commands(capsys, command):
    cmp = _json(capsys, ["compare", *command, "--vs", "--precision bf16-mixed",
                         "--vs", "--precision fp8-mixed", "--json"])
    alone = [_json(capsys, [*command, "--precision", p, "--json"])
             for p in ("bf16-mixed", "fp8-mixed")]
    assert [o["result"] for o in cmp["options"]] == alone
    assert alone[0] != alone[1]


def test_models_finetuning_modes_and_layouts(capsys):
    cmp = _json(capsys, ["compare", "params", "--vs", "llama-3-8b", "--vs", "llama-3.1-70b",
                         "--vs", "llama-3.1-70b --weights fp8", "--json"])
    totals = [o["result"]["total_params"] for o in cmp["options"]]
    assert totals == [_json(capsys, ["params", m, "--json"])["total_params"]
                      for m in ("llama-3-8b", "llama-3.1-70b", "llama-3.1-70b")]
    ft = _json(capsys, ["compare", "memory", "llama-3.1-8b", "--seq", "1024", "--vs",
                        "--finetune full", "--vs", "--finetune lora", "--vs",
                        "--finetune qlora", "--json"])
    assert [o["result"]["total_bytes"] for o in ft["options"]] == [
        _json(capsys, ["memory", "llama-3.1-8b", "--seq", "1024", "--finetune", f,
                       "--json"])["total_bytes"] for f in ("full", "lora", "qlora")]
    lay = _json(capsys, ["compare", "plan", "train", "llama-3-8b", "--tokens", "1T",
                         "--gpus", "16", "--vs", "--tp 1", "--vs", "--tp 2", "--json"])
    assert [o["result"]["total_gpus"] for o in lay["options"]] == [16, 16]


def test_table_marks_differences_and_folds_when_narrow(capsys, monkeypatch):
    from txcalc.cli.output import console
    argv = ["compare", "memory", "llama-3-8b", "--seq", "4096", "--vs",
            "--precision bf16-mixed", "--vs", "--precision fp8-mixed"]
    for width in (200, 120, 80):
        monkeypatch.setattr(console, "_width", width)
        capsys.readouterr()
        assert main(argv) == 0
        text = capsys.readouterr().out
        assert max(len(line) for line in text.splitlines()) <= width
        assert "* total_bytes" in text and "179.49 GiB" in text and "192.49 GiB" in text


def test_out_writes_markdown_json_and_a_chart(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "cmp"
    data = _json(capsys, ["compare", "memory", "llama-3-8b", "--seq", "1024", "--vs",
                          "--precision bf16-mixed", "--vs", "--precision fp8-mixed",
                          "--out", str(out), "--json"])
    assert sorted(p.name for p in out.iterdir()) == ["compare.json", "compare.md",
                                                     "compare.png"]
    md = (out / "compare.md").read_text()
    assert "| **total_bytes** |" in md and "txcalc memory llama-3-8b" in md
    assert json.loads((out / "compare.json").read_text())["differ"] == data["differ"]
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv,match", [
    (["compare", "memory", "gpt2", "--vs", "--seq 64"], "2 to 6 --vs options"),
    (["compare", "--vs", "a", "--vs", "b"], "needs a command first"),
    (["compare", "report", "gpt2", "--vs", "a", "--vs", "b"], "needs a command first"),
    (["compare", "memory", "gpt2", "--seq", "64", "--vs", "--gpu h100", "--vs", "--gpu h9"],
     "option '--gpu h9': unknown GPU 'h9'"),
    (["compare", "memory", "gpt2", "--vs", "--seq 64", "--vs", "--seq 64"], "the same"),
    (["compare", "memory", "gpt2", "--vs", "--seq 64", "--vs", "--bogus 1"],
     "option '--bogus 1': No such option"),
])
def test_bad_compare_is_one_line(capsys, argv, match):
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err, err


def test_vary_is_the_same_as_vs(capsys):
    by_vs = _json(capsys, ["compare", "memory", "llama-3-8b", "--seq", "1024", "--vs",
                           "--gpu h100", "--vs", "--gpu h200", "--json"])
    by_vary = _json(capsys, ["compare", "memory", "llama-3-8b", "--seq", "1024", "--vary",
                             "gpu=h100,h200", "--json"])
    assert by_vary["options"] == by_vs["options"]
    models = _json(capsys, ["compare", "--vary=model=gpt2,gpt2-medium", "--json", "--",
                            "params"])
    assert [o["result"]["total_params"] for o in models["options"]] == [124_439_808,
                                                                        354_823_168]


# --- the report's --compare section (one source: txcalc.report.compare) ----------------------
def _report(capsys, tmp_path, argv):
    out = tmp_path / "rep"
    capsys.readouterr()
    assert main(["report", *argv, "--out", str(out), "--json"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    return out, json.loads((out / "report.json").read_text())


def test_report_compare_section_is_the_compare_commands_table(capsys, tmp_path):
    """A serving report's --compare gpu=h100,h200 runs plan infer per GPU with the report's
    settings: its numbers are the single commands', its table and chart are in the report."""
    serve = ["llama-3-8b", "--inference", "--context", "8k", "--concurrency", "16"]
    out, rep = _report(capsys, tmp_path, [*serve, "--compare", "gpu=h100,h200"])
    cmp = rep["data"]["compare"]
    alone = [_json(capsys, ["plan", "infer", "llama-3-8b", "--context", "8192",
                            "--concurrency", "16", "--gpu", g, "--json"]) for g in ("h100", "h200")]
    rows = cmp["rows"]
    assert [o["result"] for o in cmp["options"]] == [
        {k: a[k] for k in rows if k in a} for a in alone]
    assert [o["label"] for o in cmp["options"]] == ["--gpu h100", "--gpu h200"]
    assert {"gpu", "kv_cache_bytes"} <= set(cmp["differ"]) and "model" not in cmp["differ"]
    assert rep["data"]["request"]["compare"] == "gpu=h100,h200"
    assert "--compare gpu=h100,h200" in rep["command"]
    # the section: second, right after the answer; the same rows as txcalc compare's table
    sec = rep["sections"][1]
    assert (sec["id"], sec["title"]) == ("compare", "Side by side: gpu")
    from txcalc.report.compare import table_rows
    assert sec["tables"][0]["rows"] == table_rows(cmp)
    assert sec["tables"][0]["columns"] == ["quantity", "--gpu h100", "--gpu h200"]
    assert [p["file"] for p in sec["plots"]] == ["compare.png"]
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "report.md").read_text()
    assert "## Side by side: gpu" in md and "| **kv_cache_bytes** |" in md
    assert "Side by side: gpu" in (out / "report.html").read_text()


def test_report_compare_training_runs_memory_with_the_reports_settings(capsys, tmp_path):
    _, rep = _report(capsys, tmp_path, ["llama-3-8b", "--seq", "1024", "--batch", "2",
                                        "--compare", "precision=bf16-mixed,fp8-mixed"])
    cmp = rep["data"]["compare"]
    assert cmp["command"] == "memory"
    alone = [_json(capsys, ["memory", "llama-3-8b", "--seq", "1024", "--batch", "2",
                            "--precision", p, "--json"]) for p in ("bf16-mixed", "fp8-mixed")]
    assert [o["result"]["total_bytes"] for o in cmp["options"]] == [
        a["total_bytes"] for a in alone]
    assert alone[0]["total_bytes"] != alone[1]["total_bytes"]


@pytest.mark.parametrize("argv,match", [
    (["gpt2", "--compare", "gpu=h100"], "2 to 6 values"),
    (["gpt2", "--compare", "gpu"], "KEY=V1,V2"),
    (["gpt2", "--compare", "out=a,b"], "would write files"),
    (["gpt2", "--compare", "gpu=h100,h100"], "twice"),
    (["gpt2", "--seq", "64", "--compare", "gpu=h100,h9"], "option '--gpu h9'"),
    (["gpt2", "--inference", "--gpu-gb", "80", "--compare", "gpu=h100,h200"],
     "plan infer, which has no --gpu-gb"),
])
def test_bad_report_compare_is_one_line_and_writes_nothing(capsys, tmp_path, argv, match):
    out = tmp_path / "rep"
    capsys.readouterr()
    # --json: no progress bar (rich's transient bar leaves a newline on a non-terminal stdout
    # whatever the error, as before --compare)
    assert main(["report", *argv, "--out", str(out), "--json"]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.count("\n") == 1 and match in cap.err, cap.err
    assert not out.exists()
