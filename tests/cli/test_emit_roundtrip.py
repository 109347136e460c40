"""--emit then --from-config: a torchtitan TOML, a DeepSpeed JSON and a vllm serve line read
back into the same layout and settings, so the same --json answer (the search's own record,
which the file's pins narrow, aside). And what a framework cannot express is refused: exit 2,
one line naming the setting, nothing written."""

import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.cli.cli_run import run

FEW = settings(max_examples=3, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture])
#: what differs because the file pins the layout and the batch: the search's record
SEARCH = {"global_batch_source", "max_global_batch", "layouts", "layouts_evaluated", "notes"}


def answer(capsys, *argv) -> dict:
    rc, out, err = run(capsys, *argv, "--json")
    assert rc == 0, err
    return json.loads(out)


@pytest.mark.parametrize("fmt", ["torchtitan", "deepspeed"])
@FEW
@given(gpus=st.sampled_from(["8", "32"]), zero=st.sampled_from(["0", "2", "3"]),
       recompute=st.sampled_from(["none", "full"]))
@example(gpus="8", zero="3", recompute="full")  # both formats express it: a real round trip
def test_train_round_trip(capsys, tmp_path_factory, fmt, gpus, zero, recompute):
    path = tmp_path_factory.mktemp("rt") / "cfg"
    base = ["plan", "train", "llama-3.2-1b", "--tokens", "50B", "--seq", "2048"]
    pins = ["--gpus", gpus, "--zero", zero, "--recompute", recompute, "--tp", "1", "--pp", "1",
            "--cp", "1"]
    rc, out, err = run(capsys, *base, *pins, "--emit", fmt, "--out", str(path), "--json")
    if rc:
        assert (gpus, zero, recompute) != ("8", "3", "full"), err
        assert err.count("\n") == 1 and f"--emit {fmt}" in err and not path.exists()
        return
    a = json.loads(out)
    b = answer(capsys, *base, "--from-config", str(path))
    assert a["best"] == b["best"]
    assert {k: v for k, v in a.items() if k not in SEARCH} == \
        {k: v for k, v in b.items() if k not in SEARCH}
    # and the file written from the read-back answer is the same file
    again = path.with_name("again")
    rc, _, err = run(capsys, *base, "--from-config", str(path), "--emit", fmt, "--out",
                     str(again))
    assert rc == 0, err
    strip = lambda t: [x for x in t.splitlines() if "written by txcalc" not in x]
    assert strip(path.read_text()) == strip(again.read_text())


@pytest.mark.parametrize("mode", [["--context", "8k", "--concurrency", "16"],
                                  ["--input-len", "1k", "--output-len", "256", "--rate", "4"]])
def test_vllm_round_trip(capsys, tmp_path, mode):
    base = ["plan", "infer", "llama-3-8b", "--kv-dtype", "fp8"]
    path = tmp_path / "serve.sh"
    rc, out, err = run(capsys, *base, *mode, "--emit", "vllm", "--out", str(path), "--json")
    assert rc == 0, err
    a = json.loads(out)
    back = [m for m in mode if m not in ("--context", "8k")]  # the file gives the context
    b = answer(capsys, *base, *back, "--from-config", str(path))
    # a served plan's searched layouts narrow to the file's; the chosen one stays
    assert {k: v for k, v in a.items() if k not in ("notes", "layouts")} == \
        {k: v for k, v in b.items() if k not in ("notes", "layouts")}


