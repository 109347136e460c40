"""The CLI path stays light: no torch, pandas or matplotlib for a query (speed target is
measured in benchmarks/cli_speed.py, not here)."""

import subprocess
import sys

CHECK = """
import sys
from txcalc.cli import main
rc = main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "pandas", "matplotlib", "numpy", "transformers")
               if m in sys.modules)
print("HEAVY", heavy, file=sys.stderr)
sys.exit(rc)
"""


def run(*argv):
    return subprocess.run([sys.executable, "-c", CHECK, *argv], capture_output=True, text=True)


def test_params_flops_memory_import_no_heavy_modules():
    for argv in (("params", "llama-3.1-405b"), ("flops", "llama-3-8b", "--seq", "4096"),
                 ("memory", "llama-3-8b", "--seq", "4096"), ("presets",),
                 ("report", "--help")):
        r = run(*argv)
        assert r.returncode == 0, r.stderr
        assert "HEAVY []" in r.stderr, (argv, r.stderr)
