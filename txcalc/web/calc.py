"""The what-if page's answers: the page's controls -> the CLI commands they stand for -> those
commands' answers, computed in this process by txcalc.answers.

Nothing here computes a figure. A form (the page's controls, all text) becomes the argument
lists of the CLI commands behind each panel of the page (``commands``); ``answer_bytes`` reads
one back into its answer function's arguments (``call_of``: each ``--flag`` is the parameter
of that name, its text read as the parameter's type) and calls it, so the JSON the page shows
is, byte for byte, what ``txcalc ARGV --json`` prints (the same function, the same JSON text),
and a bad input gives the command's own one-line message. The page shows the same argument
lists as the equivalent commands. Only the report link still runs a command (``run_cli``):
a report is a set of files, written by ``txcalc report``.

    task      | panel   | command
    ----------|---------|-------------------------------------------------------------------
    train     | params  | txcalc params MODEL
              | flops   | txcalc flops MODEL --batch --seq --attn --recompute
              | memory  | txcalc memory MODEL --batch --seq --precision --optimizer ... --gpu-gb
              | answer  | txcalc plan train MODEL --tokens --gpu --seq ... [layout pins]
    finetune  | params, flops and memory as train, with --finetune --lora-rank ...
              | answer  | txcalc fit MODEL --gpu ... --finetune ...
    serve     | params  | txcalc params MODEL [--weights]
              | flops   | txcalc flops MODEL --seq INPUT --context INPUT+OUTPUT
              | memory  | txcalc memory MODEL --inference --context INPUT+OUTPUT --concurrency
              | answer  | txcalc plan infer MODEL --gpu --input-len --output-len (--rate|--concurrency)
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
from collections import OrderedDict
from pathlib import Path

from ..answers.costs import MEMORY_GROUPS, MEMORY_PARTS, PEAK_LABELS
from ..errors import TxcalcError

TASKS = ("train", "finetune", "serve")
PANELS = ("params", "flops", "memory", "answer")
MODEL_CHARS = 4096

#: the page's controls and their starting values ("" = not given: the CLI's default)
DEFAULTS = {
    "model": "llama-3.1-8b", "task": "train", "gpu": "h100-sxm", "price": "",
    # training and fine-tuning ("" precision and optimizer: the CLI's defaults, bf16-mixed,
    # or fp16-mixed on a GPU without bf16, and adamw, which each answer's ``assumed`` states)
    "precision": "", "optimizer": "", "batch": "1", "seq": "4096",
    "attn": "flash", "recompute": "", "tokens": "1T", "days": "", "gpus": "",
    "global_batch": "",
    # the planner's layout pins ("" = the planner chooses)
    "tp": "", "pp": "", "cp": "", "ep": "", "zero": "", "micro_batch": "", "plan_recompute": "",
    # fine-tuning
    "finetune": "lora", "lora_rank": "16", "lora_targets": "all-linear", "base_format": "nf4",
    # serving
    "weights": "", "kv_dtype": "", "input_len": "1024", "output_len": "256",
    "concurrency": "8", "rate": "", "ttft_p99": "", "itl_p99": "", "replicas": "", "mode": "",
}


class WebInputError(TxcalcError):
    """A request to the page's API that names no command the page has (an unknown task, panel
    or control); the page shows it as one line."""


class CommandFailed(TxcalcError):
    """A command the page runs refused its input: the CLI's own one-line message."""

    def __init__(self, message: str, argv: list[str]):
        super().__init__(message)
        self.argv = argv


def form_of(given: dict[str, str]) -> dict[str, str]:
    """The page's controls: DEFAULTS updated by ``given``; an unknown control is refused."""
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise WebInputError(f"unknown control(s) {', '.join(map(repr, unknown))}; the page's "
                            f"controls are {', '.join(DEFAULTS)}")
    form = DEFAULTS | {k: str(v).strip() for k, v in given.items()}
    if form["task"] not in TASKS:
        raise WebInputError(f"task ({form['task']!r:.60}) must be one of {', '.join(TASKS)}")
    model = form["model"]
    if not model:
        raise WebInputError("choose a model: a preset, a Hugging Face id or a config.json")
    if model.startswith("-") or len(model) > MODEL_CHARS or "\n" in model:
        raise WebInputError(f"model ({model!r:.80}) is not a preset name, Hub id or path")
    return form


def _opts(form: dict, *pairs: tuple[str, str]) -> list[str]:
    """``--flag value`` for each (flag, control) whose control is not empty."""
    out = []
    for flag, key in pairs:
        if form[key] != "":
            out += [flag, form[key]]
    return out


