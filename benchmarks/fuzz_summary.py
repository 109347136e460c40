"""Outcomes of the CLI fuzz test (tests/cli/test_fuzz_cli.py), counted per command.

Runs the same generators with the same settings (derandomised unless TXCALC_FUZZ_EXAMPLES is
set) without stopping at the first failure, and prints, per command, the examples run, how many
exited 0, how many exited 2 cleanly, and how many broke the contract (by kind: traceback type,
hang, bad JSON, extra stderr lines, stray or lost files).

Run: python3 benchmarks/fuzz_summary.py [--failures] [--grid]
  --failures  also print each distinct failure (command, changed options/fields, outcome) once
  --grid[=cli|config|files]  instead of random draws, change ONE option or field at a time to each value on
              the base invocation: the precise triage (which option, which value, what outcome)
"""

from __future__ import annotations

import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import given, settings  # noqa: E402

from tests import test_fuzz_cli as fz  # noqa: E402


def _signature(case, o, kind):
    first = (o.stderr.strip().splitlines() or [""])[0][:90]
    detail = (f"{o.error} {o.where}" if o.error else (fz.problems(case, o) or [""])[0])[:160]
    return (case.command, tuple(sorted(case.changed.items())), kind, detail if kind != "exit 2"
            else first)


def draw_all():
    """(case, outcome) for every example of every fuzz test, as the tests draw them."""
    for name in sorted(fz.COMMANDS):
        cmd = fz.COMMANDS[name]
        n = fz.examples(fz.EXAMPLES.get(name, fz.DEFAULT_EXAMPLES))
        fz.warm_up(fz.build_cli_case(cmd, {}))
        yield from _run_given(name, fz.cli_cases(cmd), n)
    for model_type in sorted(fz.CONFIG_BASES):
        yield from _run_given(f"config:{model_type}", fz.config_cases(model_type),
                              fz.examples(fz.CONFIG_EXAMPLES))
    for kind in sorted(fz.FILE_STRATEGIES):
        yield from _run_given(f"file:{kind}", fz.FILE_STRATEGIES[kind](),
                              fz.examples(fz.FILE_EXAMPLES[kind]))


def _run_given(label, strategy, n):
    results = []

    @settings(max_examples=n, **fz.SETTINGS)
    @given(strategy)
    def run(case):
        results.append((case, fz.run_case(case)))

    t = time.perf_counter()
    run()
    print(f"  {label}: {len(results)} examples in {time.perf_counter() - t:.1f} s",
          file=sys.stderr)
    yield from results


def grid(which=("cli", "config", "files")):
    """One change at a time on each base: every option x every value, every field x value."""
    for name in sorted(fz.COMMANDS) if "cli" in which else ():
        cmd = fz.COMMANDS[name]
        fz.warm_up(fz.build_cli_case(cmd, {}))
        for p in cmd.params:
            if p.flag:
                changes = [True, False]
            else:
                changes = [fz.MISSING] + sorted(fz.CLI_VALUES.items())
            for c in changes:
                case = fz.build_cli_case(cmd, {p.name: c})
                yield case, fz.run_case(case)
    for model_type in sorted(fz.CONFIG_BASES) if "config" in which else ():
        fz.warm_up(fz.build_config_case(model_type, "params", {}, True))
        for f in fz.CONFIG_FIELDS[model_type]:
            for c in [fz.MISSING] + sorted(fz.JSON_VALUES.items()):
                for command in sorted(fz.CONFIG_COMMANDS):
                    if command in fz.CONFIG_SKIP.get(model_type, ()):
                        continue
                    case = fz.build_config_case(model_type, command, {f: c}, True)
                    yield case, fz.run_case(case)
    if "files" in which:
        for col in fz.GPU_COLUMNS:
            for c in [fz.MISSING] + sorted(fz.CLI_VALUES.items()):
                for command in sorted(fz.GPU_FILE_COMMANDS):
                    case = fz.build_gpu_file_case(command, {col: c}, True)
                    yield case, fz.run_case(case)
        for f in fz.CALIBRATION_FIELDS:
            for c in [fz.MISSING] + sorted(fz.JSON_VALUES.items()):
                case = fz.build_calibration_case({f: c}, True)
                yield case, fz.run_case(case)


def main(argv: list[str]) -> None:
    t0 = time.perf_counter()
    rows = collections.OrderedDict()
    failures = collections.OrderedDict()
    which = [a.split("=", 1)[1] for a in argv if a.startswith("--grid=")]
    source = grid(which or ("cli", "config", "files")) if any(a.startswith("--grid") for a in argv) \
        else draw_all()
    for case, o in source:
        group = case.command if not case.command.startswith("config:") \
            else ":".join(case.command.split(":")[:2])
        kind = fz.classify(case, o)
        r = rows.setdefault(group, collections.Counter())
        r["examples"] += 1
        r[kind] += 1
        if kind not in ("exit 0", "exit 2"):
            failures.setdefault(_signature(case, o, kind), (case, o))
    kinds = sorted({k for r in rows.values() for k in r} - {"examples", "exit 0", "exit 2"})
    head = ["command", "examples", "exit 0", "exit 2", "failed"] + kinds
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    total = collections.Counter()
    for group, r in rows.items():
        failed = r["examples"] - r["exit 0"] - r["exit 2"]
        total.update(r)
        total["failed"] += failed
        print(" | ".join([group] + [str(r[k]) for k in ("examples", "exit 0", "exit 2")]
                         + [str(failed)] + [str(r[k]) for k in kinds]))
    print(" | ".join(["total"] + [str(total[k]) for k in ("examples", "exit 0", "exit 2",
                                                          "failed")]
                     + [str(total[k]) for k in kinds]))
    print(f"\n{total['examples']} examples in {time.perf_counter() - t0:.1f} s")
    if "--failures" in argv or any(a.startswith("--grid") for a in argv):
        print(f"\n{len(failures)} distinct failures (command, changed, outcome):")
        for (command, changed, kind, detail), (case, o) in failures.items():
            print(f"- {command} {dict(changed)} -> {kind}: {detail}")
            print(f"    argv: {case.argv if len(repr(case.argv)) < 400 else repr(case.argv)[:400]}")


if __name__ == "__main__":
    main(sys.argv[1:])
