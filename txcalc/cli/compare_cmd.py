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

import typer

from ..errors import TxcalcError
from ..report.compare import (MAX_OPTIONS, MIN_OPTIONS, CompareError, labelled_argvs,
                              numeric_differ, panel_grid, run, show, table_rows, vary_options)
from .output import console, emit_json
from .typer_app import app

#: commands whose JSON compare can read (every one of them has --json)
COMMANDS = ("params", "flops", "memory", "fit", "plan train", "plan infer")


def _split(words: list[str]) -> tuple[list[str], list[str]]:
    """(command words, shared arguments) of the words before the --vs options."""
    n = 2 if words[:1] == ["plan"] else 1
    cmd = words[:n]
    if " ".join(cmd) not in COMMANDS:
        raise CompareError(f"compare needs a command first, one of {', '.join(COMMANDS)} "
                           f"(got {' '.join(words[:2]) or 'nothing'!r:.80})")
    return cmd, words[n:]


def run_option(argv: list[str], label: str) -> dict:
    """One option's JSON: the command run in this process, its stdout captured (the runner
    of txcalc.report.compare: also the report's --compare section's)."""
    from .typer_app import app as the_app, click_exceptions
    _click = click_exceptions()
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
    import shlex

    from ..atomic import write_files
    from .output import strict_json
    opts = data["options"]
    lines = [f"# compare: txcalc {data['command']}", "",
             "Each column is the command below run alone with `--json`; rows in bold differ.",
             ""]
    lines += [f"- **{o['label']}**: `{shlex.join(o['argv'])}`" for o in opts]
    lines += ["", "| quantity | " + " | ".join(o["label"] for o in opts) + " |",
              "|---|" + "---:|" * len(opts)]
    lines += ["| " + " | ".join(row).replace("\n", " ") + " |" for row in table_rows(data)]
    files: dict[str, bytes | str] = {"compare.json": strict_json(data, indent=2) + "\n"}
    numeric = numeric_differ(data)
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
    from ..report.compare import draw_panels
    nrows, cols = panel_grid(len(keys))
    fig = plt.figure(figsize=(4.2 * cols, 2.8 * nrows))
    draw_panels(fig, data, keys)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


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
    labels, argvs = labelled_argvs(cmd, shared, vs)
    data = run(" ".join(cmd), labels, argvs, run_option)
    written = write_out(data, out) if out is not None else []
    if json_out:
        emit_json(data | ({"written": written} if written else {}))
        return
    for r in render(data, console.width, all_rows):
        console.print(r)
    if written:
        console.print("wrote " + ", ".join(written))
