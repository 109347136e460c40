"""The one input layer: every count, size, float, choice and path a user gives goes through here.

The CLI parses its text options with ``parse_count``/``parse_context``/``number`` and the
public library functions check their arguments at their entry with ``integer``/``number``/
``choice``/``model_config``/``workload``/``path_text``. Each rejects a non-finite, out-of-range,
wrong-type or absurd value with an ``InputError`` (a TxcalcError) that names the argument and
the value (its repr, cut at ``SHOW_CHARS``): the CLI prints it as one line and exits 2.

Bounds (the README's "Limits" table) are generous for real use and keep every figure txcalc
prints finite:

    bound               | value        | applies to
    --------------------|--------------|--------------------------------------------------------
    MAX_PARAMS          | 10^15        | --params, model_states(n_params)
    MAX_SEQ             | 2^27 tokens  | --seq, --src-seq, --context, Workload.seq, kv contexts
    MAX_BATCH           | 2^24 seqs    | --batch, --concurrency, --global-batch, --micro-batch
    MAX_GPUS            | 2^20         | --gpus, --max-gpus, --tp/--pp/--cp/--ep
    MAX_TOKENS          | 10^18        | --tokens (training budget)
    MAX_DAYS            | 10^6         | --days
    MAX_PRICE           | 10^6         | --price per GPU-hour (0 allowed)
    TFLOPS_RANGE        | [1e-3, 1e6]  | --achieved-tflops per GPU
    TOKENS_PER_S_MAX    | 10^12        | --tokens-per-s
    GPU_GB_RANGE        | [1e-3, 1e6]  | --gpu-gb (GB = 1e9 bytes)
    OVERHEAD_GIB_MAX    | 10^4         | --cuda-context-gib, --comm-buffer-gib (GiB = 2^30)
    fragmentation       | [0, 1)       | --fragmentation
    MAX_TEXT            | 4096 chars   | names, paths (each path component at most 255 bytes)

Suffixes: a count reads ``80e9``, ``70B``, ``1.5T``, ``7,000,000``; K/M/B (or G)/T/P are
10^3/10^6/10^9/10^12/10^15. A context (a number of tokens in a sequence) reads k = 1024 as in
"128K context" (``128k`` = 131072, ``1.5k`` = 1536) and M = 10^6 as a count does (``1M`` =
1,000,000); a value that does not land on a whole token (``1.3k``) is refused. Plain numbers
and exponents are exact (``8192``, ``1e4``).
"""

from __future__ import annotations

import math
import numbers
import os

from .errors import WorkloadError

MAX_PARAMS = 10**15
MAX_SEQ = 2**27
MAX_BATCH = 2**24
MAX_GPUS = 2**20
MAX_TOKENS = 10**18
MAX_DAYS = 1e6
MAX_PRICE = 1e6
TFLOPS_RANGE = (1e-3, 1e6)
TOKENS_PER_S_MAX = 1e12
GPU_GB_RANGE = (1e-3, 1e6)
OVERHEAD_GIB_MAX = 1e4
MAX_KV_TOKENS = 2**16  #: validate --kv-tokens: tokens generated for the KV-cache check
MAX_ROWS = 10**4  #: layouts shown by plan train --rows
MAX_TEXT = 4096
MAX_PATH_COMPONENT = 255
#: what a library error on a non-ModelConfig argument suggests
CONFIG_HINT = " (txcalc.load(NAME_OR_PATH) gives one)"
SHOW_CHARS = 60

