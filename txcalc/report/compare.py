"""Options side by side: the library part of ``txcalc compare`` and of the report's
``--compare`` section (one source for both).

An *option* is one txcalc command line; its numbers are that command's ``--json`` answer,
got by a ``runner(argv, label) -> dict`` the caller passes in (the CLI runs the command in
process: the same code, so the same numbers as running it alone; this layer never imports
the CLI). Here: building the options' command lines (``option_argv``, ``vary_options``),
the comparison's data (``compare_data``: one row per scalar of the answers, the rows whose
values differ listed), its display (``show``, ``table_rows``), its bar charts
(``draw_panels``) and the report section (``section_for``).
"""

from __future__ import annotations

import json
import shlex

from ..errors import TxcalcError
from ..units import GIB, human

MIN_OPTIONS, MAX_OPTIONS = 2, 6
#: flags of the compared commands that take no value
FLAGS = {"--json", "--inference", "--dropout", "--all"}


class CompareError(TxcalcError):
    """A compare request that names no command, too few or too many options, or an option
    whose command fails (the message names the option)."""


# --- the options' command lines -----------------------------------------------------------
def _positional_at(args: list[str]) -> int | None:
    """Index of the first positional word (the model) in an argument list, or None. An option
    takes the next word as its value unless it is a flag (no value) or written --opt=value."""
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("-") or a == "-":
            return i
        i += 1 if ("=" in a or a in FLAGS) else 2
    return None


def option_argv(cmd: list[str], shared: list[str], own: list[str]) -> list[str]:
    """The full argv of one option: the command, the shared arguments with the option's
    leading model word (if any) in place of the shared one, then the option's flags."""
    args = list(shared)
    if own and not own[0].startswith("-"):
        at = _positional_at(args)
        if at is None:
            args.insert(0, own[0])
        else:
            args[at] = own[0]
        own = own[1:]
    return cmd + args + own + ["--json"]


def vary_options(vary: str, flag: str = "--vary") -> list[str]:
    """``KEY=V1,V2,...`` as --vs strings: ``model=a,b`` -> ["a", "b"]; ``gpu=h100,h200``
    -> ["--gpu h100", "--gpu h200"]. ``flag`` names the option in an error."""
    key, sep, values = vary.partition("=")
    key = key.strip().lstrip("-")
    vals = [v.strip() for v in values.split(",") if v.strip()]
    if not sep or not key or not vals:
        raise CompareError(f"{flag} ({vary!r:.80}) must be KEY=V1,V2,... (gpu=h100,h200; "
                           "model=llama-3-8b,llama-3.1-70b)")
    if key == "model":
        return [shlex.quote(v) for v in vals]
    return [f"--{key} {shlex.quote(v)}" for v in vals]


def labelled_argvs(cmd: list[str], shared: list[str], vs: list[str],
                   flag: str = "--vs") -> tuple[list[str], list[list[str]]]:
    """(labels, argvs) of the --vs strings ``vs`` (2 to 6, all different)."""
    if not MIN_OPTIONS <= len(vs) <= MAX_OPTIONS:
        raise CompareError(f"compare takes {MIN_OPTIONS} to {MAX_OPTIONS} {flag} options "
                           f"(got {len(vs)})")
    labels, argvs = [], []
    for v in vs:
        try:
            own = shlex.split(v)
        except ValueError as e:
            raise CompareError(f"{flag} {v!r}: {e}") from None
        labels.append(" ".join(own) or "(shared)")
        argvs.append(option_argv(cmd, shared, own))
    if len(set(labels)) != len(labels):
        raise CompareError(f"two {flag} options are the same ({', '.join(labels)})")
    return labels, argvs


# --- the comparison -----------------------------------------------------------------------
def scalar_rows(results: list[dict]) -> list[str]:
    """Keys of the scalars (numbers, strings, booleans, null) of the options' JSON, in the order
    they first appear; nested lists and objects are left to --json."""
    keys: list[str] = []
    for r in results:
        for k, v in r.items():
            if k not in keys and (v is None or isinstance(v, (int, float, str, bool))):
                keys.append(k)
    return keys


