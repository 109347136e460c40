"""What a simple command loads (issue 18: simple commands under 0.1 s over ``python -c pass``;
the times themselves are measured by benchmarks/cli_speed.py, not here): counted modules, not
seconds. Also the two things that keep start-up short without changing a byte of output: the
lazily loading command group and the pydantic-free coercion of plain option values."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]

CHECK = """
import gc, sys
import typer.main as tm
from txcalc.cli import main
built, collections = [], []
made = tm.get_command_from_info
def counted(command_info, **kw):
    cmd = made(command_info, **kw)
    built.append(cmd.name)
    return cmd
tm.get_command_from_info = counted
gc.callbacks.append(lambda phase, info: collections.append(info) if phase == "start" else None)
rc = main()  # sys.argv, as the program runs it
gc.callbacks.clear()
mods = sorted(sys.modules)  # before json is imported here
presets = sys.modules.get("txcalc.model.presets")
made = (sum(not isinstance(v, presets._Deferred) for v in presets.PRESETS._table.values())
        if presets else 0)
import json
print(json.dumps({"modules": mods, "built": built, "collections": len(collections),
                  "presets_built": made}), file=sys.stderr)
sys.exit(rc)
"""

#: never on a simple command's path: the engine's heavy optional libraries, typer's pydantic
#: adapters (a third of the start-up), the web page, the planner
NEVER = ("pydantic", "typer._adapters", "pandas", "numpy", "matplotlib", "torch",
         "transformers", "txcalc.web", "txcalc.train.planner", "txcalc.parallel")
SIMPLE = [["presets"], ["params", "gpt2"], ["params", "llama-3.1-405b", "--json"],
          ["flops", "llama-3-8b", "--seq", "4096"], ["memory", "llama-3-8b", "--seq", "4096"],
          ["memory", "llama-3-8b", "--seq", "4096", "--batch", "2", "--json"]]


#: what each simple command leaves out on top of NEVER (issue 18's second round; each was on
#: its path and cost start-up): json where nothing is printed as JSON (txcalc.cli.output and
#: txcalc.engine.formats import it where used), the Decimal parser where no count or context is read
#: and rich does not load it (fractions), the stacks table where no command option names a
#: stack, the HF converters for a preset, the GPU catalog where no fit is checked
ALSO_NEVER = {
    ("presets",): ("txcalc.engine.stacks", "txcalc.engine.hardware", "csv"),
    ("presets", "--json"): ("decimal", "txcalc.engine.stacks", "txcalc.engine.hardware", "csv", "rich"),
    ("params", "gpt2"): ("json", "txcalc.engine.stacks", "txcalc.model.hf", "txcalc.engine.hardware", "csv"),
    ("params", "llama-3.1-405b", "--json"): ("decimal", "txcalc.engine.stacks", "txcalc.model.hf",
                                             "txcalc.engine.hardware", "csv", "rich"),
    ("flops", "llama-3-8b", "--seq", "4096"): ("json", "txcalc.model.hf", "txcalc.engine.hardware", "csv",
                                               "txcalc.engine.memory"),
    ("flops", "llama-3-8b", "--seq", "4096", "--json"): ("decimal", "txcalc.model.hf",
                                                         "txcalc.engine.hardware", "csv", "rich",
                                                         "txcalc.engine.memory"),
    ("memory", "llama-3-8b", "--seq", "4096"): ("json", "txcalc.model.hf"),
    ("memory", "llama-3-8b", "--seq", "4096", "--batch", "2", "--json"): ("txcalc.model.hf", "rich"),
}
SIMPLE += [["presets", "--json"], ["flops", "llama-3-8b", "--seq", "4096", "--json"]]


def run_check(argv) -> dict:
    """The modules a command in a fresh interpreter has imported when main returns, the click
    commands typer built, and the cyclic collections run during main."""
    r = subprocess.run([sys.executable, "-c", CHECK, *argv], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert r.returncode == 0, r.stderr
    import json
    return json.loads(r.stderr.strip().splitlines()[-1])


def loaded(argv) -> set[str]:
    return set(run_check(argv)["modules"])


@pytest.mark.parametrize("argv", SIMPLE, ids=" ".join)
def test_simple_command_loads_only_its_own_module(argv):
    from txcalc.cli.typer_app import COMMAND_MODULES

    got = run_check(argv)
    mods = set(got["modules"])
    never = NEVER + ALSO_NEVER.get(tuple(argv), ())
    heavy = sorted(m for m in mods if m.split(".")[0] in never or m in never
                   or any(m.startswith(n + ".") for n in never))
    assert heavy == [], heavy
    # typer builds the command that runs, not the others its module registers (presets and
    # params, flops and memory), nor the whole group a second time
    assert got["built"] == [argv[0]], got["built"]
    # no cyclic garbage collection during a simple command (txcalc.cli.GC_FREE_COMMANDS)
    assert got["collections"] == 0
    # the preset a command names is the one config it builds (``presets`` lists them all)
    from txcalc.model.presets import PRESETS
    assert got["presets_built"] == (len(PRESETS) if argv[0] == "presets" else 1)
    commands = {m.rsplit(".", 1)[1] for m in mods
                if m.startswith("txcalc.cli.") and m.endswith("_cmd")}
    own = COMMAND_MODULES[argv[0]]
    # costs_cmd shares params_cmd's help texts and fit_cmd's fine-tuning options
    allowed = {own} | ({"params_cmd", "fit_cmd"} if own == "costs_cmd" else set())
    assert own in commands and commands <= allowed, commands
    # rich only for output meant for people
    assert ("rich.console" in mods) == ("--json" not in argv), argv


def test_help_lists_every_command_and_loads_them():
    """``txcalc --help`` imports every command module and lists each command once, in the
    table's order."""
    from txcalc.cli.typer_app import COMMAND_MODULES

    r = subprocess.run([sys.executable, "-m", "txcalc", "--help"], capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200"),
                       timeout=120)
    assert r.returncode == 0, r.stderr
    listed = [line.split()[1] for line in r.stdout.splitlines()
              if line.startswith("│ ") and len(line.split()) > 2
              and line.split()[1] in COMMAND_MODULES]
    assert listed == list(COMMAND_MODULES)