def _context(form: dict) -> str:
    """A serving request's context: input + output tokens (plan infer's own convention), each
    read by the CLI's parser (``1k`` = 1024), which names the control it refuses."""
    from ..inputs import parse_context
    return str(parse_context(form["input_len"], "--input-len", zero=False)
               + parse_context(form["output_len"], "--output-len", zero=False))


def _gpu_gb(form: dict) -> list[str]:
    """The chosen GPU for ``memory``'s fit check (an unknown GPU: the catalog's GpuError,
    with its close matches)."""
    return ["--gpu", form["gpu"]]


def serve_modes() -> list[str]:
    """The serving modes ``plan infer --mode`` takes (colocated, disaggregated, auto), read
    from its answer function's docstring-free signature: [] while plan infer has no --mode
    (the page then hides its mode control)."""
    import inspect

    from ..answers.plan import plan_infer
    if "mode" not in inspect.signature(plan_infer).parameters:
        return []
    from ..serve import plan as serve_plan
    return list(getattr(serve_plan, "SERVE_MODES", ("auto", "colocated", "disaggregated")))


def _mode(form: dict) -> list[str]:
    """``--mode`` of the serving plan, when the control is set (and plan infer has it)."""
    if form["mode"] == "":
        return []
    if not serve_modes():
        raise WebInputError(f"mode ({form['mode']!r:.40}): this txcalc's plan infer has no "
                            "--mode (it chooses colocated or disaggregated itself)")
    return ["--mode", form["mode"]]


def commands(form: dict) -> dict[str, list[str]]:
    """{panel: the CLI's argument list (no program name, no --json)} for a checked form."""
    m, task = form["model"], form["task"]
    train_work = _opts(form, ("--batch", "batch"), ("--seq", "seq"), ("--attn", "attn"),
                       ("--recompute", "recompute"))
    states = _opts(form, ("--precision", "precision"), ("--optimizer", "optimizer"))
    if task == "serve":
        ctx = _context(form)
        weights = _opts(form, ("--weights", "weights"))
        load = (_opts(form, ("--rate", "rate")) if form["rate"] else
                _opts(form, ("--concurrency", "concurrency")))
        return {
            "params": ["params", m, *weights],
            "flops": ["flops", m, *_opts(form, ("--seq", "input_len")), "--context", ctx],
            "memory": ["memory", m, "--inference", "--context", ctx,
                       *_opts(form, ("--concurrency", "concurrency"), ("--kv-dtype", "kv_dtype")),
                       *weights, *_gpu_gb(form)],
            "answer": ["plan", "infer", m, "--gpu", form["gpu"],
                       *_opts(form, ("--input-len", "input_len"), ("--output-len", "output_len")),
                       *load, *_opts(form, ("--kv-dtype", "kv_dtype")), *weights,
                       *_opts(form, ("--price", "price"), ("--tp", "tp"), ("--pp", "pp"),
                              ("--replicas", "replicas"), ("--ttft-p99", "ttft_p99"),
                              ("--itl-p99", "itl_p99")), *_mode(form)],
        }
    ft = _finetune_opts(form) if task == "finetune" else []
    out = {
        "params": ["params", m],
        "flops": ["flops", m, *train_work, *ft],
        "memory": ["memory", m, *train_work, *states, *ft, *_gpu_gb(form)],
    }
    if task == "finetune":
        out["answer"] = ["fit", m, "--gpu", form["gpu"],
                         *_opts(form, ("--batch", "batch")), *states,
                         *_opts(form, ("--attn", "attn"), ("--recompute", "recompute")), *ft]
    else:
        out["answer"] = ["plan", "train", m, *_opts(form, ("--tokens", "tokens")),
                         "--gpu", form["gpu"], *_opts(form, ("--seq", "seq")), *states,
                         *_opts(form, ("--attn", "attn"), ("--price", "price"),
                                ("--days", "days"), ("--gpus", "gpus"),
                                ("--global-batch", "global_batch"), ("--tp", "tp"), ("--pp", "pp"),
                                ("--cp", "cp"), ("--ep", "ep"), ("--zero", "zero"),
                                ("--micro-batch", "micro_batch"),
                                ("--recompute", "plan_recompute"))]
    return out


