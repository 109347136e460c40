"""Fuzz the whole command line: every command, every option, every config.json field.

The commands and their options are read from the typer app itself, and the config.json fields
from what ``txcalc.model.hf`` actually reads, so a new option or a new field is fuzzed without touching
this file. Each example starts from a valid base invocation of one command, replaces one to three
of its options (or config fields) with a hostile value, runs ``txcalc.cli.main`` in-process in a
fresh temporary folder (a handful of fixed hostile cases also run as real ``txcalc`` processes,
which must agree with the in-process run), and checks the contract of the CLI (README, issue 10):

- the exit code is 0 or 2 (130 only after a signal, which the fuzzer never sends);
- on 2, stderr is exactly one line, never a traceback;
- on 0 with ``--json``, stdout is one strict JSON document (no NaN, no Infinity);
- no file appears outside ``-o``/``--out`` (or the command's default out folder), and no file
  that was there before (inputs, an unrelated file) disappears or changes;
- no example spends more than a few seconds of CPU time (a hang; CPU time of the thread that
  runs it, so a loaded machine or a parallel run does not make a slow example look hung; a
  blocked example is caught by a wall-clock limit twelve times longer), nor grows memory by
  more than ~1.5 GiB.

The default run draws about 200 examples (the ``quick`` tests); the same tests at full size
(over 2,000 examples) carry the ``fuzz`` marker, which only ``pytest -m fuzz`` selects (CI runs
both; tests/conftest.py). Both draw the same examples every run (derandomised);
``TXCALC_FUZZ_EXAMPLES=N`` scales the counts and draws fresh examples for a deeper search.
``python -m benchmarks.fuzz_summary`` runs the same generators without asserting and prints
the outcomes per command.
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import typer
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import txcalc
import txcalc.model.hf as hf
from txcalc.model.hf.fields import Fields
from txcalc.model.hf.registry import MODELS
from txcalc.cli import app, main

# ---------------------------------------------------------------------------------------------
# The hostile values. {0, negative, float, huge int, 1e400, inf, nan, bool, string, empty,
# missing, unicode, control characters}; "missing" is the MISSING marker below.

MISSING = object()

#: label -> the value as typed on the command line. No NUL: an argv cannot carry one.
CLI_VALUES: dict[str, str] = {
    "zero": "0", "negative": "-1", "negative_float": "-2.5", "float": "0.5", "float_big": "3.7",
    "tiny": "1e-300", "huge_int": str(10**30), "int_5000_digits": "9" * 5000,
    "1e400": "1e400", "1e308": "1e308", "inf": "inf", "-inf": "-inf", "nan": "nan",
    "bool_true": "true", "bool_false": "False", "string": "abc", "empty": "",
    "unicode": "\u03a9\u03bc\u00e9ga\u20ac\U0001f600", "bidi": "x\u202ey\u200b",
    "control": "a\x01b\x1b[31mc", "newline": "a\nb\tc", "markup": "[bold]$\\foo{$[/]",
}

#: label -> a JSON fragment spliced into config.json as the value of one field.
JSON_VALUES: dict[str, str] = {
    "zero": "0", "negative": "-1", "negative_float": "-2.5", "float": "0.5",
    "float_integral": "2.0", "huge_int": str(10**30), "int_5000_digits": "9" * 5000,
    "1e400": "1e400", "Infinity": "Infinity", "-Infinity": "-Infinity", "NaN": "NaN",
    "true": "true", "false": "false", "null": "null", "string": '"abc"', "empty": '""',
    "unicode": json.dumps("\u03a9\u03bc\u00e9ga\U0001f600\u202e"),
    "control": json.dumps("a\x00b\x01\x1b[31m\n"), "list": "[1, 2]", "empty_list": "[]",
    "object": '{"a": 1}', "empty_object": "{}", "nested_5000": "[" * 5000 + "]" * 5000,
    "nested_objects_5000": '{"a": ' * 5000 + "1" + "}" * 5000,
}

HANG_S = 5.0  # CPU seconds: an example that computes longer is a hang
SLOW_HANG_S = {"report": 15.0, "validate": 10.0, "calibrate": 10.0, "calibration": 10.0,
               "compare": 15.0}  # these write plots / fit
BLOCKED = 12  # an example that waits (no CPU) this many times its hang limit of wall time hangs
MEMORY_HEADROOM = 3 << 29  # 1.5 GiB of address space over what the process already maps
SCALE = float(os.environ.get("TXCALC_FUZZ_EXAMPLES", "1"))
DERANDOMIZE = "TXCALC_FUZZ_EXAMPLES" not in os.environ
# Shrinking re-runs slow and hanging examples many times; a failing draw is already small
# (one base invocation plus one to three changed options), so it is reported as drawn.
SETTINGS = dict(deadline=None, derandomize=DERANDOMIZE, phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck), print_blob=False)

# ---------------------------------------------------------------------------------------------
# Commands and options, read from the typer app.


@dataclass(frozen=True)
class Param:
    name: str
    opt: str | None  # "--seq"; None for a positional argument
    flag: bool
    choices: tuple[str, ...]  # valid values named in the help ("eager | sdpa | flash")


@dataclass(frozen=True)
class Command:
    path: tuple[str, ...]
    params: tuple[Param, ...]

    @property
    def name(self) -> str:
        return " ".join(self.path)


def _choices(help_text: str | None) -> tuple[str, ...]:
    """Valid values a help text lists as ``a | b | c``: fuzzing mixes them with hostile ones."""
    m = re.search(r"([\w.-]+(?: \| [\w.-]+)+)", help_text or "")
    return tuple(c.rstrip(".") for c in m.group(1).split(" | ")) if m else ()


def commands() -> list[Command]:
    found: list[Command] = []

    def walk(cmd, path):
        if hasattr(cmd, "commands"):  # a group (typer vendors click: no isinstance check)
            for name, sub in sorted(cmd.commands.items()):
                walk(sub, path + (name,))
            return
        params = []
        for p in cmd.params:
            if p.param_type_name == "argument":
                params.append(Param(p.name, None, False, ()))
            else:
                long = max(p.opts, key=len)
                params.append(Param(p.name, long, bool(p.is_flag), _choices(p.help)))
        found.append(Command(path, tuple(params)))

    walk(typer.main.get_command(app), ())
    return found


#: serve answers until interrupted (a fuzzed valid --port would hang here); tests/cli/test_web.py
#: checks its options, its bad input and its shutdown
COMMANDS = {c.name: c for c in commands() if c.name != "serve"}

#: A valid, cheap invocation of each command (param name -> value), so that most examples get
#: past the first check. validate runs on the meta device (no fuzz value names a real device).
BASES: dict[str, dict[str, str]] = {
    "presets": {},
    "params": {"model": "gpt2"},
    "flops": {"model": "gpt2", "seq": "128"},
    "memory": {"model": "gpt2", "seq": "128"},
    "plan train": {"model": "gpt2", "tokens": "1e9"},
    "plan infer": {"model": "gpt2", "context": "1k"},
    "report": {"model": "gpt2", "seq": "128", "out": "out"},
    "validate": {"model": "gpt2", "device": "meta", "seq": "64", "out": "val"},
    "calibrate": {"report": "gpu_validation.json", "gpu": "h200", "out": "profile.json"},
    "compare": {"words": "params", "vary": "model=gpt2,gpt2-medium"},
}
#: Examples per command in the full run (a command missing here gets DEFAULT_EXAMPLES).
EXAMPLES = {"presets": 5, "params": 120, "flops": 250, "memory": 300, "plan train": 150,
            "plan infer": 250, "report": 60, "validate": 50, "calibrate": 40}
DEFAULT_EXAMPLES = 100
#: Where a command may write when its out option is not given (param default or documented).
DEFAULT_OUT = {"validate": "validation"}  # calibrate writes nothing without --out


def _calibration_input() -> str:
    """A small valid GPU validation report (two cases) for calibrate's base invocation."""
    llama = {"name": "l", "n_layers": 2, "d_model": 256, "n_heads": 4, "d_ff": 512,
             "vocab_size": 1000, "activation": "swiglu", "norm_type": "rmsnorm",
             "tie_embeddings": False, "max_position": 4096}
    cases = [{"config": llama, "batch": b, "seq": s, "attn_impl": "eager", "recompute": "none",
              "precision": "bf16-mixed", "optimizer": "adamw", "step_time_s": t}
             for b, s, t in ((1, 512, 0.01), (4, 1024, 0.05))]
    return json.dumps({"device": "NVIDIA H200", "cases": cases})


