"""--emit: each format's file, parsed back, holds the plan's numbers under option names (and
value types) its framework defines. The option tables were read off each framework's own
parser (tests/data/emit_options/extract.py: package version and defining file cited in each
table), since none of torchtitan 0.2.2, vLLM 0.33, SGLang 0.5.23, Axolotl 0.19, TRL 1.16 or
LLaMA-Factory 0.9.5 installs in CI's budget on CPU (vLLM and SGLang pull CUDA wheels of several
hundred MB; torchtitan needs triton and torchdata; LLaMA-Factory pins transformers <= 5.6;
TRL and Axolotl need datasets and pyarrow). Where the framework's parser imports here it is
run too (accelerate comes with peft; torchtitan, DeepSpeed and vLLM when installed)."""

import json
import shlex
from pathlib import Path

import pytest
import tomllib
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.cli.cli_run import run

TABLES = Path(__file__).parents[1] / "data" / "emit_options"
FEW = settings(max_examples=4, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture])


def table(name: str) -> dict:
    return json.loads((TABLES / f"{name}.json").read_text())["options"]


def accepts(kind: str, value) -> bool:
    """Whether ``value`` (text from a command line, or a parsed TOML/YAML value) is a value
    of an option of ``kind`` (extract.kind)."""
    if kind == "flag":
        return value is True
    if kind.startswith("choice:"):
        return str(value) in kind[7:].split("|")
    for k in kind.split("|"):
        try:
            if k in ("int", "human_readable_int"):
                return str(int(str(value))) == str(value)
            if k == "float":
                float(value)
                return True
            if k == "bool":
                return isinstance(value, bool) or str(value).lower() in ("true", "false")
            if k in ("str", "list", "dict", "Any"):
                return True
        except ValueError:
            continue
    return True  # a type the table names by class (a pydantic model): not checked here


def flags(text: str, after: str) -> dict:
    """``--flag value`` pairs of the command line in ``text`` after the word ``after``; a
    bare switch is True."""
    words = shlex.split(text.replace("\\\n", " "), comments=True)
    words = words[words.index(after) + 1:]
    out, i = {}, 0
    while i < len(words):
        if not words[i].startswith("--"):
            i += 1
            continue
        if i + 1 < len(words) and not words[i + 1].startswith("--"):
            out[words[i]] = words[i + 1]
            i += 2
        else:
            out[words[i]] = True
            i += 1
    return out


def emitted(capsys, folder: Path, name: str, *argv) -> tuple[int, str, dict | None, str]:
    """(exit code, the emitted main file's text, the answer's JSON, stderr) of one run that
    writes the file (--out) and prints the --json answer it was made from."""
    rc, out, err = run(capsys, *argv, "--out", str(folder / name), "--json")
    if rc:
        assert err.count("\n") == 1 and not any(folder.iterdir()), err
        return rc, "", None, err
    return rc, (folder / name).read_text(), json.loads(out), err


TRAIN = st.fixed_dictionaries({
    "gpus": st.sampled_from(["8", "16", "64"]), "zero": st.sampled_from(["0", "2", "3"]),
    "recompute": st.sampled_from(["none", "full"]), "tp": st.sampled_from(["1", "2", "4"])})


def train_argv(d: dict, fmt: str) -> list[str]:
    return ["plan", "train", "llama-3.2-1b", "--tokens", "100B", "--gpus", d["gpus"], "--zero",
            d["zero"], "--recompute", d["recompute"], "--tp", d["tp"], "--rows", "1",
            "--emit", fmt] + (["--pp", "1", "--cp", "1"] if fmt == "deepspeed" else [])


#: a plan every training format expresses: the tests' draws must not all be refusals
EXPRESSIBLE = {"gpus": "8", "zero": "3", "recompute": "full", "tp": "1"}


