"""--emit, --out and --from-config (txcalc.emit): the options, the command line stated in each
emitted file, and the merge of a config file's settings with the options given."""

from __future__ import annotations

import typer

EMIT_HELP = {"plan train": "torchtitan | deepspeed | megatron | accelerate",
             "fit": "trl | axolotl | llama-factory",
             "plan infer": "vllm | sglang | trtllm"}


def emit_option(command: str):
    return typer.Option(None, "--emit", help=f"Print (or with --out, write) the configuration "
                        f"that runs the plan: {EMIT_HELP[command]}. A setting the framework "
                        "cannot express is refused (exit 2, nothing written).")


OUT_OPT = typer.Option(None, "--out", help="With --emit: the file to write (atomically; "
                       "a second file, such as a launcher, lands beside it).")
FROM_TRAIN = typer.Option(None, "--from-config", help="A torchtitan 0.2 TOML or a DeepSpeed "
                          "JSON: its layout, batch and precision as pins (options given must "
                          "agree); a torchtitan run's steps give --tokens when it is not given.")
FROM_INFER = typer.Option(None, "--from-config", help="A file holding a `vllm serve` line: "
                          "its layout and engine settings as options (options given must "
                          "agree).")


def command_line(ctx) -> str:
    """The txcalc command being run (``ctx``: its typer.Context): the words as typed, else
    rebuilt from what was parsed (--out left out: the file's content does not depend on where
    it lands)."""
    import shlex
    typed = (ctx.obj or {}).get("argv") if isinstance(ctx.obj, dict) else None
    if typed is not None:  # the words as typed (txcalc.cli._run), --out and its value left out
        words, skip = ["txcalc"], False
        for w in typed:
            if skip or w == "--out" or w.startswith("--out="):
                skip = w == "--out" and not skip
                continue
            words.append(shlex.quote(w))
        return " ".join(words)
    words = [ctx.command_path]
    for p in ctx.command.params:
        if not given(ctx, p.name) or p.name == "out_file":
            continue
        v = ctx.params[p.name]
        if p.param_type_name == "argument":
            words.append(shlex.quote(str(v)))
        elif getattr(p, "is_flag", False):
            names = p.opts if v else (p.secondary_opts or p.opts)
            words.append(names[0])
        else:
            words += [p.opts[0], shlex.quote(str(v))]
    return " ".join(words)


def need_out(emit, out_file, command: str) -> None:
    """Before any search: --out writes what --emit makes (refused alone), and the format is
    one ``command`` emits."""
    from ..emit import EmitError, check_format
    if out_file is not None and emit is None:
        raise EmitError("--out writes the --emit configuration: give --emit FORMAT")
    if emit is not None:
        check_format(emit, command)
    if out_file is not None:  # a folder, a link or a device is refused before the search
        from ..atomic import check_out_file
        check_out_file(out_file, "--out")


def given(ctx, name: str) -> bool:
    """Whether option ``name`` came from the command line."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def merged(ctx, values: dict, from_file: dict,
           flag_of=lambda k: "--" + k.replace("_", "-")) -> dict:
    """``values`` (the options, by parameter name) with the file's settings filling those not
    given on the command line; one given that differs from the file's is refused."""
    from ..emit import EmitError
    out = dict(values)
    for k, v in from_file.items():
        if given(ctx, k):
            same = str(out[k]) == str(v)
            if not same:
                raise EmitError(f"{flag_of(k)} ({out[k]}) and the --from-config file's "
                                f"({v}) differ")
        else:
            out[k] = v
    return out


def emit_answer(ctx, fmt: str, command: str, ans, model: str, out: str | None,
                quiet: bool = False) -> None:
    """Print or write the emitted configuration; every refusal comes before a byte is
    written. ``quiet`` (--json): the paths written are not printed."""
    from ..emit import emit, rendered, write
    from .output import console
    e = emit(fmt, command, ans, "txcalc " + command_line(ctx).partition(" ")[2], model)
    if out is None:
        print(rendered(e), end="")
        return
    for path in write(e, out):
        if not quiet:
            console.print(f"wrote {path}")
