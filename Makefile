# kdat top-level build.  `make` builds the kernel module (Kbuild, against the guest kernel's headers)
# and the C++ side; `make demo` and `make test` install their own dependencies first.
KVER  ?= $(shell scripts/kver 2>/dev/null)
KDIR  ?= /lib/modules/$(KVER)/build
BUILD ?= $(CURDIR)/build
JOBS  ?= $(shell nproc)

.PHONY: all deps module user bench demo test test-host test-guest test-debug kunit test-kernel debug-modules test-wire guest-shell check-style clean install deb help

all: module user

deps:
	@scripts/deps

# A module that links against kdat's exports (the samples, bench/kmod): Kbuild does not track
# KBUILD_EXTRA_SYMBOLS, so one built against other symbol versions of kdat would stay as it is and
# fail insmod ("Invalid parameters"); it is rebuilt whenever kdat's Module.symvers changes.
define build_against_kdat
	@cmp -s kmod/Module.symvers $(1)/.kdat.symvers || $(MAKE) -s -C $(KDIR) M=$(CURDIR)/$(1) clean
	$(MAKE) -C $(KDIR) M=$(CURDIR)/$(1) W=1 KCFLAGS=-Werror \
		KBUILD_EXTRA_SYMBOLS=$(CURDIR)/kmod/Module.symvers modules
	@cp kmod/Module.symvers $(1)/.kdat.symvers
endef

# W=1 and -Werror: the module builds warning-free or not at all.
module:
	@test -n "$(KVER)" || { echo "no guest kernel headers: run 'make deps'" >&2; exit 1; }
	$(MAKE) -C $(KDIR) M=$(CURDIR)/kmod W=1 KCFLAGS=-Werror modules
	$(call build_against_kdat,kmod/samples)
	$(call build_against_kdat,kmod/blk)

user:
	cmake -S user -B $(BUILD)/user -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(BUILD)/user -j $(JOBS)

# Benchmarks (bench/): built against an installed libkdat (find_package), run in one guest boot,
# reported in bench/results/latest.md.  Not part of 'make test'.
bench-build: all
	$(call build_against_kdat,bench/kmod)
	cmake --install $(BUILD)/user --prefix $(BUILD)/stage >/dev/null
	cmake -S bench -B $(BUILD)/bench -DCMAKE_PREFIX_PATH=$(abspath $(BUILD))/stage -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD)/bench -j $(JOBS)

bench: deps bench-build
	scripts/deps --bench
	rm -rf $(BUILD)/bench-results
	scripts/vm-run --timeout 3600 --results $(BUILD)/bench-results -- bench/run
	bench/report $(BUILD)/bench-results bench/results/latest.md

demo: deps
	@$(MAKE) --no-print-directory all
	scripts/vm-run --results $(BUILD)/demo -- scripts/demo

# Every suite: host unit tests, the guest suite on Debian's kernel, KUnit and the guest suite again
# on the debug kernel (built once, cached; run-tests builds it beside the first two lanes).
# KDAT_DEBUG_LANE=0 skips the debug lane.
KDAT_DEBUG_LANE ?= 1
test: deps
	@$(MAKE) --no-print-directory all
	KDAT_DEBUG_LANE=$(KDAT_DEBUG_LANE) \
		KDAT_DEBUG_BUILD="$(MAKE) --no-print-directory debug-modules" scripts/run-tests

test-host: all
	scripts/run-tests --host-only

# One guest run of pytest; PYTEST_ARGS selects, e.g. PYTEST_ARGS="-k unload".
test-guest: all
	scripts/run-tests --guest-only $(PYTEST_ARGS)

# The debug lane: a kernel with KUnit, KASAN, lockdep and kmemleak, built once and cached
# (scripts/build-test-kernel), and kdat built against it into build/debug/.
test-kernel: deps
	scripts/build-test-kernel

debug-modules: test-kernel
	scripts/build-modules --debug

# KUnit suites in the debug guest; TAP turned into JUnit, any failure or skip fails.
kunit: debug-modules
	scripts/run-tests --kunit-only

# The whole guest suite on the debug kernel; fails on KASAN/lockdep/hung-task/WARNING reports and
# on kmemleak leaks attributed to kdat.
test-debug: debug-modules
	scripts/run-tests --debug-only $(PYTEST_ARGS)

# The two-host lane alone: two guests joined by a virtual wire (scripts/vm-pair), Soft-RoCE and
# soft-iWARP on it, faults injected with tc netem and hard power-offs (tests/wire/).
# KDAT_WIRE_DEBUG=1: both guests on the debug kernel, checked for leaks at the end.
test-wire: all $(if $(filter 1,$(KDAT_WIRE_DEBUG)),debug-modules)
	scripts/run-tests --wire-only $(PYTEST_ARGS)

guest-shell: all
	scripts/vm-run --timeout 86400 -- bash -c 'eval "$$(scripts/rdma-up)"; exec bash -i'

check-style:
	scripts/check-style

