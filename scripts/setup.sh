#!/bin/sh
# `make setup`: the system packages the tests use, then pgfleet with its dev, embedded and
# web extras. It says what it installs, where, and why; run as a user who is not root it
# installs no system package and prints the command to run instead.
#   sh scripts/setup.sh            both parts
#   sh scripts/setup.sh system     the system packages only
#   sh scripts/setup.sh python     the Python package only
# PYTHON picks the interpreter (python3); PGFLEET_SETUP_EXTRAS the extras (dev,embedded,web).
# PGFLEET_SETUP_ROOT prefixes the system paths looked at (the tests point it elsewhere).
set -eu

PYTHON=${PYTHON:-python3}
EXTRAS=${PGFLEET_SETUP_EXTRAS-dev,embedded,web}
ROOT=${PGFLEET_SETUP_ROOT:-}
VENV=.venv
part=${1:-all}

say() { printf 'make setup: %s\n' "$*"; }

# A program on PATH or in the system directories under ROOT.
have_program() {
    command -v "$1" >/dev/null 2>&1 || [ -x "$ROOT/usr/bin/$1" ] || [ -x "$ROOT/usr/sbin/$1" ]
}

have_prometheus() { have_program prometheus && have_program promtool; }

have_file_glob() {
    for found in $1; do
        [ -e "$found" ] && return 0
    done
    return 1
}

missing=""
check() {  # PACKAGE PRESENT? WHY
    if [ "$2" = yes ]; then
        say "$1: present ($3)"
    else
        say "$1: missing: $3"
        missing="$missing $1"
    fi
}

yes_if() { if "$@"; then echo yes; else echo no; fi; }

system_packages() {
    check prometheus "$(yes_if have_prometheus)" \
        "prometheus and promtool check the alert rules and scrape a real run for the dashboard tests"
    check pgbouncer "$(yes_if have_program pgbouncer)" \
        "the tests behind a transaction pooler start their own PgBouncer"
    check faketime "$(yes_if have_file_glob "$ROOT/usr/lib/*/faketime/libfaketime.so.1")" \
        "libfaketime moves a worker's wall clock in the clock-jump tests"
    check chromium "$(yes_if have_program chromium)" \
        "the web UI's browser tests drive Debian's chromium through Playwright"
    check patroni "$(yes_if have_program patroni)" \
        "the failover tests run a real Patroni cluster (tests/ha)"
    check etcd-server "$(yes_if have_program etcd)" \
        "Patroni's store in the failover tests"
    check etcd-client "$(yes_if have_program etcdctl)" \
        "etcdctl, which the failover tests use to end a primary's leadership"
    if [ -z "$missing" ]; then
        say "every system package the tests use is present"
        return 0
    fi
    set -- $missing
    after=""
    case " $missing " in *" pgbouncer "*) after=" && sudo make pgbouncer-service-off" ;; esac
    case " $missing " in *" etcd-server "*) after="$after && sudo make etcd-service-off" ;; esac
    if [ "$(id -u)" != 0 ]; then
        say "not root, so no system package is installed. To install them, run:"
        say "  sudo apt-get install -y $*$after"
        say "then make setup again. Without them the tests that use them fail."
        return 0
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        say "no apt-get here: install $* with this system's package manager."
        return 0
    fi
    say "installing with apt-get: $*"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
    case " $missing " in
        *" pgbouncer "*)
            # Debian's package enables a system PgBouncer on port 6432; the tests run their own.
            say "pgbouncer: turning off the system service the package enabled"
            make --no-print-directory pgbouncer-service-off ;;
    esac
    case " $missing " in
        *" etcd-server "*)
            # Likewise a system etcd on port 2379; the failover tests run their own.
            say "etcd-server: turning off the system service the package enabled"
            make --no-print-directory etcd-service-off ;;
    esac
}

# pip refuses to install into a Python that its distribution manages (PEP 668, Debian's
# "externally-managed-environment"), outside a virtual environment.
externally_managed() {
    "$PYTHON" -c 'import os, sys, sysconfig
managed = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
sys.exit(0 if sys.prefix == sys.base_prefix and os.path.exists(managed) else 1)'
}

python_package() {
    if ! command -v "$PYTHON" >/dev/null 2>&1; then
        say "no $PYTHON on PATH: install Python 3.11 or later (Debian: apt-get install python3)"
        exit 1
    fi
    target=$PYTHON
    if [ -x "$VENV/bin/python" ]; then
        target=$VENV/bin/python
        say "python: into the virtual environment $(pwd)/$VENV (made by an earlier make setup)"
    elif externally_managed; then
        say "python: $PYTHON is managed by the system (PEP 668), so pip would refuse to install"
        say "  into it; making a virtual environment of its own: $(pwd)/$VENV"
        if ! "$PYTHON" -m venv "$VENV"; then
            rm -rf "$VENV"
            say "$PYTHON -m venv failed: install python3-venv (apt-get install python3-venv)"
            exit 1
        fi
        target=$VENV/bin/python
    else
        say "python: into $("$PYTHON" -c 'import sys; print(sys.prefix)') ($PYTHON is not"
        say "  managed by the system, so pip installs there)"
    fi
    spec=.
    [ -n "$EXTRAS" ] && spec=".[$EXTRAS]"
    say "pip install -e '$spec' with $target"
    "$target" -m pip install -q -e "$spec"
    if [ "$target" = "$VENV/bin/python" ]; then
        say "done. make test uses $VENV by itself; in a shell: . $VENV/bin/activate"
    else
        say "done."
    fi
}

case $part in
    all) system_packages; python_package ;;
    system) system_packages ;;
    python) python_package ;;
    *) say "unknown part '$part': expected system or python"; exit 2 ;;
esac
