"""Hub ids (issue 18 item 3): ``org/name`` reads config.json from a cache laid out as the Hub
lays it out (models--org--name/refs/main -> snapshots/<commit>/config.json)."""

import json
import shutil
import sys
from pathlib import Path

import pytest

import txcalc
from txcalc.cli import main
from txcalc.model import hub as hub_module
from txcalc.model.hub import HubError, cache_dir, cached_config, is_hub_id

DATA = Path(__file__).parents[1] / "data" / "hf"
COMMIT = "0e9e39f249a16976918f6564b8830bc894c89659"  # any 40-hex commit: the layout matters


def lay_out(root: Path, repo_id: str, config: Path, commit: str = COMMIT) -> Path:
    """Write ``config`` where huggingface_hub's cache puts a repo's config.json."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir()
    blob = repo / "blobs" / "5b5e1d2f"  # the Hub stores the file as a blob, the snapshot links it
    shutil.copy(config, blob)
    (snap / "config.json").symlink_to(Path("..") / ".." / "blobs" / blob.name)
    return snap / "config.json"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # never the network in tests
    return tmp_path


def _json(capsys, argv):
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_hub_id_from_hf_home_matches_the_file(hub, monkeypatch, capsys):
    monkeypatch.setenv("HF_HOME", str(hub / "home"))
    lay_out(hub / "home" / "hub", "meta-llama/Llama-3.1-8B", DATA / "llama-3.1-8b.json")
    by_id = _json(capsys, ["params", "meta-llama/Llama-3.1-8B", "--json"])
    by_file = _json(capsys, ["params", str(DATA / "llama-3.1-8b.json"), "--json"])
    assert by_id["total_params"] == by_file["total_params"] == 8_030_261_248
    assert txcalc.load("meta-llama/Llama-3.1-8B").name == "meta-llama/Llama-3.1-8B"


def test_hf_hub_cache_wins_and_refs_main_picks_the_snapshot(hub, monkeypatch, capsys):
    monkeypatch.setenv("HF_HOME", str(hub / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub / "cache"))
    lay_out(hub / "home" / "hub", "org/model", DATA / "gpt2.json")
    path = lay_out(hub / "cache", "org/model", DATA / "llama-3.2-1b.json")
    # an older snapshot beside it, not the one refs/main names
    old = path.parents[1] / ("f" * 40)
    old.mkdir()
    shutil.copy(DATA / "gpt2.json", old / "config.json")
    assert cache_dir() == hub / "cache" and cached_config("org/model") == path
    out = _json(capsys, ["memory", "org/model", "--seq", "512", "--json"])
    assert out["params"] == txcalc.params("llama-3.2-1b").total
    assert _json(capsys, ["flops", "org/model", "--seq", "512", "--json"])["model_flops"] == \
        _json(capsys, ["flops", "llama-3.2-1b", "--seq", "512", "--json"])["model_flops"]


def test_missing_config_says_how_to_get_it(hub, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    assert main(["params", "Qwen/Qwen2.5-7B"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "'Qwen/Qwen2.5-7B'" in err and str(hub) in err
    assert "hf download Qwen/Qwen2.5-7B config.json" in err


def test_without_huggingface_hub_the_message_names_the_package(hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails
    with pytest.raises(HubError, match=r"huggingface_hub is not installed.*hf download a/b "
                                       r"config\.json"):
        txcalc.load("a/b")


def test_download_failure_is_one_error(hub, monkeypatch):
    """huggingface_hub present, download raising (no network, gated repo): a HubError."""
    import types
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.delenv("HF_HUB_OFFLINE")

    def refuse(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co'")
    monkeypatch.setattr(hub_module, "_unreachable", lambda endpoint: "")  # the host answers
    monkeypatch.setitem(sys.modules, "huggingface_hub",
                        types.SimpleNamespace(hf_hub_download=refuse))
    with pytest.raises(HubError, match=r"download failed \(OSError: We couldn't connect"):
        txcalc.load("a/b")


def test_download_lands_in_the_cache_and_is_read(hub, monkeypatch, capsys):
    import types
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.delenv("HF_HUB_OFFLINE")
    calls = []
    monkeypatch.setattr(hub_module, "_unreachable", lambda endpoint: "")  # the host answers

    def download(repo_id, filename, cache_dir, etag_timeout):
        assert etag_timeout == hub_module.HUB_TIMEOUT_S
        calls.append((repo_id, filename))
        return str(lay_out(Path(cache_dir), repo_id, DATA / "llama-3.2-3b.json"))
    monkeypatch.setitem(sys.modules, "huggingface_hub",
                        types.SimpleNamespace(hf_hub_download=download))
    assert txcalc.params("meta-llama/Llama-3.2-3B").total == txcalc.params("llama-3.2-3b").total
    assert calls == [("meta-llama/Llama-3.2-3B", "config.json")]
    txcalc.load("meta-llama/Llama-3.2-3B")  # cached now: no second download
    assert len(calls) == 1


@pytest.mark.parametrize("text,ok", [("meta-llama/Llama-3.1-8B", True), ("a/b", True),
                                     ("a/b/c", False), ("./a/b", False), ("a/b.json", False),
                                     ("a--b/c", False), ("a/..b", False), ("/a", False),
                                     ("llama-3-8b", False)])
def test_hub_id_shapes(text, ok):
    assert is_hub_id(text) is ok


def test_a_relative_path_is_still_a_path(hub, monkeypatch, capsys):
    (hub / "org" / "m").mkdir(parents=True)
    shutil.copy(DATA / "gpt2.json", hub / "org" / "m" / "config.json")
    monkeypatch.chdir(hub)
    assert _json(capsys, ["params", "org/m", "--json"])["total_params"] == \
        txcalc.params("gpt2").total
