# shellcheck shell=bash
# Sourced by scripts/test.sh and scripts/e2e-kind.sh (from the repository root): builds (or reuses) the
# project's own virtual environment in .venv/, installs the project and its test extras there (editable,
# jsbroker's hot path compiled by mypyc next to its sources: broker/setup.py; JSBROKER_PURE=1 for the pure-Python
# build), and puts it first on PATH, so nothing installed elsewhere on the machine is used.
# JETSTREAM_KOPF_VENV=DIR picks another venv folder.
unset PYTHONPATH PYTHONHOME  # the venv alone decides what is importable
venv="${JETSTREAM_KOPF_VENV:-.venv}"

if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "venv: Python >= 3.11 is needed as python3 (found: $(python3 --version 2>&1 || echo none))" >&2
    exit 1
fi
if [[ ! -x "$venv/bin/python" ]]; then
    echo "venv: creating the virtual environment $venv" >&2
    python3 -m venv "$venv" || {
        echo "venv: could not create $venv; on Debian/Ubuntu install python3-venv first" >&2
        exit 1
    }
fi
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
"${pip[@]}" --upgrade "pip>=24"
"${pip[@]}" -e ".[test]"
PATH="$(cd "$venv/bin" && pwd):$PATH"
export PATH
