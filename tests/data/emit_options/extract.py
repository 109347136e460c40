"""Write the option tables the emit tests check against, read from each framework's own
parser (run once per framework version, in a throwaway venv where the package installs:
``python tests/data/emit_options/extract.py FRAMEWORK``). Each table cites its package version
and the file that defines the options; the tests check emitted names and value types
against it where the package cannot be installed in CI (txcalc/emit's docstrings name why).

    framework     | package==version        | defined in
    --------------|-------------------------|---------------------------------------------
    torchtitan    | torchtitan==0.2.2       | torchtitan/config/job_config.py (JobConfig)
    vllm          | vllm==0.33.0            | vllm/engine/arg_utils.py (EngineArgs parser)
    sglang        | sglang==0.5.23          | python/sglang/srt/server_args.py (ServerArgs)
    axolotl       | axolotl==0.19.0         | axolotl/utils/schemas/config.py
    trl           | trl==1.16.0             | trl/trainer/sft_config.py, trl/trainer/model_config.py
    llama-factory | llamafactory==0.9.5     | llamafactory/hparams/*.py (the four dataclasses)
    deepspeed     | deepspeed==0.19.8 sdist | deepspeed/runtime/constants.py (the config's keys),
                  |   deepspeed/runtime/zero/config.py (DeepSpeedZeroConfig's fields), read
                  |   with ast from the unpacked sdist (``extract.py deepspeed SRC_DIR``): its
                  |   build needs ninja and hjson, ~15 s, so CI does not install it
    megatron      | NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553
                  |   megatron/training/arguments.py (add_megatron_arguments; a checkout on
                  |   PYTHONPATH, Python 3.11 given typing.override from typing_extensions)
    trtllm        | NVIDIA/TensorRT-LLM     | tensorrt_llm/commands/serve.py@4c05a748 (serve's
                  |   click options), tensorrt_llm/llmapi/llm_args.py@00043967 (BaseLlmArgs,
                  |   TorchLlmArgs, KvCacheConfig: the --extra_llm_api_options YAML's keys);
                  |   recorded by hand (trtllm.json says which fields): no reader here, as
                  |   neither the 2.5 GB repository nor the CUDA wheel comes to this machine
"""

import dataclasses
import enum
import json
import sys
import typing
from pathlib import Path

HERE = Path(__file__).parent


def kind(t) -> str:
    """A JSON-able type name: int, float, bool, str, list, or choices."""
    origin = typing.get_origin(t)
    if origin is typing.Literal:
        return "choice:" + "|".join(map(str, typing.get_args(t)))
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = [a for a in typing.get_args(t) if a is not type(None)]
        if len(args) == 1:
            return kind(args[0])
        kinds = [kind(a) for a in args]
        if all(k.startswith("choice:") for k in kinds):  # one enum or another: any member
            return "choice:" + "|".join(k[7:] for k in kinds)
        if "str" in kinds:  # any text (a choice beside it only names common values)
            return "str"
        return "|".join(sorted(set(kinds)))
    if origin in (list, tuple):
        return "list"
    if isinstance(t, type) and issubclass(t, enum.Enum):
        return "choice:" + "|".join(str(m.value) for m in t)
    return getattr(t, "__name__", str(t))


def dc_fields(cls) -> dict:
    hints = typing.get_type_hints(cls)
    return {f.name: kind(hints[f.name]) for f in dataclasses.fields(cls)}


def parser_options(parser) -> dict:
    out = {}
    for a in parser._actions:
        for s in a.option_strings:
            if a.nargs == 0 or a.const is not None and a.type is None:
                out[s] = "flag"
            elif a.choices:
                out[s] = "choice:" + "|".join(map(str, a.choices))
            else:
                out[s] = getattr(a.type, "__name__", "str") if a.type else "str"
    return out


