"""Reading user files safely: configs, GPU files, calibration and validation reports.

Every file txcalc reads on a user's behalf goes through ``read_text`` (and ``read_json`` for
JSON), so that no input can hang it, exhaust its memory or raise from deep inside a parser:

    check                  | limit                         | refused with
    -----------------------|-------------------------------|-----------------------------------
    kind of file           | regular file (symlinks are    | "is a FIFO/device/directory ..."
                           |   followed, then checked)     |   before anything is opened
    size                   | MAX_FILE_BYTES (16 MiB)       | "is N bytes, over the limit"
    encoding               | UTF-8                         | the decoder's message
    JSON nesting           | MAX_JSON_DEPTH (64) levels    | "nested deeper than 64 levels"
    JSON integers          | MAX_INT_DIGITS (64) digits    | "an integer of N digits"
    JSON numbers/constants | finite (strict JSON: no NaN,  | "non-finite number"
                           |   Infinity, 1e400); a config  |
                           |   may hold +-Infinity (below) |

The file is checked with ``os.stat`` before it is opened (a FIFO would block ``open``) and
opened with ``O_NONBLOCK``, then checked again on the open descriptor (the path may have been
swapped in between). The largest file txcalc ships or writes as input (a 405B model's meta
validation report) is about 0.5 MB; a HF config.json is a few KB.

HF config.json files may hold the constants ``Infinity`` and ``-Infinity``: transformers writes
them with Python's ``json.dumps`` (Mamba-2's and Falcon-H1's ``time_step_limit`` is
``[0.0, Infinity]`` by default), so a strict reader would refuse real checkpoints. Config
readers pass ``infinity=True``: the two constants become float infinities, and a field txcalc
reads refuses them there, naming the field (every number it reads must be a finite size or
probability). ``NaN`` and overflowing literals (``1e400``) stay refused everywhere: no HF
default is NaN, and an overflow is a typo, not a limit.

Errors are the caller's ``TxcalcError`` subclass, so a GPU file fails as a ``GpuError`` and a
config as a ``ConfigError``; each names the path.
"""

from __future__ import annotations

import json
import os
import re
import stat
from itertools import accumulate
from pathlib import Path
from typing import Any

from .errors import TxcalcError

MAX_FILE_BYTES = 16 * 2**20  #: largest input file read, bytes (16 MiB)
MAX_JSON_DEPTH = 64  #: deepest nesting of JSON arrays/objects accepted
MAX_INT_DIGITS = 64  #: longest JSON integer accepted (10^64 exceeds any count txcalc takes)
MAX_PATH_SHOWN = 200  #: characters of a path quoted in an error message

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def shown(path: str | os.PathLike) -> str:
    """A path for an error message: repr-quoted (control characters escaped), truncated."""
    text = os.fspath(path) if not isinstance(path, str) else path
    if isinstance(text, bytes):
        text = text.decode("utf-8", "backslashreplace")
    return text if len(text) <= MAX_PATH_SHOWN and text.isprintable() \
        else repr(text[:MAX_PATH_SHOWN]) + ("..." if len(text) > MAX_PATH_SHOWN else "")


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _os_reason(e: OSError) -> str:
    return e.strerror or e.__class__.__name__


def check_path(path: str | os.PathLike, error: type[TxcalcError] = TxcalcError) -> str:
    """The path as text, refusing NUL bytes and a component over the system's name limit
    before any system call sees it."""
    try:
        text = os.fspath(path)
    except TypeError:
        raise error(f"path ({path!r:.{MAX_PATH_SHOWN}}) must be a string") from None
    if isinstance(text, bytes):
        text = text.decode("utf-8", "surrogateescape")
    if "\0" in text:
        raise error(f"{shown(text)}: a path cannot contain a NUL character")
    longest = max((len(part.encode("utf-8", "surrogateescape")) for part in Path(text).parts),
                  default=0)
    if longest > 255:
        raise error(f"{shown(text)}: a path component is {longest} bytes, over the 255-byte "
                    "limit of file names")
    return text