COUNT_SUFFIXES = {"K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12, "P": 10**15}
CONTEXT_SUFFIXES = {"K": 2**10, "M": 10**6}


class InputError(WorkloadError):
    """A value out of range, of the wrong type, non-finite or unreadable; names the argument."""


def show(value) -> str:
    """repr of a value for an error message, cut to SHOW_CHARS characters."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001  (a user object whose repr fails)
        text = f"<{type(value).__name__}>"
    return text if len(text) <= SHOW_CHARS else text[:SHOW_CHARS - 3] + "..."


def _fmt(x) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def integer(name: str, value, lo: int = 1, hi: int | None = None, *, none: bool = False):
    """``value`` as a Python int in [lo, hi]; None passes when ``none``. Bools, floats, strings
    and other types are refused (a float of a whole number too: counts are exact)."""
    if value is None and none:
        return None
    if not _is_int(value):
        raise InputError(f"{name} ({show(value)}) must be an integer, not "
                         f"{type(value).__name__}")
    v = int(value)
    if v < lo or (hi is not None and v > hi):
        rng = f"at least {_fmt(lo)}" if hi is None else f"between {_fmt(lo)} and {_fmt(hi)}"
        raise InputError(f"{name} ({show(value)}) must be {rng}")
    return v


def number(name: str, value, lo: float = 0.0, hi: float = math.inf, *, lo_open: bool = True,
           hi_open: bool = False, none: bool = False, note: str = ""):
    """``value`` as a finite float in the range (lo, hi] (``lo_open``/``hi_open`` choose the
    ends). Bools, strings, NaN and infinities are refused. None passes when ``none``; ``note``
    ends the message (a unit, what the value sets)."""
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{name} ({show(value)}) must be a number, not {type(value).__name__}")
    try:
        v = float(value)
    except (OverflowError, ValueError):
        raise InputError(f"{name} ({show(value)}) must be a finite number") from None
    if not math.isfinite(v):
        raise InputError(f"{name} ({show(value)}) must be a finite number{note}")
    low_bad = v <= lo if lo_open else v < lo
    high_bad = v >= hi if hi_open else v > hi
    if low_bad or high_bad:
        left, right = "(" if lo_open else "[", ")" if hi_open else "]"
        raise InputError(f"{name} ({show(value)}) must be in {left}{_fmt(lo)}, {_fmt(hi)}{right}"
                         f"{note}")
    return v


def choice(name: str, value, choices) -> str:
    """``value`` when it is one of ``choices`` (strings), else an error listing them."""
    if not isinstance(value, str) or value not in choices:
        raise InputError(f"{name} ({show(value)}) must be one of {', '.join(choices)}")
    return value


def boolean(name: str, value) -> bool:
    """``value`` when it is True or False (not 1, not "yes"), else an error naming it."""
    if not isinstance(value, bool):
        raise InputError(f"{name} ({show(value)}) must be True or False")
    return value


def _nonempty_within(name: str, value: str, max_len: int) -> None:
    """Shared by text() and path_text(): not blank, at most ``max_len`` characters."""
    if not value.strip():
        raise InputError(f"{name} ({show(value)}) must not be empty")
    if len(value) > max_len:
        raise InputError(f"{name} ({show(value)}) is {len(value):,} characters long; at most "
                         f"{max_len:,}")


def text(name: str, value, *, max_len: int = MAX_TEXT, none: bool = False):
    """A non-empty string without NUL or other control characters, at most ``max_len``."""
    if value is None and none:
        return None
    if not isinstance(value, str):
        raise InputError(f"{name} ({show(value)}) must be a string, not {type(value).__name__}")
    _nonempty_within(name, value, max_len)
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InputError(f"{name} ({show(value)}) contains control characters")
    return value


def path_text(name: str, value, *, none: bool = False):
    """A path (str or os.PathLike) as a string: no NUL, at most MAX_TEXT characters, each
    component at most MAX_PATH_COMPONENT bytes (what file systems take)."""
    if value is None and none:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, bytes) or not isinstance(value, str):
        raise InputError(f"{name} ({show(value)}) must be a path (str or os.PathLike), not "
                         f"{type(value).__name__}")
    if "\0" in value:
        raise InputError(f"{name} ({show(value)}) contains a NUL character")
    _nonempty_within(name, value, MAX_TEXT)
    for part in value.replace("\\", "/").split("/"):
        size = len(part.encode("utf-8", "surrogateescape"))
        if size > MAX_PATH_COMPONENT:
            raise InputError(f"{name} ({show(value)}): a path component is {size:,} bytes long, "
                             f"longer than {MAX_PATH_COMPONENT} bytes")
    return value


def instance(name: str, value, cls: type, hint: str = ""):
    """``value`` when it is a ``cls`` (the caller passes its own class: this module sits at the
    bottom of the import chain and imports nothing of txcalc's but its errors)."""
    if not isinstance(value, cls):
        raise InputError(f"{name} ({show(value)}) must be a {cls.__name__}, not "
                         f"{type(value).__name__}{hint}")
    return value


def _decimal(name: str, raw, what: str, example: str, hi) -> tuple[Decimal, str]:
    """Split ``raw`` into (number, suffix letter) with Decimal, refusing everything odd."""
    from decimal import Decimal, InvalidOperation  # here: most commands read no count
    if isinstance(raw, bool) or not isinstance(raw, (str, int)):
        raise InputError(f"{name} ({show(raw)}) must be text such as {example}, not "
                         f"{type(raw).__name__}")
    if isinstance(raw, int) and not -10**64 < raw < 10**64:  # str() of 4,300+ digits raises
        raise InputError(f"{name} ({show(raw)}) exceeds the largest accepted, {_fmt(hi)}")
    t = str(raw).strip().replace(",", "").replace("_", "")
    if len(t) > 64:
        raise InputError(f"{name} ({show(raw)}) is too long to be {what}")
    suffix = ""
    if t and t[-1].isalpha() and t[-1].upper() not in "E":
        suffix, t = t[-1].upper(), t[:-1]
    try:
        value = Decimal(t)
    except InvalidOperation:
        raise InputError(f"{name}: cannot read {show(raw)} as {what} (try {example})") from None
    if not value.is_finite():
        raise InputError(f"{name} ({show(raw)}) must be a finite number")
    if value.adjusted() > 30:  # before any exact arithmetic (int(1e1000000) takes 23 s)
        raise InputError(f"{name} ({show(raw)}) exceeds the largest accepted, {_fmt(hi)}")
    if value.adjusted() < -30:
        raise InputError(f"{name} ({show(raw)}) must be a positive whole number")
    return value, suffix


def parse_count(text, name: str = "count", hi: int = MAX_TOKENS) -> int:
    """'80e9', '70B', '1.5T', '7,000,000' -> an exact positive integer at most ``hi``.

    K/M/B (or G)/T/P multiply by 10^3/10^6/10^9/10^12/10^15."""
    value, suffix = _decimal(name, text, "a count", "80e9, 70B or 1.5T", hi)
    if suffix:
        if suffix not in COUNT_SUFFIXES:
            raise InputError(f"{name}: cannot read {show(text)} as a count (suffixes: "
                             f"{', '.join(COUNT_SUFFIXES)})")
        value *= COUNT_SUFFIXES[suffix]
    if value != value.to_integral_value() or value <= 0:
        raise InputError(f"{name} ({show(text)}) must be a positive whole number")
    n = int(value)
    if n > hi:
        raise InputError(f"{name} ({show(text)}) exceeds the largest accepted, {_fmt(hi)}")
    return n


def parse_context(text, name: str = "context", *, zero: bool = True) -> int:
    """A sequence length in tokens: '128k' -> 131072, '1.5k' -> 1536 (k = 1024, as in "128K
    context"), '1M' -> 1000000, '8192' or '1e4' as written. '0' (when ``zero``)
    means: not given, and returns 0. At most MAX_SEQ tokens."""
    if zero and str(text).strip() == "0":
        return 0
    value, suffix = _decimal(name, text, "a number of tokens", "8192 or 128k", MAX_SEQ)
    if suffix:
        if suffix not in CONTEXT_SUFFIXES:
            raise InputError(f"{name}: cannot read {show(text)} as a number of tokens "
                             "(suffixes: k = 1024, M = 10^6)")
        value *= CONTEXT_SUFFIXES[suffix]
    if value <= 0:
        hint = " ('0' alone means: not given)" if zero else ""
        raise InputError(f"{name} ({show(text)}) must be a positive number of tokens{hint}")
    if value != value.to_integral_value():
        raise InputError(f"{name} ({show(text)}) is not a whole number of tokens "
                         f"({value.normalize():f}; k = 1024)")
    n = int(value)
    if n > MAX_SEQ:
        raise InputError(f"{name} ({show(text)}) exceeds the longest accepted sequence, "
                         f"{MAX_SEQ:,} tokens")
    return n
