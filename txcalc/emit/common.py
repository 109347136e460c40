"""What every emitter shares: the refusal, the header that states the producing command and
the expected figures, the mappings of txcalc's names to framework names (each written once),
and small writers for TOML, YAML and shell lines (the core has no TOML or YAML dependency).

    txcalc            | torchtitan 0.2   | DeepSpeed / HF     | Megatron-LM       | vLLM
    ------------------|------------------|--------------------|-------------------|------------
    bf16-mixed        | bfloat16 params, | bf16.enabled,      | --bf16            | --dtype
                      |  fp32 reduce     |  --bf16            |                   |  bfloat16
    fp16-mixed        | (refused)        | fp16.enabled       | --fp16            | float16
    fp32              | float32          | neither            | neither           | float32
    kv bf16/fp16      |                  |                    |                   | auto
    kv fp8            |                  |                    |                   | fp8
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

from ..errors import TxcalcError
from ..units import GIB


class EmitError(TxcalcError):
    """The framework cannot express what the plan assumed: one line naming the setting."""


def refuse(fmt: str, setting: str, why: str) -> None:
    """Raise the one-line refusal: '--emit torchtitan: recompute selective ...: why'."""
    raise EmitError(f"--emit {fmt}: {setting}: {why}")


@dataclass
class Emitted:
    """The files one format writes: name -> text; ``main`` is the one --out names."""

    main: str
    files: dict = field(default_factory=dict)


#: training precision -> (HF Trainer/accelerate mixed_precision, DeepSpeed section enabled)
HF_MIXED = {"bf16-mixed": "bf16", "fp16-mixed": "fp16", "fp32": "no", "fp8-mixed": "fp8"}
#: serving precision -> vLLM/SGLang --dtype
SERVE_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
#: txcalc's optimizer -> torch's class name (torchtitan optimizer.name, DeepSpeed's type)
TORCH_OPTIMIZER = {"adamw": "AdamW", "adam": "Adam"}
#: txcalc's optimizer with its kernel -> HF TrainingArguments.optim (fine-tuning formats)
HF_OPTIM = {("adamw", "foreach"): "adamw_torch", ("adamw", "fused"): "adamw_torch_fused",
            ("adam8bit", "foreach"): "adamw_bnb_8bit", ("adam8bit", "fused"): "adamw_bnb_8bit",
            ("paged-adam8bit", "foreach"): "paged_adamw_8bit",
            ("sgd", "foreach"): "sgd", ("adafactor", "foreach"): "adafactor"}
#: --lora-targets words -> the module names of a Llama-style decoder (HF names)
LORA_TARGETS = {"attn": ["q_proj", "k_proj", "v_proj", "o_proj"],
                "mlp": ["gate_proj", "up_proj", "down_proj"]}


def hf_optim(fmt: str, optimizer: str, kernel: str, recipe_optim: str | None) -> str:
    """The HF ``optim`` string of the plan's optimizer: the recipe's own name when the plan
    kept the recipe's optimizer (``paged_adamw_32bit``), else HF_OPTIM's."""
    if recipe_optim is not None:
        return recipe_optim
    name = HF_OPTIM.get((optimizer, kernel)) or HF_OPTIM.get((optimizer, "foreach"))
    if name is None:
        refuse(fmt, f"optimizer {optimizer}", "no HF Trainer optim of that name")
    return name


def lora_targets(targets: str) -> list[str] | str:
    """``all-linear`` stays a word (PEFT's own); attn / mlp / comma-separated names a list."""
    if targets == "all-linear":
        return "all-linear"
    out: list[str] = []
    for t in targets.split(","):
        out += LORA_TARGETS.get(t.strip(), [t.strip()])
    return out


def header(command: str, figures: list[str], note: str = "") -> list[str]:
    """The lines every emitted file starts with (without the comment mark): the command and
    txcalc version that produced it and the figures the plan expects."""
    from .. import __version__
    out = [f"written by txcalc {__version__}: {command}"]
    out += [f"expected: {f}" for f in figures]
    if note:
        out.append(note)
    return out


def gib(n: float) -> str:
    """Bytes as GiB for a header line."""
    return f"{n / GIB:,.1f} GiB"


def comment(lines: list[str], mark: str = "#") -> str:
    return "".join(f"{mark} {x}\n" for x in lines)


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(str(v))  # a TOML basic string is a JSON string


def toml(sections: dict) -> str:
    """``{section: {key: value}}`` as TOML (scalars and lists of scalars)."""
    out = []
    for name, body in sections.items():
        out.append(f"\n[{name}]\n")
        out += [f"{k} = {toml_value(v)}\n" for k, v in body.items()]
    return "".join(out)


def yaml_value(v) -> str:
    """A YAML scalar (a dict: a JSON flow mapping, which YAML reads as one)."""
    if isinstance(v, dict):
        return json.dumps(v)
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))  # a double-quoted YAML scalar is a JSON string


def yaml(d: dict, indent: int = 0) -> str:
    """A dict of scalars, lists of scalars and dicts as block YAML."""
    pad, out = " " * indent, []
    for k, v in d.items():
        if isinstance(v, dict):
            out.append(f"{pad}{k}:\n{yaml(v, indent + 2)}")
        elif isinstance(v, (list, tuple)):
            out.append(f"{pad}{k}:\n" + "".join(f"{pad}  - {yaml_value(x)}\n" for x in v))
        else:
            out.append(f"{pad}{k}: {yaml_value(v)}\n")
    return "".join(out)


def shell_line(words: list[str], flags: list[tuple[str, object]]) -> str:
    """A command line, one flag per continued line: ``(flag, value)``; value True: a bare
    switch, None or False: left out."""
    parts = [" ".join(shlex.quote(w) for w in words)]
    for flag, v in flags:
        if v is None or v is False:
            continue
        parts.append(flag if v is True else f"{flag} {shlex.quote(str(v))}")
    return " \\\n  ".join(parts) + "\n"
