#!/bin/sh
# install_test.sh BUILD_DIR SRC_DIR CC: install from BUILD_DIR into a temporary prefix, build the
# C program tests/vipl_connect.c against the installed vipl.h with pkg-config vipl-kdat's flags,
# run it, and check that libvipl-kdat.so exports the VIPL entry points and nothing else.
set -eu
build=$1
src=$2
cc=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
lib=$(find "$prefix" -name 'libvipl-kdat.so.0' | head -n 1)
test -n "$lib" || { echo "no libvipl-kdat.so.0 installed" >&2; exit 1; }
libdir=$(dirname "$lib")
test -L "$libdir/libvipl-kdat.so" || { echo "no libvipl-kdat.so development link" >&2; exit 1; }
test -f "$prefix/include/kdat/vipl/vipl.h" || { echo "vipl.h not installed" >&2; exit 1; }

pcdir=$(dirname "$(find "$prefix" -name vipl-kdat.pc | head -n 1)")
export PKG_CONFIG_PATH=$pcdir
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Werror -pedantic -D_DEFAULT_SOURCE -o "$tmp/vipl_connect" \
	"$src/tests/vipl_connect.c" $(pkg-config --cflags --libs vipl-kdat)
status=0
LD_LIBRARY_PATH=$libdir "$tmp/vipl_connect" 2>"$tmp/err" || status=$?
test "$status" = 2 || { echo "vipl_connect without arguments exited $status, not 2" >&2; exit 1; }
grep -q usage "$tmp/err" || { echo "no usage text" >&2; exit 1; }

# Exported functions: the Vip* calls and the vipl_kdat_* extensions only, in VIPL_KDAT_0.
others=$(nm -D --defined-only "$lib" | awk '$2 == "T" { print $3 }' |
	grep -v -e '^Vip[A-Za-z]*@@VIPL_KDAT_0$' -e '^vipl_kdat_[a-z_]*@@VIPL_KDAT_0$' \
		-e '^_init$' -e '^_fini$' || true)
test -z "$others" || { echo "libvipl-kdat exports more than VIPL: $others" >&2; exit 1; }
nm -D --defined-only "$lib" | grep -q ' T VipConnectRequest@@VIPL_KDAT_0$' ||
	{ echo "no VipConnectRequest@@VIPL_KDAT_0" >&2; exit 1; }
echo "installed VIPL OK"
