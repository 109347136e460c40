"""The configuration that runs a plan: ``--emit FORMAT [--out FILE]`` on ``plan train``,
``fit`` and ``plan infer``, fed by the answer layer (txcalc.answers), and ``--from-config``,
which reads a torchtitan TOML, a DeepSpeed JSON or a ``vllm serve`` line back into options.

    format        | command     | writes                                   | module
    --------------|-------------|------------------------------------------|-----------
    torchtitan    | plan train  | torchtitan 0.2 TOML job config           | train
    deepspeed     | plan train  | DeepSpeed JSON + deepspeed launcher line | train
    megatron      | plan train  | torchrun pretrain_gpt.py arguments       | train
    accelerate    | plan train  | HF accelerate FSDP config YAML           | train
    trl           | fit         | trl sft arguments (SFTConfig + PEFT)     | finetune
    axolotl       | fit         | Axolotl YAML                             | finetune
    llama-factory | fit         | LLaMA-Factory YAML                       | finetune
    vllm          | plan infer  | vllm serve line                          | serve
    sglang        | plan infer  | python -m sglang.launch_server line      | serve
    trtllm        | plan infer  | trtllm-serve line + extra options YAML   | serve

Where a framework cannot express what the plan assumed, the emitter raises EmitError (one
line naming the setting; the CLI exits 2 and writes nothing).
"""

from __future__ import annotations

from .common import EmitError, Emitted

#: format -> (the command that emits it, module, function)
FORMATS = {"torchtitan": ("plan train", "train", "torchtitan"),
           "deepspeed": ("plan train", "train", "deepspeed"),
           "megatron": ("plan train", "train", "megatron"),
           "accelerate": ("plan train", "train", "accelerate"),
           "trl": ("fit", "finetune", "trl"),
           "axolotl": ("fit", "finetune", "axolotl"),
           "llama-factory": ("fit", "finetune", "llamafactory"),
           "vllm": ("plan infer", "serve", "vllm"),
           "sglang": ("plan infer", "serve", "sglang"),
           "trtllm": ("plan infer", "serve", "trtllm")}

__all__ = ["FORMATS", "EmitError", "Emitted", "check_format", "emit", "launch_files", "rendered",
           "serve_launch_files", "write"]


def emit(fmt: str, command: str, ans, argv: str, model: str) -> Emitted:
    """The files of ``fmt`` for ``command``'s answer ``ans``; ``argv`` is the txcalc command
    line stated in each file's header, ``model`` the model argument as given."""
    import importlib
    check_format(fmt, command)
    _, module, fn = FORMATS[fmt]
    make = getattr(importlib.import_module(f".{module}", __name__), fn)
    return make(ans, argv) if module == "train" else make(ans, argv, model)


def launch_files(plan, command: str, finetune=None) -> list[dict]:
    """What each ``plan train`` format would write for a planner answer (``plan``: a
    train.planner TrainPlan, the report's): ``{"format", "main", "files": {name: text}}``, or
    ``{"format", "refused": the one-line refusal}`` where the framework cannot express the
    plan. ``command`` is stated in each file's header."""
    from ..answers.common import Answer
    return _launch("plan train", Answer({}, {"plan": plan, "finetune": finetune}), command, "")


def serve_launch_files(ans, command: str, model: str) -> list[dict]:
    """``launch_files`` of a ``plan infer`` answer (``ans``: answers.plan's capacity_answer,
    the serving report's): each ``plan infer`` format's files for ``model`` as
    ``plan infer --emit FORMAT`` writes them, or its one-line refusal."""
    return _launch("plan infer", ans, command, model)


def _launch(of: str, ans, command: str, model: str) -> list[dict]:
    out = []
    for fmt, (cmd, _, _) in FORMATS.items():
        if cmd != of:
            continue
        try:
            e = emit(fmt, cmd, ans, command, model)
        except EmitError as err:
            out.append({"format": fmt, "refused": str(err)})
            continue
        out.append({"format": fmt, "main": e.main, "files": dict(e.files)})
    return out


def check_format(fmt: str, command: str) -> None:
    """Refuse a format ``command`` does not emit, naming those it does."""
    own = [f for f, (c, _, _) in FORMATS.items() if c == command]
    if fmt not in own:
        raise EmitError(f"--emit ({fmt!r:.40}) must be one of {', '.join(own)} for "
                        f"`txcalc {command}`")


def rendered(e: Emitted) -> str:
    """What --emit prints without --out: the main file, then any other under a
    '==> name <==' line (as ``head`` shows several files)."""
    if len(e.files) == 1:
        return e.files[e.main]
    return "".join(f"==> {name} <==\n{text}" for name, text in e.files.items())


def write(e: Emitted, out: str) -> list[str]:
    """Write the main file at ``out`` and the others beside it (references to the main
    file's name follow it), all atomically: none half-written (atomic.write_files)."""
    from pathlib import Path

    from ..atomic import check_out_file, write_files
    path = check_out_file(out, "--out")
    files = {path.name: e.files[e.main]}
    for name, text in e.files.items():
        if name != e.main:
            files[name] = text.replace(e.main, path.name)
    folder = path.parent if str(path.parent) else Path(".")
    return [str(p) for p in write_files(folder, files, "--out")]
