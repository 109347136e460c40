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
        assert "* total_bytes" in text and "192.73 GB" in text and "206.69 GB" in text


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
