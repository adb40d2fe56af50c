#!/usr/bin/env bash
# The test suite under other torch versions, each in a throwaway venv.
#
#   scripts/test_torch_versions.sh [VERSION ...]     (default: 2.4.1 2.14.1)
#
# pyproject.toml admits torch >= 2.4 while CI runs 2.13.0 alone; run this
# before a release and put the counts in the README's list of tested
# versions. Each venv lives in a temporary folder, is removed at the end,
# and installs the project without touching the caller's environment. Torch
# builds other than this machine's local CPU wheel are large downloads (2.4.1
# is about 5 GB). Prints one line per version: its pytest summary, and exits
# non-zero if any version fails.
set -uo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
[ ${#versions[@]} -eq 0 ] && versions=(2.4.1 2.14.1)
status=0
summary=()
for v in "${versions[@]}"; do
    venv=$(mktemp -d "${TMPDIR:-/tmp}/cutimeline-torch-$v-XXXX")
    echo "== torch $v in $venv"
    { python3 -m venv "$venv" \
      && "$venv/bin/pip" install -q "torch==$v" "setuptools>=68" \
      && "$venv/bin/pip" install -q -e '.[test]'; } 2>&1 | grep -v '^WARNING: Location'
    if ! "$venv/bin/python" -c "import torch, cutimeline" 2>/dev/null; then
        summary+=("torch $v: install failed")
        status=1
    else
        "$venv/bin/python" -m pytest -q -p no:cacheprovider > "$venv/pytest.log" 2>&1
        rc=$?
        line=$(tail -1 "$venv/pytest.log")
        grep -E "^(FAILED|ERROR) " "$venv/pytest.log" | sed "s/^/  torch $v: /"
        summary+=("torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'): $line")
        [ "$rc" -eq 0 ] || status=1
    fi
    rm -rf "$venv"
done
printf '%s\n' "${summary[@]}"
exit $status