INPUTS = {"gpu_validation.json": _calibration_input(), "precious.txt": "not txcalc's\n"}

# ---------------------------------------------------------------------------------------------
# config.json fields, read from what txcalc.model.hf reads.

HF_DATA = Path(__file__).parents[1] / "data" / "hf"
_FALCON = {"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71,
           "num_hidden_layers": 32, "vocab_size": 65024, "multi_query": True,
           "parallel_attn": True, "bias": False, "new_decoder_architecture": False,
           "alibi": False}  # falcon-7b's fields (tiiuae/falcon-7b config.json)
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers")


def _small(raw: dict) -> dict:
    """A base config with two layers (and few experts): the planner searches it quickly."""
    out = {k: (2 if k in _LAYER_KEYS else v) for k, v in raw.items() if k != "architectures"}
    if "n_routed_experts" in out:
        out |= {"n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1,
                "first_k_dense_replace": 1}
    if "num_local_experts" in out:
        out["num_local_experts"] = 4
    return out


CONFIG_BASES = {
    "llama": _small(json.loads((HF_DATA / "llama-2-7b.json").read_text())),
    "gpt2": _small(json.loads((HF_DATA / "gpt2.json").read_text())),
    "t5": _small(json.loads((HF_DATA / "t5-small.json").read_text())),
    "mixtral": _small(json.loads((HF_DATA / "mixtral-8x7b.json").read_text())),
    "deepseek_v3": _small(json.loads((HF_DATA / "deepseek-v3.json").read_text())),
    "falcon": _small(_FALCON),
    "bert": _small(json.loads((HF_DATA / "bert-base-uncased.json").read_text())),
}


