"""`txcalc serve`: the local what-if web page (txcalc.web)."""

from __future__ import annotations

import typer

from .typer_app import app


@app.command()
def serve(port: int = typer.Option(8000, "--port", help="Port to listen on (0: any free port; the URL printed says which)."),
          host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (127.0.0.1: this machine only)."),
          quiet: bool = typer.Option(False, "--quiet", help="Do not log each request on stderr.")):
    """A local what-if web page: pick a model, a task, a GPU and the settings, and watch the
    memory, FLOPs and the planner's answer move. No network: the page loads nothing from
    elsewhere. Ctrl-C stops it."""
    import sys

    from ..errors import TxcalcError
    from ..inputs import integer, text
    from ..web.server import make_server

    integer("--port", port, 0, 65535)
    text("--host", host, max_len=255)

    try:
        server = make_server(host, port, None if quiet else sys.stderr)
    except OSError as e:
        raise TxcalcError(f"cannot listen on {host}:{port}: {e.strerror or e} (another port: "
                          "--port N, or --port 0 for any free one)") from None
    try:
        print(f"txcalc: the what-if page is at {server.url} (Ctrl-C stops it)", flush=True)
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
