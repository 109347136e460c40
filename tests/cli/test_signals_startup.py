"""Ctrl-C while txcalc starts: from the first line of ``txcalc.cli.main`` on, SIGINT exits 130
with one line, also while typer, rich and the commands are still being imported (main
installs its handlers before importing them: txcalc.cli._load). Before that only Python's own
start-up and a few milliseconds of light imports remain (``import txcalc`` defers the engine).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ONE_LINE = "txcalc: interrupted (SIGINT)\n"

# the child sends itself SIGINT when the named module starts importing
HOOK = """
import os, signal, sys, importlib.abc
class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == sys.argv[1]:
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, _Hook())
from txcalc.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO))


@pytest.mark.parametrize("module,argv", [
    ("typer", ["params", "gpt2", "--json"]),
    ("txcalc.cli.typer_app", ["params", "gpt2", "--json"]),
    # a command's module loads as the command is looked up (txcalc.cli.typer_app.LazyGroup)
    ("txcalc.cli.params_cmd", ["params", "gpt2", "--json"]),
    ("txcalc.model.presets", ["params", "gpt2", "--json"]),
    # rich loads with the first line printed for people (--json output never imports it)
    ("rich.console", ["params", "gpt2"])])
def test_sigint_while_importing_the_cli_is_130_with_one_line(module, argv):
    """Deterministic: the signal arrives as ``module`` starts importing (start-up for typer
    and the app, then as the command is looked up and as it runs)."""
    r = subprocess.run([sys.executable, "-c", HOOK, module, *argv],
                       env=_env(), capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr, r.stdout) == (130, ONE_LINE, "")


def test_import_txcalc_cli_is_light():
    """What runs before main's handlers: txcalc and txcalc.cli import neither typer, rich,
    numpy nor the engine."""
    code = ("import sys, txcalc.cli; print(sorted(m for m in ('typer', 'rich', 'numpy', "
            "'txcalc.model.config', 'txcalc.engine.accounting') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                       text=True, timeout=60)
    assert r.stdout.strip() == "[]", r.stderr


@pytest.mark.parametrize("delay_s", [0.15, 0.25, 0.4, 0.6, 0.9])
def test_sigint_at_a_few_moments_of_a_real_run(delay_s):
    """``python -m txcalc plan train`` (about a second here) sent SIGINT after ``delay_s``:
    130 and one line (with nothing, or the whole answer when it came while the process was
    exiting), or 0 and the whole answer when it finished first, or death by SIGINT during
    interpreter shut-down; never a traceback or a partial answer."""
    p = subprocess.Popen([sys.executable, "-m", "txcalc", "plan", "train", "llama-3.1-405b",
                          "--gpu", "h100", "--tokens", "15T", "--days", "100", "--json"],
                         env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay_s)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    if p.returncode == 0:
        assert err == "" and out.rstrip().endswith("}")
    elif p.returncode == -signal.SIGINT:
        # the answer was complete and main() had handed SIGINT back to Python's default as
        # the interpreter shut down: death by SIGINT (a shell's $? is 130), still no traceback
        assert "Traceback" not in err and (out == "" or out.rstrip().endswith("}")), err
    else:
        # interrupted before the answer, or (a loaded machine delaying this sleep past the
        # run) after the whole answer was written, while the process was exiting: 130 and
        # the one line either way, never a partial answer
        assert (p.returncode, err) == (130, ONE_LINE), (p.returncode, err)
        assert out == "" or out.rstrip().endswith("}"), out[-200:]