def compare_data(command: str, labels: list[str], argvs: list[list[str]],
                 results: list[dict]) -> dict:
    keys = scalar_rows(results)
    differ = [k for k in keys if len({json.dumps(r.get(k)) for r in results}) > 1]
    return {"command": command,
            "options": [{"label": lab, "argv": ["txcalc", *a], "result": r}
                        for lab, a, r in zip(labels, argvs, results)],
            "rows": keys, "differ": differ}


def run(command: str, labels: list[str], argvs: list[list[str]], runner) -> dict:
    """compare_data of the options, each answered by ``runner(argv, label)``."""
    return compare_data(command, labels, argvs,
                        [runner(a, lab) for a, lab in zip(argvs, labels)])


def show(key: str, v) -> str:
    """A value for people: bytes in GiB (2^30), FLOPs with a prefix, seconds, exact counts."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, str):
        return v
    if "_bytes" in key and "per_token" not in key:
        return f"{v / GIB:,.2f} GiB"
    if "flops" in key:
        return human(v, "FLOP")
    if key.endswith("_s") and "per_s" not in key:
        return f"{v * 1e3:,.1f} ms" if abs(v) < 1 else f"{v:,.2f} s"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.0f}"


def table_rows(data: dict) -> list[list[str]]:
    """One row per quantity: its name, then each option's value; a differing row's cells
    in ``**bold**``."""
    rows = []
    for k in data["rows"]:
        mark = k in data["differ"]
        vals = [show(k, o["result"].get(k)) for o in data["options"]]
        rows.append([f"**{x}**" if mark else x for x in (k, *vals)])
    return rows


def numeric_differ(data: dict) -> list[str]:
    """The differing rows every option answers with a number (the ones a bar chart shows)."""
    return [k for k in data["differ"]
            if all(isinstance(o["result"].get(k), (int, float))
                   and not isinstance(o["result"].get(k), bool) for o in data["options"])]


def panel_grid(n: int) -> tuple[int, int]:
    """(rows, columns) of ``n`` panels, three a row."""
    cols = min(3, n)
    return -(-n // cols), cols


def draw_panels(fig, data: dict, keys: list[str]) -> None:
    """One bar chart per quantity of ``keys`` on ``fig`` (a matplotlib Figure), one bar per
    option; bytes in GiB."""
    opts = data["options"]
    nrows, cols = panel_grid(len(keys))
    axes = fig.subplots(nrows, cols, squeeze=False)
    for ax, k in zip(axes.flat, keys):
        vals = [o["result"][k] for o in opts]
        div, unit = (GIB, " (GiB)") if k.endswith("_bytes") else (1, "")
        ax.bar(range(len(opts)), [v / div for v in vals], color="tab:blue")
        ax.set_xticks(range(len(opts)), [o["label"] for o in opts], rotation=20, ha="right",
                      fontsize=7)
        ax.set_title(k + unit, fontsize=8)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")


# --- the report's section -----------------------------------------------------------------
#: --compare keys that would make the compared command write files
WRITERS = ("out", "o", "plot")
#: fine-tuning fields of ReportRequest, passed on when fine-tuning
_FT = ("finetune", "lora_rank", "lora_alpha", "lora_targets", "lora_dropout", "trainable",
       "base_format")
#: the ReportRequest fields each compared command takes (as --field-name)
_TAKES = {
    "memory": ("params", "batch", "seq", "src_seq", "precision", "optimizer", "attn",
               "recompute", "gpu", "gpu_gb", "gpu_file", "loss", "recipe", *_FT),
    # the planner searches the micro-batch and recompute: the report's single-GPU batch and
    # recompute are not the plan's (left out, as the report's own plan leaves them out)
    "plan train": ("tokens", "gpu", "days", "max_gpus", "global_batch", "price", "seq",
                   "precision", "optimizer", "gpu_file", "attn", "loss", "recipe", *_FT),
    "plan infer": ("gpu", "context", "concurrency", "kv_dtype", "tokens_per_s", "weights",
                   "gpu_file", "price", "precision", "engine"),
}
_NOT_PLAN = ("batch", "recompute")


def compare_options(spec: str) -> list[str]:
    """The --vs strings of a report's ``--compare KEY=V1,V2,...`` (2 to 6 values, no option
    that writes files)."""
    vs = vary_options(spec, "--compare")
    key = spec.partition("=")[0].strip().lstrip("-")
    if key in WRITERS:
        raise CompareError(f"--compare ({spec!r:.80}) cannot vary --{key}: the compared "
                           "command would write files")
    if not MIN_OPTIONS <= len(vs) <= MAX_OPTIONS:
        raise CompareError(f"--compare ({spec!r:.80}) takes {MIN_OPTIONS} to {MAX_OPTIONS} "
                           f"values (got {len(vs)})")
    if len(set(vs)) != len(vs):
        raise CompareError(f"--compare ({spec!r:.80}) names a value twice")
    return vs


def compared_command(req) -> tuple[list[str], list[str]]:
    """(command words, shared arguments) that a report's --compare runs once per option: the
    command of the report's answer (a serving report: ``plan infer``; a training report with
    --tokens: ``plan train``; else ``memory``, the single-GPU figures) with every setting of
    the request it takes. A request setting the command lacks is refused, by name, rather
    than silently dropped."""
    import dataclasses

    if req.inference:
        cmd = ["plan", "infer"]
    elif req.tokens is not None and req.model is not None:
        cmd = ["plan", "train"]
    else:
        cmd = ["memory"]
    takes = _TAKES[" ".join(cmd)]
    shared = [req.model] if req.model is not None else []
    lacks = []
    for f in dataclasses.fields(req):
        name, v = f.name, getattr(req, f.name)
        if name in ("model", "inference", "compare") or (name in _FT and req.finetune == "full"):
            continue
        if name == "context" and req.inference:
            v = req.serve_context
        if name == "precision" and req.inference:
            if v == f.default:
                continue  # plan infer's default (bf16) is the report's bf16-mixed weights
            v = req.serve_precision  # plan infer's answer serves them in this
        if name not in takes:
            if v != f.default and not (cmd[0] == "plan" and name in _NOT_PLAN):
                lacks.append("--" + name.replace("_", "-"))
            continue
        if v is None or (name == "src_seq" and v == 0) or (name == "loss" and v == "full"):
            continue
        shared += ["--" + name.replace("_", "-"),
                   f"{v:g}" if isinstance(v, float) else str(v)]
    if lacks:
        raise CompareError(f"--compare runs txcalc {' '.join(cmd)}, which has no "
                           f"{', '.join(lacks)}: leave {'them' if len(lacks) > 1 else 'it'} "
                           "out, or compare by hand with txcalc compare")
    return cmd, shared


def compare_report(req, runner) -> dict:
    """The comparison of a report's --compare (``req`` resolved: its sequence set), each
    option answered by ``runner`` (txcalc.cli.compare_cmd.run_option)."""
    if runner is None:
        raise CompareError("--compare runs txcalc commands: build the report with a runner "
                           "(txcalc report passes txcalc.cli.compare_cmd.run_option)")
    cmd, shared = compared_command(req)
    labels, argvs = labelled_argvs(cmd, shared, compare_options(req.compare), "--compare")
    return scalars_only(run(" ".join(cmd), labels, argvs, runner))


def scalars_only(data: dict) -> dict:
    """``data`` with each option's result cut to its scalar rows (what the table and the
    charts show: the report's JSON stays small)."""
    return data | {"options": [o | {"result": {k: o["result"][k] for k in data["rows"]
                                               if k in o["result"]}}
                               for o in data["options"]]}


def section_for(data: dict, key: str) -> dict:
    """The report section of a comparison: what was run, the table, the charts."""
    from .sections import plot, section, table

    opts = data["options"]
    plots = []
    if numeric_differ(data):
        plots.append(plot("compare.png", "compare", f"Side by side: {key}",
                          f"one bar chart per differing quantity of txcalc "
                          f"{data['command']}, one bar per option"))
    same = len(data["rows"]) - len(data["differ"])
    return section(
        "compare", f"Side by side: {key}",
        [f"Each column is `txcalc {data['command']}` run alone with `--json` for one option "
         f"(the same code as `txcalc compare`, so the same numbers); **{len(data['differ'])}** "
         f"of its {len(data['rows'])} quantities differ between the options (in bold), "
         f"{same} are the same for all."],
        bullets=[f"**{o['label']}**: `{shlex.join(o['argv'])}`" for o in opts],
        tables=[table(f"txcalc {data['command']}, one column per option",
                      ["quantity", *(o["label"] for o in opts)], table_rows(data))],
        plots=plots)
