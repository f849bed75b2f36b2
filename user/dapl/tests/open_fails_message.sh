#!/bin/sh
# open_fails_message.sh PROVIDER_CHECK NAME TYPE TEXT: dat_ia_open of the dat.conf entry NAME
# fails with TYPE twice in one process (provider_check --open-fails), and the provider says why
# on stderr: a reason no program can work past (NAME's device node missing, not kdat's, or not
# ours to open) once, carrying TEXT (libkdat's advice), with or without DAPL_KDAT_DEBUG; every
# failed call's reason only with DAPL_KDAT_DEBUG=1.
set -eu
check=$1 name=$2 type=$3 text=$4
err=$(mktemp)
trap 'rm -f "$err"' EXIT

run() {
	# A node only root could open: run as nobody, as root opens anything.
	if [ "$name" = kdat-noperm ] && [ "$(id -u)" = 0 ]; then
		setpriv --reuid=65534 --regid=65534 --clear-groups "$@"
	else
		"$@"
	fi
}
count() { grep -c -F -- "$1" "$err" || true; }
fail() {
	echo "FAIL: $*" >&2
	sed 's/^/  stderr: /' "$err" >&2
	exit 1
}

for debug in 0 1; do
	DAPL_KDAT_DEBUG=$debug run "$check" --open-fails "$name" "$type" >/dev/null 2>"$err" ||
		fail "provider_check --open-fails $name $type (DAPL_KDAT_DEBUG=$debug)"
	[ "$(count 'libdaplkdat: no IA can be opened: ')" = 1 ] ||
		fail "the fatal reason is not said exactly once (DAPL_KDAT_DEBUG=$debug)"
	grep -q -F -- "$text" "$err" || fail "no '$text' (DAPL_KDAT_DEBUG=$debug)"
	grep -q -F -- "DAT_$type" "$err" || fail "the DAT type is not named (DAPL_KDAT_DEBUG=$debug)"
	# each failed call's reason: only when asked, and then for both calls
	want=$((debug * 2))
	[ "$(grep -c -E '^libdaplkdat: ia_open[: ]' "$err" || true)" = "$want" ] ||
		fail "not $want per-call reasons with DAPL_KDAT_DEBUG=$debug"
done
echo "$name: the reason is said once, with its advice"
