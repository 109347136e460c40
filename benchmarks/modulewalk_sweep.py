"""Walk the default config of every model type transformers has (about 820) and print a summary.

    python3 benchmarks/modulewalk_sweep.py [--out results.jsonl] [--timeout 120]

For each type: its default config is written as config.json text (as a Hub file would hold it),
read back and walked (txcalc.model.modulewalk.walk_hf_dict); the total is compared with sum(numel) of
a second model of the same class built from the config object directly. A refusal must be a
TxcalcError (one line, exit 2 in the CLI); anything else, or a build past --timeout seconds, is
a failure. Peak RSS growth per type shows that nothing is allocated (meta device).
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import resource
import signal
import sys
import time
import warnings


class _Timeout(Exception):
    pass


def _alarm(signum, frame):  # noqa: ARG001
    raise _Timeout


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="write one JSON line per type here")
    ap.add_argument("--timeout", type=int, default=120)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    import torch
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from txcalc.errors import TxcalcError
    from txcalc.model.modulewalk import build, walk

    # import what every build needs before any alarm is armed: an alarm inside a first import
    # leaves the module half-initialised for every later type
    import torch._dynamo  # noqa: F401
    import transformers.modeling_utils  # noqa: F401
    build(json.loads(CONFIG_MAPPING["vit"]().to_json_string()) | {"model_type": "vit"}, "vit")
    signal.signal(signal.SIGALRM, _alarm)
    out = open(args.out, "w", encoding="utf-8") if args.out else None
    results = []
    for model_type in sorted(CONFIG_MAPPING.keys()):
        rec: dict = {"type": model_type}
        try:
            cfg = CONFIG_MAPPING[model_type]()
            raw = json.loads(cfg.to_json_string()) | {"model_type": model_type}
        except Exception:  # noqa: BLE001  (a config that needs arguments)
            rec["status"] = "no default config"
            results.append(rec)
            continue
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        signal.alarm(args.timeout)
        try:
            built = build(raw, model_type)
            if built is None:
                rec["status"] = "unknown to transformers"
            else:
                model, cls_name, source, _ = built
                rows, _ = walk(model, torch)
                total = sum(r.params for r in rows)
                with torch.device("meta"):
                    ref = type(model)(cfg) if hasattr(model, "config") else None
                ref_total = sum(p.numel() for p in ref.parameters()) if ref is not None else None
                rec.update(status="walked", cls=cls_name, params=total, equal=total == ref_total,
                           ruled_share=round(sum(r.params for r in rows if r.rule) /
                                             max(total, 1), 4))
        except TxcalcError as e:
            rec.update(status="refused", msg=str(e)[:200])
        except _Timeout:
            rec["status"] = "TIMEOUT"  # the interpreter may be left half-way: stop here
            results.append(rec)
            break
        except Exception as e:  # noqa: BLE001
            rec.update(status="FAILED", msg=f"{type(e).__name__}: {str(e)[:200]}")
        finally:
            signal.alarm(0)
        rec["s"] = round(time.perf_counter() - t0, 3)
        rec["rss_growth_mib"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) // 1024
        results.append(rec)
        if out:
            out.write(json.dumps(rec) + "\n")
            out.flush()
    counts = collections.Counter(r["status"] for r in results)
    walked = [r for r in results if r["status"] == "walked"]
    print(f"{len(results)} model types: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    print(f"walked: {sum(r['equal'] for r in walked)} of {len(walked)} equal to a second build's "
          "sum(numel)")
    timed = [r for r in results if "s" in r]
    print("slowest (s):", sorted(((r["s"], r["type"]) for r in timed), reverse=True)[:5])
    print("largest peak-RSS growth (MiB):",
          sorted(((r["rss_growth_mib"], r["type"]) for r in timed), reverse=True)[:5])
    bad = [r for r in results if r["status"] in ("TIMEOUT", "FAILED") or r.get("equal") is False]
    for r in bad:
        print("FAIL", r)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