def torchtitan():
    from torchtitan.config.job_config import JobConfig
    hints = typing.get_type_hints(JobConfig)
    opts = {f"{f.name}.{k}": v for f in dataclasses.fields(JobConfig)
            for k, v in dc_fields(hints[f.name]).items()}
    return "torchtitan==0.2.2 torchtitan/config/job_config.py", opts


def vllm():
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    return ("vllm==0.33.0 vllm/engine/arg_utils.py",
            parser_options(AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())))


def sglang():
    import argparse

    from sglang.srt.server_args import ServerArgs
    p = argparse.ArgumentParser()
    ServerArgs.add_cli_args(p)
    return "sglang==0.5.23 python/sglang/srt/server_args.py", parser_options(p)


def axolotl():
    from axolotl.utils.schemas.config import AxolotlInputConfig
    return ("axolotl==0.19.0 axolotl/utils/schemas/config.py",
            {k: kind(f.annotation) for k, f in AxolotlInputConfig.model_fields.items()})


def trl():
    from trl import ModelConfig, SFTConfig
    return ("trl==1.16.0 trl/trainer/sft_config.py, trl/trainer/model_config.py",
            {"--" + k: v for k, v in (dc_fields(SFTConfig) | dc_fields(ModelConfig)).items()})


def llamafactory():
    from llamafactory.hparams import (
        DataArguments,
        FinetuningArguments,
        ModelArguments,
        TrainingArguments,
    )
    opts = {}
    for cls in (ModelArguments, DataArguments, TrainingArguments, FinetuningArguments):
        opts |= dc_fields(cls)
    return "llamafactory==0.9.5 llamafactory/hparams/*.py", opts


def megatron():
    import argparse

    import typing_extensions
    typing.override = getattr(typing, "override", typing_extensions.override)
    from megatron.training.arguments import add_megatron_arguments
    p = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    source = ("NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553 "
              "megatron/training/arguments.py")
    return source, parser_options(p)


def deepspeed():
    """The key names DeepSpeed's config reader looks up: every lower-case string constant of
    runtime/constants.py and runtime/activation_checkpointing/config.py (train_batch_size,
    bf16, enabled, partition_activations, ...) and every key runtime/config.py reads by name
    (``param_dict.get("zero_optimization")``) as "key", and
    DeepSpeedZeroConfig's fields (and their pydantic aliases) as "zero_optimization.NAME"."""
    import ast
    src = Path(sys.argv[2])
    options = {}
    nodes = []
    for f in ("runtime/constants.py", "runtime/activation_checkpointing/config.py"):
        nodes += ast.parse((src / "deepspeed" / f).read_text()).body
    for node in ast.walk(ast.parse((src / "deepspeed/runtime/config.py").read_text())):
        # param_dict.get("zero_optimization"): a key read by name, with no constant for it
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            options[node.args[0].value] = "key"
    for node in nodes:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str) and node.value.value.isidentifier()
                and node.value.value.islower() and node.targets[0].id.isupper()):
            options[node.value.value] = "key"
    tree = ast.parse((src / "deepspeed/runtime/zero/config.py").read_text())
    zero = next(n for n in tree.body if isinstance(n, ast.ClassDef)
                and n.name == "DeepSpeedZeroConfig")
    for node in zero.body:
        if isinstance(node, ast.AnnAssign):
            options[f"zero_optimization.{node.target.id}"] = "field"
            for kw in getattr(node.value, "keywords", []):
                if kw.arg == "alias" and isinstance(kw.value, ast.Constant):
                    options[f"zero_optimization.{kw.value.value}"] = "field"
    return ("deepspeed==0.19.8 (sdist) deepspeed/runtime/constants.py, runtime/config.py, "
            "runtime/activation_checkpointing/config.py, runtime/zero/config.py"), options


if __name__ == "__main__":
    name = sys.argv[1]
    source, options = globals()[name.replace("-", "")]()
    (HERE / f"{name}.json").write_text(json.dumps(
        {"source": source, "written_by": "tests/data/emit_options/extract.py",
         "options": dict(sorted(options.items()))}, indent=1) + "\n")
    print(name, len(options))