class _Recorder(dict):
    """A config dict that records which keys the importer looks at."""

    def __init__(self, raw, seen):
        super().__init__(raw)
        self.seen = seen

    def get(self, key, default=None):
        self.seen.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.seen.add(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self.seen.add(key)
        return super().__contains__(key)


def config_fields(model_type: str) -> tuple[str, ...]:
    """Every field hf.py reads for this model type (recorded on the base config), its aliases,
    the base's own fields, and the two read before the converter (model_type, _name_or_path)."""
    seen: set[str] = set()
    orig = Fields.__init__

    def recording_init(self, raw, where):
        orig(self, _Recorder(raw, seen), where)

    Fields.__init__ = recording_init
    try:
        hf.from_hf_dict(_Recorder(CONFIG_BASES[model_type], seen))
    finally:
        Fields.__init__ = orig
    aliases = MODELS[model_type].aliases
    seen |= set(aliases) | set(aliases.values()) | set(CONFIG_BASES[model_type])
    return tuple(sorted(seen | {"model_type", "_name_or_path"}))


CONFIG_FIELDS = {t: config_fields(t) for t in CONFIG_BASES}
#: Commands run on a mutated config.json (cfg.json in the example's folder).
CONFIG_COMMANDS = {"params": ["params", "cfg.json"],
                   "flops": ["flops", "cfg.json", "--seq", "64"],
                   "memory": ["memory", "cfg.json", "--seq", "64"],
                   "plan infer": ["plan", "infer", "cfg.json", "--context", "256"],
                   "plan train": ["plan", "train", "cfg.json", "--tokens", "1e9", "--seq", "64"]}
CONFIG_EXAMPLES = 150  # per model type
#: Commands a model type cannot run at all (an encoder does not decode: a clean exit 2).
CONFIG_SKIP = {"bert": {"plan infer"}}

# ---------------------------------------------------------------------------------------------
# Fields of the other input files: a --gpu-file row (CSV cells) and a calibration report.

from txcalc.engine.hardware import COLUMNS as GPU_COLUMNS  # noqa: E402

_GPU_ROW = dict(zip(GPU_COLUMNS, next(
    line for line in (Path(txcalc.__file__).parent / "data" / "gpus.csv").read_text().splitlines()
    if line.startswith("h100-sxm,")).split(",")))
GPU_ROW = _GPU_ROW | {"name": "mygpu", "aliases": "mine"}  # a user's GPU, h100's figures
GPU_FILE_COMMANDS = {"plan infer": ["plan", "infer", "gpt2", "--context", "1k", "--gpu", "mine",
                                    "--gpu-file", "gpus.csv"],
                     "plan train": ["plan", "train", "gpt2", "--tokens", "1e9", "--gpu", "mine",
                                    "--gpu-file", "gpus.csv"]}
CALIBRATION_FIELDS = ("device", "cases", "config", "batch", "seq", "attn_impl", "recompute",
                      "precision", "optimizer", "step_time_s")
FILE_EXAMPLES = {"gpu_file": 100, "calibration": 60}


# ---------------------------------------------------------------------------------------------
# Building an invocation.


@dataclass
class Case:
    command: str  # "plan train", or "config:llama" for a config.json case
    argv: list[str]
    changed: dict[str, str]  # option or field -> value label
    json_out: bool
    out: str | None  # the folder (or file) the command may write to, relative to the cwd
    files: dict[str, str] = field(default_factory=dict)  # inputs written before the run


def build_cli_case(cmd: Command, changes: dict[str, object]) -> Case:
    """The base invocation of ``cmd`` with ``changes`` (param name -> (label, value) or MISSING,
    flags -> True/False) applied."""
    values: dict[str, object] = dict(BASES.get(cmd.name, {}))
    if "model" in {p.name for p in cmd.params} and cmd.name not in BASES:
        values["model"] = "gpt2"
    labels = {}
    for name, change in changes.items():
        if change is MISSING:
            values.pop(name, None)
            labels[name] = "missing"
        elif isinstance(change, bool):
            values[name] = change
            labels[name] = "on" if change else "off"
        else:
            labels[name], values[name] = change
    argv, positional = list(cmd.path), []
    for p in cmd.params:
        if p.name not in values:
            continue
        v = values[p.name]
        if p.opt is None:
            positional.append(v)
        elif p.flag:
            if v is True:
                argv.append(p.opt)
        else:
            argv.append(f"{p.opt}={v}")
    argv += ["--", *positional] if positional else []
    out = values["out"] if "out" in values else DEFAULT_OUT.get(cmd.name)
    return Case(cmd.name, argv, labels, values.get("json_out") is True,
                None if out is None else str(out), dict(INPUTS))


def build_config_case(model_type: str, command: str, changes: dict[str, object],
                      json_out: bool) -> Case:
    """config.json of ``model_type`` with ``changes`` (field -> (label, JSON text) or MISSING)."""
    raw = dict(CONFIG_BASES[model_type])
    labels, splice = {}, {}
    for i, (key, change) in enumerate(changes.items()):
        if change is MISSING:
            raw.pop(key, None)
            labels[key] = "missing"
        else:
            labels[key], text = change
            raw[key] = f"@@FUZZ{i}@@"
            splice[f'"@@FUZZ{i}@@"'] = text
    text = json.dumps(raw, indent=1)
    for k, v in splice.items():
        text = text.replace(k, v)
    argv = list(CONFIG_COMMANDS[command]) + (["--json"] if json_out else [])
    return Case(f"config:{model_type}:{command}", argv, labels, json_out, None,
                dict(INPUTS) | {"cfg.json": text})


def build_gpu_file_case(command: str, changes: dict[str, object], json_out: bool) -> Case:
    """--gpu-file with one row (h100's figures, named mygpu) with ``changes`` (column ->
    (label, text) or MISSING: the column is dropped from the header)."""
    import csv
    row, labels = dict(GPU_ROW), {}
    for col, change in changes.items():
        if change is MISSING:
            row.pop(col)
            labels[col] = "missing"
        else:
            labels[col], row[col] = change
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(row))
    w.writeheader()
    w.writerow(row)
    argv = list(GPU_FILE_COMMANDS[command]) + (["--json"] if json_out else [])
    return Case(f"gpu_file:{command}", argv, labels, json_out, None,
                dict(INPUTS) | {"gpus.csv": buf.getvalue()})


