"""The what-if page's HTTP server: the standard library's ``http.server``, one page, a JSON API.

    route                    | answer
    -------------------------|-----------------------------------------------------------------
    GET /                    | the page (static/index.html; its script and style beside it)
    GET /api/options         | what the controls offer: presets, GPUs, precisions, formats ...
    GET /api/commands?FORM   | {panel: the equivalent ``txcalc`` command}, and the report link
    GET /api/charts?FORM     | {"charts": [...]}: the page's charts, each point the JSON of a
                             | panel's command with one option changed (charts.py)
    GET /api/PANEL?FORM      | the JSON ``txcalc ... --json`` prints for the panel's command,
                             | computed in this process by its txcalc.answers function
                             | (PANEL: params, flops, memory, answer; calc.commands)
    POST /api/upload?name=N  | a config.json (the body; N: its file name) kept for this
                             | server's life: {"model": its path}
    GET /report?FORM         | writes ``txcalc report`` for the form, then sends its report.html

FORM is the page's controls as a query string (calc.DEFAULTS names them). A bad input is HTTP
400 with ``{"error": "<the CLI's one-line message>"}``, never a traceback. Bound to a loopback
address, the server answers only requests whose Host is that address (a web page elsewhere
cannot reach it through DNS rebinding), and its pages may load nothing from elsewhere
(Content-Security-Policy).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

from ..errors import TxcalcError
from . import calc

MAX_UPLOAD_BYTES = 4 * 2**20  #: a config.json; the largest on the Hub are a few hundred KB
STATIC = {"/": ("index.html", "text/html; charset=utf-8"),
          "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
          "/static/app.css": ("app.css", "text/css; charset=utf-8")}
PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
#: report.html is self-contained: inline styles and data: images, nothing fetched
REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data: 'self'"
_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class WhatIfServer(ThreadingHTTPServer):
    """One page's server; ``workdir`` keeps uploaded config.json files and written reports
    until ``server_close``."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int, log=None):
        self.address_family = _family(host)
        self.workdir = None  # a failed bind closes the server inside __init__
        super().__init__((host, port), Handler)
        self.workdir = Path(tempfile.mkdtemp(prefix="txcalc-serve-"))
        self.log = log  #: a file for one line per request, or None
        self._reports = 0
        self._reports_lock = threading.Lock()
        port = self.server_address[1]
        names = LOOPBACK if host in LOOPBACK else ()
        self.hosts = {f"{h}:{port}" if ":" not in h else f"[{h}]:{port}" for h in names}

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks the host's name up (socket.getfqdn): a DNS query at
        # start-up, for a name nothing here uses
        import socketserver
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

    def next_report_dir(self) -> Path:
        with self._reports_lock:
            self._reports += 1
            return self.workdir / "reports" / str(self._reports)

    def server_close(self) -> None:
        super().server_close()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _family(host: str):
    import socket
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def make_server(host: str = "127.0.0.1", port: int = 0, log=None) -> WhatIfServer:
    """A server listening on host:port (0: a free port; ``server.url`` says which); call
    ``serve_forever`` and, at the end, ``shutdown`` and ``server_close``."""
    return WhatIfServer(host, port, log)


