"""The typer application every command registers on (``@app.command()`` in each
``*_cmd.py``). A leaf module, so that the command modules import it without importing the
package that imports them."""

from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Exact compute-and-memory accounting for Transformer models.")


def click_exceptions():
    """click's exception classes as typer uses them: typer >= 0.2x vendors its own click,
    older ones use the click package."""
    try:
        from typer._click import exceptions
    except ImportError:  # pragma: no cover
        from click import exceptions
    return exceptions
