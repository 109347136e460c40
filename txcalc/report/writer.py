"""Write a report folder atomically: report.json, report.md, report.html and the PNGs.

The rules (the README's Reports section says the same):

- ``-o DIR`` is created, or replaced only when it is empty or holds a report txcalc wrote: its
  ``report.json`` carries txcalc's signature (``schema``, ``txcalc_version``, ``command``,
  ``sections``) and every other entry is a file that report lists (report.md, report.html, its
  plots). Any other folder is refused, naming what is in it; nothing else is ever deleted.
- ``DIR`` itself must not be a symbolic link (refused, not followed: replacing the folder
  would replace the link); links in its parent folders are followed as usual. ``.``, ``..``
  and the current folder are refused (a report replaces its folder as a whole).
- Everything is written into a hidden sibling (``.DIR.txcalc-new-XXXXXXXX``), flushed to disk
  and swapped with ``DIR`` in one ``renameat2(RENAME_EXCHANGE)`` (Linux), so ``DIR`` holds the
  old report or the new one at every instant; where the exchange is unsupported, two renames
  with SIGINT/SIGTERM held back, through ``.DIR.txcalc-old-XXXXXXXX``. A hidden sibling left by
  a killed run (SIGKILL, power loss) is recognised by its name on the next run: an old report
  is put back when ``DIR`` is missing, anything else is removed.
- Writers of one parent folder are serialised by an ``flock`` on that folder (no lock file).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ..atomic import (OutputPathError, check_name, deferred_signals, fsync_dir, quoted,
                      remove_empty)
from .model import build_report
from .request import ReportRequest

REPORT_FILES = ("report.json", "report.md", "report.html")
#: keys of report.json that mark a folder as txcalc's own
SIGNATURE = ("schema", "txcalc_version", "command", "sections")
#: what a report folder's files are called (the plots are listed in report.json)
_OUR_FILE = re.compile(r"report\.(json|md|html)|[a-z0-9_]+\.png")
_LEFTOVER = re.compile(r"\.(?P<short>.+)\.txcalc-(?P<kind>new|old)-[a-z0-9_]{8}")
MAX_REPORT_JSON = 64 * 2**20  # a report.json larger than this is not one txcalc wrote
LOCK_WAIT_S = 30.0
#: progress(step description, steps done, total steps or None while unknown)
StepProgress = Callable[[str, int, "int | None"], None]


class ReportError(OutputPathError):
    """A report cannot be written where asked (the output path, not the model)."""


def _quiet(step: str, done: int, total: int | None) -> None:
    pass


# --- what -o names, and whether txcalc may replace it -----------------------------------------
def resolve_out(out: str | os.PathLike) -> Path:
    """``out`` as a Path, refused (ReportError) when it cannot be a report folder: empty, a
    NUL, a name too long, ``.``/``..``, the current folder or one holding it, a link."""
    try:
        text = check_name(out, "-o")
    except OutputPathError as e:
        raise ReportError(str(e)) from None
    body = text.rstrip("/") or "/"
    if os.path.basename(body) in ("", ".", ".."):
        raise ReportError(f"-o {quoted(text)} names the current or a parent folder; a report "
                          "replaces its folder as a whole: give a folder name, e.g. -o report")
    p = Path(body)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return p
    except OSError as e:
        raise ReportError(f"-o {quoted(text)}: {e.strerror or e}") from None
    if stat.S_ISLNK(st.st_mode):
        raise ReportError(f"-o {quoted(text)} is a symbolic link; txcalc does not follow or "
                          "replace links: give the real folder")
    if not stat.S_ISDIR(st.st_mode):
        raise ReportError(f"-o {quoted(text)} is a file, not a folder")
    here, target = os.path.realpath(os.getcwd()), os.path.realpath(p)
    if here == target or here.startswith(target.rstrip("/") + "/"):
        raise ReportError(f"-o {quoted(text)} is the current folder or holds it; a report "
                          "replaces its folder as a whole: give a subfolder")
    return p


def _entries(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


def _is_file(p: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(p).st_mode)
    except OSError:
        return False


def _listed(folder: Path) -> set[str] | None:
    """The files a signed report.json in ``folder`` names (itself, report.md, report.html and
    its plots), or None when there is no such report.json."""
    p = folder / "report.json"
    if not _is_file(p) or os.lstat(p).st_size > MAX_REPORT_JSON:
        return None
    try:
        rep = json.loads(p.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(rep, dict) or not all(k in rep for k in SIGNATURE) \
            or not isinstance(rep["sections"], list):
        return None
    names = set(REPORT_FILES)
    for s in rep["sections"]:
        for plot in (s.get("plots") or []) if isinstance(s, dict) else []:
            f = plot.get("file") if isinstance(plot, dict) else None
            if isinstance(f, str) and _OUR_FILE.fullmatch(f):
                names.add(f)
    return names


def report_signature(folder: Path) -> set[str] | None:
    """The files of the txcalc report in ``folder`` (report.json signed, every entry a plain
    file it lists), or None when the folder holds anything else."""
    names = _listed(folder)
    entries = _entries(folder)
    if names is None or any(e not in names or not _is_file(folder / e) for e in entries):
        return None
    return set(entries)


def check_out_dir(out: str | os.PathLike) -> Path:
    """Refuse (ReportError) an -o that is not a new folder, an empty one or a txcalc report."""
    p = resolve_out(out)
    if not os.path.lexists(p):
        return p
    try:
        entries = _entries(p)
        if entries and report_signature(p) is None:
            listed = _listed(p) or set()
            foreign = [e for e in entries if e not in listed or not _is_file(p / e)]
            raise ReportError(f"-o {quoted(str(p))} holds files txcalc did not write "
                              f"({', '.join(quoted(e, 40) for e in foreign[:3])}"
                              f"{', ...' if len(foreign) > 3 else ''}); give a new or empty "
                              "folder")
    except OSError as e:
        raise ReportError(f"-o {quoted(str(p))}: {e.strerror or e}") from None
    return p


def report_json(report: dict) -> str:
    """Strict JSON (no NaN or infinity); a non-finite figure is a ReportError, not bad JSON."""
    try:
        return json.dumps(report, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    except ValueError as e:
        raise ReportError(f"a figure of the report is not a finite number ({e})") from None


def write_report(req: ReportRequest, out_dir: str | os.PathLike, *, validation_dir=None,
                 progress: StepProgress = _quiet, runner=None) -> dict:
    """Build the report of ``req`` and write it to ``out_dir``; returns the report model.
    ``runner``: answers the options of ``req.compare`` (build_report)."""
    from . import plots, render

    out = check_out_dir(out_dir)
    plots.require_matplotlib()
    done = 0

    def step(desc: str, total: int | None = None) -> None:
        nonlocal done
        progress(desc, done, total)
        done += 1

    with plots.Painter() as painter:  # imports matplotlib while the report is built
        report = build_report(req, str(out_dir), validation_dir, progress=step, runner=runner)
        specs = plots.plot_specs(report)
        total = done + len(specs) + 1
        drawn = painter.draw_all(report, specs,
                                 before=lambda spec: step(f"plot {spec['file']}", total))
    pngs = {spec["file"]: png for spec, png in zip(specs, drawn)}
    step("writing files", total)
    extra = [str(out_dir)] + ([str(validation_dir)] if validation_dir is not None else [])
    files = {name: png for name, png in pngs.items()}
    # a name with a lone surrogate (undecodable bytes from argv or a file name) stays JSON
    files["report.json"] = report_json(report).encode("utf-8", "backslashreplace")
    files["report.md"] = render.to_markdown(report, extra).encode("utf-8")
    files["report.html"] = render.to_html(report, pngs, extra).encode("utf-8")
    write_folder(out, files)
    progress("done", total, total)
    return report


# --- the swap ---------------------------------------------------------------------------------
def _short(name: str) -> str:
    """``name`` shortened so that ``.<short>.txcalc-new-XXXXXXXX`` fits in 255 bytes."""
    raw = os.fsencode(name)
    if len(raw) <= 200:
        return name
    return os.fsdecode(raw[:180]) + "-" + hashlib.sha1(raw).hexdigest()[:12]


def _remove_ours(folder: Path) -> bool:
    """Delete the report files in ``folder`` (a hidden sibling made by txcalc) and the folder;
    anything else in it stays, with the folder. True when the folder is gone."""
    try:
        for e in _entries(folder):
            if _OUR_FILE.fullmatch(e) and _is_file(folder / e):
                os.unlink(folder / e)
        os.rmdir(folder)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _recover(out: Path) -> None:
    """Hidden siblings of ``out`` left by a killed run: an old report goes back to ``out``
    when ``out`` is missing (killed between the two renames); the rest is removed."""
    parent, short = out.parent, _short(out.name)
    found = [(m["kind"], parent / e) for e in _entries(parent)
             if (m := _LEFTOVER.fullmatch(e)) and m["short"] == short]
    for kind, p in sorted(found, key=lambda f: f[0] != "old"):
        if kind == "old" and not os.path.lexists(out) and report_signature(p):
            os.rename(p, out)
        else:
            _remove_ours(p)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap ``a`` and ``b`` in one step (Linux renameat2 RENAME_EXCHANGE). False when the
    system or the file system does not support it (nothing happened then)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError, ImportError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


@contextlib.contextmanager
def _locked(parent: Path):
    """An exclusive flock on the parent folder: one writer at a time replaces its reports."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fd = os.open(parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ReportError(f"another txcalc has been writing a report in "
                                      f"{quoted(str(parent))} for {LOCK_WAIT_S:g} s; try again"
                                      ) from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)


