"""The CLI run in this process, its output captured (pytest's ``capsys``)."""

import json

from txcalc.cli import main


def run(capsys, *argv) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``txcalc *argv``."""
    rc = main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def run_json(capsys, *argv) -> dict:
    """The JSON of ``txcalc *argv --json``, which must exit 0."""
    rc, out, err = run(capsys, *argv, "--json")
    assert rc == 0, err
    return json.loads(out)
