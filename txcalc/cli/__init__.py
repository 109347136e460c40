"""The txcalc command line: typer commands, rich tables, ``--json`` for scripts.

Imports stay light on purpose: no pandas, torch or matplotlib on the CLI path (a query must
answer in well under half a second). Every user error prints as one line and exits 2.
typer and the app are imported by ``main`` once its signal handlers are in place (``_load``),
so Ctrl-C during start-up is one line and 130 too; a command's module (and rich, and the
engine) load when that command runs; ``txcalc.cli.app`` imports every command on first use.
"""

from __future__ import annotations

import gc
import io
import os
import signal
import sys
import threading

from ..errors import TxcalcError


def _load() -> None:
    """Import typer and the app (main's start-up, once its signal handlers are in place). The
    commands' modules load as a command is looked up (txcalc.cli.typer_app.LazyGroup)."""
    g = globals()
    if "_click" in g:
        return
    import typer
    from .typer_app import app, click_exceptions
    g["_app"] = app
    g["typer"] = typer
    g["_click"] = click_exceptions()


def __getattr__(name: str):
    """``txcalc.cli.app``: the app with every command registered (what a test walks);
    ``txcalc.cli.typer``."""
    if name in ("app", "typer"):
        _load()
        if name == "app":
            from .typer_app import load_command_modules
            load_command_modules()
            globals().setdefault("app", _app)
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


class _Interrupted(BaseException):
    """SIGINT or SIGTERM while a command runs (a BaseException: no ``except Exception`` of a
    library swallows it; every ``finally`` and the report writer's cleanup run)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class _OutputFailed(BaseException):
    """Standard output cannot be written (a closed pipe, a full disk, /dev/full)."""


class _GuardedStdout:
    """sys.stdout whose write and flush errors become _OutputFailed (rich and print both write
    through sys.stdout), so they are told apart from a file error of a command."""

    def __init__(self, raw):
        self._raw = raw

    def write(self, text):
        try:
            return self._raw.write(text)
        except OSError as e:
            raise _OutputFailed(e) from None

    def flush(self):
        try:
            return self._raw.flush()
        except OSError as e:
            raise _OutputFailed(e) from None

    def __getattr__(self, name):
        return getattr(self._raw, name)


#: set once the program's own run (``txcalc``, ``python -m txcalc``) has finished its command:
#: a signal from then until the process exits still ends it with 128 + the signal and one line
_FINISHING = [False]


def _interrupted_line(signum: int) -> str:
    name = "interrupted" if signum == signal.SIGINT else "terminated"
    return f"txcalc: {name} ({signal.Signals(signum).name})"


#: the signals our handler received during the current main(), first first. The handler
#: raises _Interrupted, but Python runs a handler wherever the interpreter happens to be, and
#: some places drop what it raised: a weakref callback or a ``__del__`` only reports it to
#: sys.unraisablehook (importlib's module-lock callback, seen), and a handler that ran while
#: an import compiled a module's source (every run compiles where no .pyc is written:
#: PYTHONDONTWRITEBYTECODE) was seen to have its exception dropped and the import go on. So
#: the signal is also noted here, and main() ends with 128 + it when the command ran to its
#: end anyway (tests/cli/test_report_safety.py: before this, about one run in 40 signalled
#: under load exited 0, silent, its report written)
_RECEIVED: list[int] = []


def _raise_interrupted(signum, frame):  # noqa: ARG001
    _RECEIVED.append(signum)
    if _FINISHING[0]:
        # the command is done and its output flushed; Python's own handler would raise a
        # KeyboardInterrupt into the interpreter's exit, where it is lost (exit 0, silent)
        _say(_interrupted_line(signum))
        os._exit(128 + signum)
    raise _Interrupted(signum)


def _quiet_unraisable(hook):
    """sys.unraisablehook that drops our _Interrupted (a handler that ran inside a weakref
    callback or a ``__del__``: _RECEIVED has it, main() acts on it) and passes the rest on."""
    def quiet(unraisable):
        if not isinstance(unraisable.exc_value, _Interrupted):
            hook(unraisable)
    return quiet


def _say(line: str) -> None:
    """One line on stderr; a broken stderr is ignored (there is nowhere else to say it)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _silence_stdout(raw) -> None:
    """After a failed write: point file descriptor 1 at /dev/null so that the interpreter's
    last flush at exit succeeds quietly (no "Exception ignored ... BrokenPipeError")."""
    try:
        fd = raw.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


#: the simple commands (issue 18: under 0.1 s over ``python -c pass``), which run without the
#: cyclic garbage collector: their start-up (typer, rich, the engine's modules) and their op
#: rows allocate some 10^5 objects, which the collector traverses over and over (~15 % of
#: the command's time) to find no cycle to free; the process ends a moment later. Every
#: other command (a planner search, a report, the web server) runs with it.
GC_FREE_COMMANDS = ("presets", "params", "flops", "memory")


