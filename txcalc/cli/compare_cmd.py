"""``txcalc compare``: two to six options of one command side by side.

    txcalc compare plan infer llama-3.1-70b --context 8k --concurrency 16 \\
        --vs "--gpu h100" --vs "--gpu h200"
    txcalc compare memory llama-3-8b --seq 4096 --vs "--precision bf16-mixed" \\
        --vs "--precision fp8-mixed"
    txcalc compare params --vs llama-3-8b --vs llama-3.1-70b --vs "llama-3.1-70b --weights fp8"

The words before the first ``--vs`` are a txcalc command and the arguments every option shares;
each ``--vs`` adds its own (a later flag wins over a shared one; a leading word names the
option's model, replacing the shared one). Each option is that very command run with ``--json``
(the same code, so the same numbers as running it alone); the table has one column per option
and one row per number of their JSON, the rows whose values differ marked ``*`` (and in bold);
``--json`` prints every option's JSON; ``--out DIR`` writes compare.md, compare.json and one bar
chart per differing quantity (needs the ``plots`` extra).
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex

import typer

from ..errors import TxcalcError
from ..units import GB, human
from .output import console, emit_json
from .typer_app import app

#: commands whose JSON compare can read (every one of them has --json)
COMMANDS = ("params", "flops", "memory", "fit", "plan train", "plan infer")
MIN_OPTIONS, MAX_OPTIONS = 2, 6


class CompareError(TxcalcError):
    """A compare request that names no command, too few or too many options, or an option
    whose command fails (the message names the option)."""


def _split(words: list[str]) -> tuple[list[str], list[str]]:
    """(command words, shared arguments) of the words before the --vs options."""
    n = 2 if words[:1] == ["plan"] else 1
    cmd = words[:n]
    if " ".join(cmd) not in COMMANDS:
        raise CompareError(f"compare needs a command first, one of {', '.join(COMMANDS)} "
                           f"(got {' '.join(words[:2]) or 'nothing'!r:.80})")
    return cmd, words[n:]


def _positional_at(args: list[str]) -> int | None:
    """Index of the first positional word (the model) in an argument list, or None. An option
    takes the next word as its value unless it is a flag (no value) or written --opt=value."""
    flags = {"--json", "--inference", "--dropout", "--all"}
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("-") or a == "-":
            return i
        i += 1 if ("=" in a or a in flags) else 2
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


def run_option(argv: list[str], label: str) -> dict:
    """One option's JSON: the command run in this process, its stdout captured."""
    try:  # as txcalc.cli does: typer >= 0.2x vendors its own click
        from typer._click import exceptions as _click
    except ImportError:  # pragma: no cover
        from click import exceptions as _click
    from .typer_app import app as the_app
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            the_app(args=argv, prog_name="txcalc", standalone_mode=False)
    except TxcalcError as e:
        raise CompareError(f"option {label!r}: {e}") from None
    except _click.UsageError as e:
        raise CompareError(f"option {label!r}: {e.format_message()}") from None
    try:
        out = json.loads(buf.getvalue())
    except json.JSONDecodeError:
        raise CompareError(f"option {label!r}: `txcalc {' '.join(argv)}` printed no JSON") from None
    if not isinstance(out, dict):
        raise CompareError(f"option {label!r}: expected a JSON object")
    return out


def scalar_rows(results: list[dict]) -> list[str]:
    """Keys of the scalars (numbers, strings, booleans, null) of the options' JSON, in the order
    they first appear; nested lists and objects are left to --json."""
    keys: list[str] = []
    for r in results:
        for k, v in r.items():
            if k not in keys and (v is None or isinstance(v, (int, float, str, bool))):
                keys.append(k)
    return keys


