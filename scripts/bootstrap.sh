# shellcheck shell=bash
# Sourced by scripts/run, scripts/test and scripts/deploy (not run on its own): makes sure .venv
# exists and holds exactly what uv.lock pins for development (every dependency group of
# pyproject.toml, each file checked against its hash), and that Java is there for the Firestore
# and Pub/Sub emulators.
#
# .venv is synced only when pyproject.toml or uv.lock differ from the checksums recorded in the
# stamp .venv/.codedrop-installed, so a fresh machine installs everything, a changed lock installs
# the difference, and a warm start goes straight on. uv itself is installed first, with pip, at
# the version and hashes uv.lock pins for it. Set PYTHON to choose the interpreter that creates
# the venv (default: python3); CODEDROP_SKIP_JAVA_CHECK=1 skips the Java check (scripts/deploy).

# Prints the requirement (uv==VERSION --hash=...) that uv.lock pins for uv, or nothing when .venv
# already holds that version.
codedrop_uv_requirement() {
    "$1/bin/python" - "$2" <<'EOF'
import sys
import tomllib
from importlib import metadata

with open(sys.argv[1], "rb") as lock:
    (uv,) = [package for package in tomllib.load(lock)["package"] if package["name"] == "uv"]
try:
    if metadata.version("uv") == uv["version"]:
        sys.exit(0)
except metadata.PackageNotFoundError:
    pass
print(f"uv=={uv['version']}", *(f"--hash={wheel['hash']}" for wheel in uv["wheels"]))
EOF
}

codedrop_bootstrap() {
    local root venv stamp python wanted reason requirement
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)" || return 1
    venv="$root/.venv"
    stamp="$venv/.codedrop-installed"
    python="${PYTHON:-python3}"

    if [ ! -x "$venv/bin/python" ]; then
        if ! command -v "$python" >/dev/null 2>&1; then
            echo "bootstrap: $python not found; install Python 3.11 or newer" >&2
            return 1
        fi
        if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
            echo "bootstrap: $("$python" --version 2>&1) is too old; codedrop needs Python" \
                ">= 3.11 (set PYTHON=/path/to/python3.11 to pick another one)" >&2
            return 1
        fi
        echo "bootstrap: creating $venv" >&2
        "$python" -m venv "$venv" || return 1
    elif ! "$venv/bin/python" -c '' >/dev/null 2>&1; then
        echo "bootstrap: $venv is broken (its interpreter does not run);" \
            "remove it with \`rm -rf .venv\` and run this again" >&2
        return 1
    fi

    wanted="$(cd "$root" && cksum pyproject.toml uv.lock)" || return 1
    reason=""
    if [ ! -f "$stamp" ]; then
        reason="first install"
    elif [ "$(cat "$stamp")" != "$wanted" ]; then
        reason="pyproject.toml or uv.lock changed"
    fi
    if [ -n "$reason" ]; then
        echo "bootstrap: installing uv.lock's development set into .venv ($reason)" >&2
        requirement="$(codedrop_uv_requirement "$venv" "$root/uv.lock")" || {
            echo "bootstrap: uv.lock pins no uv (pyproject.toml's dev group must hold it)" >&2
            return 1
        }
        if [ -n "$requirement" ]; then
            echo "$requirement" >"$venv/.uv-requirement.txt" || return 1
            "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
                --require-hashes --only-binary=:all: -r "$venv/.uv-requirement.txt" || {
                echo "bootstrap: installing ${requirement%% *} with pip failed; see above" >&2
                return 1
            }
        fi
        # --locked: install the lock as committed, and stop if pyproject.toml no longer matches
        # it. The sync is exact: packages the lock does not hold are removed.
        (cd "$root" && UV_PROJECT_ENVIRONMENT="$venv" UV_PYTHON_DOWNLOADS=never \
            "$venv/bin/uv" sync --locked --quiet) || {
            echo "bootstrap: uv sync failed; see above (after changing dependencies in" \
                "pyproject.toml, run \`.venv/bin/uv lock\` and commit uv.lock)" >&2
            return 1
        }
        echo "$wanted" >"$stamp" || return 1
    fi

    # `command -v` keeps a warm start instant; scripts/localstack and the test suite run the
    # complete check (`java -version`, the Cloud SDK emulators) before they use them.
    if [ "${CODEDROP_SKIP_JAVA_CHECK:-0}" != 1 ] && ! command -v java >/dev/null 2>&1; then
        echo "bootstrap: Java is missing; the Firestore and Pub/Sub emulators need it." >&2
        (cd "$root" && "$venv/bin/python" -m emulator check) >&2
        return 1
    fi
}

# A failure ends the calling script; when sourced from an interactive shell, it only returns.
if ! codedrop_bootstrap; then
    unset -f codedrop_bootstrap codedrop_uv_requirement
    # shellcheck disable=SC2317
    return 1 2>/dev/null || exit 1
fi
unset -f codedrop_bootstrap codedrop_uv_requirement