def _fill(tmp: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        with open(tmp / name, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    fsync_dir(tmp)


def write_folder(out: Path, files: dict[str, bytes]) -> None:
    """Put ``files`` at ``out`` (see the module docstring). On any failure ``out`` is as it
    was, and nothing is left: no hidden sibling, no parent folder this call made."""
    out = resolve_out(out)
    parent = out.parent
    made: list[Path] = []
    for q in [parent, *parent.parents]:
        if os.path.lexists(q):
            break
        made.append(q)
    try:
        with deferred_signals():
            try:
                parent.mkdir(parents=True, exist_ok=True)
                with _locked(parent):
                    _recover(out)
                    check_out_dir(out)  # again, under the lock
                    _swap_in(out, files)
                fsync_dir(parent)
            except BaseException:
                if not os.path.lexists(out):
                    remove_empty(made)
                raise
    except OSError as e:
        raise ReportError(f"cannot write the report to {quoted(str(out))}: "
                          f"{e.strerror or e}") from None


def _swap_in(out: Path, files: dict[str, bytes]) -> None:
    short = _short(out.name)
    tmp = Path(tempfile.mkdtemp(prefix=f".{short}.txcalc-new-", dir=out.parent))
    old = None
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; a report folder is for reading
        _fill(tmp, files)
        if not os.path.lexists(out) or not _entries(out):
            os.rename(tmp, out)  # new, or over an empty folder: one atomic step
        elif not _exchange(tmp, out):
            old = Path(tempfile.mkdtemp(prefix=f".{short}.txcalc-old-", dir=out.parent))
            os.rename(out, old)  # signals are held back: only SIGKILL can stop us here,
            try:                 # and the next run puts the old report back (_recover)
                os.rename(tmp, out)
            except BaseException:
                os.rename(old, out)
                raise
    finally:
        try:  # the new report when the swap failed, else the old one
            if os.path.lexists(tmp):
                _remove_ours(tmp)
        finally:
            if old is not None and os.path.lexists(old):
                _remove_ours(old)
