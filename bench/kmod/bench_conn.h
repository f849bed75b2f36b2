/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the two connection benchmark modules share: their parameters, the
 * results they report and the command interface bench/run drives.
 *
 * Load with n=N addr=IP port=P [window=W timeout_s=T], then write a command
 * to /sys/module/<module>/parameters/cmd; the write returns when the phase is
 * over (or failed) and its wall time is in the read-only parameters:
 *   connect     N clients connect to the module's own listener (loopback),
 *               every request is accepted; done when both sides of all N
 *               are ESTABLISHED (establish_ns)
 *   disconnect  the N clients disconnect; done when both sides of all N
 *               saw DISCONNECTED and every connection object is freed
 *               (teardown_ns; teardown_free_ns of it the frees, after the
 *               last DISCONNECTED)
 *   idle        N endpoints created, not connected (idle_ns)
 *   free        the idle endpoints freed (idle_free_ns)
 * At most `window` connects (or disconnects) are in flight at once.
 */
#ifndef KDAT_BENCH_CONN_H
#define KDAT_BENCH_CONN_H

#include <linux/inet.h>
#include <linux/ktime.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/string.h>
#include <linux/wait.h>

static int n = 100;
module_param(n, int, 0444);
MODULE_PARM_DESC(n, "connections (or idle endpoints) per phase");
static char *addr = "192.0.2.1";
module_param(addr, charp, 0444);
MODULE_PARM_DESC(addr, "local IPv4 address: listener and clients");
static int port = 7471;
module_param(port, int, 0444);
MODULE_PARM_DESC(port, "listener port (connection qualifier)");
static int window = 32;
module_param(window, int, 0444);
MODULE_PARM_DESC(window, "connects or disconnects in flight at once");
static int timeout_s = 600;
module_param(timeout_s, int, 0444);
MODULE_PARM_DESC(timeout_s, "a phase fails after this many seconds");

static unsigned long establish_ns, teardown_ns, idle_ns, idle_free_ns;
module_param(establish_ns, ulong, 0444);
module_param(teardown_ns, ulong, 0444);
static unsigned long teardown_free_ns;
module_param(teardown_free_ns, ulong, 0444);
module_param(idle_ns, ulong, 0444);
module_param(idle_free_ns, ulong, 0444);
static int connected, errors;
module_param(connected, int, 0444);
MODULE_PARM_DESC(connected, "connections established by the last connect");
module_param(errors, int, 0444);
MODULE_PARM_DESC(errors, "unexpected events and failed calls");

/* Each module provides these; they return 0 or a negative errno. */
static int bench_connect(void);
static int bench_disconnect(void);
static int bench_idle(void);
static int bench_free(void);

/* Bumped by event callbacks; the benchmark thread sleeps on it. */
static atomic_t bench_seq = ATOMIC_INIT(0);
static DECLARE_WAIT_QUEUE_HEAD(bench_wq);

static void bench_kick(void)
{
	atomic_inc(&bench_seq);
	wake_up(&bench_wq);
}

/* Sleeps until a callback ran after `seen` was read; false once `deadline` passed. */
static bool bench_wait(int seen, unsigned long deadline)
{
	if (time_after(jiffies, deadline))
		return false;
	wait_event_timeout(bench_wq, atomic_read(&bench_seq) != seen, HZ);
	return true;
}

static int bench_sockaddr(struct sockaddr_in *sin, u16 p)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(p);
	if (!in4_pton(addr, -1, (u8 *)&sin->sin_addr.s_addr, '\0', NULL))
		return -EINVAL;
	return 0;
}

static char bench_status[32] = "none";
static const char * const bench_names[] = { "connect", "disconnect", "idle", "free" };
typedef int (*bench_phase_t)(void);
static const bench_phase_t bench_fns[] = { bench_connect, bench_disconnect, bench_idle,
					   bench_free };

static int bench_cmd_set(const char *val, const struct kernel_param *kp)
{
	unsigned long * const outs[] = { &establish_ns, &teardown_ns, &idle_ns, &idle_free_ns };
	int i = sysfs_match_string(bench_names, val);
	const char * const *names = bench_names;
	u64 t0 = ktime_get_ns();
	int err;

	if (i < 0)
		return -EINVAL;
	err = bench_fns[i]();
	*outs[i] = ktime_get_ns() - t0;
	snprintf(bench_status, sizeof(bench_status), "%s %d", names[i], err);
	/* the line bench/run's logs keep: phase, N, status, wall time */
	pr_info("%s: phase=%s n=%d err=%d ns=%lu errors=%d\n", KBUILD_MODNAME, names[i], n,
		err, *outs[i], errors);
	return err;
}

static int bench_cmd_get(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%s\n", bench_status);
}

static const struct kernel_param_ops bench_cmd_ops = {
	.set = bench_cmd_set,
	.get = bench_cmd_get,
};
module_param_cb(cmd, &bench_cmd_ops, NULL, 0600);
MODULE_PARM_DESC(cmd, "connect | disconnect | idle | free (read: last status)");

static bool bench_params_ok(void)
{
	return n > 0 && n <= 65536 && window > 0 && port > 0 && port < 65536 &&
	       timeout_s > 0;
}

#endif /* KDAT_BENCH_CONN_H */