def read_bytes(path: str | os.PathLike, error: type[TxcalcError] = TxcalcError,
               max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; ``error`` for anything else."""
    text = check_path(path, error)
    where = shown(text)
    try:
        st = os.stat(text)  # follows a symlink: /dev/zero behind x.json is refused here
    except FileNotFoundError:
        raise error(f"{where}: no such file") from None
    except OSError as e:
        raise error(f"{where}: cannot read: {_os_reason(e)}") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{where}: is {_kind(st.st_mode)}, not a regular file")
    if st.st_size > max_bytes:
        raise error(f"{where}: is {st.st_size:,} bytes, over the {max_bytes:,}-byte limit for "
                    "input files")
    try:
        fd = os.open(text, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise error(f"{where}: cannot read: {_os_reason(e)}") from None
    try:
        st = os.fstat(fd)  # the file opened may not be the file checked
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{where}: is {_kind(st.st_mode)}, not a regular file")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise error(f"{where}: cannot read: {_os_reason(e)}") from None
    finally:
        os.close(fd)
    if size > max_bytes:  # grew after the stat
        raise error(f"{where}: is over the {max_bytes:,}-byte limit for input files")
    return b"".join(chunks)


def read_text(path: str | os.PathLike, error: type[TxcalcError] = TxcalcError,
              max_bytes: int = MAX_FILE_BYTES) -> str:
    """``read_bytes`` decoded as UTF-8 (a leading byte-order mark is dropped)."""
    data = read_bytes(path, error, max_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise error(f"{shown(path)}: cannot read: {e}") from None


_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKETS = re.compile(r"[\[\]{}]")


def _depth(text: str) -> int:
    """Deepest bracket nesting of a JSON text, strings skipped, without recursion."""
    steps = (1 if m.group() in "[{" else -1
             for m in _BRACKETS.finditer(_STRINGS.sub("", text)))
    return max(accumulate(steps, initial=0))


def parse_json(text: str, where: str, error: type[TxcalcError] = TxcalcError,
               infinity: bool = False) -> Any:
    """Strict JSON: depth, integer size and finiteness limits; ``error`` naming ``where``.
    ``infinity``: accept the constants ``Infinity`` and ``-Infinity`` (HF config files)."""
    depth = _depth(text)
    if depth > MAX_JSON_DEPTH:
        raise error(f"{where}: JSON nested {depth} levels deep, over the limit of "
                    f"{MAX_JSON_DEPTH}")

    def parse_int(s: str) -> int:
        digits = len(s.lstrip("-"))
        if digits > MAX_INT_DIGITS:
            raise error(f"{where}: an integer of {digits} digits ({s[:20]}...), over the limit "
                        f"of {MAX_INT_DIGITS} digits")
        return int(s)

    def parse_float(s: str) -> float:
        v = float(s)
        if v in (float("inf"), float("-inf")):
            raise error(f"{where}: number {s[:40]} is too large (not a finite float)")
        return v

    def parse_constant(s: str):
        if infinity and s in ("Infinity", "-Infinity"):
            return float(s[:-5])  # float("inf") / float("-inf")
        raise error(f"{where}: {s} is not a number in strict JSON")

    try:
        return json.loads(text, parse_int=parse_int, parse_float=parse_float,
                          parse_constant=parse_constant)
    except json.JSONDecodeError as e:
        raise error(f"{where}: malformed JSON at line {e.lineno} column {e.colno}: "
                    f"{e.msg}") from None
    except RecursionError:  # the depth pre-scan makes this unreachable; kept as a net
        raise error(f"{where}: JSON nested too deeply") from None


def read_json(path: str | os.PathLike, error: type[TxcalcError] = TxcalcError,
              max_bytes: int = MAX_FILE_BYTES, infinity: bool = False) -> Any:
    """The parsed contents of a JSON file (``read_text`` then ``parse_json``)."""
    return parse_json(read_text(path, error, max_bytes), shown(path), error, infinity)