def build_calibration_case(changes: dict[str, object], json_out: bool) -> Case:
    """calibrate on a report whose top level (device, cases) or first case has ``changes``
    (field -> (label, JSON text) or MISSING)."""
    report = json.loads(INPUTS["gpu_validation.json"])
    labels, splice = {}, {}
    top = ("device", "cases")  # changed after the first case's fields (cases may become a string)
    for i, (key, change) in enumerate(sorted(changes.items(), key=lambda kv: kv[0] in top)):
        where = report if key in top else report["cases"][0]
        if change is MISSING:
            where.pop(key, None)
            labels[key] = "missing"
        else:
            labels[key], text = change
            where[key] = f"@@FUZZ{i}@@"
            splice[f'"@@FUZZ{i}@@"'] = text
    text = json.dumps(report)
    for k, v in splice.items():
        text = text.replace(k, v)
    argv = ["calibrate", "gpu_validation.json", "--gpu", "h200", "--out", "profile.json"] + (
        ["--json"] if json_out else [])
    return Case("calibration", argv, labels, json_out, "profile.json",
                dict(INPUTS) | {"gpu_validation.json": text})


# ---------------------------------------------------------------------------------------------
# Running one invocation and checking the contract.


class _Hang(BaseException):
    """Raised by the alarm in the example's code; a BaseException so no `except Exception`
    in the code under test can swallow it."""


def _on_alarm(signum, frame):
    raise _Hang()


class _Watchdog:
    """Sends SIGALRM to the calling (main) thread once that thread has spent ``cpu_s`` seconds
    of CPU time, or ``wall_s`` seconds have passed (an example blocked on something). The CPU
    clock is the thread's own: other processes and other threads do not advance it."""

    def __init__(self, cpu_s: float, wall_s: float):
        self.cpu_s, self.wall_s = cpu_s, wall_s
        self.thread_id = threading.get_ident()
        self.clock = time.pthread_getcpuclockid(self.thread_id)
        self.stop = threading.Event()
        self.cpu0 = time.clock_gettime(self.clock)
        self.wall0 = time.perf_counter()
        self.watcher = threading.Thread(target=self._watch, daemon=True)
        self.watcher.start()

    def cpu(self) -> float:
        return time.clock_gettime(self.clock) - self.cpu0

    def wall(self) -> float:
        return time.perf_counter() - self.wall0

    def _watch(self) -> None:
        while not self.stop.wait(0.02):
            if self.cpu() > self.cpu_s or self.wall() > self.wall_s:
                signal.pthread_kill(self.thread_id, signal.SIGALRM)
                return

    def close(self) -> None:
        self.stop.set()
        self.watcher.join()


