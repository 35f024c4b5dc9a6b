# shellcheck shell=bash
# Sourced by scripts/run and scripts/test (not run on its own): makes sure .venv exists and holds
# requirements-dev.txt, and that Java is there for the Firestore and Pub/Sub emulators.
#
# The packages are (re)installed only when requirements-dev.txt or requirements.txt is newer than
# the stamp .venv/.codedrop-installed, so a fresh machine installs everything and a warm one goes
# straight on. Set PYTHON to choose the interpreter that creates the venv (default: python3).

codedrop_bootstrap() {
    local root venv stamp python reason
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

    reason=""
    if [ ! -f "$stamp" ]; then
        reason="first install"
    elif [ "$root/requirements-dev.txt" -nt "$stamp" ]; then
        reason="requirements-dev.txt changed"
    elif [ "$root/requirements.txt" -nt "$stamp" ]; then
        reason="requirements.txt changed"
    fi
    if [ -n "$reason" ]; then
        echo "bootstrap: installing requirements-dev.txt into .venv ($reason)" >&2
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            -r "$root/requirements-dev.txt" || {
            echo "bootstrap: pip install failed; see the output above" >&2
            return 1
        }
        touch "$stamp" || return 1
    fi

    # `command -v` keeps a warm start instant; scripts/local_stack.py and the test suite run
    # the complete check (`java -version`, the Cloud SDK emulators) before they use them.
    if ! command -v java >/dev/null 2>&1; then
        echo "bootstrap: Java is missing; the Firestore and Pub/Sub emulators need it." >&2
        (cd "$root" && "$venv/bin/python" -m emulator check) >&2
        return 1
    fi
}

# A failure ends the calling script; when sourced from an interactive shell, it only returns.
if ! codedrop_bootstrap; then
    unset -f codedrop_bootstrap
    # shellcheck disable=SC2317
    return 1 2>/dev/null || exit 1
fi
unset -f codedrop_bootstrap
