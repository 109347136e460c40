"""Issue 29 item 7: ``report`` prints its answer on the terminal, ``calibrate`` writes nothing
it was not asked to, and a Hub id that cannot be fetched fails in seconds with a whole line."""

from __future__ import annotations

import json
import time

import pytest

from tests.cli.cli_run import run


def test_report_prints_its_headline_answer(tmp_path, capsys):
    """Not only "wrote out/...": the answer section's first paragraph, as plain text (the
    report's Markdown bold dropped), and the same words in --json's ``headline``."""
    out = tmp_path / "r"
    rc, text, err = run(capsys, "report", "--params", "70B", "--gpu", "h100", "--out", str(out))
    assert rc == 0, err
    lines = " ".join(text.split())
    md = (out / "report.md").read_text()
    answer = md.split("## The answer", 1)[1].strip().split("\n\n")[0]
    assert "does NOT fit on one h100-sxm" in answer  # the report's own sentence
    assert answer.replace("**", "") in lines
    assert "**" not in text and f"wrote {out}/" in lines
    rc, text, err = run(capsys, "report", "--params", "70B", "--gpu", "h100", "--out", str(out),
                        "--json")
    assert rc == 0, err
    assert json.loads(text)["headline"] == answer.replace("**", "")


def _validation_report(path):
    from tests.published.test_calibrate import synthetic_report
    from txcalc.engine.hardware import get_gpu
    from txcalc.engine.timing import DeviceProfile
    synthetic_report(path, DeviceProfile.from_gpu(get_gpu("h200")))


def test_calibrate_writes_nothing_without_out(tmp_path, monkeypatch, capsys):
    """It wrote profiles/<gpu>-calibrated.json into the current folder unasked; now the fit is
    printed, the JSON's profile is null, and --out writes the file."""
    _validation_report(tmp_path / "r.json")
    monkeypatch.chdir(tmp_path)
    rc, text, err = run(capsys, "calibrate", "r.json")
    assert rc == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    assert "not saved: --out FILE writes the profile" in " ".join(text.split())
    rc, text, err = run(capsys, "calibrate", "r.json", "--json")
    assert rc == 0 and json.loads(text)["profile"] is None
    rc, text, err = run(capsys, "calibrate", "r.json", "--out", "p/h200.json", "--json")
    assert rc == 0, err
    assert json.loads(text)["profile"] == "p/h200.json" and (tmp_path / "p/h200.json").is_file()


def test_the_published_runs_fit_reuses_each_runs_costs():
    """A fit evaluates each run under ~200 candidate profiles: ``with_profile`` shares the
    run's ops, grouping and profile-free per-group costs, and gives the step time a setting
    built afresh on that profile gives (calibrate took 56 s rebuilding them each time)."""
    from txcalc.train import published_runs as P
    run_ = next(r for r in P.load_runs() if r.split == "fit" and not P.pending_reason(r)
                and r.measured["kind"] != "memory_only")
    prof = P.profile_with(run_.gpu, 0.55, 32.0)
    cache: dict = {}
    shared = P.predict(run_, prof, cache)
    assert P.predict(run_, P.profile_with(run_.gpu, 0.8, 0.0), cache) != shared
    assert P.predict(run_, prof, cache) == shared == P.predict(run_, prof)


# --- Hub ids without a network ----------------------------------------------------------------
@pytest.fixture
def online(tmp_path, monkeypatch):
    """huggingface_hub importable, HF_HUB_OFFLINE unset, an empty cache, no proxy."""
    pytest.importorskip("huggingface_hub")
    for var in ("HF_HUB_OFFLINE", "HF_HOME", "HUGGINGFACE_HUB_CACHE", "HTTPS_PROXY",
                "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    return monkeypatch


def _refused_port() -> int:
    """A local port nothing listens on (connections to it are refused at once)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_hub_fails_fast_in_one_whole_line(online, capsys):
    import huggingface_hub.constants as hc
    online.setattr(hc, "ENDPOINT", f"http://127.0.0.1:{_refused_port()}")
    t = time.monotonic()
    rc, _, err = run(capsys, "params", "Qwen/Qwen2.5-7B")
    assert time.monotonic() - t < 5  # it took 24 s of huggingface_hub's retries
    assert rc == 2
    (line,) = err.strip().splitlines()
    assert "cannot be reached" in line and "HF_HUB_OFFLINE=1" in line
    assert line.endswith("or pass the path of a config.json")


def test_a_hub_host_that_never_answers_is_given_up_on(online):
    """A name lookup or connection that hangs (a black-holed network) ends at the timeout."""
    import socket

    from txcalc.model import hub
    online.setattr(socket, "create_connection", lambda *a, **k: time.sleep(30))
    t = time.monotonic()
    why = hub._unreachable("https://huggingface.co", timeout_s=0.5)
    assert time.monotonic() - t < 2
    assert why.startswith("huggingface.co:443 did not answer within 0.5 s")


def test_a_failed_download_message_is_not_cut(online, capsys):
    """The library's whole message on one line ("... try aga" was cut at 160 characters)."""
    import huggingface_hub
    from txcalc.model import hub
    why = ("An error happened while trying to locate the file on the Hub and we cannot find "
           "the requested files in the local cache.\nPlease check your connection and try "
           "again or make sure your Internet connection is on.")

    def fail(*a, **k):
        raise OSError(why)
    online.setattr(hub, "_unreachable", lambda endpoint: "")
    online.setattr(huggingface_hub, "hf_hub_download", fail)
    rc, _, err = run(capsys, "params", "Qwen/Qwen2.5-7B")
    assert rc == 2
    (line,) = err.strip().splitlines()
    assert " ".join(why.split()) in line