def _vm_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _snapshot(root: str) -> dict[str, bytes | None]:
    """Every path under root (relative) -> its bytes (None for a folder)."""
    snap = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            snap[os.path.relpath(os.path.join(dirpath, d), root)] = None
        for f in filenames:
            p = os.path.join(dirpath, f)
            try:
                snap[os.path.relpath(p, root)] = Path(p).read_bytes()
            except OSError:
                snap[os.path.relpath(p, root)] = b"<unreadable>"
    return snap


@dataclass
class Outcome:
    rc: int | None
    stdout: str
    stderr: str
    seconds: float  # wall clock
    cpu_s: float = 0.0  # CPU time of the thread that ran the example
    error: str | None = None  # exception type that escaped main (a traceback), or "hang"
    where: str = ""  # the escaped exception's message and innermost txcalc frame
    warnings: list[str] = field(default_factory=list)
    stray: list[str] = field(default_factory=list)  # files that appeared outside the out
    lost: list[str] = field(default_factory=list)  # inputs that vanished or changed


def run_case(case: Case, hang_s: float | None = None, headroom: int = MEMORY_HEADROOM) -> Outcome:
    """Run ``case`` in a fresh temporary folder, with a CPU-time alarm and a memory cap."""
    hang_s = hang_s or SLOW_HANG_S.get(case.command, HANG_S)
    old_cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="txcalc-fuzz-") as tmp:
        for name, text in case.files.items():
            Path(tmp, name).write_text(text, encoding="utf-8")
        before = _snapshot(tmp)
        out, err = io.StringIO(), io.StringIO()
        rc, error, where = None, None, ""
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        old_handler = signal.signal(signal.SIGALRM, _on_alarm)
        os.chdir(tmp)
        watchdog = None
        try:
            with warnings.catch_warnings(record=True) as caught, \
                    contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                warnings.simplefilter("always")
                limit = _vm_bytes() + headroom
                resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY
                                                        else min(limit, hard), hard))
                watchdog = _Watchdog(hang_s, BLOCKED * hang_s)
                try:
                    rc = main(case.argv)
                finally:
                    watchdog.close()
                    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        except _Hang:
            error = "hang"
        except SystemExit as e:  # main must return its code, not exit
            error = f"SystemExit({e.code!r})"
        except BaseException as e:  # noqa: BLE001  a traceback in a real run
            error = type(e).__name__
            where = _where(e)
        finally:
            seconds, cpu_s = (watchdog.wall(), watchdog.cpu()) if watchdog else (0.0, 0.0)
            os.chdir(old_cwd)
            signal.signal(signal.SIGALRM, old_handler)
        if error is None and (cpu_s > hang_s or seconds > BLOCKED * hang_s):
            error = "hang"  # a C call the alarm could not interrupt
        after = _snapshot(tmp)
        stray, lost = _compare(before, after, tmp, case.out)
    return Outcome(rc, out.getvalue(), err.getvalue(), seconds, cpu_s, error, where,
                   [f"{w.category.__name__}: {w.message}" for w in caught], stray, lost)


def _where(e: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "txcalc" in f.filename
              or "reference" in f.filename] or traceback.extract_tb(e.__traceback__)[-1:]
    at = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno} {frames[-1].name}" \
        if frames else ""
    return f"{str(e)[:100]!r}{at}"


def _compare(before, after, tmp, out):
    """Paths new outside ``out``, and paths of ``before`` that vanished or changed."""
    real = os.path.realpath(tmp)
    root = None
    if out is not None:
        try:
            root = os.path.realpath(os.path.join(real, out))
        except (ValueError, OSError):
            root = None

    def inside(rel):
        if root is None:
            return False
        p = os.path.realpath(os.path.join(real, rel))
        return p == root or p.startswith(root.rstrip(os.sep) + os.sep)

    def parent_of_out(rel):  # the folders above the out that writing it creates
        p = os.path.realpath(os.path.join(real, rel))
        return root is not None and root.startswith(p.rstrip(os.sep) + os.sep)

    stray = sorted(p for p, v in after.items() if p not in before and not inside(p)
                   and not (v is None and parent_of_out(p)))
    lost = sorted(p for p, v in before.items() if after.get(p, b"<gone>") != v)
    return stray, lost