REFUSED = [
    (["plan", "train", "llama-3.2-1b", "--tokens", "50B", "--gpus", "8", "--zero", "1",
      "--tp", "1", "--pp", "1", "--cp", "1"], "torchtitan", "zero 1"),
    (["plan", "train", "llama-3.2-1b", "--tokens", "50B", "--gpus", "8", "--tp", "2"],
     "deepspeed", "tp 2"),
    (["plan", "train", "llama-3.2-1b", "--tokens", "50B", "--gpus", "8", "--tp", "1", "--pp",
      "1", "--recompute", "op"], "megatron", "recompute op"),
    (["plan", "train", "llama-3.2-1b", "--tokens", "50B", "--gpus", "8", "--tp", "1", "--pp",
      "1", "--cp", "1", "--recompute", "selective"], "accelerate", "recompute selective"),
    (["plan", "infer", "llama-3-8b", "--context", "8k", "--kv-dtype", "int8"], "vllm",
     "kv dtype int8"),
    (["plan", "infer", "llama-3-8b", "--context", "8k"], "trtllm", "engine vllm"),
    (["fit", "llama-3.2-1b", "--gpu", "h100", "--finetune", "lora"], "axolotl",
     "recipe hf-peft"),
    (["fit", "llama-3.2-1b", "--gpu", "h100", "--recompute", "selective"], "trl",
     "recompute selective"),
]


#: the serving emitters' other refusals (ids named by the setting)
SERVE_REFUSED = {
    "sglang-kv-int8": (["plan", "infer", "llama-3-8b", "--context", "8k", "--kv-dtype", "int8"],
                       "sglang", "kv dtype int8"),
    "trtllm-weights-int4": (["plan", "infer", "llama-3-8b", "--context", "8k", "--engine",
                             "trtllm", "--weights", "int4"], "trtllm", "weights int4"),
    "trtllm-offline": (["plan", "infer", "llama-3-8b", "--input-len", "1k", "--output-len",
                        "128", "--rate", "inf"], "trtllm", "--rate inf")}


@pytest.mark.parametrize("argv,fmt,setting", REFUSED + list(SERVE_REFUSED.values()),
                         ids=[f for _, f, _ in REFUSED] + list(SERVE_REFUSED))
def test_refusal_names_the_setting_and_writes_nothing(capsys, tmp_path, argv, fmt, setting):
    out = tmp_path / "sub" / "file"
    rc, stdout, err = run(capsys, *argv, "--emit", fmt, "--out", str(out))
    assert rc == 2 and stdout == ""
    assert err.count("\n") == 1 and f"--emit {fmt}" in err and setting in err, err
    assert not (tmp_path / "sub").exists()


def test_from_config_disagreeing_option_is_refused(capsys, tmp_path):
    path = tmp_path / "ds.json"
    rc, _, err = run(capsys, "plan", "train", "llama-3.2-1b", "--tokens", "50B", "--gpus", "8",
                     "--zero", "2", "--tp", "1", "--pp", "1", "--cp", "1", "--emit", "deepspeed",
                     "--out",
                     str(path))
    assert rc == 0, err
    rc, _, err = run(capsys, "plan", "train", "llama-3.2-1b", "--tokens", "50B", "--zero", "3",
                     "--from-config", str(path))
    assert rc == 2 and err.count("\n") == 1 and "--zero (3)" in err and "(2)" in err


def test_emit_for_another_command_and_out_alone_are_refused(capsys, tmp_path):
    rc, _, err = run(capsys, "fit", "llama-3.2-1b", "--gpu", "h100", "--emit", "vllm")
    assert rc == 2 and "trl, axolotl, llama-factory" in err
    rc, _, err = run(capsys, "fit", "llama-3.2-1b", "--gpu", "h100", "--out",
                     str(tmp_path / "x"))
    assert rc == 2 and "--emit" in err and not (tmp_path / "x").exists()


def test_torchtitan_round_trip_with_model_parallelism(capsys, tmp_path):
    """tp, pp, SP and the interleaved schedule's virtual stages (layers per stage) survive."""
    base = ["plan", "train", "llama-3.2-1b", "--tokens", "50B"]
    path = tmp_path / "job.toml"
    rc, out, err = run(capsys, *base, "--gpus", "16", "--tp", "2", "--pp", "2", "--emit",
                       "torchtitan", "--out", str(path), "--json")
    assert rc == 0, err
    a = json.loads(out)
    b = answer(capsys, *base, "--from-config", str(path))
    assert (a["best"]["layout"]["tp"], a["best"]["layout"]["pp"]) == (2, 2)
    assert a["best"] == b["best"]