def report_command(form: dict, out_dir: str) -> list[str]:
    """``txcalc report`` for the form: a serving report for serve; a fine-tuning report (the
    page's --finetune options, no token budget: fine-tuning has no planner run) for finetune,
    whose recompute, where the page's is auto, is the report's own default: gradient
    checkpointing, as the memory and fit panels assume (answers.common.default_recompute),
    said among its assumptions; else a training report."""
    m = form["model"]
    common = ["report", m, "--out", out_dir, "--gpu", form["gpu"], *_opts(form, ("--price", "price"))]
    if form["task"] == "serve":
        return [*common, "--inference", "--context", _context(form),
                *_opts(form, ("--concurrency", "concurrency"), ("--kv-dtype", "kv_dtype"),
                       ("--weights", "weights"))]
    step = [*_opts(form, ("--precision", "precision"), ("--optimizer", "optimizer"),
                   ("--batch", "batch"), ("--seq", "seq"), ("--attn", "attn"))]
    if form["task"] == "finetune":
        return [*common, *step, *_opts(form, ("--recompute", "recompute")),
                *_finetune_opts(form)]
    return [*common, *step, *_opts(form, ("--recompute", "recompute"), ("--tokens", "tokens"),
                                   ("--days", "days"), ("--global-batch", "global_batch"))]


def _finetune_opts(form: dict) -> list[str]:
    """The fine-tuning options of a finetune form (--base-format for QLoRA only)."""
    ft = _opts(form, ("--finetune", "finetune"), ("--lora-rank", "lora_rank"),
               ("--lora-targets", "lora_targets"))
    if form["finetune"] == "qlora":
        ft += _opts(form, ("--base-format", "base_format"))
    return ft


def shell_line(argv: list[str]) -> str:
    """The command as a user types it."""
    return shlex.join(["txcalc", *argv])


COMMAND_TIMEOUT_S = 600
CACHE_ENTRIES = 256

#: at most this many commands at once (a change of the page asks for four)
_SLOTS = threading.BoundedSemaphore(max(4, os.cpu_count() or 1))
_CACHE: OrderedDict[tuple[str, ...], bytes] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def _cache_get(key: tuple[str, ...]) -> bytes | None:
    """A remembered answer (most recently used last), or None."""
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    return None


def _cache_put(key: tuple[str, ...], body: bytes) -> None:
    """Remember an answer, forgetting the least recently used past CACHE_ENTRIES."""
    with _CACHE_LOCK:
        _CACHE[key] = body
        while len(_CACHE) > CACHE_ENTRIES:
            _CACHE.popitem(last=False)