def _no_constants(name):
    raise ValueError(f"non-standard JSON constant {name}")


def problems(case: Case, o: Outcome) -> list[str]:
    """What breaks the CLI contract in this outcome; empty when it holds."""
    bad = []
    if o.error is not None:
        bad.append(f"{o.error} escaped main: {o.where}" if o.error != "hang" else
                   f"hang: ran {o.cpu_s:.1f} s of CPU, {o.seconds:.1f} s of wall clock")
    elif o.rc not in (0, 2):
        bad.append(f"exit code {o.rc}")
    if o.rc == 2:
        lines = o.stderr.strip("\n").split("\n") + o.warnings
        if len(lines) != 1 or not lines[0].strip():
            bad.append(f"exit 2 with {len(lines)} stderr lines: {o.stderr[:300]!r}")
    if "Traceback" in o.stderr:
        bad.append("traceback on stderr")
    if o.rc == 0 and o.error is None and case.json_out:
        try:
            json.loads(o.stdout, parse_constant=_no_constants)
        except ValueError as e:
            bad.append(f"stdout is not strict JSON: {str(e)[:120]}")
    if o.stray:
        bad.append(f"files outside the out folder: {o.stray[:5]}")
    if o.lost:
        bad.append(f"files that were there before vanished or changed: {o.lost[:5]}")
    return bad


def classify(case: Case, o: Outcome) -> str:
    """One short word for the outcome, for the summary table."""
    if o.error is not None:
        return o.error if o.error == "hang" else f"traceback:{o.error}"
    bad = problems(case, o)
    if not bad:
        return f"exit {o.rc}"
    first = bad[0]
    for key, word in (("exit code", f"exit {o.rc}"), ("stderr lines", "stderr>1 line"),
                      ("traceback on", "traceback-text"), ("strict JSON", "bad JSON"),
                      ("outside", "stray file"), ("vanished", "lost file")):
        if key in first:
            return word
    return first


# ---------------------------------------------------------------------------------------------
# Strategies.

# One flat sampled_from each: st.one_of(st.just(MISSING), ...) would draw "missing" more than
# half of the time (hypothesis favours its first, simplest branch).
CLI_CHANGE = st.sampled_from([MISSING] + sorted(CLI_VALUES.items()))
JSON_CHANGE = st.sampled_from([MISSING] + sorted(JSON_VALUES.items()))


def _param_change(p: Param):
    if p.flag:
        return st.booleans()
    # valid values too (as one more entry), so that deep combinations are reached
    return st.sampled_from([MISSING] + sorted(CLI_VALUES.items())
                           + [("valid", c) for c in p.choices])


@st.composite
def cli_cases(draw, cmd: Command) -> Case:
    if not cmd.params:
        return build_cli_case(cmd, {})
    chosen = draw(st.lists(st.sampled_from(cmd.params), min_size=1, max_size=3,
                           unique_by=lambda p: p.name))
    changes = {p.name: draw(_param_change(p)) for p in chosen}
    return build_cli_case(cmd, changes)


@st.composite
def config_cases(draw, model_type: str) -> Case:
    fields = CONFIG_FIELDS[model_type]
    chosen = draw(st.lists(st.sampled_from(fields), min_size=1, max_size=3, unique=True))
    changes = {f: draw(JSON_CHANGE) for f in chosen}
    command = draw(st.sampled_from(sorted(set(CONFIG_COMMANDS) - CONFIG_SKIP.get(model_type, set()))))
    return build_config_case(model_type, command, changes, draw(st.booleans()))


@st.composite
def gpu_file_cases(draw) -> Case:
    chosen = draw(st.lists(st.sampled_from(GPU_COLUMNS), min_size=1, max_size=3, unique=True))
    changes = {c: draw(CLI_CHANGE) for c in chosen}
    return build_gpu_file_case(draw(st.sampled_from(sorted(GPU_FILE_COMMANDS))), changes,
                               draw(st.booleans()))


@st.composite
def calibration_cases(draw) -> Case:
    chosen = draw(st.lists(st.sampled_from(CALIBRATION_FIELDS), min_size=1, max_size=3,
                           unique=True))
    changes = {f: draw(JSON_CHANGE) for f in chosen}
    return build_calibration_case(changes, draw(st.booleans()))


FILE_STRATEGIES = {"gpu_file": gpu_file_cases, "calibration": calibration_cases}


