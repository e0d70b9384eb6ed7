#!/usr/bin/env bash
# The README's test command. Builds (or reuses) the project's own virtual environment in .venv/, installs
# the project and its test extras there, builds what the tests need, and runs pytest from that
# environment: nothing installed elsewhere on the machine is used, so a newcomer and CI run the same thing.
# Usage: bash scripts/test.sh [extra pytest args]      (JETSTREAM_KOPF_VENV=DIR picks another venv folder)
set -euo pipefail
cd "$(dirname "$0")/.."
unset PYTHONPATH PYTHONHOME  # the venv alone decides what is importable
venv="${JETSTREAM_KOPF_VENV:-.venv}"

if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "test.sh: Python >= 3.11 is needed as python3 (found: $(python3 --version 2>&1 || echo none))" >&2
    exit 1
fi
if [[ ! -x "$venv/bin/python" ]]; then
    echo "test.sh: creating the virtual environment $venv" >&2
    python3 -m venv "$venv" || {
        echo "test.sh: could not create $venv; on Debian/Ubuntu install python3-venv first" >&2
        exit 1
    }
fi
py="$venv/bin/python"
pip=("$py" -m pip install --quiet --disable-pip-version-check)
"${pip[@]}" --upgrade "pip>=24"
"${pip[@]}" -e ".[test]"
export PATH="$(cd "$venv/bin" && pwd):$PATH"
python -m tests.kube.assets ensure  # kube-apiserver + etcd for envtest (tools/envtest; cold Go build)
python -m tests.chart.go_tools ensure  # helm and kustomize for the chart/manifest tests (Go builds, once)
exec python -m pytest -n 2 --dist loadgroup "$@"
