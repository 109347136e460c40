"""Hugging Face Hub ids (``meta-llama/Llama-3.1-8B``): their config.json, from the local cache
or, where ``huggingface_hub`` is installed and the network allows, downloaded into it.

The cache is the Hub's own layout, read here without huggingface_hub (so a cached model needs
no extra package and no network):

    $HF_HUB_CACHE (else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
    ~/.cache/huggingface/hub)
      models--{org}--{name}/
        refs/main                      the commit hash the revision ``main`` points at
        snapshots/{commit}/config.json

Only ``config.json`` is ever fetched (a few KB); weights are never needed. When neither the
cache nor a download gives it, ``HubError`` says in one line how to get it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import ConfigError

#: the Hub's repo-id rule (huggingface_hub.utils.validate_repo_id): one "/", each part up to
#: 96 characters of letters, digits, "-", "_", "."; no "--" or ".." and no leading/trailing "-."
_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?"
HUB_ID = re.compile(rf"^{_PART}/{_PART}$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")


class HubError(ConfigError):
    """A Hub id whose config.json is neither cached nor downloadable here."""


def is_hub_id(text: str) -> bool:
    """``org/name`` as the Hub spells repo ids (a path such as ``./x/y`` or ``a/b.json`` is not)."""
    return (bool(HUB_ID.match(text)) and "--" not in text and ".." not in text
            and not text.endswith(".json"))


def cache_dir() -> Path:
    """The Hub cache folder, as huggingface_hub resolves it from the environment."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def cached_config(repo_id: str, revision: str = "main") -> Path | None:
    """The cached config.json of ``repo_id`` at ``revision`` (a branch in ``refs/`` or a
    commit hash), or None."""
    repo = cache_dir() / ("models--" + repo_id.replace("/", "--"))
    try:
        ref = repo / "refs" / revision
        if ref.is_file():
            commit = ref.read_text(encoding="utf-8").strip()
        elif _HEX40.match(revision):
            commit = revision
        else:
            return None
        if not _HEX40.match(commit):  # a damaged ref: nothing trustworthy to read
            return None
        path = repo / "snapshots" / commit / "config.json"
        return path if path.is_file() else None
    except OSError:
        return None


def how_to_get(repo_id: str) -> str:
    return (f"get it with `hf download {repo_id} config.json` (huggingface_hub; "
            f"`huggingface-cli login` first for a gated model), or pass the path of a "
            f"config.json")


def config_path(repo_id: str) -> Path:
    """The config.json of ``repo_id``: cached, else downloaded (huggingface_hub, network),
    else HubError saying how to get it."""
    cached = cached_config(repo_id)
    if cached is not None:
        return cached
    where = f"not in the Hugging Face cache ({cache_dir()})"
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    if offline:
        raise HubError(f"model {repo_id!r}: config.json {where} and HF_HUB_OFFLINE is set; "
                       + how_to_get(repo_id))
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise HubError(f"model {repo_id!r}: config.json {where}, and huggingface_hub is not "
                       f"installed to download it (python3 -m pip install huggingface_hub); "
                       + how_to_get(repo_id)) from None
    import huggingface_hub
    endpoint = getattr(getattr(huggingface_hub, "constants", None), "ENDPOINT", None)
    unreachable = _unreachable(endpoint or os.environ.get("HF_ENDPOINT")
                               or "https://huggingface.co")
    if unreachable:
        raise HubError(f"model {repo_id!r}: config.json {where} and {unreachable}; "
                       + how_to_get(repo_id))
    try:
        return Path(hf_hub_download(repo_id, "config.json", cache_dir=str(cache_dir()),
                                    etag_timeout=HUB_TIMEOUT_S))
    except Exception as e:  # noqa: BLE001 - offline, gated, missing repo: one line, never a trace
        why = " ".join(str(e).split()) or type(e).__name__  # whole, on one line
        raise HubError(f"model {repo_id!r}: config.json {where} and the download failed "
                       f"({type(e).__name__}: {why}); " + how_to_get(repo_id)) from None


#: seconds to wait for the Hub's host (name lookup and TCP connection), and for its answer
#: about config.json: without a network huggingface_hub retries with back-off for ~25 s
HUB_TIMEOUT_S = 3.0
_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


def _unreachable(endpoint: str, timeout_s: float = HUB_TIMEOUT_S) -> str:
    """Why the Hub's host cannot be reached within ``timeout_s`` ("" when it can, or when a
    proxy is set: then only the download itself can tell). The name lookup runs in a thread
    (getaddrinfo has no timeout of its own)."""
    import socket
    import threading
    from urllib.parse import urlsplit
    if any(os.environ.get(v) for v in _PROXY_VARS):
        return ""
    url = urlsplit(endpoint)
    host, port = url.hostname or "", url.port or (80 if url.scheme == "http" else 443)
    failure: list[str] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
        except OSError as e:
            failure.append(e.strerror or str(e) or type(e).__name__)
    t = threading.Thread(target=connect, daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        return (f"{host}:{port} did not answer within {timeout_s:g} s (no network? "
                "HF_HUB_OFFLINE=1 skips the download)")
    if failure:
        return (f"{host}:{port} cannot be reached ({failure[0]}: no network? "
                "HF_HUB_OFFLINE=1 skips the download)")
    return ""


def load_hub(repo_id: str, head: str | None = None):
    """The ModelConfig of a Hub id, named by the id."""
    from .hf import load_hf_config
    cfg = load_hf_config(config_path(repo_id), head)
    return cfg if cfg.name == repo_id else cfg.replace(name=repo_id)
