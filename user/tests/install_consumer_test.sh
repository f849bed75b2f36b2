#!/bin/sh
# install_consumer_test.sh BUILD_DIR CONSUMER_SRC CXX: install libkdat from BUILD_DIR into a
# temporary prefix, then build and run CONSUMER_SRC against it twice: as a CMake project with
# find_package(kdat), and by hand with pkg-config's flags.
set -eu
build=$1
src=$2
cxx=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(dirname "$(find "$prefix" -name 'libkdat.so.0' | head -n 1)")
test -n "$libdir" || { echo "no libkdat.so.0 installed" >&2; exit 1; }
test -L "$libdir/libkdat.so" || { echo "no libkdat.so development link" >&2; exit 1; }
for h in kdat/kdat.hpp kdat/ep_table.h kdat/uapi/kdat.h kdat/uapi/kdat_dat.h; do
	test -f "$prefix/include/$h" || { echo "header $h not installed" >&2; exit 1; }
done
# Every header in the project's namespace: nothing generic (uapi/, vipl.h) at the top level.
stray=$(find "$prefix/include" -mindepth 1 -maxdepth 1 ! -name kdat)
test -z "$stray" || { echo "installed outside include/kdat/: $stray" >&2; exit 1; }

# The DAT provider (built when libdapl-dev is there) and its dat.conf naming the installed path.
if [ -f "$build/dapl/libdaplkdat.so.2" ]; then
	test -f "$libdir/libdaplkdat.so.2" || { echo "libdaplkdat.so.2 not installed" >&2; exit 1; }
	conf=$prefix/share/kdat/dat.conf
	grep -q "^kdat u2.0 .* $libdir/libdaplkdat.so.2 dapl.2.0 " "$conf" ||
		{ echo "$conf does not name $libdir/libdaplkdat.so.2" >&2; cat "$conf" >&2; exit 1; }
fi

echo "--- find_package(kdat)"
cmake -S "$src" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
cmake --build "$tmp/cmake-build" >/dev/null
LD_LIBRARY_PATH=$libdir "$tmp/cmake-build/consumer"

echo "--- pkg-config kdat"
pcdir=$(dirname "$(find "$prefix" -name kdat.pc | head -n 1)")
export PKG_CONFIG_PATH=$pcdir
pkg-config --exists kdat
# The .pc file leaves the language level to the consumer: C++20 and C++23 both build, and a
# pre-C++20 build stops at the headers' own message instead of deep in <span>.
for std in c++20 c++23; do
	# shellcheck disable=SC2046
	"$cxx" -std=$std -o "$tmp/consumer-pc" "$src/consumer.cpp" $(pkg-config --cflags --libs kdat)
	LD_LIBRARY_PATH=$libdir "$tmp/consumer-pc"
done
pkg-config --cflags kdat | grep -q -- '-std=' && { echo "kdat.pc forces a -std" >&2; exit 1; }
pkg-config --print-requires-private kdat | grep -q '^libibverbs' ||
	{ echo "kdat.pc does not require libibverbs" >&2; exit 1; }
# shellcheck disable=SC2046
if "$cxx" -std=c++17 -c -o /dev/null "$src/consumer.cpp" $(pkg-config --cflags kdat) 2>"$tmp/c17.err"; then
	echo "a C++17 build of a libkdat consumer compiled" >&2; exit 1
fi
grep -q "need C++20 or later" "$tmp/c17.err" || { echo "no clear C++20 message:" >&2; head -5 "$tmp/c17.err" >&2; exit 1; }

echo "--- exported symbols and the installed kdatctl"
# Only the public API: nothing of kdat::detail, every symbol in a KDAT_0 version node.
if nm -DC --defined-only "$libdir/libkdat.so.0" | grep -E '^[0-9a-f]+ [A-Za-z] kdat::detail::'; then
	echo "libkdat exports kdat::detail symbols" >&2; exit 1
fi
nm -D --defined-only --with-symbol-versions "$libdir/libkdat.so.0" |
	grep -Ev '@@KDAT_0(\.[0-9]+)?$' | grep -Ev ' KDAT_0(\.[0-9]+)?$' &&
	{ echo "libkdat exports symbols outside its KDAT_0 nodes" >&2; exit 1; }
# kdatctl finds its libkdat through its RUNPATH, with no LD_LIBRARY_PATH, from wherever it is.
mv "$prefix" "$tmp/moved"
env -u LD_LIBRARY_PATH "$tmp/moved/bin/kdatctl" --help >/dev/null