#: The share of every count the default (quick) tests draw: about 200 examples in all.
QUICK = 0.08
#: Each fuzz test at both sizes; the full one only under ``-m fuzz`` (tests/conftest.py).
SIZES = [pytest.param(QUICK, id="quick"), pytest.param(1.0, id="full", marks=pytest.mark.fuzz)]
#: Examples the quick tests run together at least (counted); the full ones run 2,000.
QUICK_FLOOR = 200


def examples(n: int, size: float = 1.0) -> int:
    return max(1, round(n * size * SCALE))


def describe(case: Case, o: Outcome) -> str:
    return (f"txcalc {' '.join(repr(a) if not a.isprintable() or not a or ' ' in a else a for a in case.argv)}"
            f"\n  changed: {case.changed}\n  exit {o.rc}, error {o.error}, {o.cpu_s:.2f} s CPU"
            f" ({o.seconds:.2f} s wall)"
            f"\n  stderr: {o.stderr[:300]!r}\n  stdout: {o.stdout[:200]!r}"
            + (f"\n  config.json: {case.files.get('cfg.json', '')[:300]!r}"
               if "cfg.json" in case.files else ""))


# ---------------------------------------------------------------------------------------------
# The tests.


#: Examples each fuzz test ran, per (size, test) (hypothesis stops early when a command's
#: space is exhausted).
RAN: collections.Counter = collections.Counter()
DONE: set[tuple[float, str]] = set()  # the fuzz tests that ran to the end (passed)


def warm_up(case: Case) -> None:
    """Run the base once with a long limit: the first call imports torch or matplotlib, which
    must not count against the hang limit nor be cut in half by the alarm."""
    run_case(case, hang_s=120, headroom=1 << 40)


def _fuzz(test: str, size: float, n: int, strategy) -> None:
    """Draw ``n`` examples from ``strategy`` and check each; counted under (size, test)."""
    @settings(max_examples=examples(n, size), **SETTINGS)
    @given(strategy)
    def run(case):
        RAN[size, test] += 1
        o = run_case(case)
        bad = problems(case, o)
        assert not bad, "; ".join(bad) + "\n" + describe(case, o)

    RAN[size, test] = 0
    run()
    DONE.add((size, test))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_of_every_command(name, size):
    cmd = COMMANDS[name]
    warm_up(build_cli_case(cmd, {}))
    _fuzz(name, size, EXAMPLES.get(name, DEFAULT_EXAMPLES), cli_cases(cmd))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("model_type", sorted(CONFIG_BASES))
def test_every_config_field(model_type, size):
    _fuzz(f"config:{model_type}", size, CONFIG_EXAMPLES, config_cases(model_type))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind", sorted(FILE_STRATEGIES))
def test_every_field_of_the_input_files(kind, size):
    """--gpu-file cells (plan train/infer) and calibration-report fields (calibrate)."""
    _fuzz(f"file:{kind}", size, FILE_EXAMPLES[kind], FILE_STRATEGIES[kind]())


def _process_argv() -> list[str]:
    """The installed ``txcalc`` script (what a user runs), else this interpreter's module."""
    import shutil
    exe = shutil.which("txcalc")
    return [exe] if exe else [sys.executable, "-m", "txcalc"]


def run_process(case: Case) -> Outcome:
    """Run ``case`` as a real ``txcalc`` process in a fresh temporary folder. A generous
    wall-clock limit only: the in-process run of the same case checks its CPU time."""
    with tempfile.TemporaryDirectory(prefix="txcalc-fuzz-") as tmp:
        for name, text in case.files.items():
            Path(tmp, name).write_text(text, encoding="utf-8")
        before = _snapshot(tmp)
        t0, cpu0 = time.perf_counter(), _children_cpu()
        try:
            r = subprocess.run(_process_argv() + case.argv, cwd=tmp, capture_output=True,
                               text=True, timeout=120, stdin=subprocess.DEVNULL)
            rc, stdout, stderr, error = r.returncode, r.stdout, r.stderr, None
        except subprocess.TimeoutExpired as e:
            rc, stdout, stderr, error = None, str(e.stdout or ""), str(e.stderr or ""), "hang"
        seconds, cpu_s = time.perf_counter() - t0, _children_cpu() - cpu0
        stray, lost = _compare(before, _snapshot(tmp), tmp, case.out)
    return Outcome(rc, stdout, stderr, seconds, cpu_s, error, "", [], stray, lost)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _processes() -> dict[str, Case]:
    """Hostile cases that end in exit 2 (and one valid one), one per kind of input."""
    cli = {name: build_cli_case(COMMANDS[name], {opt: (label, CLI_VALUES[label]), **more})
           for name, opt, label, more in (
               ("flops", "seq", "int_5000_digits", {}),
               ("plan train", "tokens", "control", {"json_out": True}),
               ("memory", "seq", "nan", {"json_out": True}),
               ("params", "model", "bidi", {}))}
    return cli | {
        "params --json": build_cli_case(COMMANDS["params"], {"json_out": True}),
        "config.json nested": build_config_case(
            "deepseek_v3", "plan train", {"kv_lora_rank": ("nested_5000", JSON_VALUES[
                "nested_5000"])}, True),
        "config.json 1e400": build_config_case(
            "gpt2", "memory", {"n_layer": ("1e400", JSON_VALUES["1e400"])}, False),
        "gpu file": build_gpu_file_case(
            "plan infer", {"memory": ("unicode", CLI_VALUES["unicode"])}, True),
        "calibration report": build_calibration_case(
            {"cases": ("string", JSON_VALUES["string"])}, False),
    }


