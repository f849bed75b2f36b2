/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note OR BSD-2-Clause */
/*
 * kdat's release version, in one place: kdat.ko's MODULE_VERSION (modinfo,
 * /sys/module/kdat/version), libkdat's CMake project and SONAME version,
 * kdatctl --version and the packages read it from here.
 */
#ifndef KDAT_VERSION_H
#define KDAT_VERSION_H

#define KDAT_VERSION "0.1.0"

#endif
