/*
 * LD_PRELOAD for both sides of dtestx -u: after each "Recv RMR message" line
 * it prints, wait 100 ms before going on.  dtestx posts its UD sends with
 * completions suppressed and, once it has the peer's messages, frees their
 * buffers and its EP without waiting for them; where rxe sends a user QP's
 * posts from a work queue instead of the posting call, that teardown can
 * overtake the sends.  The wait shows what the program sees without the race.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static void after(const char *fmt)
{
	static const char mark[] = "Recv RMR message";
	const struct timespec wait = { .tv_nsec = 100 * 1000 * 1000 };

	if (strncmp(fmt, mark, sizeof(mark) - 1) == 0) {
		fflush(stdout);
		nanosleep(&wait, NULL);
	}
}

int __printf_chk(int flag, const char *fmt, ...)
{
	va_list ap;
	int n;

	(void)flag;
	va_start(ap, fmt);
	n = vprintf(fmt, ap);
	va_end(ap);
	after(fmt);
	return n;
}

int printf(const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vprintf(fmt, ap);
	va_end(ap);
	after(fmt);
	return n;
}
