#!/usr/bin/env bash
# The README's two commands (its "## Two commands" section, read from README.md, not retyped)
# in a fresh virtual environment. --system-site-packages lets pip find torch and the test
# dependencies already installed by .ci/run, so the check costs a minute, not a download; the
# second command's pytest only collects the suite (.ci/run has just run it in full).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv --system-site-packages "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
mapfile -t cmds < <(python3 - <<'PY'
import re
section = open("README.md", encoding="utf-8").read().split("## Two commands", 1)[1]
section = section.split("\n## ", 1)[0]
for block in re.findall(r"```bash\n(.*?)```", section, re.S)[:2]:
    print(" ".join(block.replace("\\\n", " ").split()))
PY
)
if [ "${#cmds[@]}" -ne 2 ]; then echo "readme_check: expected two commands in README.md"; exit 1; fi
echo "readme_check: $ ${cmds[0]}"
out=$(bash -c "${cmds[0]}")
head -4 <<<"$out"  # (not a pipe: echo would die of SIGPIPE once head has its lines)
grep -q "fewest GPUs on which training fits: " <<<"$out"
[ "$(command -v txcalc)" = "$work/venv/bin/txcalc" ]  # the venv's own entry point ran
second=${cmds[1]%python3 -m pytest}
[ "$second" != "${cmds[1]}" ] || { echo "readme_check: the second command no longer ends in pytest"; exit 1; }
echo "readme_check: $ ${second}python3 -m pytest --collect-only -q"
bash -c "${second}python3 -m pytest --collect-only -q" | tail -2
echo "readme_check: both README commands ran in a fresh venv"