PROCESSES = _processes()


@pytest.mark.parametrize("label", sorted(PROCESSES))
def test_a_handful_as_real_processes(label):
    """The contract as a terminal sees it (exit code, one stderr line, no traceback), and the
    in-process run the fuzz tests rely on gives the same exit code and output."""
    case = PROCESSES[label]
    o = run_process(case)
    assert not problems(case, o), "; ".join(problems(case, o)) + "\n" + describe(case, o)
    inside = run_case(case, hang_s=120)
    assert (inside.rc, inside.stdout, inside.stderr) == (o.rc, o.stdout, o.stderr), \
        describe(case, inside) + "\n" + describe(case, o)
    assert o.rc == (0 if label == "params --json" else 2), describe(case, o)


def test_the_fuzzer_sees_every_command_and_option():
    """The enumeration is real: every command of the app, its options, the bases are valid."""
    assert {"presets", "params", "flops", "memory", "plan train", "plan infer", "report",
            "validate", "calibrate"} <= set(COMMANDS)
    assert sum(EXAMPLES.get(n, DEFAULT_EXAMPLES) for n in COMMANDS) \
        + CONFIG_EXAMPLES * len(CONFIG_BASES) >= 2000
    assert {p.name for p in COMMANDS["plan train"].params} >= {"tokens", "tp", "zero", "gpu_file"}
    assert "flash" in next(p for p in COMMANDS["flops"].params if p.name == "attn").choices
    assert {"n_routed_experts", "kv_lora_rank", "q_lora_rank"} <= set(CONFIG_FIELDS["deepseek_v3"])
    assert {"n_embd", "n_layer", "activation_function"} <= set(CONFIG_FIELDS["gpt2"])
    for name in ("params", "flops", "memory", "plan infer", "plan train", "presets"):
        case = build_cli_case(COMMANDS[name], {"json_out": True})
        o = run_case(case)
        assert o.rc == 0 and not problems(case, o), describe(case, o)
    for model_type in CONFIG_BASES:
        for command in CONFIG_COMMANDS:
            case = build_config_case(model_type, command, {}, True)
            o = run_case(case)
            expected = 2 if command in CONFIG_SKIP.get(model_type, ()) else 0
            assert o.rc == expected and not problems(case, o), describe(case, o)
    for name in ("report", "validate", "calibrate"):  # the writers write inside their out
        case = build_cli_case(COMMANDS[name], {"json_out": True})
        warm_up(case)
        o = run_case(case)
        assert o.rc == 0 and not problems(case, o), describe(case, o)
    for command in GPU_FILE_COMMANDS:
        case = build_gpu_file_case(command, {}, True)
        o = run_case(case)
        assert o.rc == 0 and not problems(case, o) and '"mygpu"' in o.stdout, describe(case, o)
    case = build_calibration_case({}, True)
    o = run_case(case)
    assert o.rc == 0 and not problems(case, o), describe(case, o)
    assert _compare({"precious.txt": b"x"}, {"new": b""}, "/tmp", "out") == (["new"], ["precious.txt"])
    assert _compare({}, {"out/report.md": b""}, "/tmp", "out") == ([], [])


@pytest.mark.parametrize("size", SIZES)
def test_at_least_2000_examples_ran(size):
    """Runs last: when every fuzz test above of this size passed in this session, they ran
    >= 2,000 examples together at full size, >= 200 quick (counted, not the max_examples
    asked for)."""
    everything = {(size, t) for t in set(COMMANDS) | {f"config:{t}" for t in CONFIG_BASES}
                  | {f"file:{k}" for k in FILE_STRATEGIES}}
    if not everything <= DONE:
        pytest.skip(f"not every fuzz test ran to the end here: {sorted(everything - DONE)}")
    ran = {t: n for (s, t), n in RAN.items() if s == size}
    floor = 2000 if size == 1.0 else QUICK_FLOOR
    assert sum(ran.values()) >= floor * min(SCALE, 1), ran
