"""The txcalc command line: typer commands, rich tables, ``--json`` for scripts.

Imports stay light on purpose: no pandas, torch or matplotlib on the CLI path (a query must
answer in well under half a second). Every user error prints as one line and exits 2.
"""

from __future__ import annotations

import sys

import typer

try:  # typer >= 0.2x vendors its own click; older ones use the click package
    from typer._click import exceptions as _click
except ImportError:  # pragma: no cover
    from click import exceptions as _click

from ..errors import TxcalcError
from .typer_app import app

# Commands register themselves on import (one module per command).
from . import (calibrate_cmd, costs_cmd, params_cmd, plan_cmd,  # noqa: F401
               report_cmd, validate_cmd)


def _one_line(msg: str) -> str:
    """A message as one line: embedded newlines (a path, a library message) become spaces."""
    return " ".join(msg.split()) or "invalid input"


def _given(e: Exception) -> str:
    """repr of the value a BadParameter rejected (typer's pydantic messages do not quote it)."""
    errors = getattr(e.__cause__, "errors", None)
    if not isinstance(e, _click.BadParameter) or not callable(errors):
        return ""
    try:
        return repr(errors()[0]["input"])
    except (LookupError, TypeError, ValueError):
        return ""


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app, turning every user error into one line and exit code 2."""
    try:
        app(args=argv, prog_name="txcalc", standalone_mode=False)
    except TxcalcError as e:
        print(f"txcalc: error: {_one_line(str(e))}", file=sys.stderr)
        return 2
    except _click.NoArgsIsHelpError:
        return 0
    except _click.UsageError as e:  # bad option, non-numeric value, missing argument
        where = f" ({e.ctx.command_path})" if e.ctx else ""
        msg, got = e.format_message(), _given(e)
        if got and got not in msg:
            msg += f" (got {got})"
        print(f"txcalc: error{where}: {_one_line(msg)}", file=sys.stderr)
        return 2
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        print("txcalc: aborted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