class Handler(BaseHTTPRequestHandler):
    server: WhatIfServer
    server_version = "txcalc"
    protocol_version = "HTTP/1.1"

    # --- plumbing --------------------------------------------------------------------------
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        if self.server.log is not None:
            try:
                self.server.log.write(f"{self.address_string()} {format % args}\n")
                self.server.log.flush()
            except (OSError, ValueError):
                pass

    def _send(self, status: int, body: bytes, ctype: str, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj, headers: dict | None = None) -> None:
        self._send(status, json.dumps(obj, allow_nan=False).encode(), "application/json",
                   headers)

    def _error(self, status: int, message: str, **extra) -> None:
        self._json(status, {"error": " ".join(str(message).split())} | extra)

    def _host_ok(self) -> bool:
        return not self.server.hosts or self.headers.get("Host", "") in self.server.hosts

    def _form(self, query: str) -> dict:
        given = parse_qs(query, keep_blank_values=True, max_num_fields=200)
        twice = [k for k, v in given.items() if len(v) > 1]
        if twice:
            raise calc.WebInputError(f"control(s) given twice: {', '.join(twice)}")
        return calc.form_of({k: v[0] for k, v in given.items()})

    def _guarded(self, handler) -> None:
        """Run a route; a TxcalcError is 400 with its one line; anything else is 500 with
        one line (its traceback goes to the server's log, never to the page)."""
        if not self._host_ok():
            self._error(HTTPStatus.FORBIDDEN, f"Host {self.headers.get('Host')!r:.80} is not "
                        "this server's address")
            return
        try:
            handler()
        except calc.CommandFailed as e:
            self._error(HTTPStatus.BAD_REQUEST, str(e), command=calc.shell_line(e.argv))
        except TxcalcError as e:
            self._error(HTTPStatus.BAD_REQUEST, str(e))
        except RuntimeError as e:  # a command that neither answered nor refused its input
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"{e}; please report it")
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as e:  # a bug: one line to the page, the details to the log
            if self.server.log is not None:
                import traceback
                traceback.print_exc(file=self.server.log)
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR,
                        f"internal error ({type(e).__name__}: {e}); please report it")

    # --- routes ------------------------------------------------------------------------------
    def do_GET(self):  # noqa: N802 (http.server's name)
        self._guarded(self._get)

    def do_HEAD(self):  # noqa: N802
        self._guarded(self._get)

    def do_POST(self):  # noqa: N802
        self._guarded(self._post)

    def _get(self) -> None:
        url = urlsplit(self.path)
        path = url.path
        if path in STATIC:
            name, ctype = STATIC[path]
            body = resources.files("txcalc.web").joinpath("static", name).read_bytes()
            self._send(HTTPStatus.OK, body, ctype, {"Content-Security-Policy": PAGE_CSP})
        elif path == "/api/options":
            self._json(HTTPStatus.OK, calc.options())
        elif path == "/api/commands":
            form = self._form(url.query)
            cmds = calc.commands(form)
            self._json(HTTPStatus.OK, {
                "commands": {k: calc.shell_line(v) for k, v in cmds.items()},
                "argv": cmds,
                "report": {"url": "/report?" + urlencode(
                               {k: v for k, v in form.items() if v != calc.DEFAULTS[k]}),
                           "command": calc.shell_line(calc.report_command(form, "report"))}})
        elif path == "/api/charts":
            from .charts import charts
            form = self._form(url.query)
            self._json(HTTPStatus.OK, {"charts": charts(form, cache=self._fixed(form["model"]))})
        elif path.startswith("/api/") and path[5:] in calc.PANELS:
            form = self._form(url.query)
            argv = calc.commands(form)[path[5:]]
            body = calc.answer_bytes(argv, cache=self._fixed(form["model"]))
            self._send(HTTPStatus.OK, body, "application/json",
                       {"X-Txcalc-Command": calc.shell_line(argv)})
        elif path == "/report":
            self._report(self._form(url.query))
        elif path.startswith("/reports/"):
            self._report_file(path)
        elif path == "/favicon.ico":
            self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
        else:
            self._error(HTTPStatus.NOT_FOUND, f"no page {path!r:.80} here (the page is /)")

    def _fixed(self, model: str) -> bool:
        """Whether a command's answer depends on its arguments alone: a preset, or a
        config.json uploaded here (its folder is named by its hash)."""
        from ..model.presets import PRESETS
        return model in PRESETS or model.startswith(str(self.server.workdir / "uploads") + "/")

    def _post(self) -> None:
        if urlsplit(self.path).path != "/api/upload":
            self._error(HTTPStatus.NOT_FOUND, "POST goes to /api/upload (a config.json)")
            return
        try:
            n = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise calc.WebInputError("an upload needs a Content-Length") from None
        if not 0 < n <= MAX_UPLOAD_BYTES:
            self.close_connection = True
            raise calc.WebInputError(f"a config.json upload must be 1 byte to "
                                     f"{MAX_UPLOAD_BYTES:,} bytes, not {n:,}")
        body = self.rfile.read(n)
        try:
            cfg = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise calc.WebInputError(f"the uploaded file is not JSON text ({e})") from None
        if not isinstance(cfg, dict):
            raise calc.WebInputError("the uploaded file is JSON but not an object: a "
                                     "config.json is one {...} object")
        # the model takes its name from the folder (as txcalc names a Hub download): the
        # uploaded file's name, without .json and characters a folder name should not have
        name = parse_qs(urlsplit(self.path).query).get("name", ["uploaded"])[0]
        stem = re.sub(r"[^A-Za-z0-9._-]+", "-", name.removesuffix(".json")).strip(".-")[:100]
        folder = (self.server.workdir / "uploads" / hashlib.sha256(body).hexdigest()[:16]
                  / (stem or "uploaded"))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_bytes(body)
        self._json(HTTPStatus.OK, {"model": str(folder / "config.json")})

    def _report(self, form: dict) -> None:
        out = self.server.next_report_dir()
        calc.run_json(calc.report_command(form, str(out)))
        self.send_response(HTTPStatus.SEE_OTHER)
        self.send_header("Location", f"/reports/{out.name}/report.html")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _report_file(self, path: str) -> None:
        parts = path.split("/")[2:]
        root = self.server.workdir / "reports"
        if len(parts) != 2 or not parts[0].isdigit() or not _FILE.match(parts[1]) \
                or not (root / parts[0] / parts[1]).is_file():
            self._error(HTTPStatus.NOT_FOUND, f"no report file {path!r:.80}")
            return
        f = root / parts[0] / parts[1]
        ctype = {".html": "text/html; charset=utf-8", ".md": "text/markdown; charset=utf-8",
                 ".json": "application/json", ".png": "image/png"}.get(
                     f.suffix, "application/octet-stream")
        self._send(HTTPStatus.OK, f.read_bytes(), ctype, {"Content-Security-Policy": REPORT_CSP})