@FEW
@given(TRAIN)
@example(EXPRESSIBLE)
def test_torchtitan_toml_keys_and_values(capsys, tmp_path_factory, d):
    rc, out, j, err = emitted(capsys, tmp_path_factory.mktemp("tt"), "job.toml",
                              *train_argv(d, "torchtitan"))
    if rc:
        assert d != EXPRESSIBLE and "--emit torchtitan" in err
        return
    doc, known = tomllib.loads(out), table("torchtitan")
    for section, body in doc.items():
        for k, v in body.items():
            assert f"{section}.{k}" in known, f"{section}.{k}"
            assert accepts(known[f"{section}.{k}"], v), (section, k, v)
    lay, par = j["best"]["layout"], doc["parallelism"]
    assert par["tensor_parallel_degree"] == lay["tp"] and par["pipeline_parallel_degree"] == lay["pp"]
    assert par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] == lay["dp"]
    assert doc["activation_checkpoint"]["mode"] == lay["recompute"]


@FEW
@given(TRAIN)
@example(EXPRESSIBLE)
def test_deepspeed_json_values(capsys, tmp_path_factory, d):
    folder = tmp_path_factory.mktemp("ds")
    rc, out, j, err = emitted(capsys, folder, "ds.json", *train_argv(d, "deepspeed"))
    if rc:
        assert d != EXPRESSIBLE and "--emit deepspeed" in err
        return
    cfg, lay = json.loads(out), j["best"]["layout"]
    assert cfg["zero_optimization"]["stage"] == lay["zero"]
    assert cfg["train_micro_batch_size_per_gpu"] == lay["micro_batch"]
    assert cfg["train_batch_size"] == lay["micro_batch"] * lay["dp"] * cfg["gradient_accumulation_steps"]
    assert "--deepspeed ds.json" in (folder / "launch.sh").read_text()
    # every key is one DeepSpeed 0.19.8 reads (its constants, config.py's lookups, ZeRO's
    # fields: tests/data/emit_options/deepspeed.json), optimizer params aside (torch's names)
    known = table("deepspeed")
    for key, value in cfg.items():
        assert key in known, key
        if isinstance(value, dict) and key != "optimizer":
            for sub in value:
                assert (f"{key}.{sub}" if key == "zero_optimization" else sub) in known, sub
    assert set(cfg["optimizer"]) <= known.keys()
    try:  # DeepSpeed's own parser where it is installed: not in the test extra (an sdist
        import deepspeed.runtime.config as ds  # build of ~15 s, with ninja and hjson)
    except ImportError:
        return

    class Mpu:  # the data-parallel size DeepSpeed would read off torch.distributed
        def get_data_parallel_world_size(self):
            return lay["dp"]
    from unittest import mock
    with mock.patch.object(ds.dist, "get_rank", return_value=0):  # rank 0, no process group
        parsed = ds.DeepSpeedConfig(cfg, mpu=Mpu())
    assert parsed.zero_optimization_stage == lay["zero"]
    assert parsed.train_batch_size == cfg["train_batch_size"]


@FEW
@given(st.sampled_from(["0", "2", "3"]), st.sampled_from(["none", "full"]))
def test_accelerate_yaml_by_accelerate(capsys, tmp_path_factory, zero, recompute):
    folder = tmp_path_factory.mktemp("acc")
    argv = ["plan", "train", "llama-3.2-1b", "--tokens", "100B", "--gpus", "16", "--zero", zero,
            "--recompute", recompute, "--tp", "1", "--pp", "1", "--cp", "1", "--rows", "1",
            "--emit", "accelerate"]
    rc, _out, _j, err = emitted(capsys, folder, "acc.yaml", *argv)
    assert rc == 0, err
    from accelerate.commands.config.config_args import ClusterConfig
    cfg = ClusterConfig.from_yaml_file(folder / "acc.yaml")
    assert cfg.num_processes == 16 and cfg.mixed_precision == "bf16"
    assert (cfg.distributed_type.value == "FSDP") == (zero != "0")
    if zero != "0":
        assert cfg.fsdp_config["fsdp_activation_checkpointing"] == (recompute == "full")