def _gc_free(argv) -> bool:
    return bool(argv) and isinstance(argv[0], str) and argv[0] in GC_FREE_COMMANDS


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app, turning every user error into one line and exit code 2.

    Exit codes: 0 done; 2 bad input (one line on stderr); 130 interrupted (SIGINT, Ctrl-C) and
    143 terminated (SIGTERM), one line, no temporary left; 1 standard output could not be
    written (a closed pipe, a full disk), one line.
    """
    handlers = {}
    gc_was_on = gc.isenabled()
    if gc_was_on and _gc_free(sys.argv[1:] if argv is None else argv):
        gc.disable()
    unraisable = sys.unraisablehook
    if threading.current_thread() is threading.main_thread():  # signals reach this thread only
        _RECEIVED.clear()
        sys.unraisablehook = _quiet_unraisable(unraisable)
        for sig in (signal.SIGINT, signal.SIGTERM):
            handlers[sig] = signal.signal(sig, _raise_interrupted)
    raw = sys.stdout
    sys.stdout = _GuardedStdout(raw)
    try:
        _load()
        rc = _run(argv)
        sys.stdout.flush()
        if handlers and _RECEIVED:  # a signal whose _Interrupted was dropped (_RECEIVED)
            raise _Interrupted(_RECEIVED[0])
        return rc
    except _Interrupted as e:
        _say(_interrupted_line(e.signum))
        return 128 + e.signum
    except _OutputFailed as e:
        err = e.args[0] if e.args else None
        _say(f"txcalc: error: cannot write to standard output: "
             f"{getattr(err, 'strerror', None) or err}")
        _silence_stdout(raw)
        return 1
    finally:
        # the program's own run keeps its handlers until the process ends (a late Ctrl-C is
        # 130 and one line, _raise_interrupted); a call from Python gets its handlers back
        _FINISHING[0] = argv is None and bool(handlers)
        if gc_was_on:
            if argv is None:
                # the program's own run (``python -m txcalc``, the ``txcalc`` script), which
                # ends now: frozen, the objects it made are not walked once more by the
                # collection that re-enabling triggers, nor by the interpreter's last one
                gc.freeze()
            gc.enable()
        if sys.stdout.__class__ is _GuardedStdout:
            sys.stdout = raw
        for sig, h in handlers.items():
            if not _FINISHING[0]:
                signal.signal(sig, h)
        if handlers and not _FINISHING[0]:
            sys.unraisablehook = unraisable


def run() -> None:
    """The program's entry point (the ``txcalc`` script, ``python -m txcalc``): ``main()`` on
    sys.argv, then the exit.

    The exit skips the interpreter's shut-down (``os._exit`` after the output is flushed and
    the atexit functions have run): in that shut-down a signal's Python handler never runs,
    so a Ctrl-C landing there was lost and the process exited 0 with nothing said (one run
    in twenty of tests/cli/test_report_safety.py's random moments on a loaded machine). Here
    SIGINT and SIGTERM are blocked before the last check: one that came earlier has had its
    handler run (130/143 and one line, ``_raise_interrupted``), one that came since is
    pending and ends the process the same way. A signal in main()'s own last lines, before
    its handler knew the command had finished, ends it the same way too."""
    try:
        rc = main()
    except _Interrupted as e:
        _say(_interrupted_line(e.signum))
        os._exit(128 + e.signum)
    if not _FINISHING[0]:  # handlers not ours (not the main thread): the ordinary exit
        sys.exit(rc)
    import atexit
    atexit._run_exitfuncs()  # what the interpreter's exit would run, our handlers still in place
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass
    stop = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    pending = signal.sigpending() & stop
    if pending:
        signum = min(pending)
        _say(_interrupted_line(signum))
        os._exit(128 + signum)
    os._exit(rc)


def _run(argv: list[str] | None) -> int:
    try:
        # txcalc.cli.app when set (a test may replace it), else the lazily loading app
        # obj: the words as typed, which --emit states in the files it writes
        rv = globals().get("app", _app)(args=argv, prog_name="txcalc", standalone_mode=False,
                                        obj={"argv": list(sys.argv[1:] if argv is None
                                                          else argv)})
    except TxcalcError as e:
        _say(f"txcalc: error: {_one_line(str(e))}")
        return 2
    except _click.NoArgsIsHelpError:
        return 0
    except _click.UsageError as e:  # bad option, non-numeric value, missing argument
        where = f" ({e.ctx.command_path})" if e.ctx else ""
        msg, got = e.format_message(), _given(e)
        if got and got not in msg:
            msg += f" (got {got})"
        _say(f"txcalc: error{where}: {_one_line(msg)}")
        return 2
    except typer.Exit as e:
        return e.exit_code
    except (typer.Abort, KeyboardInterrupt):
        raise _Interrupted(signal.SIGINT) from None
    # typer turns a KeyboardInterrupt (one raised without our handler) into exit code 130
    if rv == 130 and not isinstance(rv, bool):
        raise _Interrupted(signal.SIGINT)
    return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
