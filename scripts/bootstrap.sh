# shellcheck shell=bash
# Sourced by scripts/run, scripts/test and scripts/deploy (not run on its own): makes sure .venv
# exists and holds exactly what uv.lock pins for development (every dependency group of
# pyproject.toml, each file checked against its hash), and that Java is there for the Firestore
# and Pub/Sub emulators.
#
# .venv is synced only when pyproject.toml, uv.lock or the sync's options differ from what the
# stamp .venv/.codedrop-installed records, so a fresh machine installs everything, a changed lock
# installs the difference, and a warm start goes straight on. uv itself is installed first, with
# pip, at the version and hashes uv.lock pins for it. Set PYTHON to choose the interpreter that
# creates the venv (default: python3); CODEDROP_SKIP_JAVA_CHECK=1 skips the Java check
# (scripts/deploy).
#
# CODEDROP_NEEDS, set by the calling script, asks for more:
#   node     Node.js 20+ and the Node packages package-lock.json pins (firebase-tools for the
#            Firebase Auth emulator, the Firebase JS SDK the example landing page serves, the
#            checks of web/), installed with `npm ci --omit=optional` into node_modules when
#            package.json or package-lock.json differ from the stamp
#            node_modules/.codedrop-installed (scripts/run, scripts/test).
#   browser  Chromium for the browser tests: Debian's package, installed with apt-get when it is
#            missing and this runs as root; elsewhere the tests fail with the hint (scripts/test).

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

codedrop_node() {
    local root="$1" stamp wanted major
    stamp="$root/node_modules/.codedrop-installed"
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        echo "bootstrap: Node.js 20 or newer, with npm, is needed (the Firebase Auth emulator," \
            "the landing page); install it from https://nodejs.org/en/download or with your" \
            "package manager" >&2
        return 1
    fi
    major="$(node -p 'process.versions.node.split(".")[0]')" || return 1
    if [ "$major" -lt 20 ]; then
        echo "bootstrap: Node.js $(node --version) is too old; codedrop needs 20 or newer" >&2
        return 1
    fi
    wanted="$(cd "$root" && cksum package.json package-lock.json)" || return 1
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
        echo "bootstrap: installing package-lock.json's Node packages into node_modules" >&2
        # --omit=optional: firebase-tools' optional native module (re2) compiles from source
        # without a network and the Auth emulator does without it. The price: no tool whose
        # binary is an optional package (Biome, TypeScript 7) can be used here.
        (cd "$root" && npm ci --omit=optional --no-audit --no-fund --loglevel=error) || {
            echo "bootstrap: npm ci failed; see above" >&2
            return 1
        }
        echo "$wanted" >"$stamp" || return 1
    fi
}

codedrop_browser() {
    if [ -n "${CODEDROP_CHROMIUM:-}" ] || [ -x /usr/lib/chromium/chromium ] \
        || command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "bootstrap: installing Chromium for the browser tests (apt-get install chromium)" >&2
        if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends chromium >/dev/null; }; then
            echo "bootstrap: installing chromium failed; the browser tests will say how" >&2
        fi
    else
        echo "bootstrap: Chromium is missing; the browser tests need it" \
            "(\`sudo apt-get install chromium\`, or set CODEDROP_CHROMIUM to a Chromium binary)" >&2
    fi
}

codedrop_bootstrap() {
    local root node_pid="" status=0
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)" || return 1
    # The Node packages install while the venv does: both take seconds on a fresh machine.
    case " ${CODEDROP_NEEDS:-} " in *" node "*)
        codedrop_node "$root" &
        node_pid=$!
        ;;
    esac
    codedrop_python "$root" || status=1
    if [ -n "$node_pid" ] && ! wait "$node_pid"; then
        status=1
    fi
    [ "$status" = 0 ] || return 1
    case " ${CODEDROP_NEEDS:-} " in *" browser "*) codedrop_browser ;; esac

    # `command -v` keeps a warm start instant; scripts/localstack and the test suite run the
    # complete check (`java -version`, the Cloud SDK emulators) before they use them.
    if [ "${CODEDROP_SKIP_JAVA_CHECK:-0}" != 1 ] && ! command -v java >/dev/null 2>&1; then
        echo "bootstrap: Java is missing; the Firestore and Pub/Sub emulators need it." >&2
        (cd "$root" && "$root/.venv/bin/python" -m devkit.emulators check) >&2
        return 1
    fi
}

codedrop_python() {
    local root="$1" venv stamp python wanted reason requirement sync_options
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

    # The sync's options are part of the stamp: a venv synced without them is synced again.
    sync_options=(--locked --compile-bytecode)
    wanted="$(cd "$root" && cksum pyproject.toml uv.lock) ${sync_options[*]}" || return 1
    reason=""
    if [ ! -f "$stamp" ]; then
        reason="first install"
    elif [ "$(cat "$stamp")" != "$wanted" ]; then
        reason="pyproject.toml, uv.lock or the sync's options changed"
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
        # --compile-bytecode: every Python process of the stack and the suite (function servers,
        # tools, test workers) then loads the libraries' bytecode instead of compiling them
        # again: where PYTHONDONTWRITEBYTECODE is set nothing else ever writes it, and importing
        # functions/main.py took 2.4 s of CPU instead of 1.2 s.
        (cd "$root" && UV_PROJECT_ENVIRONMENT="$venv" UV_PYTHON_DOWNLOADS=never \
            "$venv/bin/uv" sync "${sync_options[@]}" --quiet) || {
            echo "bootstrap: uv sync failed; see above (after changing dependencies in" \
                "pyproject.toml, run \`.venv/bin/uv lock\` and commit uv.lock)" >&2
            return 1
        }
        echo "$wanted" >"$stamp" || return 1
    fi
}

# A failure ends the calling script; when sourced from an interactive shell, it only returns.
if ! codedrop_bootstrap; then
    unset -f codedrop_bootstrap codedrop_python codedrop_uv_requirement codedrop_node \
        codedrop_browser
    # shellcheck disable=SC2317
    return 1 2>/dev/null || exit 1
fi
unset -f codedrop_bootstrap codedrop_python codedrop_uv_requirement codedrop_node codedrop_browser