def _env() -> dict[str, str]:
    """The environment of a command: this process's, with this txcalc first on the path (the
    command imports the same package as the server, installed or a source tree)."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def run_cli(argv: list[str], cache: bool = False) -> bytes:
    """What ``txcalc ARGV --json`` prints, the CLI run as a command (the report link, and
    benchmarks/web_speed.py's baseline). A refused input raises
    CommandFailed with the CLI's one line (its ``txcalc: error:`` prefix cut); a command that
    ends otherwise raises RuntimeError. ``cache``: the answer depends on argv alone (a preset,
    an uploaded file named by its hash), so a repeated question is answered from memory."""
    key = tuple(argv)
    if cache and (hit := _cache_get(key)) is not None:
        return hit
    with _SLOTS:
        try:
            r = subprocess.run([sys.executable, "-m", "txcalc", *argv, "--json"],
                               capture_output=True, env=_env(), stdin=subprocess.DEVNULL,
                               timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{shell_line(argv)} took longer than {COMMAND_TIMEOUT_S} s") from None
    if r.returncode == 0:
        if cache:
            _cache_put(key, r.stdout)
        return r.stdout
    lines = [ln for ln in r.stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    if r.returncode == 2 and last.startswith("txcalc: error"):
        raise CommandFailed(last.removeprefix("txcalc: error").removeprefix(":").strip(), argv)
    raise RuntimeError(f"{shell_line(argv)} exited with status {r.returncode}: {last:.300}")


#: the commands the page's panels run -> their answer functions (txcalc.answers)
ANSWERS = {("params",): "params", ("flops",): "flops", ("memory",): "memory", ("fit",): "fit",
           ("plan", "train"): "plan_train", ("plan", "infer"): "plan_infer"}


def _value(flag: str, text: str, annotation: str):
    """A control's text as the answer's parameter type (its annotation's first word), as the
    CLI reads it: an ASCII integer, a decimal number or text."""
    kind = annotation.split("|")[0].strip()
    if kind == "int":
        if not re.fullmatch(r"[+-]?[0-9]{1,18}", text):
            raise CommandFailed(f"Invalid value for '{flag}': {text!r} is not a valid integer.",
                                [])
        return int(text)
    if kind == "float":
        try:
            return float(text)
        except ValueError:
            raise CommandFailed(f"Invalid value for '{flag}': {text!r} is not a valid float.",
                                []) from None
    return text


def call_of(argv: list[str]):
    """(answer function, keyword arguments) of a panel's command: the command's words name
    the function (ANSWERS), the model is its first argument, each ``--flag VALUE`` the
    parameter ``flag`` (``--kv-dtype``: kv_dtype), each bare ``--flag`` a True bool."""
    import inspect

    from .. import answers
    n = 2 if argv[:1] == ["plan"] else 1
    name = ANSWERS.get(tuple(argv[:n]))
    if name is None:
        raise WebInputError(f"no answer for the command {shell_line(argv[:n])!r}")
    fn = answers.get(name)
    sig = inspect.signature(fn).parameters
    kw, rest = {"model": argv[n]}, argv[n + 1:]
    i = 0
    while i < len(rest):
        flag = rest[i]
        key = flag.removeprefix("--").replace("-", "_")
        if not flag.startswith("--") or key not in sig or key == "model":
            raise RuntimeError(f"{shell_line(argv)}: {flag!r} is no option of {name}")
        ann = str(sig[key].annotation)
        if ann.startswith("bool"):
            kw[key], i = True, i + 1
            continue
        try:
            kw[key] = _value(flag, rest[i + 1], ann)
        except CommandFailed as e:
            raise CommandFailed(str(e), argv) from None
        i += 2
    return fn, kw


def answer_bytes(argv: list[str], cache: bool = False) -> bytes:
    """What ``txcalc ARGV --json`` prints, computed here: the answer function of the command
    (``call_of``) and the JSON text the command prints. A refused input raises CommandFailed
    with the command's one line. ``cache``: the answer depends on argv alone (a preset, an
    uploaded file named by its hash), so a repeated question is answered from memory."""
    from ..answers import json_text
    key = tuple(argv)
    if cache and (hit := _cache_get(key)) is not None:
        return hit
    fn, kw = call_of(argv)
    with _SLOTS:
        try:
            body = (json_text(fn(**kw).json, indent=2) + "\n").encode()
        except CommandFailed:
            raise
        except TxcalcError as e:
            raise CommandFailed(str(e), argv) from None
    if cache:
        _cache_put(key, body)
    return body


def run_json(argv: list[str], cache: bool = False) -> dict:
    """The answer of a command as a dict (json keeps the integers exact): a panel's computed
    here (``answer_bytes``), a report's by running ``txcalc report`` (``run_cli``)."""
    if argv[:1] == ["report"]:
        return json.loads(run_cli(argv, cache))
    return json.loads(answer_bytes(argv, cache))


def cached_hub_ids(limit: int = 500) -> list[str]:
    """Hugging Face ids whose config.json is in the local Hub cache (``txcalc.model.hub`` reads the
    cache and names its folders ``models--{org}--{name}``); [] where this txcalc has no
    ``txcalc.model.hub`` or no cache."""
    try:
        from ..model.hub import cache_dir, cached_config, is_hub_id
    except ImportError:
        return []
    try:
        folders = sorted(p.name for p in cache_dir().iterdir() if p.name.startswith("models--"))
    except OSError:
        return []
    ids = []
    for name in folders:
        repo_id = name.removeprefix("models--").replace("--", "/", 1)
        if is_hub_id(repo_id) and cached_config(repo_id) is not None:
            ids.append(repo_id)
            if len(ids) == limit:
                break
    return ids


def options() -> dict:
    """What the page's selects offer: the library's own names (presets, the GPU catalog,
    precisions, optimizers, kernels, formats), and the controls' starting values."""
    from ..engine.finetune import BASE_FORMATS, FINETUNE_MODES, TARGET_GROUPS
    from ..engine.formats import WEIGHTS_EXAMPLES
    from ..engine.hardware import load_catalog
    from ..engine.kvcache import KV_DTYPES
    from ..engine.memory import OPTIMIZERS, PRECISIONS
    from ..model.presets import PRESETS
    from ..engine.workload import ATTN_IMPLS, RECOMPUTE
    return {
        "presets": list(PRESETS), "hub_models": cached_hub_ids(), "tasks": list(TASKS),
        "gpus": [{"name": g.name, "memory_bytes": g.memory_bytes, "aliases": list(g.aliases)}
                 for g in load_catalog().values()],
        "precisions": list(PRECISIONS), "optimizers": list(OPTIMIZERS),
        "attn": list(ATTN_IMPLS), "recompute": list(RECOMPUTE), "kv_dtypes": list(KV_DTYPES),
        "weights": list(WEIGHTS_EXAMPLES), "finetune_modes": list(FINETUNE_MODES),
        "base_formats": list(BASE_FORMATS), "lora_targets": list(TARGET_GROUPS),
        "peak_labels": PEAK_LABELS, "memory_groups": MEMORY_GROUPS,
        "memory_parts": {k: list(v) for k, v in MEMORY_PARTS.items()},
        "serve_modes": serve_modes(), "defaults": DEFAULTS,
    }