SERVE = st.fixed_dictionaries({"rate": st.sampled_from(["2", "8"]),
                               "in": st.sampled_from(["512", "2k"]),
                               "kv": st.sampled_from(["bf16", "fp8"])})


@pytest.mark.parametrize("fmt,table_name,after", [("vllm", "vllm", "llama-3-8b"),
                                                  ("sglang", "sglang", "sglang.launch_server")])
@FEW
@given(d=SERVE)
def test_serving_flags_in_the_parser(capsys, tmp_path_factory, fmt, table_name, after, d):
    argv = ["plan", "infer", "llama-3-8b", "--input-len", d["in"], "--output-len", "256",
            "--rate", d["rate"], "--kv-dtype", d["kv"], "--emit", fmt]
    rc, out, j, err = emitted(capsys, tmp_path_factory.mktemp("s"), "serve.sh", *argv)
    assert rc == 0, err
    known, got = table(table_name), flags(out, after)
    for flag, v in got.items():
        assert flag in known, flag
        assert accepts(known[flag], v), (flag, v, known[flag])
    kv = j["kv_capacity"]
    tp_flag, len_flag, chunk = {"vllm": ("--tensor-parallel-size", "--max-model-len",
                                         "--max-num-batched-tokens"),
                                "sglang": ("--tp-size", "--context-length",
                                           "--chunked-prefill-size")}[fmt]
    assert int(got[tp_flag]) == j["tp"] and int(got[len_flag]) == kv["max_model_len"]
    assert int(got[chunk]) == j["max_num_batched_tokens"]


def dotted(d: dict, prefix: str = "") -> dict:
    """A nested mapping's leaves by dotted key: {"a": {"b": 1}} -> {"a.b": 1}."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(dotted(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


@FEW
@given(d=SERVE, capacity=st.booleans())
def test_trtllm_line_and_yaml_keys_in_its_source(capsys, tmp_path_factory, d, capacity):
    """Every trtllm-serve flag and every --extra_llm_api_options YAML key (nested ones as
    kv_cache_config.NAME) is one TensorRT-LLM defines (tests/data/emit_options/trtllm.json:
    serve.py's click options, llm_args.py's pydantic fields, cited commits), with a value of
    its type, and the values are the plan's."""
    load = (["--context", d["in"], "--concurrency", d["rate"]] if capacity else
            ["--input-len", d["in"], "--output-len", "256", "--rate", d["rate"]])
    argv = ["plan", "infer", "llama-3-8b", *load, "--kv-dtype", d["kv"], "--engine", "trtllm",
            "--emit", "trtllm"]
    folder = tmp_path_factory.mktemp("t")
    rc, out, j, err = emitted(capsys, folder, "serve.sh", *argv)
    assert rc == 0, err
    known, got = table("trtllm"), flags(out, "llama-3-8b")
    extra = dotted(yaml.safe_load((folder / got["--extra_llm_api_options"]).read_text()))
    for key, v in [*got.items(), *extra.items()]:
        assert key in known, key
        assert accepts(known[key], v), (key, v, known[key])
    kv = j["kv_capacity"]
    assert (int(got["--tp_size"]), int(got["--pp_size"])) == (j["tp"], j["pp"])
    assert int(got["--max_seq_len"]) == kv["max_model_len"]
    assert int(got["--max_num_tokens"]) == kv["max_num_batched_tokens"]
    assert int(got["--max_batch_size"]) == kv["max_num_seqs"]
    fraction = kv["kv_cache_free_gpu_mem_fraction"]
    assert float(got["--kv_cache_free_gpu_memory_fraction"]) == fraction
    assert extra["kv_cache_config.free_gpu_memory_fraction"] == fraction
    assert extra["kv_cache_config.tokens_per_block"] == kv["block_size"]
    assert extra.get("kv_cache_config.dtype", "auto") == ("fp8" if d["kv"] == "fp8" else "auto")


