#!/usr/bin/env bash
# A newcomer's first session with the kit, scripted (issue 11): clone this repository into a temp
# dir, install it as the README says, run `fd-conformance run`, run it again and SIGTERM it midway
# (exit 143, certificate marked INTERRUPTED, temp dir gone), then `fd-conformance report` on the
# interrupted run's results.jsonl (exit 3, the same row verdicts) and on the finished one's (exit 0).
#
#   bash scripts/newcomer.sh
#   FD_NEWCOMER_SKIP_INSTALL=1 bash scripts/newcomer.sh   # the kit's requirements are installed already:
#                                                          # use the clone through PYTHONPATH, install nothing
# FD_NEWCOMER_REPO=URL_OR_PATH clones another copy (default: this checkout's committed HEAD).
# FD_NEWCOMER_KEEP=1 keeps the temp dir for inspection. Exit 0 when every step behaved as documented.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repo="${FD_NEWCOMER_REPO:-$here}"
work="$(mktemp -d "${TMPDIR:-/tmp}/fd-newcomer-XXXXXX")"
cleanup() { if [ "${FD_NEWCOMER_KEEP:-0}" = 1 ]; then echo "newcomer: kept $work"; else rm -rf "$work"; fi; }
trap cleanup EXIT
step() { printf '\n== newcomer: %s\n' "$*"; }
fail() { echo "newcomer: FAILED: $*" >&2; exit 1; }

step "clone $repo"
git clone -q "$repo" "$work/fd-conformance"
cd "$work/fd-conformance"

if [ "${FD_NEWCOMER_SKIP_INSTALL:-0}" = 1 ]; then
    step "install skipped (FD_NEWCOMER_SKIP_INSTALL=1): the clone on PYTHONPATH"
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    python=python
    fdc=(python -m fd_conformance.cli)
else
    # The README's two commands, in a venv of our own. --system-site-packages: a machine that
    # already holds the torch/paddle wheels reuses them instead of downloading gigabytes again.
    step "install as the README says, into $work/venv"
    python -m venv --system-site-packages "$work/venv"
    python="$work/venv/bin/python"
    "$python" -m pip install -q torch==2.13.0
    "$python" -m pip install -q -e ".[dev,torch,paddle]"
    fdc=("$work/venv/bin/fd-conformance")
fi
"$python" -c "import fd_conformance, sys; sys.exit(0 if fd_conformance.__file__.startswith('$work') else 'not the clone: ' + fd_conformance.__file__)"

verdicts() {  # the (case, device) -> verdict rows of a conformance.json, one per line
    "$python" -c 'import json, sys; d = json.load(open(sys.argv[1])); [print(c["name"], c["device"], c["verdict"]) for c in d["cases"]]' "$1"
}

step "fd-conformance run (the bundled reference models)"
set +e
"${fdc[@]}" run --out "$work/first"
rc=$?
set -e
[ "$rc" = 0 ] || fail "fd-conformance run exited $rc, expected 0"
grep -q '\*\*PASS\*\*' "$work/first/certificate.md" || fail "certificate of the first run is not PASS"
[ -s "$work/first/results.jsonl" ] || fail "no results.jsonl in --out"

step "fd-conformance run again, SIGTERM once three checks have finished"
mkdir "$work/tmp"  # the run's own TMPDIR: its fd-conformance-run-* dir must be gone afterwards
TMPDIR="$work/tmp" "${fdc[@]}" run --out "$work/second" > "$work/second.out" 2> "$work/second.err" &
pid=$!
for _ in $(seq 1 1200); do
    done_checks=$(grep -c '"outcome"' "$work/second/results.jsonl" 2>/dev/null || true)
    [ "${done_checks:-0}" -ge 3 ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.25
done
kill -0 "$pid" 2>/dev/null || fail "the second run ended before it could be interrupted"
kill -TERM "$pid"
set +e
wait "$pid"
rc=$?
set -e
cat "$work/second.out"
cat "$work/second.err" >&2
[ "$rc" = 143 ] || fail "the interrupted run exited $rc, expected 143"
grep -q 'Traceback' "$work/second.err" && fail "the interrupted run printed a traceback"
grep -q 'INTERRUPTED' "$work/second/certificate.md" || fail "certificate of the interrupted run is not marked INTERRUPTED"
grep -q 'INTERRUPTED (SIGTERM)' "$work/second.out" || fail "the interrupted run's verdict line does not say INTERRUPTED (SIGTERM)"
leftover=$(ls -d "$work"/tmp/fd-conformance-run-* 2>/dev/null || true)
[ -z "$leftover" ] || fail "the interrupted run left its temp dir behind: $leftover"

step "fd-conformance report on the interrupted run's results.jsonl"
set +e
"${fdc[@]}" report "$work/second/results.jsonl" --out "$work/rebuilt"
rc=$?
set -e
[ "$rc" = 3 ] || fail "report on the interrupted results exited $rc, expected 3 (incomplete)"
[ "$(verdicts "$work/rebuilt/conformance.json")" = "$(verdicts "$work/second/conformance.json")" ] \
    || fail "report's verdicts differ from the interrupted run's"
verdicts "$work/rebuilt/conformance.json" | grep -q ' incomplete$' || fail "no row of the interrupted run is incomplete"

step "fd-conformance report on the finished run's results.jsonl"
set +e
"${fdc[@]}" report -q "$work/first/results.jsonl" --out "$work/rebuilt-first"
rc=$?
set -e
[ "$rc" = 0 ] || fail "report on the finished results exited $rc, expected 0"
[ "$(verdicts "$work/rebuilt-first/conformance.json")" = "$(verdicts "$work/first/conformance.json")" ] \
    || fail "report's verdicts differ from the finished run's"

echo
echo "newcomer: OK (run 0, interrupted run 143 + INTERRUPTED, report 3 and 0 with the runs' verdicts)"