def show(key: str, v) -> str:
    """A value for people: bytes in GB (1e9), FLOPs with a prefix, seconds, exact counts."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, str):
        return v
    if "_bytes" in key and "per_token" not in key:
        return f"{v / GB:,.2f} GB"
    if "flops" in key:
        return human(v, "FLOP")
    if key.endswith("_s") and "per_s" not in key:
        return f"{v * 1e3:,.1f} ms" if abs(v) < 1 else f"{v:,.2f} s"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.0f}"


def compare_data(command: str, labels: list[str], argvs: list[list[str]],
                 results: list[dict]) -> dict:
    keys = scalar_rows(results)
    differ = [k for k in keys if len({json.dumps(r.get(k)) for r in results}) > 1]
    return {"command": command,
            "options": [{"label": lab, "argv": ["txcalc", *a], "result": r}
                        for lab, a, r in zip(labels, argvs, results)],
            "rows": keys, "differ": differ}


def render(data: dict, width: int, all_rows: bool = True) -> list:
    """Rich renderables: one table (a column per option) when it fits ``width``, else a
    key-value block per differing row (every option's value on its own line)."""
    from rich.table import Table
    from rich.text import Text
    opts = data["options"]
    rows = data["rows"] if all_rows else data["differ"]
    cells = [[show(k, o["result"].get(k)) for o in opts] for k in rows]
    key_w = max([len(k) + 2 for k in rows] + [8])
    col_w = [max([len(o["label"])] + [len(c[i]) for c in cells]) for i, o in enumerate(opts)]
    title = f"compare: txcalc {data['command']} (* = differs)"
    if key_w + sum(w + 3 for w in col_w) + 4 <= width:
        t = Table(title=title, title_justify="left")
        t.add_column("quantity", justify="left", no_wrap=True)
        for o in opts:
            t.add_column(o["label"], justify="right", no_wrap=True)
        for k, c in zip(rows, cells):
            mark = k in data["differ"]
            style = "bold" if mark else ""
            t.add_row(Text(("* " if mark else "  ") + k, style=style),
                      *(Text(x, style=style) for x in c))
        return [t]
    out = [Text(title + "; one block per quantity, the terminal being narrow")]
    label_w = max(len(o["label"]) for o in opts)
    for k, c in zip(rows, cells):
        mark = k in data["differ"]
        if not mark and len(set(c)) == 1:
            out.append(Text(f"  {k}: {c[0]} (all)"))
            continue
        out.append(Text(f"* {k}", style="bold"))
        for o, x in zip(opts, c):
            out.append(Text(f"    {o['label']:<{label_w}}  {x}"))
    return out


def write_out(data: dict, folder: str) -> list[str]:
    """compare.json, compare.md and, when numbers differ, compare.png (one bar chart per
    differing number), all written atomically (txcalc.atomic.write_files)."""
    from ..atomic import write_files
    from .output import strict_json
    opts = data["options"]
    lines = [f"# compare: txcalc {data['command']}", "",
             "Each column is the command below run alone with `--json`; rows in bold differ.",
             ""]
    lines += [f"- **{o['label']}**: `{shlex.join(o['argv'])}`" for o in opts]
    lines += ["", "| quantity | " + " | ".join(o["label"] for o in opts) + " |",
              "|---|" + "---:|" * len(opts)]
    for k in data["rows"]:
        mark = k in data["differ"]
        vals = [show(k, o["result"].get(k)) for o in opts]
        row = (f"**{k}**" if mark else k, *(f"**{v}**" if mark else v for v in vals))
        lines.append("| " + " | ".join(row).replace("\n", " ") + " |")
    files: dict[str, bytes | str] = {"compare.json": strict_json(data, indent=2) + "\n"}
    numeric = [k for k in data["differ"]
               if all(isinstance(o["result"].get(k), (int, float))
                      and not isinstance(o["result"].get(k), bool) for o in opts)]
    if numeric:
        files["compare.png"] = _plot(data, numeric)
        lines += ["", "![the differing quantities, one panel each](compare.png)"]
    files["compare.md"] = "\n".join(lines) + "\n"
    return [str(p) for p in write_files(folder, files)]


def _plot(data: dict, keys: list[str]) -> bytes:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CompareError("--out draws its charts with matplotlib: python3 -m pip install "
                           "'txcalc[plots]'") from None
    opts = data["options"]
    n = len(keys)
    cols = min(3, n)
    nrows = -(-n // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 2.8 * nrows), squeeze=False)
    for ax, k in zip(axes.flat, keys):
        vals = [o["result"][k] for o in opts]
        div, unit = (GB, " (GB)") if k.endswith("_bytes") else (1, "")
        ax.bar(range(len(opts)), [v / div for v in vals], color="tab:blue")
        ax.set_xticks(range(len(opts)), [o["label"] for o in opts], rotation=20, ha="right",
                      fontsize=7)
        ax.set_title(k + unit, fontsize=8)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def vary_options(vary: str) -> list[str]:
    """``--vary KEY=V1,V2,...`` as --vs strings: ``model=a,b`` -> ["a", "b"]; ``gpu=h100,h200``
    -> ["--gpu h100", "--gpu h200"]."""
    key, sep, values = vary.partition("=")
    key = key.strip().lstrip("-")
    vals = [v.strip() for v in values.split(",") if v.strip()]
    if not sep or not key or not vals:
        raise CompareError(f"--vary ({vary!r:.80}) must be KEY=V1,V2,... (gpu=h100,h200; "
                           "model=llama-3-8b,llama-3.1-70b)")
    if key == "model":
        return [shlex.quote(v) for v in vals]
    return [f"--{key} {shlex.quote(v)}" for v in vals]


@app.command(context_settings={"ignore_unknown_options": True})
def compare(words: list[str] = typer.Argument(None, help="A command (params, flops, memory, fit, plan train, plan infer) and the arguments every option shares."),
            vs: list[str] = typer.Option(None, "--vs", help="One option's own arguments (quoted; 2 to 6 of them): flags such as \"--gpu h200\", or a model name first."),
            vary: str = typer.Option(None, "--vary", help="Options from one setting: KEY=V1,V2,... (gpu=h100,h200; precision=bf16-mixed,fp8-mixed; model=a,b), instead of --vs."),
            json_out: bool = typer.Option(False, "--json", help="Print every option's JSON and the differing keys."),
            all_rows: bool = typer.Option(True, "--all/--differ-only", help="Show every row, or only the rows that differ."),
            out: str = typer.Option(None, "--out", "-o", help="Folder for compare.md, compare.json and compare.png.")):
    """Two to six options of one command side by side (models, GPUs, precisions, fine-tuning
    modes, layouts): COMMAND [SHARED ARGS] --vs "ARGS" --vs "ARGS" ..., or --vary KEY=V1,V2."""
    from .options import options
    cmd, shared = _split(list(words or []))
    if vary is not None and vs:
        raise CompareError("give --vs options or one --vary, not both")
    vs = vary_options(vary) if vary is not None else list(vs or [])
    if not MIN_OPTIONS <= len(vs) <= MAX_OPTIONS:
        raise CompareError(f"compare takes {MIN_OPTIONS} to {MAX_OPTIONS} --vs options "
                           f"(got {len(vs)})")
    if out is not None:
        options(out=out)
    labels, argvs = [], []
    for v in vs:
        try:
            own = shlex.split(v)
        except ValueError as e:
            raise CompareError(f"--vs {v!r}: {e}") from None
        labels.append(" ".join(own) or "(shared)")
        argvs.append(option_argv(cmd, shared, own))
    if len(set(labels)) != len(labels):
        raise CompareError(f"two --vs options are the same ({', '.join(labels)})")
    results = [run_option(a, lab) for a, lab in zip(argvs, labels)]
    data = compare_data(" ".join(cmd), labels, argvs, results)
    written = write_out(data, out) if out is not None else []
    if json_out:
        emit_json(data | ({"written": written} if written else {}))
        return
    for r in render(data, console.width, all_rows):
        console.print(r)
    if written:
        console.print("wrote " + ", ".join(written))