# make docs: include/kdat/kdat.h's kernel-doc checked (scripts/check-kernel-doc), then rendered
# as man pages into build/docs/man9: one per function, macro and type, one per DOC: section.
.PHONY: docs
docs:
	scripts/check-kernel-doc --man $(BUILD)/docs/man9

# make install [DESTDIR=...] [PREFIX=/usr/local]: kdat.ko where modprobe finds it
# (/lib/modules/KVER/updates), the udev rule and the sysusers.d entry of its group (the group is
# made too, unless DESTDIR stages), libkdat/libdaplkdat/kdatctl and their headers
# (cmake --install), and for out-of-tree kernel consumers kdat's kernel headers and the
# Module.symvers of this kernel under PREFIX/src/kdat-VERSION (README: "Installing").
PREFIX ?= /usr/local
KDAT_VERSION := $(shell sed -n 's/^\#define KDAT_VERSION "\(.*\)"$$/\1/p' include/kdat/version.h)
KSRCDIR = $(PREFIX)/src/kdat-$(KDAT_VERSION)
UDEVRULESDIR ?= $(shell pkg-config --variable=udevdir udev 2>/dev/null || echo /lib/udev)/rules.d
# where systemd-sysusers looks whatever PREFIX is, as the udev rule goes where udev looks
SYSUSERSDIR ?= $(shell pkg-config --variable=sysusersdir systemd 2>/dev/null || echo /usr/lib/sysusers.d)
install: all
	$(MAKE) -C $(KDIR) M=$(CURDIR)/kmod INSTALL_MOD_PATH=$(DESTDIR) INSTALL_MOD_DIR=updates \
		DEPMOD=true modules_install
	$(MAKE) -C $(KDIR) M=$(CURDIR)/kmod/blk INSTALL_MOD_PATH=$(DESTDIR) INSTALL_MOD_DIR=updates \
		KBUILD_EXTRA_SYMBOLS=$(CURDIR)/kmod/Module.symvers DEPMOD=true modules_install
	install -d $(DESTDIR)$(KSRCDIR)/include/kdat/uapi
	install -m 0644 include/kdat/kdat.h include/kdat/ep_table.h include/kdat/version.h \
		$(DESTDIR)$(KSRCDIR)/include/kdat/
	install -m 0644 include/kdat/uapi/*.h $(DESTDIR)$(KSRCDIR)/include/kdat/uapi/
	install -D -m 0644 kmod/Module.symvers $(DESTDIR)$(KSRCDIR)/$(KVER)/Module.symvers
	install -D -m 0644 scripts/99-kdat.rules $(DESTDIR)$(UDEVRULESDIR)/99-kdat.rules
	install -D -m 0644 scripts/kdat.sysusers $(DESTDIR)$(SYSUSERSDIR)/kdat.conf
	DESTDIR=$(DESTDIR) cmake --install $(BUILD)/user --prefix $(PREFIX)
	@if [ -z "$(DESTDIR)" ]; then depmod -a $(KVER); \
		if command -v systemd-sysusers >/dev/null; then \
			systemd-sysusers $(SYSUSERSDIR)/kdat.conf; \
		elif ! getent group rdma >/dev/null; then groupadd --system rdma; fi; \
		udevadm control --reload 2>/dev/null || true; \
		echo "installed: 'modprobe kdat' loads it (and udev does when an RDMA device appears);"; \
		echo "members of the group rdma may open /dev/kdat ('adduser USER rdma')"; \
	fi

# make deb: Debian packages from this tree (debian/) into build/deb, checked by lintian
# (scripts/make-deb; README: "Packages").
deb: deps
	scripts/make-deb $(BUILD)/deb

help:
	@echo "make              build kdat.ko, libkdat, kdatctl, the DAT provider and VIPL"
	@echo "make demo         install what it needs, then connect two processes through kdat.ko in a guest"
	@echo "make test         install what it needs, then every test (host, guest, KUnit, debug kernel, wire)"
	@echo "make test-host    host tests only;  make test-guest / test-debug / kunit / test-wire: one lane"
	@echo "make bench        benchmarks in a guest (bench/results/latest.md)"
	@echo "make install      [DESTDIR=] [PREFIX=/usr/local]: module, udev rule, libraries, tools, headers"
	@echo "make deb          Debian packages (DKMS module, libraries, provider, tools, dev files) in build/deb"
	@echo "make check-style  checkpatch and clang-format"
	@echo "make docs         the kernel API's kernel-doc, checked, as man pages in build/docs/man9"
	@echo "make clean"

clean:
	-$(MAKE) -C $(KDIR) M=$(CURDIR)/kmod clean
	-$(MAKE) -C $(KDIR) M=$(CURDIR)/kmod/samples clean
	-$(MAKE) -C $(KDIR) M=$(CURDIR)/kmod/blk clean
	-$(MAKE) -C $(KDIR) M=$(CURDIR)/bench/kmod clean
	rm -rf $(BUILD)