@pytest.mark.parametrize("fmt,recipe", [("trl", "trl-sft"), ("axolotl", "axolotl"),
                                        ("llama-factory", "llama-factory")])
@FEW
@given(mode=st.sampled_from(["lora", "qlora", "dora", "full"]), gpus=st.sampled_from(["1", "2"]))
def test_finetune_keys_in_the_schema(capsys, tmp_path_factory, fmt, recipe, mode, gpus):
    argv = ["fit", "llama-3.2-1b", "--gpu", "h100", "--finetune", mode, "--gpus", gpus,
            *(["--recipe", recipe] if mode != "full" else []), "--emit", fmt]
    rc, out, j, err = emitted(capsys, tmp_path_factory.mktemp("f"), "ft.txt", *argv)
    if rc:
        assert f"--emit {fmt}" in err
        return
    known = table(fmt)
    if fmt == "trl":
        got = flags(out, "sft")
        seq, batch = int(got["--max_length"]), int(got["--per_device_train_batch_size"])
    else:
        got = yaml.safe_load(out)
        seq_key, batch_key = {"axolotl": ("sequence_len", "micro_batch_size"),
                              "llama-factory": ("cutoff_len", "per_device_train_batch_size")}[fmt]
        seq, batch = got[seq_key], got[batch_key]
    for k, v in got.items():
        assert k in known, k
        assert accepts(known[k], v if fmt == "trl" else v if not isinstance(v, list) else "x"), (k, v)
    assert (seq, batch) == (j["max_seq"], j["max_batch"])


def test_torchtitan_parses_with_its_config_manager(capsys, tmp_path):
    """torchtitan 0.2's own ConfigManager reads the TOML (where torchtitan imports)."""
    # torchtitan 0.2's TOML job config (0.3 replaced it with Python config registries)
    pytest.importorskip("torchtitan.config.job_config", reason="torchtitan 0.2 needs triton "
                        "and torchdata: not in the test extra")
    from torchtitan.config import manager
    rc, _, j, err = emitted(capsys, tmp_path, "job.toml", "plan", "train", "llama-3-8b",
                            "--tokens", "100B", "--gpus", "16", "--zero", "3", "--tp", "2",
                            "--emit", "torchtitan")
    assert rc == 0, err
    cfg = manager.ConfigManager().parse_args(["--job.config_file", str(tmp_path / "job.toml")])
    lay, par = j["best"]["layout"], cfg.parallelism
    assert (par.tensor_parallel_degree, par.pipeline_parallel_degree) == (lay["tp"], lay["pp"])
    assert par.data_parallel_shard_degree * par.data_parallel_replicate_degree == lay["dp"]
    assert cfg.training.global_batch_size == j["global_batch"]


def test_vllm_line_parses_with_vllms_parser(capsys, tmp_path):
    """vLLM's own argument parser and EngineArgs read the emitted line (where vLLM imports)."""
    args = pytest.importorskip("vllm.engine.arg_utils", reason="vLLM's wheel is CUDA-built "
                               "(336 MB) with a long dependency list: not in the test extra")
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    rc, out, j, err = emitted(capsys, tmp_path, "serve.sh", "plan", "infer", "llama-3-8b",
                              "--input-len", "1k", "--output-len", "256", "--rate", "4",
                              "--kv-dtype", "fp8", "--emit", "vllm")
    assert rc == 0, err
    words = shlex.split(out.replace("\\\n", " "), comments=True)
    parser = args.AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
    ns = parser.parse_args(["--model", "llama-3-8b", *words[3:]])
    e = args.AsyncEngineArgs.from_cli_args(ns)
    kv = j["kv_capacity"]
    assert (e.tensor_parallel_size, e.pipeline_parallel_size) == (j["tp"], j["pp"])
    assert (e.max_model_len, e.max_num_batched_tokens, e.block_size) == (
        kv["max_model_len"], kv["max_num_batched_tokens"], kv["block_size"])
    assert e.gpu_memory_utilization == kv["gpu_memory_utilization"]
    assert e.kv_cache_dtype == "fp8"


