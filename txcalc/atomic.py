"""Writing output files so that an interrupt or a full disk never leaves half a file.

``write_files(folder, {name: text})`` writes each file to a temporary file in the same folder,
flushes it to disk and renames it over the target (``os.replace``): a reader sees the old file
or the new one, never a mix. ``deferred_signals()`` holds SIGINT and SIGTERM back while files
are moved into place (their handler runs right after), and every temporary is removed on any
failure. ``txcalc report`` builds its folders with the same pieces (``report/writer.py``).

Library code: no printing; a bad output path is an ``OutputPathError`` naming it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
import tempfile
import threading
from pathlib import Path

from .errors import TxcalcError

#: the longest file name most file systems take (ext4, xfs, btrfs, tmpfs: 255 bytes)
NAME_MAX = 255


class OutputPathError(TxcalcError):
    """An output path that cannot be written as asked (a device, a file for a folder, ...)."""


@contextlib.contextmanager
def deferred_signals():
    """Hold SIGINT and SIGTERM back for the duration of the block, then deliver them.

    Inside, a signal only records itself; on leaving, the previous handlers come back and the
    first recorded signal is raised again, so its handler (KeyboardInterrupt, the CLI's exit
    130/143) runs at once, after the files are consistent. Python runs signal handlers in the
    main thread only: elsewhere this does nothing (callers clean up on any exception anyway).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []

    def note(signum, frame):  # noqa: ARG001
        got.append(signum)

    old = {}
    try:
        for s in (signal.SIGINT, signal.SIGTERM):
            old[s] = signal.signal(s, note)
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if got:
            signal.raise_signal(got[0])


def check_name(path: str | os.PathLike, what: str) -> str:
    """``path`` as a string, refused when empty, with a NUL or a component longer than
    NAME_MAX bytes (which every file call would fail on with a less clear message)."""
    text = os.fspath(path)
    if not isinstance(text, str):
        text = os.fsdecode(text)
    if not text:
        raise OutputPathError(f"{what} is empty: give a path")
    if "\0" in text:
        raise OutputPathError(f"{what} ({text!r}) contains a NUL character")
    for part in text.split(os.sep):
        if len(os.fsencode(part)) > NAME_MAX:
            raise OutputPathError(f"{what} ({quoted(text)}): a path component is longer "
                                  f"than {NAME_MAX} bytes")
    return text


#: characters kept in a file name made from a user's name (a model's, a GPU's); any other
#: character (a slash, a space, a control character) becomes "_"
_STEM_CHARS = re.compile(r"[^A-Za-z0-9._+-]+")


def file_stem(name: str, what: str) -> str:
    """A file name made from ``name`` (a model name may be a path, a Hub id or anything a
    config.json's ``_name_or_path`` says): its last path component, every character outside
    ``[A-Za-z0-9._+-]`` replaced by ``_``, no leading dot (no hidden file, no ``..``), at most
    100 characters. A name with nothing left (``/``, ``..``) is an OutputPathError: without
    it the files would be named ``-meta.json``."""
    last = [p for p in str(name).replace("\\", "/").split("/") if p.strip()]
    stem = _STEM_CHARS.sub("_", last[-1] if last else "").lstrip(".")[:100]
    if not stem.strip("_"):
        raise OutputPathError(f"{what} ({quoted(str(name))}) gives no file name: name the "
                              "model (a config.json's _name_or_path) with a letter or digit")
    return stem


def quoted(text: str, n: int = 80) -> str:
    """A path or name for an error message: repr-quoted, cut to ``n`` characters."""
    return repr(text if len(text) <= n else text[:n] + "...")


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (a rename into it) to disk; best effort."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_temp(folder: Path, name: str, data: bytes) -> Path:
    """``data`` in a new hidden temporary file of ``folder``, flushed to disk."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name[:50]}.", suffix=".txcalc-tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return Path(tmp)


def check_out_folder(folder: str | os.PathLike, what: str = "--out") -> Path:
    """A folder to write files into: an existing folder (a link to one is followed) or a new
    one; a file, a device or anything else is refused."""
    text = check_name(folder, what)
    p = Path(text)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        return p
    except OSError as e:
        raise OutputPathError(f"{what} ({quoted(text)}): {e.strerror or e}") from None
    if not stat.S_ISDIR(st.st_mode):
        kind = "a file" if stat.S_ISREG(st.st_mode) else "not a folder (a device or a pipe)"
        raise OutputPathError(f"{what} ({quoted(text)}) is {kind}; give a folder")
    return p


def check_out_file(path: str | os.PathLike, what: str = "--out") -> Path:
    """A file to write (or replace): a device, a folder, a link or a pipe is refused."""
    text = check_name(path, what)
    p = Path(text)
    if text.endswith(os.sep) or p.name in ("", ".", ".."):
        raise OutputPathError(f"{what} ({quoted(text)}) names a folder; give a file name")
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise OutputPathError(f"{what} ({quoted(text)}): {e.strerror or e}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a symbolic link"
                if stat.S_ISLNK(st.st_mode) else "a device or a pipe, not a regular file")
        raise OutputPathError(f"{what} ({quoted(text)}) is {kind}; give a file to write")
    check_out_folder(p.parent if str(p.parent) else ".", f"the folder of {what}")
    return p


def write_files(folder: str | os.PathLike, files: dict[str, bytes | str],
                what: str = "--out") -> list[Path]:
    """Write ``files`` (name -> bytes or text) into ``folder`` (made when missing), each one
    atomically; returns the paths written. On any failure (a full disk, an interrupt) no
    temporary is left and no target is half-written; the parent folders this call made are
    removed again when nothing was written."""
    out = check_out_folder(folder, what)
    for name in files:
        check_out_file(out / name, what)
    made = _missing_parents(out)
    temps: list[Path] = []
    done: list[Path] = []
    try:
        with deferred_signals():
            try:
                out.mkdir(parents=True, exist_ok=True)
                for name, data in files.items():
                    raw = data.encode("utf-8") if isinstance(data, str) else data
                    temps.append(_write_temp(out, name, raw))
                for tmp, name in zip(temps, files):
                    os.replace(tmp, out / name)
                    done.append(out / name)
                fsync_dir(out)
            except BaseException:
                for tmp in temps:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
                if not done:
                    remove_empty(made)
                raise
    except OSError as e:
        raise OutputPathError(f"cannot write {what} ({quoted(str(out))}): "
                              f"{e.strerror or e}") from None
    return done


def _missing_parents(p: Path) -> list[Path]:
    """The folders from ``p`` up that do not exist yet (deepest first)."""
    out = []
    for q in [p, *p.parents]:
        if os.path.lexists(q):
            break
        out.append(q)
    return out


def remove_empty(folders: list[Path]) -> None:
    """Remove folders this process made, deepest first, each only while it is empty."""
    for q in folders:
        try:
            os.rmdir(q)
        except OSError:
            return
