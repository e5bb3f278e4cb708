#!/bin/sh
# CTest entry of the Python suite: pytest over python/tests against the
# package built into $TW_BUILD_DIR/python (cmake target "python").
# Exit 77 (skip) when the interpreter, pytest, NumPy or the built package is
# missing; PyTorch is optional here (its tests skip), CI installs it.
# pytest's exit status 5 (no test collected) is a failure, not a pass.
set -u
B=${TW_BUILD_DIR:?}
S=${TW_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=${TW_PYTHON:-/usr/bin/python3}
command -v "$PY" >/dev/null 2>&1 || { echo "SKIP: no $PY"; exit 77; }
"$PY" -c "import pytest, numpy" 2>/dev/null || {
    echo "SKIP: $PY lacks pytest or numpy (apt-get install python3-pytest python3-numpy)"
    exit 77
}
[ -f "$B/python/.built" ] || { echo "SKIP: the Python package was not built (no python3-dev?)"; exit 77; }
cd "$S/python/tests" || exit 1  # not python/: its tensorwire/ has no built extension
PYTHONPATH="$B/python" PYTHONDONTWRITEBYTECODE=1 "$PY" -m pytest -q -p no:cacheprovider \
    -o console_output_style=classic . "$@"
rc=$?
[ $rc -eq 5 ] && { echo "FAIL: pytest collected no tests"; exit 1; }
exit $rc