def test_command_table_names_the_module_that_registers_each_command():
    """COMMAND_MODULES is complete and right: with every module imported, the commands
    registered on the app are exactly its keys, each from the module it names."""
    import typer

    from txcalc.cli import app
    from txcalc.cli.typer_app import COMMAND_MODULES

    registered = {}
    for info in app.registered_commands:
        name = info.name or info.callback.__name__.replace("_", "-")
        registered[name] = info.callback.__module__
    for group in app.registered_groups:
        registered[group.name] = group.typer_instance.registered_commands[0].callback.__module__
    assert {n: m.rsplit(".", 1)[1] for n, m in registered.items()} == COMMAND_MODULES
    assert list(typer.main.get_command(app).commands) == list(COMMAND_MODULES)


def test_mistyped_command_suggests_from_every_command():
    """In a fresh process (no command module loaded yet) the suggestions still come from
    every command."""
    r = subprocess.run([sys.executable, "-m", "txcalc", "valdate", "gpt2"], capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == ("txcalc: error (txcalc): No such command 'valdate'. Did you mean "
                        "'validate', 'calibrate'?\n")


def test_stack_help_is_one_text_from_the_stacks_table():
    import typer

    from txcalc.cli import app
    from txcalc.engine.stacks import STACKS

    group = typer.main.get_command(app)
    helps = {name: next(p.help for p in cmd.params if p.name == "stack")
             for name, cmd in (("memory", group.commands["memory"]),
                               ("plan train", group.commands["plan"].commands["train"]))}
    assert len(set(helps.values())) == 1, helps
    assert f"Framework profile: {' | '.join(STACKS)} (" in helps["memory"]


# -------------------------------------------------------------------------------------------
# plain option values: the same as typer's pydantic coercion, or handed to it
# -------------------------------------------------------------------------------------------

def _typer_coerce(annotation, value):
    """What typer's own (pydantic) coercion makes of ``value``: ("ok", v) or ("error",)."""
    from pydantic import ValidationError
    from typer._adapters import build_adapter
    from typer.models import OptionInfo

    try:
        return ("ok", build_adapter(annotation, OptionInfo()).validate_python(value))
    except ValidationError:
        return ("error",)


NUMBERISH = st.text(alphabet="0123456789+-.eE _１٣\u00a0infa", max_size=24)
VALUES = st.one_of(NUMBERISH, st.text(max_size=12), st.integers(-2 ** 70, 2 ** 70),
                   st.floats(allow_nan=True, allow_infinity=True))


@settings(max_examples=400, deadline=None)
@given(annotation=st.sampled_from([int, float, str]), value=VALUES)
def test_plain_values_coerce_as_typer_does(annotation, value):
    from txcalc.cli.typer_app import plain_value

    ok, v = plain_value(annotation, value)
    if not ok:
        return  # typer's own coercion answers (and words any error)
    want = _typer_coerce(annotation, value)
    assert want[0] == "ok", (annotation, value)
    assert type(v) is type(want[1]) and (v == want[1] or (math.isnan(v) and math.isnan(want[1])))


@pytest.mark.parametrize("annotation,value,expect", [
    (int, "4096", 4096), (int, "+7", 7), (int, "007", 7), (int, "-0", 0), (int, 3, 3),
    (float, "1e3", 1000.0), (float, ".5", 0.5), (float, "5.", 5.0), (float, "-2.5E-3", -0.0025),
    (float, 2, 2.0), (float, 0.25, 0.25), (str, "a\udcffb", "a\udcffb"),
    (list[str], ("a", "b"), ["a", "b"])])
def test_plain_values_answered_here(annotation, value, expect):
    from txcalc.cli.typer_app import plain_value

    assert plain_value(annotation, value) == (True, expect)
    assert _typer_coerce(annotation, value) == ("ok", expect)


@pytest.mark.parametrize("annotation,value", [
    (int, "3.5"), (int, " 5"), (int, "1_000"), (int, "１２"), (int, "9" * 40), (int, True),
    (float, "inf"), (float, "nan"), (float, "1e400"), (float, " 2"), (float, float("inf")),
    (str, 5), (str, b"x")])
def test_other_values_go_to_typer(annotation, value):
    from txcalc.cli.typer_app import plain_value

    assert plain_value(annotation, value) == (False, None)


def test_a_bad_value_reads_as_typer_words_it(capsys):
    """A value plain_value does not answer is typer's to refuse: its message, the value."""
    from txcalc.cli import main

    assert main(["memory", "llama-3-8b", "--batch", "3.5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("txcalc: error (txcalc memory): Invalid value for '--batch'") and \
        "'3.5'" in err and err.count("\n") == 1, err
    # --seq is text read as --context is (issue 29): the input layer's one line names it
    assert main(["memory", "llama-3-8b", "--seq", "3.5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("txcalc: error: --seq ('3.5') is not a whole number of tokens") and \
        err.count("\n") == 1, err


def test_memory_reads_the_gpu_catalog_once(monkeypatch, capsys):
    """``txcalc memory`` parses the GPU catalog once for its fit check and its words (it
    parsed it twice)."""
    from txcalc.engine import hardware
    from txcalc.cli import main

    calls = []
    parse = hardware.parse_catalog
    monkeypatch.setattr(hardware, "parse_catalog",
                        lambda *a, **k: calls.append(a[1]) or parse(*a, **k))
    for argv in (["memory", "llama-3-8b"], ["memory", "llama-3-8b", "--gpu", "h200"],
                 ["memory", "llama-3-8b", "--gpu", "a100-80gb", "--gpu-gb", "70"]):
        calls.clear()
        assert main(argv) == 0
        assert calls == ["gpus.csv"], (argv, calls)
    calls.clear()
    assert main(["memory", "llama-3-8b", "--gpu-gb", "70"]) == 0
    assert calls == [] and "70 GB usable, as given by --gpu-gb" in " ".join(
        capsys.readouterr().out.split())


def test_the_program_leaves_the_collector_as_it_found_it():
    """In-process callers (tests, the web page) get the collector back after a simple
    command; a command outside GC_FREE_COMMANDS runs with it."""
    import gc

    from txcalc.cli import GC_FREE_COMMANDS, _gc_free, main

    assert set(GC_FREE_COMMANDS) == {"presets", "params", "flops", "memory"}
    assert _gc_free(["params", "gpt2"]) and not _gc_free(["plan", "train"])
    assert not _gc_free([]) and not _gc_free(["--help"])
    assert gc.isenabled()
    assert main(["params", "gpt2", "--json"]) == 0
    assert gc.isenabled()
    gc.disable()
    try:
        assert main(["params", "gpt2", "--json"]) == 0
        assert not gc.isenabled()  # left off when it was off
    finally:
        gc.enable()