MEGATRON = st.fixed_dictionaries({
    "gpus": st.sampled_from(["16", "64"]), "zero": st.sampled_from(["0", "1", "3"]),
    "recompute": st.sampled_from(["none", "selective", "full"]),
    "tp": st.sampled_from(["1", "2", "4"])})


@FEW
@given(MEGATRON)
@example(EXPRESSIBLE)
def test_megatron_flags_in_its_parser(capsys, tmp_path_factory, d):
    """Every flag is one Megatron-LM's add_megatron_arguments defines, its value of the
    flag's type or choices, and the degrees, batch and recompute are the plan's."""
    argv = ["plan", "train", "llama-3.2-1b", "--tokens", "100B", "--gpus", d["gpus"], "--zero",
            d["zero"], "--recompute", d["recompute"], "--tp", d["tp"], "--rows", "1",
            "--emit", "megatron"]
    rc, out, j, err = emitted(capsys, tmp_path_factory.mktemp("m"), "m.sh", *argv)
    if rc:
        assert d != EXPRESSIBLE and "--emit megatron" in err
        return
    known, got = table("megatron"), flags(out, "pretrain_gpt.py")
    for flag, v in got.items():
        assert flag in known, flag
        assert accepts(known[flag], v), (flag, v, known[flag])
    lay = j["best"]["layout"]
    assert int(got["--tensor-model-parallel-size"]) == lay["tp"]
    assert int(got["--pipeline-model-parallel-size"]) == lay["pp"]
    assert int(got["--micro-batch-size"]) == lay["micro_batch"]
    assert int(got["--global-batch-size"]) == j["global_batch"]
    assert ("--sequence-parallel" in got) == lay["sp"]
    assert got.get("--recompute-granularity", "none") == lay["recompute"]
    assert ("--use-distributed-optimizer" in got) == (lay["zero"] == 1)


HEADERS = [
    (["plan", "train", "llama-3.2-1b", "--tokens", "50B", "--gpus", "8", "--tp", "1", "--pp",
      "1", "--cp", "1", "--zero", "3"], ["torchtitan", "megatron", "accelerate", "deepspeed"]),
    (["fit", "llama-3.2-1b", "--gpu", "h100"], ["trl", "axolotl", "llama-factory"]),
    (["plan", "infer", "llama-3.2-1b", "--input-len", "1k", "--output-len", "128", "--rate",
      "2", "--engine", "trtllm"], ["trtllm"]),
    (["plan", "infer", "llama-3.2-1b", "--context", "4k", "--concurrency", "8"],
     ["vllm", "sglang"])]


@pytest.mark.parametrize("argv,formats", HEADERS, ids=[a[1] for a, _ in HEADERS])
def test_every_file_states_its_command_and_expected_figures(capsys, argv, formats):
    """The header names the txcalc command (as given, --out aside) and the figures to compare
    the run with: memory per GPU, and tokens/s (training) or latency/speed (serving)."""
    for fmt in formats:
        rc, out, err = run(capsys, *argv, "--emit", fmt)
        assert rc == 0, (fmt, err)
        head = [x for x in out.splitlines() if x.startswith("# ")]
        if fmt == "deepspeed":  # JSON holds no comment: the launcher beside it carries them
            assert out.startswith("==> ds_config.json <==")
        assert f"txcalc {' '.join(argv)} --emit {fmt}" in head[0], (fmt, head[0])
        said = " ".join(head)
        assert "memory per GPU" in said and "GiB" in said, fmt
        assert any(w in said for w in ("tokens/s", "seq")), fmt
