/*
 * provider_check: drives a DAT provider through libdat2 (the registry) as a uDAPL consumer does,
 * and checks the answers: connection management in one process (PSP, RSP, provider PSP, accept,
 * reject, dup_connect, disconnect) and the error paths (bad, stale and wrong-type handles, bad
 * parameters, state errors) and the data path over a connected pair (send/recv, RDMA write and
 * read checked byte for byte, flushed receives before DISCONNECTED on a shared EVD), and the IB
 * extensions (RDMA write with immediate data, compare-and-swap and fetch-and-add with the
 * values checked exactly, the posts refused, counters, open query).  Run by
 * tests/guest/test_dapl_provider.py:
 *
 *   DAT_OVERRIDE=build/user/dapl/dat.conf provider_check PROVIDER IP PORT
 *   DAT_OVERRIDE=... provider_check --open-fails NAME TYPE     (host tests: no kdat.ko)
 *   DAT_OVERRIDE=... provider_check --free-connected PROVIDER IP PORT   (any provider)
 *
 * Prints one line per check ("ok ..." / "FAIL ...") and "checks: N failed: M"; exits 0 only if
 * every check passed.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
/* (after the socket types) */
#include <dat2/udat.h>
/* (after udat.h) */
#include <dat2/dat_ib_extensions.h>
#include <dat2/dat_registry.h> /* the provider table's redirection macros */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int checks, failures;

static const char *name_of(DAT_RETURN r) {
  const char *major = "?", *minor = "";
  dat_strerror(r, &major, &minor);
  return major;
}

/* The return's type must be `want` (DAT_SUCCESS, DAT_INVALID_HANDLE, ...). */
static int expect(const char *what, DAT_RETURN got, DAT_RETURN want) {
  ++checks;
  if (DAT_GET_TYPE(got) == DAT_GET_TYPE(want)) {
    printf("ok   %-58s %s\n", what, name_of(got));
    return 1;
  }
  ++failures;
  printf("FAIL %-58s got %s (0x%x), want %s\n", what, name_of(got), got, name_of(want));
  return 0;
}

static int truth(const char *what, int ok) {
  ++checks;
  if (!ok) ++failures;
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  return ok;
}

#define WAIT_US 10000000u /* 10 s: nothing here may hang */

/* Waits for the next event on evd; returns its number (0 on error). */
static DAT_EVENT_NUMBER next_event(DAT_EVD_HANDLE evd, DAT_EVENT *event) {
  DAT_COUNT nmore = 0;
  DAT_RETURN r = dat_evd_wait(evd, WAIT_US, 1, event, &nmore);
  if (r != DAT_SUCCESS) {
    printf("     (evd_wait: %s)\n", name_of(r));
    return (DAT_EVENT_NUMBER)0;
  }
  return event->event_number;
}

/* provider_check --open-fails NAME TYPE: dat_ia_open(NAME) must fail with TYPE
 * (PROVIDER_NOT_FOUND, INVALID_PARAMETER or PRIVILEGES_VIOLATION).  Host tests use it without
 * kdat.ko. */
static int open_fails(char *name, const char *type) {
  DAT_RETURN want = strcmp(type, "INVALID_PARAMETER") == 0      ? DAT_INVALID_PARAMETER
                    : strcmp(type, "PRIVILEGES_VIOLATION") == 0 ? DAT_PRIVILEGES_VIOLATION
                                                                : DAT_PROVIDER_NOT_FOUND;
  DAT_IA_HANDLE ia = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
  DAT_RETURN r = dat_ia_open(name, 8, &async, &ia);
  expect("ia_open fails cleanly", r, want);
  /* the registry's own "not found" carries DAT_NAME_NOT_REGISTERED; the provider's has none */
  truth("the provider answered (the registry loaded it)", r == (DAT_CLASS_ERROR | want));
  truth("no IA and no async EVD handed out", ia == DAT_HANDLE_NULL && async == DAT_HANDLE_NULL);
  /* again: the same answer (and the provider's stderr says a fatal reason only once) */
  expect("ia_open fails the same the second time", dat_ia_open(name, 8, &async, &ia), want);
  printf("checks: %d failed: %d\n", checks, failures);
  return failures == 0 ? 0 : 1;
}

/* A thread in evd_wait; it retries while the main thread's probe holds the EVD. */
struct waiter {
  DAT_EVD_HANDLE evd;
  DAT_RETURN result;
  DAT_EVENT event;
};

static int is_waiter_busy(DAT_RETURN r) {
  return DAT_GET_TYPE(r) == DAT_INVALID_STATE &&
         (r & DAT_SUBTYPE_MASK) == DAT_INVALID_STATE_EVD_WAITER;
}

static void *wait_thread(void *arg) {
  struct waiter *w = arg;
  DAT_COUNT nmore;
  do {
    w->result = dat_evd_wait(w->evd, WAIT_US, 1, &w->event, &nmore);
  } while (is_waiter_busy(w->result));
  return NULL;
}

/* Starts a waiter on evd and returns once it is the EVD's waiter (a probe wait is refused).
 * A probe that was not refused held the waiter's place for its 1 ms: the probing then pauses
 * 2 ms, so that the thread (retrying while refused) finds the place free even on a busy CPU. */
static int start_waiter(pthread_t *thread, struct waiter *w, DAT_EVD_HANDLE evd) {
  const struct timespec pause = {0, 2 * 1000 * 1000};
  DAT_EVENT ev;
  DAT_COUNT nmore;
  memset(w, 0, sizeof(*w));
  w->evd = evd;
  if (pthread_create(thread, NULL, wait_thread, w) != 0) return 0;
  for (int i = 0; i < 2000; ++i) {
    if (is_waiter_busy(dat_evd_wait(evd, 1000, 1, &ev, &nmore))) return 1;
    nanosleep(&pause, NULL);
  }
  return 0;
}

static void threads(DAT_IA_HANDLE ia) {
  DAT_EVD_HANDLE evd = DAT_HANDLE_NULL;
  pthread_t thread;
  struct waiter w;
  DAT_EVENT se;
  expect("evd_create (threads)",
         dat_evd_create(ia, 8, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG | DAT_EVD_DTO_FLAG, &evd),
         DAT_SUCCESS);
  if (!truth("a second thread waits on the EVD", start_waiter(&thread, &w, evd))) return;
  expect("evd_free while another thread waits", dat_evd_free(evd), DAT_INVALID_STATE);
  memset(&se, 0, sizeof(se));
  se.event_number = DAT_SOFTWARE_EVENT;
  se.event_data.software_event_data.pointer = &w;
  expect("evd_post_se wakes the waiting thread", dat_evd_post_se(evd, &se), DAT_SUCCESS);
  pthread_join(thread, NULL);
  truth("the waiter got the software event",
        w.result == DAT_SUCCESS && w.event.event_number == DAT_SOFTWARE_EVENT &&
            w.event.event_data.software_event_data.pointer == &w);
  if (truth("another waiter", start_waiter(&thread, &w, evd))) {
    expect("evd_set_unwaitable", dat_evd_set_unwaitable(evd), DAT_SUCCESS);
    pthread_join(thread, NULL);
    expect("set_unwaitable ends the wait", w.result, DAT_INVALID_STATE);
    expect("evd_wait on an unwaitable EVD", dat_evd_wait(evd, 1000, 1, &se, NULL),
           DAT_INVALID_STATE);
    expect("evd_clear_unwaitable", dat_evd_clear_unwaitable(evd), DAT_SUCCESS);
  }
  expect("evd_free (threads)", dat_evd_free(evd), DAT_SUCCESS);
}

/* Waits for a DTO completion on evd and checks cookie, length and status. */
static int dto_done(const char *what, DAT_EVD_HANDLE evd, uint64_t cookie, DAT_VLEN length,
                    DAT_DTO_COMPLETION_STATUS status) {
  DAT_EVENT ev;
  DAT_EVENT_NUMBER n = next_event(evd, &ev);
  const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
  char line[160];
  snprintf(line, sizeof(line), "%s: DTO completion, cookie 0x%llx, length %llu, status %d", what,
           (unsigned long long)cookie, (unsigned long long)length, (int)status);
  int ok = n == DAT_DTO_COMPLETION_EVENT && d->user_cookie.as_64 == cookie && d->status == status &&
           (length == (DAT_VLEN)-1 || d->transfered_length == length);
  if (!ok)
    printf("     (event 0x%x cookie 0x%llx length %llu status %d)\n", n,
           (unsigned long long)d->user_cookie.as_64, (unsigned long long)d->transfered_length,
           (int)d->status);
  return truth(line, ok);
}

static DAT_LMR_TRIPLET triplet(DAT_LMR_CONTEXT ctx, const void *at, DAT_VLEN len) {
  DAT_LMR_TRIPLET t;
  t.lmr_context = ctx;
  t.virtual_address = (DAT_VADDR)(uintptr_t)at;
  t.segment_length = len;
  return t;
}

/* The data path between two EPs of this process: the client's DTOs complete on its own EVDs, the
 * server's receive EVD is also its connect EVD (flushes before DISCONNECTED,
 * dat_ep_disconnect(3DAT)). */
/* An EP made with max_rdma_read_out 0 cannot have an RDMA read outstanding: posting one is
 * refused (DAT_INSUFFICIENT_RESOURCES) instead of being accepted and never completing. */
static void rdma_read_out_zero(DAT_IA_HANDLE ia, DAT_IA_ADDRESS_PTR addr, DAT_CONN_QUAL port,
                               DAT_PZ_HANDLE pz, DAT_EVD_HANDLE cr_evd, DAT_LMR_CONTEXT c_l,
                               DAT_RMR_CONTEXT s_r, char *cbuf, char *sbuf) {
  DAT_EVD_HANDLE conn = DAT_HANDLE_NULL, dto = DAT_HANDLE_NULL;
  DAT_EP_HANDLE c = DAT_HANDLE_NULL, s = DAT_HANDLE_NULL;
  DAT_EP_ATTR attr;
  DAT_EVENT ev;
  DAT_LMR_TRIPLET iov;
  DAT_RMR_TRIPLET rmr;
  DAT_DTO_COOKIE ck;
  int established = 0;

  dat_evd_create(ia, 16, NULL, DAT_EVD_CONNECTION_FLAG, &conn);
  dat_evd_create(ia, 16, NULL, DAT_EVD_DTO_FLAG, &dto);
  memset(&attr, 0, sizeof(attr));
  attr.service_type = DAT_SERVICE_TYPE_RC;
  attr.qos = DAT_QOS_BEST_EFFORT;
  attr.max_recv_dtos = attr.max_request_dtos = 4;
  attr.max_recv_iov = attr.max_request_iov = 1;
  attr.max_rdma_read_in = 4;
  attr.max_rdma_read_out = 0;
  expect("rd0: ep_create with max_rdma_read_out 0",
         dat_ep_create(ia, pz, dto, dto, conn, &attr, &c), DAT_SUCCESS);
  expect("rd0: ep_create (server)", dat_ep_create(ia, pz, dto, dto, conn, NULL, &s), DAT_SUCCESS);
  expect("rd0: ep_connect",
         dat_ep_connect(c, addr, port, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT,
                        DAT_CONNECT_DEFAULT_FLAG),
         DAT_SUCCESS);
  if (next_event(cr_evd, &ev) == DAT_CONNECTION_REQUEST_EVENT)
    dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, s, 0, NULL);
  for (int i = 0; i < 2; ++i)
    established += next_event(conn, &ev) == DAT_CONNECTION_EVENT_ESTABLISHED;
  if (truth("rd0: both EPs ESTABLISHED", established == 2)) {
    iov = triplet(c_l, cbuf + 6000, 64);
    rmr.rmr_context = s_r;
    rmr.virtual_address = (DAT_VADDR)(uintptr_t)(sbuf + 6000);
    rmr.segment_length = 64;
    ck.as_64 = 0x60;
    expect("rd0: post_rdma_read with max_rdma_read_out 0",
           dat_ep_post_rdma_read(c, 1, &iov, ck, &rmr, DAT_COMPLETION_DEFAULT_FLAG),
           DAT_INSUFFICIENT_RESOURCES);
    {
      /* atomics take the same initiator resources as RDMA reads */
      DAT_LMR_TRIPLET one = triplet(c_l, cbuf + 6000, 8);
      expect("rd0: fetch_and_add with max_rdma_read_out 0",
             dat_ib_post_fetch_and_add(c, 1, &one, ck, &rmr, DAT_COMPLETION_DEFAULT_FLAG),
             DAT_INSUFFICIENT_RESOURCES);
    }
    expect("rd0: post_rdma_write still works",
           dat_ep_post_rdma_write(c, 1, &iov, ck, &rmr, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
    dto_done("rd0: rdma write", dto, 0x60, 64, DAT_DTO_SUCCESS);
  }
  if (established > 0) {
    int disconnected = 0;
    dat_ep_disconnect(c, DAT_CLOSE_ABRUPT_FLAG);
    for (int i = 0; i < established; ++i)
      disconnected += next_event(conn, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED;
    truth("rd0: DISCONNECTED", disconnected == established);
  }
  expect("rd0: ep_free (client)", dat_ep_free(c), DAT_SUCCESS);
  expect("rd0: ep_free (server)", dat_ep_free(s), DAT_SUCCESS);
  dat_evd_free(dto);
  dat_evd_free(conn);
}

/* Many receives outstanding when the peer ends the connection: the device flushes them one by one
 * after the QP enters ERR, some only after the DISCONNECTED is taken from the kernel -- all of them
 * still come first on a shared EVD, in the order they were posted (dat_ep_disconnect(3DAT) puts
 * "all successful Completion events of in-progress DTOs" first; kdat puts flushed ones first too).
 */
#define FLUSH_MANY 48
/* Connects c to the PSP on port, accepts with s: true if both EPs report ESTABLISHED (checked
 * under the prefix `tag`). */
static int connect_pair(const char *tag, DAT_EP_HANDLE c, DAT_EP_HANDLE s, DAT_IA_ADDRESS_PTR addr,
                        DAT_CONN_QUAL port, DAT_EVD_HANDLE cr_evd, DAT_EVD_HANDLE c_conn,
                        DAT_EVD_HANDLE s_conn) {
  char what[64];
  DAT_EVENT ev;
  int established = 0;

  snprintf(what, sizeof(what), "%s: ep_connect", tag);
  expect(what,
         dat_ep_connect(c, addr, port, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT,
                        DAT_CONNECT_DEFAULT_FLAG),
         DAT_SUCCESS);
  if (next_event(cr_evd, &ev) == DAT_CONNECTION_REQUEST_EVENT)
    dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, s, 0, NULL);
  established += next_event(c_conn, &ev) == DAT_CONNECTION_EVENT_ESTABLISHED;
  established += next_event(s_conn, &ev) == DAT_CONNECTION_EVENT_ESTABLISHED;
  snprintf(what, sizeof(what), "%s: both EPs ESTABLISHED", tag);
  return truth(what, established == 2);
}

static void flush_many(DAT_IA_HANDLE ia, DAT_IA_ADDRESS_PTR addr, DAT_CONN_QUAL port,
                       DAT_PZ_HANDLE pz, DAT_EVD_HANDLE cr_evd, DAT_LMR_CONTEXT s_l, char *sbuf) {
  DAT_EVD_HANDLE c_conn = DAT_HANDLE_NULL, c_dto = DAT_HANDLE_NULL, shared = DAT_HANDLE_NULL;
  DAT_EP_HANDLE c = DAT_HANDLE_NULL, s = DAT_HANDLE_NULL;
  DAT_EP_ATTR attr;
  DAT_EVENT ev;
  int posted = 0, in_order = 0;

  dat_evd_create(ia, 8, NULL, DAT_EVD_CONNECTION_FLAG, &c_conn);
  dat_evd_create(ia, 8, NULL, DAT_EVD_DTO_FLAG, &c_dto);
  expect("fm: evd_create DTO|CONNECTION (shared, qlen 64)",
         dat_evd_create(ia, 64, NULL, DAT_EVD_DTO_FLAG | DAT_EVD_CONNECTION_FLAG, &shared),
         DAT_SUCCESS);
  memset(&attr, 0, sizeof(attr));
  attr.service_type = DAT_SERVICE_TYPE_RC;
  attr.qos = DAT_QOS_BEST_EFFORT;
  attr.max_recv_dtos = FLUSH_MANY;
  attr.max_request_dtos = 4;
  attr.max_recv_iov = attr.max_request_iov = 1;
  attr.max_rdma_read_in = attr.max_rdma_read_out = 1;
  dat_ep_create(ia, pz, c_dto, c_dto, c_conn, NULL, &c);
  expect("fm: ep_create (server, 48 receives, shared EVD)",
         dat_ep_create(ia, pz, shared, shared, shared, &attr, &s), DAT_SUCCESS);
  for (int i = 0; i < FLUSH_MANY; ++i) {
    DAT_LMR_TRIPLET iov = triplet(s_l, sbuf + 64 * i, 64);
    DAT_DTO_COOKIE ck;
    ck.as_64 = 0x100 + (uint64_t)i;
    posted += dat_ep_post_recv(s, 1, &iov, ck, DAT_COMPLETION_DEFAULT_FLAG) == DAT_SUCCESS;
  }
  truth("fm: 48 receives posted before the connection", posted == FLUSH_MANY);
  if (connect_pair("fm", c, s, addr, port, cr_evd, c_conn, shared)) {
    expect("fm: ep_disconnect abrupt (client)", dat_ep_disconnect(c, DAT_CLOSE_ABRUPT_FLAG),
           DAT_SUCCESS);
    for (int i = 0; i < FLUSH_MANY; ++i) {
      const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
      if (next_event(shared, &ev) != DAT_DTO_COMPLETION_EVENT ||
          d->user_cookie.as_64 != 0x100 + (uint64_t)i || d->status != DAT_DTO_ERR_FLUSHED) {
        printf("     (event %d: 0x%x cookie 0x%llx status %d)\n", i, ev.event_number,
               (unsigned long long)d->user_cookie.as_64, (int)d->status);
        break;
      }
      ++in_order;
    }
    truth("fm: all 48 receives flushed, in posting order, before DISCONNECTED",
          in_order == FLUSH_MANY);
    truth("fm: then the server's DISCONNECTED",
          in_order == FLUSH_MANY && next_event(shared, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED &&
              ev.event_data.connect_event_data.ep_handle == s);
    truth("fm: client DISCONNECTED", next_event(c_conn, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
  }
  expect("fm: ep_free (client)", dat_ep_free(c), DAT_SUCCESS);
  expect("fm: ep_free (server)", dat_ep_free(s), DAT_SUCCESS);
  dat_evd_free(shared);
  dat_evd_free(c_dto);
  dat_evd_free(c_conn);
}

/* A shared receive queue (dat_srq_*): the server's EP takes its receives from an SRQ; each one
 * completes on the EP's recv EVD naming that EP, with the SRQ's cookie and the bytes sent.  What
 * cannot be done is refused the DAT way: a low watermark (ia_query: srq_watermarks_supported 0)
 * is DAT_MODEL_NOT_SUPPORTED, an EP's own post_recv DAT_INVALID_STATE, freeing a used SRQ
 * DAT_INVALID_STATE. */
static void srq_shared(DAT_IA_HANDLE ia, DAT_IA_ADDRESS_PTR addr, DAT_CONN_QUAL port,
                       DAT_PZ_HANDLE pz, DAT_EVD_HANDLE cr_evd, DAT_LMR_CONTEXT c_l, char *cbuf,
                       DAT_LMR_CONTEXT s_l, char *sbuf) {
  DAT_EVD_HANDLE c_conn = DAT_HANDLE_NULL, c_dto = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE s_conn = DAT_HANDLE_NULL, s_dto = DAT_HANDLE_NULL;
  DAT_EP_HANDLE c = DAT_HANDLE_NULL, s = DAT_HANDLE_NULL;
  DAT_SRQ_HANDLE srq = DAT_HANDLE_NULL;
  DAT_SRQ_ATTR sa;
  DAT_SRQ_PARAM sp;
  DAT_EP_PARAM ep_param;
  DAT_PROVIDER_ATTR pa;
  DAT_LMR_TRIPLET iov;
  DAT_DTO_COOKIE ck;
  DAT_EVENT ev;

  memset(&pa, 0, sizeof(pa));
  dat_ia_query(ia, NULL, 0, NULL, DAT_PROVIDER_FIELD_ALL, &pa);
  truth("srq: ia_query: srq_supported", pa.srq_supported == DAT_TRUE);
  sa.max_recv_dtos = 0;
  sa.max_recv_iov = 1;
  sa.low_watermark = DAT_SRQ_LW_DEFAULT;
  expect("srq: srq_create with max_recv_dtos 0", dat_srq_create(ia, pz, &sa, &srq),
         DAT_INVALID_PARAMETER);
  sa.max_recv_dtos = 4;
  sa.low_watermark = 2;
  expect("srq: srq_create with a low watermark", dat_srq_create(ia, pz, &sa, &srq),
         DAT_MODEL_NOT_SUPPORTED);
  sa.low_watermark = DAT_SRQ_LW_DEFAULT;
  if (!expect("srq: srq_create (4 receives)", dat_srq_create(ia, pz, &sa, &srq), DAT_SUCCESS))
    return;
  expect("srq: srq_set_lw", dat_srq_set_lw(srq, 1), DAT_MODEL_NOT_SUPPORTED);
  dat_evd_create(ia, 8, NULL, DAT_EVD_CONNECTION_FLAG, &c_conn);
  dat_evd_create(ia, 8, NULL, DAT_EVD_DTO_FLAG, &c_dto);
  dat_evd_create(ia, 8, NULL, DAT_EVD_CONNECTION_FLAG, &s_conn);
  dat_evd_create(ia, 8, NULL, DAT_EVD_DTO_FLAG, &s_dto);
  expect("srq: ep_create_with_srq with no SRQ",
         dat_ep_create_with_srq(ia, pz, s_dto, s_dto, s_conn, DAT_HANDLE_NULL, NULL, &s),
         DAT_INVALID_HANDLE);
  dat_ep_create(ia, pz, c_dto, c_dto, c_conn, NULL, &c);
  expect("srq: ep_create_with_srq",
         dat_ep_create_with_srq(ia, pz, s_dto, s_dto, s_conn, srq, NULL, &s), DAT_SUCCESS);
  memset(&ep_param, 0, sizeof(ep_param));
  dat_ep_query(s, DAT_EP_FIELD_SRQ_HANDLE, &ep_param);
  truth("srq: ep_query names the SRQ", ep_param.srq_handle == srq);
  expect("srq: srq_free while an EP uses it", dat_srq_free(srq), DAT_INVALID_STATE);
  iov = triplet(s_l, sbuf, 64);
  ck.as_64 = 0x300;
  expect("srq: the EP's own post_recv",
         dat_ep_post_recv(s, 1, &iov, ck, DAT_COMPLETION_DEFAULT_FLAG), DAT_INVALID_STATE);
  for (int i = 0; i < 2; ++i) {
    iov = triplet(s_l, sbuf + 64 * i, 64);
    ck.as_64 = 0x200 + (uint64_t)i;
    expect("srq: srq_post_recv", dat_srq_post_recv(srq, 1, &iov, ck), DAT_SUCCESS);
  }
  memset(&sp, 0, sizeof(sp));
  dat_srq_query(srq, DAT_SRQ_FIELD_ALL, &sp);
  truth("srq: srq_query: 2 outstanding, 4 at most",
        sp.outstanding_dto_count == 2 && sp.max_recv_dtos == 4 && sp.pz_handle == pz);
  if (connect_pair("srq", c, s, addr, port, cr_evd, c_conn, s_conn)) {
    for (int i = 0; i < 2; ++i) {
      memset(cbuf, 0x41 + i, 16);
      iov = triplet(c_l, cbuf, 16);
      ck.as_64 = 0x400 + (uint64_t)i;
      dat_ep_post_send(c, 1, &iov, ck, DAT_COMPLETION_DEFAULT_FLAG);
      dto_done("srq: client send", c_dto, 0x400 + (uint64_t)i, 16, DAT_DTO_SUCCESS);
      truth("srq: the SRQ's receive completes on the EP's recv EVD, naming the EP",
            next_event(s_dto, &ev) == DAT_DTO_COMPLETION_EVENT &&
                ev.event_data.dto_completion_event_data.ep_handle == s &&
                ev.event_data.dto_completion_event_data.user_cookie.as_64 == 0x200 + (uint64_t)i &&
                ev.event_data.dto_completion_event_data.transfered_length == 16 &&
                sbuf[64 * i] == 0x41 + i && sbuf[64 * i + 15] == 0x41 + i);
    }
    dat_srq_query(srq, DAT_SRQ_FIELD_ALL, &sp);
    truth("srq: srq_query: none outstanding", sp.outstanding_dto_count == 0);
    expect("srq: ep_disconnect abrupt (client)", dat_ep_disconnect(c, DAT_CLOSE_ABRUPT_FLAG),
           DAT_SUCCESS);
    truth("srq: server DISCONNECTED", next_event(s_conn, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
    next_event(c_conn, &ev);
  }
  expect("srq: ep_free (client)", dat_ep_free(c), DAT_SUCCESS);
  expect("srq: ep_free (server)", dat_ep_free(s), DAT_SUCCESS);
  expect("srq: srq_resize to 16", dat_srq_resize(srq, 16), DAT_SUCCESS);
  expect("srq: srq_free", dat_srq_free(srq), DAT_SUCCESS);
  dat_evd_free(s_dto);
  dat_evd_free(s_conn);
  dat_evd_free(c_dto);
  dat_evd_free(c_conn);
}

/* Memory windows (dat_rmr_*): the server binds windows onto parts of its LMR on its EP and the
 * client reaches them only through the windows' contexts, only while and where they are bound.
 * A type 1 window (rmr_create, PZ scope) and a type 2 one (rmr_create_for_ep, EP scope, rebound
 * under a new key); the last write goes through an unbound window's old context and must fail at
 * the peer (DAT_DTO_ERR_REMOTE_ACCESS). */
static int bind_done(const char *what, DAT_EVD_HANDLE evd, DAT_RMR_HANDLE rmr, uint64_t cookie) {
  DAT_EVENT ev;
  DAT_EVENT_NUMBER n = next_event(evd, &ev);
  const DAT_RMR_BIND_COMPLETION_EVENT_DATA *d = &ev.event_data.rmr_completion_event_data;
  int ok = n == DAT_RMR_BIND_COMPLETION_EVENT && d->rmr_handle == rmr &&
           d->user_cookie.as_64 == cookie && d->status == DAT_RMR_BIND_SUCCESS;
  if (!ok)
    printf("     (event 0x%x rmr %p cookie 0x%llx status %d)\n", n, (void *)d->rmr_handle,
           (unsigned long long)d->user_cookie.as_64, (int)d->status);
  return truth(what, ok);
}

/* RDMA-writes 64 bytes of cbuf + from to the window context `ctx` at sbuf + at; true if the write
 * completed as `status` and (on success) the bytes landed. */
static int write_through(const char *what, DAT_EP_HANDLE c, DAT_EVD_HANDLE c_dto,
                         DAT_LMR_CONTEXT c_l, char *cbuf, size_t from, DAT_RMR_CONTEXT ctx,
                         char *sbuf, size_t at, DAT_DTO_COMPLETION_STATUS status) {
  DAT_LMR_TRIPLET iov = triplet(c_l, cbuf + from, 64);
  DAT_RMR_TRIPLET r;
  DAT_DTO_COOKIE ck;
  char line[120];
  r.rmr_context = ctx;
  r.virtual_address = (DAT_VADDR)(uintptr_t)(sbuf + at);
  r.segment_length = 64;
  ck.as_64 = 0x700 + at;
  memset(sbuf + at, 0, 64);
  snprintf(line, sizeof(line), "%s: post_rdma_write", what);
  if (!expect(line, dat_ep_post_rdma_write(c, 1, &iov, ck, &r, DAT_COMPLETION_DEFAULT_FLAG),
              DAT_SUCCESS))
    return 0;
  snprintf(line, sizeof(line), "%s: completion", what);
  if (!dto_done(line, c_dto, ck.as_64, 64, status)) return 0;
  if (status != DAT_DTO_SUCCESS) return 1;
  snprintf(line, sizeof(line), "%s: the bytes landed", what);
  return truth(line, memcmp(sbuf + at, cbuf + from, 64) == 0);
}

static void memory_windows(DAT_IA_HANDLE ia, DAT_IA_ADDRESS_PTR addr, DAT_CONN_QUAL port,
                           DAT_PZ_HANDLE pz, DAT_EVD_HANDLE cr_evd, DAT_LMR_CONTEXT c_l, char *cbuf,
                           DAT_LMR_HANDLE s_lmr, DAT_LMR_CONTEXT s_l, char *sbuf) {
  DAT_EVD_HANDLE c_conn = DAT_HANDLE_NULL, c_dto = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE s_conn = DAT_HANDLE_NULL, s_dto = DAT_HANDLE_NULL;
  DAT_EP_HANDLE c = DAT_HANDLE_NULL, s = DAT_HANDLE_NULL;
  DAT_RMR_HANDLE w1 = DAT_HANDLE_NULL, w2 = DAT_HANDLE_NULL, bad = DAT_HANDLE_NULL;
  DAT_RMR_CONTEXT k1 = 0, k1_old = 0, k2 = 0, k2_old = 0;
  DAT_RMR_PARAM rp;
  DAT_IA_ATTR ia_attr;
  DAT_PROVIDER_ATTR pa;
  DAT_LMR_TRIPLET t;
  DAT_RMR_COOKIE ck;
  DAT_EVENT ev;
  const DAT_MEM_PRIV_FLAGS rw =
      (DAT_MEM_PRIV_FLAGS)(DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG);

  /* LMR sync: coherent memory, nothing to do; the segments are still checked */
  t = triplet(s_l, sbuf + 100, 200);
  expect("lmr_sync_rdma_read", dat_lmr_sync_rdma_read(ia, &t, 1), DAT_SUCCESS);
  expect("lmr_sync_rdma_write", dat_lmr_sync_rdma_write(ia, &t, 1), DAT_SUCCESS);
  t = triplet(s_l, sbuf + 8000, 400);
  expect("lmr_sync_rdma_read past the LMR's end", dat_lmr_sync_rdma_read(ia, &t, 1),
         DAT_INVALID_PARAMETER);
  expect("lmr_sync_rdma_write with an IA handle that is an EVD",
         dat_lmr_sync_rdma_write(cr_evd, &t, 1), DAT_INVALID_HANDLE);

  dat_ia_query(ia, NULL, DAT_IA_ALL, &ia_attr, DAT_PROVIDER_FIELD_ALL, &pa);
  truth("mw: ia_query: max_rmrs > 0 and max_rmr_target_address > 0",
        ia_attr.max_rmrs > 0 && ia_attr.max_rmr_target_address > 0);
  truth("mw: ia_query: rmr_scope_supported is DAT_RMR_SCOPE_ANY",
        pa.rmr_scope_supported == DAT_RMR_SCOPE_ANY);
  expect("mw: rmr_create on an EVD handle", dat_rmr_create(cr_evd, &bad), DAT_INVALID_HANDLE);
  if (!expect("mw: rmr_create", dat_rmr_create(pz, &w1), DAT_SUCCESS)) return;
  /* Debian's libdat2 declares dat_rmr_create_for_ep but does not export it: a consumer calls
   * the provider through dat_redirection.h's macro, as libdat2's own entry points do */
  expect("mw: rmr_create_for_ep", DAT_RMR_CREATE_FOR_EP(pz, &w2), DAT_SUCCESS);
  expect("mw: pz_free while RMRs use it", dat_pz_free(pz), DAT_INVALID_STATE);
  memset(&rp, 0xff, sizeof(rp));
  expect("mw: rmr_query (unbound)", dat_rmr_query(w1, DAT_RMR_FIELD_ALL, &rp), DAT_SUCCESS);
  /* (the IA as the provider names it: see ia_query's) */
  truth("mw: rmr_query: an IA, the PZ, PZ scope, nothing bound",
        rp.ia_handle != DAT_HANDLE_NULL && rp.pz_handle == pz && rp.rmr_scope == DAT_RMR_SCOPE_PZ &&
            rp.lmr_triplet.segment_length == 0);
  dat_rmr_query(w2, DAT_RMR_FIELD_ALL, &rp);
  truth("mw: rmr_query (for_ep): EP scope", rp.rmr_scope == DAT_RMR_SCOPE_EP);

  dat_evd_create(ia, 8, NULL, DAT_EVD_CONNECTION_FLAG, &c_conn);
  dat_evd_create(ia, 8, NULL, DAT_EVD_DTO_FLAG, &c_dto);
  dat_evd_create(ia, 8, NULL, DAT_EVD_CONNECTION_FLAG, &s_conn);
  dat_evd_create(ia, 8, NULL, DAT_EVD_DTO_FLAG | DAT_EVD_RMR_BIND_FLAG, &s_dto);
  dat_ep_create(ia, pz, c_dto, c_dto, c_conn, NULL, &c);
  dat_ep_create(ia, pz, s_dto, s_dto, s_conn, NULL, &s);
  t = triplet(s_l, sbuf + 1024, 1024);
  ck.as_64 = 0x51;
  expect("mw: rmr_bind on an UNCONNECTED EP",
         dat_rmr_bind(w1, s_lmr, &t, rw, DAT_VA_TYPE_VA, s, ck, DAT_COMPLETION_DEFAULT_FLAG, &k1),
         DAT_INVALID_STATE);
  if (!connect_pair("mw", c, s, addr, port, cr_evd, c_conn, s_conn)) goto out;

  /* refused before anything is posted */
  t = triplet(s_l, sbuf + 8192 - 512, 1024);
  expect("mw: rmr_bind past the LMR's end",
         dat_rmr_bind(w1, s_lmr, &t, rw, DAT_VA_TYPE_VA, s, ck, DAT_COMPLETION_DEFAULT_FLAG, &k1),
         DAT_LENGTH_ERROR);
  t = triplet(s_l, sbuf + 1024, 1024);
  expect("mw: rmr_bind with an EVD as LMR",
         dat_rmr_bind(w1, s_dto, &t, rw, DAT_VA_TYPE_VA, s, ck, DAT_COMPLETION_DEFAULT_FLAG, &k1),
         DAT_INVALID_HANDLE);
  expect(
      "mw: rmr_bind with an LMR as EP",
      dat_rmr_bind(w1, s_lmr, &t, rw, DAT_VA_TYPE_VA, s_lmr, ck, DAT_COMPLETION_DEFAULT_FLAG, &k1),
      DAT_INVALID_HANDLE);
  expect("mw: rmr_bind with no context out",
         dat_rmr_bind(w1, s_lmr, &t, rw, DAT_VA_TYPE_VA, s, ck, DAT_COMPLETION_DEFAULT_FLAG, NULL),
         DAT_INVALID_PARAMETER);

  /* type 1: bound to [1024, 2048) of the server's buffer */
  expect("mw: rmr_bind (type 1)",
         dat_rmr_bind(w1, s_lmr, &t, rw, DAT_VA_TYPE_VA, s, ck, DAT_COMPLETION_DEFAULT_FLAG, &k1),
         DAT_SUCCESS);
  bind_done("mw: bind completion on the server's request EVD", s_dto, w1, 0x51);
  dat_rmr_query(w1, DAT_RMR_FIELD_ALL, &rp);
  truth("mw: rmr_query: the bound triplet, privileges and the new context",
        rp.rmr_context == k1 && rp.lmr_triplet.virtual_address == t.virtual_address &&
            rp.lmr_triplet.segment_length == 1024 && rp.mem_priv == rw);
  write_through("mw: write through the type 1 window", c, c_dto, c_l, cbuf, 100, k1, sbuf, 1500,
                DAT_DTO_SUCCESS);
  {
    /* and read back through it */
    DAT_LMR_TRIPLET iov = triplet(c_l, cbuf + 4096, 64);
    DAT_RMR_TRIPLET r;
    DAT_DTO_COOKIE rc;
    memset(cbuf + 4096, 0, 64);
    r.rmr_context = k1;
    r.virtual_address = (DAT_VADDR)(uintptr_t)(sbuf + 1500);
    r.segment_length = 64;
    rc.as_64 = 0x7ead;
    expect("mw: read through the type 1 window: post_rdma_read",
           dat_ep_post_rdma_read(c, 1, &iov, rc, &r, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
    dto_done("mw: read through the type 1 window: completion", c_dto, 0x7ead, 64, DAT_DTO_SUCCESS);
    truth("mw: read through the type 1 window: the bytes came back",
          memcmp(cbuf + 4096, sbuf + 1500, 64) == 0);
  }

  /* type 2: bound, then rebound elsewhere under a new key, then unbound */
  t = triplet(s_l, sbuf + 3072, 512);
  ck.as_64 = 0x52;
  expect("mw: rmr_bind (type 2)",
         dat_rmr_bind(w2, s_lmr, &t, rw, DAT_VA_TYPE_VA, s, ck, DAT_COMPLETION_DEFAULT_FLAG, &k2),
         DAT_SUCCESS);
  bind_done("mw: type 2 bind completion", s_dto, w2, 0x52);
  write_through("mw: write through the type 2 window", c, c_dto, c_l, cbuf, 200, k2, sbuf, 3100,
                DAT_DTO_SUCCESS);
  k2_old = k2;
  t = triplet(s_l, sbuf + 5120, 512);
  ck.as_64 = 0x53;
  expect("mw: rmr_bind (type 2, rebind)",
         dat_rmr_bind(w2, s_lmr, &t, rw, DAT_VA_TYPE_VA, s, ck, DAT_COMPLETION_DEFAULT_FLAG, &k2),
         DAT_SUCCESS);
  bind_done("mw: type 2 rebind: one completion", s_dto, w2, 0x53);
  truth("mw: type 2 rebind: a new context", k2 != k2_old);
  write_through("mw: write through the rebound type 2 window", c, c_dto, c_l, cbuf, 300, k2, sbuf,
                5200, DAT_DTO_SUCCESS);

  /* the client's send invalidates the server's type 2 window: the server's receive names it,
   * and the window is unbound (its unbind completes at once; it can be bound again) */
  {
    DAT_LMR_TRIPLET rx = triplet(s_l, sbuf + 6144, 64), tx = triplet(c_l, cbuf + 6144, 64);
    DAT_DTO_COOKIE dc;
    dc.as_64 = 0x5e;
    expect("mw: server post_recv", dat_ep_post_recv(s, 1, &rx, dc, DAT_COMPLETION_DEFAULT_FLAG),
           DAT_SUCCESS);
    /* (libdat2 does not export dat_ep_post_send_with_invalidate either) */
    dc.as_64 = 0x5f;
    expect(
        "mw: post_send_with_invalidate of the server's window",
        DAT_EP_POST_SEND_WITH_INVALIDATE(c, 1, &tx, dc, DAT_COMPLETION_DEFAULT_FLAG, DAT_TRUE, k2),
        DAT_SUCCESS);
    dto_done("mw: send with invalidate", c_dto, 0x5f, 64, DAT_DTO_SUCCESS);
    DAT_EVENT_NUMBER n = next_event(s_dto, &ev);
    const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
    truth("mw: the server's receive completes, naming the invalidated context",
          n == DAT_DTO_COMPLETION_EVENT && d->user_cookie.as_64 == 0x5e &&
              d->status == DAT_DTO_SUCCESS && d->transfered_length == 64 && d->rmr_context == k2);
    dat_rmr_query(w2, DAT_RMR_FIELD_ALL, &rp);
    truth("mw: rmr_query: the invalidated window is unbound", rp.lmr_triplet.segment_length == 0);
  }
  t.segment_length = 0;
  ck.as_64 = 0x56;
  expect("mw: rmr_bind length 0 of the invalidated window",
         dat_rmr_bind(w2, DAT_HANDLE_NULL, &t, rw, DAT_VA_TYPE_VA, s, ck,
                      DAT_COMPLETION_DEFAULT_FLAG, &k2),
         DAT_SUCCESS);
  bind_done("mw: ...completes at once", s_dto, w2, 0x56);
  t = triplet(s_l, sbuf + 5120, 512);
  ck.as_64 = 0x57;
  expect("mw: rmr_bind (type 2, after the invalidate)",
         dat_rmr_bind(w2, s_lmr, &t, rw, DAT_VA_TYPE_VA, s, ck, DAT_COMPLETION_DEFAULT_FLAG, &k2),
         DAT_SUCCESS);
  bind_done("mw: type 2 bind after the invalidate", s_dto, w2, 0x57);
  write_through("mw: write through the window bound again", c, c_dto, c_l, cbuf, 500, k2, sbuf,
                5300, DAT_DTO_SUCCESS);

  t.segment_length = 0;
  ck.as_64 = 0x54;
  expect("mw: rmr_bind length 0 (type 2 unbind)",
         dat_rmr_bind(w2, DAT_HANDLE_NULL, &t, rw, DAT_VA_TYPE_VA, s, ck,
                      DAT_COMPLETION_DEFAULT_FLAG, &k2),
         DAT_SUCCESS);
  bind_done("mw: type 2 unbind completion", s_dto, w2, 0x54);

  /* type 1 unbound: its old context reaches nothing */
  k1_old = k1;
  ck.as_64 = 0x55;
  expect("mw: rmr_bind length 0 (type 1 unbind)",
         dat_rmr_bind(w1, DAT_HANDLE_NULL, &t, rw, DAT_VA_TYPE_VA, s, ck,
                      DAT_COMPLETION_DEFAULT_FLAG, &k1),
         DAT_SUCCESS);
  bind_done("mw: type 1 unbind completion", s_dto, w1, 0x55);
  dat_rmr_query(w1, DAT_RMR_FIELD_ALL, &rp);
  truth("mw: rmr_query after the unbind: nothing bound", rp.lmr_triplet.segment_length == 0);
  write_through("mw: write through the unbound window's old context", c, c_dto, c_l, cbuf, 400,
                k1_old, sbuf, 1500, DAT_DTO_ERR_REMOTE_ACCESS);
  truth("mw: ...left the server's bytes alone", memcmp(sbuf + 1500, cbuf + 400, 64) != 0);
  /* the failed write put the client's QP in error; the connection ends as after any error */
  dat_ep_disconnect(c, DAT_CLOSE_ABRUPT_FLAG);
  truth("mw: client DISCONNECTED", next_event(c_conn, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
  truth("mw: server DISCONNECTED", next_event(s_conn, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
out:
  expect("mw: ep_free (client)", dat_ep_free(c), DAT_SUCCESS);
  expect("mw: ep_free (server)", dat_ep_free(s), DAT_SUCCESS);
  expect("mw: rmr_free (type 1)", dat_rmr_free(w1), DAT_SUCCESS);
  expect("mw: rmr_free (type 2)", dat_rmr_free(w2), DAT_SUCCESS);
  expect("mw: rmr_query of a freed RMR", dat_rmr_query(w1, DAT_RMR_FIELD_ALL, &rp),
         DAT_INVALID_HANDLE);
  dat_evd_free(s_dto);
  dat_evd_free(s_conn);
  dat_evd_free(c_dto);
  dat_evd_free(c_conn);
}

/* dat_ep_disconnect(3DAT): "For graceful disconnect, all outstanding and in-progress request DTOs
 * ... must try to be completed successfully first, before disconnect proceeds."  The client posts
 * GD_SENDS sends of GD_BYTES each to a server with no receive posted yet (RNR: they stay in flight,
 * the QPs retry for ever) and disconnects gracefully.  Its EP stays DISCONNECT_PENDING and the
 * server hears of no disconnect while they wait; once the server posts its receives every send
 * completes successfully (none flushed by the connection's end) and lands whole, then both sides
 * are DISCONNECTED.  The client waits on its connect EVD only: the provider's wait looks after the
 * sends (libdaplofa's graceful disconnect moves the QP to ERR at once: they would flush). */
#define GD_SENDS 8
/* 64 packets each at rxe's 1 KiB MTU: many in flight, and little enough that the debug kernel
 * (KASAN on rxe's every copy) moves all 8 well inside WAIT_US on a loaded machine */
#define GD_BYTES (64u * 1024u)
static void graceful_drains_sends(DAT_IA_HANDLE ia, DAT_IA_ADDRESS_PTR addr, DAT_CONN_QUAL port,
                                  DAT_PZ_HANDLE pz, DAT_EVD_HANDLE cr_evd) {
  DAT_EVD_HANDLE c_conn = DAT_HANDLE_NULL, c_dto = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE s_conn = DAT_HANDLE_NULL, s_dto = DAT_HANDLE_NULL;
  DAT_EP_HANDLE c = DAT_HANDLE_NULL, s = DAT_HANDLE_NULL;
  DAT_LMR_HANDLE c_lmr = DAT_HANDLE_NULL, s_lmr = DAT_HANDLE_NULL;
  DAT_LMR_CONTEXT c_l = 0, s_l = 0;
  DAT_RMR_CONTEXT rctx;
  DAT_VLEN len;
  DAT_VADDR va;
  DAT_REGION_DESCRIPTION region;
  DAT_EP_ATTR attr;
  DAT_EVENT ev;
  DAT_COUNT nmore;
  DAT_EP_STATE state = 0;
  const size_t size = (size_t)GD_SENDS * GD_BYTES;
  char *cbuf = malloc(size), *sbuf = calloc(1, size);
  int posted = 0, sent_ok = 0, received_ok = 0;

  if (!truth("gd: buffers", cbuf != NULL && sbuf != NULL)) goto out;
  for (size_t i = 0; i < size; ++i) cbuf[i] = (char)(i * 31 + i / GD_BYTES);
  dat_evd_create(ia, 8, NULL, DAT_EVD_CONNECTION_FLAG, &c_conn);
  dat_evd_create(ia, 8, NULL, DAT_EVD_CONNECTION_FLAG, &s_conn);
  dat_evd_create(ia, 2 * GD_SENDS, NULL, DAT_EVD_DTO_FLAG, &c_dto);
  dat_evd_create(ia, 2 * GD_SENDS, NULL, DAT_EVD_DTO_FLAG, &s_dto);
  memset(&attr, 0, sizeof(attr));
  attr.service_type = DAT_SERVICE_TYPE_RC;
  attr.qos = DAT_QOS_BEST_EFFORT;
  attr.max_message_size = GD_BYTES;
  attr.max_recv_dtos = attr.max_request_dtos = GD_SENDS;
  attr.max_recv_iov = attr.max_request_iov = 1;
  attr.max_rdma_read_in = attr.max_rdma_read_out = 1;
  expect("gd: ep_create (client)", dat_ep_create(ia, pz, c_dto, c_dto, c_conn, &attr, &c),
         DAT_SUCCESS);
  expect("gd: ep_create (server)", dat_ep_create(ia, pz, s_dto, s_dto, s_conn, &attr, &s),
         DAT_SUCCESS);
  region.for_va = cbuf;
  expect("gd: lmr_create (client)",
         dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, size, pz, DAT_MEM_PRIV_ALL_FLAG,
                        DAT_VA_TYPE_VA, &c_lmr, &c_l, &rctx, &len, &va),
         DAT_SUCCESS);
  region.for_va = sbuf;
  expect("gd: lmr_create (server)",
         dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, size, pz, DAT_MEM_PRIV_ALL_FLAG,
                        DAT_VA_TYPE_VA, &s_lmr, &s_l, &rctx, &len, &va),
         DAT_SUCCESS);
  if (!connect_pair("gd", c, s, addr, port, cr_evd, c_conn, s_conn)) goto out;
  for (int i = 0; i < GD_SENDS; ++i) {
    DAT_LMR_TRIPLET iov = triplet(c_l, cbuf + (size_t)i * GD_BYTES, GD_BYTES);
    DAT_DTO_COOKIE ck;
    ck.as_64 = 0x300 + (uint64_t)i;
    posted += dat_ep_post_send(c, 1, &iov, ck, DAT_COMPLETION_DEFAULT_FLAG) == DAT_SUCCESS;
  }
  truth("gd: 8 sends of 64 KiB posted to a server with no receive", posted == GD_SENDS);
  expect("gd: ep_disconnect graceful (client, its sends in flight)",
         dat_ep_disconnect(c, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
  dat_ep_get_status(c, &state, NULL, NULL);
  truth("gd: the client is DISCONNECT_PENDING", state == DAT_EP_STATE_DISCONNECT_PENDING);
  expect("gd: no DREQ reaches the server while the sends wait (0.3 s)",
         dat_evd_wait(s_conn, 300000, 1, &ev, &nmore), DAT_TIMEOUT_EXPIRED);
  state = 0;
  dat_ep_get_status(c, &state, NULL, NULL);
  truth("gd: the client is still DISCONNECT_PENDING", state == DAT_EP_STATE_DISCONNECT_PENDING);
  expect("gd: post_send while DISCONNECT_PENDING",
         dat_ep_post_send(c, 0, NULL, (DAT_DTO_COOKIE){.as_64 = 1}, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_INVALID_STATE);
  for (int i = 0; i < GD_SENDS; ++i) {
    DAT_LMR_TRIPLET iov = triplet(s_l, sbuf + (size_t)i * GD_BYTES, GD_BYTES);
    DAT_DTO_COOKIE ck;
    ck.as_64 = 0x200 + (uint64_t)i;
    dat_ep_post_recv(s, 1, &iov, ck, DAT_COMPLETION_DEFAULT_FLAG);
  }
  truth("gd: the client is DISCONNECTED (it waits on its connect EVD only)",
        next_event(c_conn, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
  for (int i = 0; i < GD_SENDS; ++i) {
    const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
    if (next_event(c_dto, &ev) != DAT_DTO_COMPLETION_EVENT ||
        d->user_cookie.as_64 != 0x300 + (uint64_t)i || d->status != DAT_DTO_SUCCESS) {
      printf("     (send %d: event 0x%x cookie 0x%llx status %d)\n", i, ev.event_number,
             (unsigned long long)d->user_cookie.as_64, (int)d->status);
      break;
    }
    ++sent_ok;
  }
  truth("gd: every send completed successfully, none flushed", sent_ok == GD_SENDS);
  for (int i = 0; i < GD_SENDS; ++i) {
    const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
    if (next_event(s_dto, &ev) != DAT_DTO_COMPLETION_EVENT || d->status != DAT_DTO_SUCCESS ||
        d->user_cookie.as_64 != 0x200 + (uint64_t)i || d->transfered_length != GD_BYTES) {
      printf("     (receive %d: event 0x%x cookie 0x%llx status %d length %llu)\n", i,
             ev.event_number, (unsigned long long)d->user_cookie.as_64, (int)d->status,
             (unsigned long long)d->transfered_length);
      break;
    }
    ++received_ok;
  }
  truth("gd: the server received all of them whole",
        received_ok == GD_SENDS && memcmp(cbuf, sbuf, size) == 0);
  truth("gd: the server is DISCONNECTED",
        next_event(s_conn, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
out:
  if (c != DAT_HANDLE_NULL) expect("gd: ep_free (client)", dat_ep_free(c), DAT_SUCCESS);
  if (s != DAT_HANDLE_NULL) expect("gd: ep_free (server)", dat_ep_free(s), DAT_SUCCESS);
  if (c_lmr != DAT_HANDLE_NULL) dat_lmr_free(c_lmr);
  if (s_lmr != DAT_HANDLE_NULL) dat_lmr_free(s_lmr);
  if (c_dto != DAT_HANDLE_NULL) dat_evd_free(c_dto);
  if (s_dto != DAT_HANDLE_NULL) dat_evd_free(s_dto);
  if (c_conn != DAT_HANDLE_NULL) dat_evd_free(c_conn);
  if (s_conn != DAT_HANDLE_NULL) dat_evd_free(s_conn);
  free(cbuf);
  free(sbuf);
}

/* A graceful disconnect whose requests stop completing still ends: a send that a live peer never
 * posts a receive for is retried for ever (RNR retry count 7), so the provider sends its held DREQ
 * once DRAIN_LIMIT_S pass without a request completing (data_path.cpp, kDrainLimit), counted from
 * the last completion, not from the disconnect.  Two sends wait; DL_WAIT_S after the disconnect
 * the server posts one receive: the first send completes, and only DRAIN_LIMIT_S after that does
 * the DREQ go and the second send flush. */
#define DRAIN_LIMIT_S 10.0 /* data_path.cpp's kDrainLimit */
#define DL_WAIT_S 4
static double monotonic_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void graceful_drain_limit(DAT_IA_HANDLE ia, DAT_IA_ADDRESS_PTR addr, DAT_CONN_QUAL port,
                                 DAT_PZ_HANDLE pz, DAT_EVD_HANDLE cr_evd, DAT_LMR_CONTEXT c_l,
                                 char *cbuf, DAT_LMR_CONTEXT s_l, char *sbuf) {
  DAT_EVD_HANDLE c_conn = DAT_HANDLE_NULL, c_dto = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE s_conn = DAT_HANDLE_NULL, s_dto = DAT_HANDLE_NULL;
  DAT_EP_HANDLE c = DAT_HANDLE_NULL, s = DAT_HANDLE_NULL;
  DAT_EP_ATTR attr;
  DAT_EVENT ev;
  DAT_COUNT nmore;
  DAT_EP_STATE state = 0;
  int posted = 0;

  dat_evd_create(ia, 8, NULL, DAT_EVD_CONNECTION_FLAG, &c_conn);
  dat_evd_create(ia, 8, NULL, DAT_EVD_CONNECTION_FLAG, &s_conn);
  dat_evd_create(ia, 8, NULL, DAT_EVD_DTO_FLAG, &c_dto);
  dat_evd_create(ia, 8, NULL, DAT_EVD_DTO_FLAG, &s_dto);
  memset(&attr, 0, sizeof(attr));
  attr.service_type = DAT_SERVICE_TYPE_RC;
  attr.qos = DAT_QOS_BEST_EFFORT;
  attr.max_message_size = 4096;
  attr.max_recv_dtos = attr.max_request_dtos = 2;
  attr.max_recv_iov = attr.max_request_iov = 1;
  attr.max_rdma_read_in = attr.max_rdma_read_out = 1;
  expect("dl: ep_create (client)", dat_ep_create(ia, pz, c_dto, c_dto, c_conn, &attr, &c),
         DAT_SUCCESS);
  expect("dl: ep_create (server)", dat_ep_create(ia, pz, s_dto, s_dto, s_conn, &attr, &s),
         DAT_SUCCESS);
  if (!connect_pair("dl", c, s, addr, port, cr_evd, c_conn, s_conn)) goto out;
  for (int i = 0; i < 2; ++i) {
    DAT_LMR_TRIPLET iov = triplet(c_l, cbuf + 64 * i, 64);
    DAT_DTO_COOKIE ck;
    ck.as_64 = 0x400 + (uint64_t)i;
    posted += dat_ep_post_send(c, 1, &iov, ck, DAT_COMPLETION_DEFAULT_FLAG) == DAT_SUCCESS;
  }
  truth("dl: 2 sends posted to a server with no receive", posted == 2);
  expect("dl: ep_disconnect graceful (client, its sends waiting)",
         dat_ep_disconnect(c, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
  dat_ep_get_status(c, &state, NULL, NULL);
  truth("dl: the client is DISCONNECT_PENDING", state == DAT_EP_STATE_DISCONNECT_PENDING);
  expect("dl: no DISCONNECTED while both sends wait (4 s)",
         dat_evd_wait(c_conn, DL_WAIT_S * 1000000u, 1, &ev, &nmore), DAT_TIMEOUT_EXPIRED);
  {
    DAT_LMR_TRIPLET iov = triplet(s_l, sbuf, 64);
    expect(
        "dl: post_recv (server, one)",
        dat_ep_post_recv(s, 1, &iov, (DAT_DTO_COOKIE){.as_64 = 0x500}, DAT_COMPLETION_DEFAULT_FLAG),
        DAT_SUCCESS);
  }
  const double posted_at = monotonic_s();
  /* a drain that never ends would fail here (40 s), not hang */
  const DAT_RETURN r = dat_evd_wait(c_conn, 40000000u, 1, &ev, &nmore);
  const double waited = monotonic_s() - posted_at;
  truth("dl: the client is DISCONNECTED (its held DREQ went)",
        r == DAT_SUCCESS && ev.event_number == DAT_CONNECTION_EVENT_DISCONNECTED);
  printf("     (DISCONNECTED %.2f s after the receive was posted)\n", waited);
  truth("dl: no sooner than the drain limit after the first send completed",
        waited >= DRAIN_LIMIT_S);
  dto_done("dl: the first send", c_dto, 0x400, 64, DAT_DTO_SUCCESS);
  dto_done("dl: the second send flushed", c_dto, 0x401, (DAT_VLEN)-1, DAT_DTO_ERR_FLUSHED);
  dto_done("dl: the server's receive", s_dto, 0x500, 64, DAT_DTO_SUCCESS);
  truth("dl: the server is DISCONNECTED",
        next_event(s_conn, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
out:
  if (c != DAT_HANDLE_NULL) expect("dl: ep_free (client)", dat_ep_free(c), DAT_SUCCESS);
  if (s != DAT_HANDLE_NULL) expect("dl: ep_free (server)", dat_ep_free(s), DAT_SUCCESS);
  dat_evd_free(c_dto);
  dat_evd_free(s_dto);
  dat_evd_free(c_conn);
  dat_evd_free(s_conn);
}

/* The peer frees its EP while this side sleeps on its receive EVD (polling: dequeues it) and
 * never looks at its connection EVD (dapltest's threads do this when the other side gives up):
 * the posted receive flushes and ends the wait, as over libdaplofa, whose CM thread moves the QP
 * to ERR. */
static void peer_gone_while_waiting(DAT_IA_HANDLE ia, DAT_IA_ADDRESS_PTR addr, DAT_CONN_QUAL port,
                                    DAT_PZ_HANDLE pz, DAT_EVD_HANDLE cr_evd, DAT_LMR_CONTEXT s_l,
                                    char *sbuf, int polling) {
  DAT_EVD_HANDLE c_conn = DAT_HANDLE_NULL, c_dto = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE s_conn = DAT_HANDLE_NULL, s_dto = DAT_HANDLE_NULL;
  DAT_EP_HANDLE c = DAT_HANDLE_NULL, s = DAT_HANDLE_NULL;
  DAT_LMR_TRIPLET iov = triplet(s_l, sbuf, 64);
  DAT_DTO_COOKIE ck;
  DAT_EVENT ev;
  DAT_COUNT nmore = 0;

  dat_evd_create(ia, 8, NULL, DAT_EVD_CONNECTION_FLAG, &c_conn);
  dat_evd_create(ia, 8, NULL, DAT_EVD_DTO_FLAG, &c_dto);
  dat_evd_create(ia, 8, NULL, DAT_EVD_CONNECTION_FLAG, &s_conn);
  dat_evd_create(ia, 8, NULL, DAT_EVD_DTO_FLAG, &s_dto);
  dat_ep_create(ia, pz, c_dto, c_dto, c_conn, NULL, &c);
  expect("pg: ep_create (server)", dat_ep_create(ia, pz, s_dto, s_dto, s_conn, NULL, &s),
         DAT_SUCCESS);
  ck.as_64 = 0x5eed;
  expect("pg: post_recv before the connection",
         dat_ep_post_recv(s, 1, &iov, ck, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
  if (connect_pair("pg", c, s, addr, port, cr_evd, c_conn, s_conn)) {
    const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
    DAT_RETURN r;

    expect("pg: ep_free (client, connected)", dat_ep_free(c), DAT_SUCCESS);
    c = DAT_HANDLE_NULL;
    if (polling) {
      const time_t give_up = time(NULL) + WAIT_US / 1000000;
      r = dat_evd_dequeue(s_dto, &ev);
      while (DAT_GET_TYPE(r) == DAT_QUEUE_EMPTY && time(NULL) < give_up)
        r = dat_evd_dequeue(s_dto, &ev);
      expect("pg: evd_dequeue on the receive EVD finds an event", r, DAT_SUCCESS);
    } else {
      r = dat_evd_wait(s_dto, WAIT_US, 1, &ev, &nmore);
      expect("pg: evd_wait on the receive EVD returns", r, DAT_SUCCESS);
    }
    truth("pg: ... with the receive, flushed",
          r == DAT_SUCCESS && ev.event_number == DAT_DTO_COMPLETION_EVENT &&
              d->user_cookie.as_64 == 0x5eed && d->status == DAT_DTO_ERR_FLUSHED);
    truth("pg: then DISCONNECTED on the connection EVD",
          next_event(s_conn, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
  }
  if (c != DAT_HANDLE_NULL) dat_ep_free(c);
  expect("pg: ep_free (server)", dat_ep_free(s), DAT_SUCCESS);
  dat_evd_free(s_dto);
  dat_evd_free(s_conn);
  dat_evd_free(c_dto);
  dat_evd_free(c_conn);
}

/* dat_ep_free of a CONNECTED EP ends the connection as an abrupt disconnect does: DISCONNECTED
 * on the freed EP's connect EVD, naming the freed handle, and on the peer's (libdaplofa's
 * dat_ep_free disconnects abruptly first; dtestcm -w counts those events).  `freed`: which side
 * is freed, "server" or "client".  Its own IA, so that the check runs alone over any provider
 * (provider_check --free-connected). */
static void free_connected(DAT_IA_HANDLE ia, DAT_IA_ADDRESS_PTR addr, DAT_CONN_QUAL port,
                           const char *freed) {
  DAT_EVD_HANDLE c_conn = DAT_HANDLE_NULL, s_conn = DAT_HANDLE_NULL, dto = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE cr = DAT_HANDLE_NULL;
  DAT_EP_HANDLE c = DAT_HANDLE_NULL, s = DAT_HANDLE_NULL;
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  DAT_PZ_HANDLE pz = DAT_HANDLE_NULL;
  const int server = strcmp(freed, "server") == 0;
  char what[96];
  DAT_EVENT ev;

  dat_pz_create(ia, &pz);
  dat_evd_create(ia, 8, NULL, DAT_EVD_CONNECTION_FLAG, &c_conn);
  dat_evd_create(ia, 8, NULL, DAT_EVD_CONNECTION_FLAG, &s_conn);
  dat_evd_create(ia, 8, NULL, DAT_EVD_DTO_FLAG, &dto);
  dat_evd_create(ia, 8, NULL, DAT_EVD_CR_FLAG, &cr);
  dat_ep_create(ia, pz, dto, dto, c_conn, NULL, &c);
  dat_ep_create(ia, pz, dto, dto, s_conn, NULL, &s);
  snprintf(what, sizeof(what), "fc %s: psp_create", freed);
  if (expect(what, dat_psp_create(ia, port, cr, DAT_PSP_CONSUMER_FLAG, &psp), DAT_SUCCESS) &&
      connect_pair(server ? "fc server" : "fc client", c, s, addr, port, cr, c_conn, s_conn)) {
    const DAT_EP_HANDLE gone = server ? s : c;
    DAT_EVENT_NUMBER n;

    snprintf(what, sizeof(what), "fc %s: ep_free (%s, connected)", freed, freed);
    expect(what, dat_ep_free(gone), DAT_SUCCESS);
    if (server)
      s = DAT_HANDLE_NULL;
    else
      c = DAT_HANDLE_NULL;
    n = next_event(server ? s_conn : c_conn, &ev);
    snprintf(what, sizeof(what), "fc %s: DISCONNECTED on the freed EP's connect EVD", freed);
    if (!truth(what, n == DAT_CONNECTION_EVENT_DISCONNECTED)) printf("     (event 0x%x)\n", n);
    snprintf(what, sizeof(what), "fc %s: ... naming the freed EP", freed);
    truth(what, n == DAT_CONNECTION_EVENT_DISCONNECTED &&
                    ev.event_data.connect_event_data.ep_handle == gone);
    snprintf(what, sizeof(what), "fc %s: DISCONNECTED on the peer's connect EVD", freed);
    truth(what, next_event(server ? c_conn : s_conn, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
  }
  if (c != DAT_HANDLE_NULL) dat_ep_free(c);
  if (s != DAT_HANDLE_NULL) dat_ep_free(s);
  if (psp != DAT_HANDLE_NULL) dat_psp_free(psp);
  dat_evd_free(cr);
  dat_evd_free(dto);
  dat_evd_free(s_conn);
  dat_evd_free(c_conn);
  dat_pz_free(pz);
}

/* provider_check --free-connected PROVIDER IP PORT: free_connected, each side, on its own. */
static int free_connected_only(char *provider, DAT_IA_ADDRESS_PTR addr, DAT_CONN_QUAL port) {
  DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
  DAT_IA_HANDLE ia = DAT_HANDLE_NULL;

  if (!expect("ia_open", dat_ia_open(provider, 8, &async, &ia), DAT_SUCCESS)) return 1;
  free_connected(ia, addr, port, "server");
  free_connected(ia, addr, port + 1, "client");
  expect("ia_close", dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
  printf("checks: %d failed: %d\n", checks, failures);
  return failures != 0;
}

/* DAT connection qualifiers are 64 bits, rdma_cm ports 16: a qualifier above 0xffff maps to
 * 33534 + q % 32001 (libdaplofa's mapping), on the listening and the connecting side alike. */
static void big_qualifier(DAT_IA_HANDLE ia, DAT_IA_ADDRESS_PTR addr) {
  const DAT_CONN_QUAL q = 0xaffab1e; /* dapltest's limit tests use it */
  const DAT_CONN_QUAL mapped = 33534 + q % 32001;
  DAT_EVD_HANDLE cr = DAT_HANDLE_NULL, conn = DAT_HANDLE_NULL;
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL, other = DAT_HANDLE_NULL;
  DAT_EP_HANDLE ep = DAT_HANDLE_NULL;
  DAT_PSP_PARAM param;
  DAT_EVENT ev;

  dat_evd_create(ia, 8, NULL, DAT_EVD_CR_FLAG, &cr);
  dat_evd_create(ia, 8, NULL, DAT_EVD_CONNECTION_FLAG, &conn);
  if (!expect("qual: psp_create 0xaffab1e", dat_psp_create(ia, q, cr, DAT_PSP_CONSUMER_FLAG, &psp),
              DAT_SUCCESS))
    goto out;
  expect("qual: psp_query", dat_psp_query(psp, DAT_PSP_FIELD_ALL, &param), DAT_SUCCESS);
  truth("qual: psp_query reports the qualifier as given", param.conn_qual == q);
  expect("qual: psp_create on the port it maps to",
         dat_psp_create(ia, mapped, cr, DAT_PSP_CONSUMER_FLAG, &other), DAT_CONN_QUAL_IN_USE);
  dat_ep_create(ia, DAT_HANDLE_NULL, DAT_HANDLE_NULL, DAT_HANDLE_NULL, conn, NULL, &ep);
  expect(
      "qual: ep_connect to 0xaffab1e",
      dat_ep_connect(ep, addr, q, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
      DAT_SUCCESS);
  if (truth("qual: the request reaches the PSP",
            next_event(cr, &ev) == DAT_CONNECTION_REQUEST_EVENT)) {
    truth("qual: the CR event names the qualifier",
          ev.event_data.cr_arrival_event_data.conn_qual == q &&
              ev.event_data.cr_arrival_event_data.sp_handle.psp_handle == psp);
    expect("qual: cr_reject", dat_cr_reject(ev.event_data.cr_arrival_event_data.cr_handle, 0, NULL),
           DAT_SUCCESS);
    truth("qual: the client is rejected",
          next_event(conn, &ev) == DAT_CONNECTION_EVENT_PEER_REJECTED);
  }
  dat_ep_free(ep);
out:
  if (psp != DAT_HANDLE_NULL) dat_psp_free(psp);
  if (other != DAT_HANDLE_NULL) dat_psp_free(other);
  dat_evd_free(conn);
  dat_evd_free(cr);
}

/* Several IAs of one process: an EP may take its connection events from another IA's connect
 * EVD (DAT allows it; dapltest -T L -w makes every EP's connect EVD IA #1's).  The EP here is a
 * user-QP EP of ia2 (its PZ and DTO EVD ia2's) whose connect EVD is ia's. */
static void cross_ia_connect_evd(DAT_IA_HANDLE ia, DAT_IA_HANDLE ia2, DAT_IA_ADDRESS_PTR addr,
                                 DAT_CONN_QUAL port) {
  DAT_EVD_HANDLE conn = DAT_HANDLE_NULL, s_conn = DAT_HANDLE_NULL, cr = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE dto = DAT_HANDLE_NULL, dto1 = DAT_HANDLE_NULL;
  DAT_EP_HANDLE x = DAT_HANDLE_NULL, s = DAT_HANDLE_NULL, bad = DAT_HANDLE_NULL;
  DAT_PZ_HANDLE pz2 = DAT_HANDLE_NULL, pz = DAT_HANDLE_NULL;
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  DAT_EP_PARAM param;
  DAT_EVENT ev;

  dat_evd_create(ia, 8, NULL, DAT_EVD_CONNECTION_FLAG, &conn);
  dat_evd_create(ia, 8, NULL, DAT_EVD_CONNECTION_FLAG, &s_conn);
  dat_evd_create(ia, 8, NULL, DAT_EVD_CR_FLAG, &cr);
  dat_evd_create(ia, 8, NULL, DAT_EVD_DTO_FLAG, &dto1);
  dat_evd_create(ia2, 8, NULL, DAT_EVD_DTO_FLAG, &dto);
  dat_pz_create(ia2, &pz2);
  dat_pz_create(ia, &pz);
  expect("xia: ep_create on IA 2 with IA 1's DTO EVD",
         dat_ep_create(ia2, pz2, dto1, dto1, conn, NULL, &bad), DAT_INVALID_HANDLE);
  if (!expect("xia: ep_create on IA 2 with IA 1's connect EVD",
              dat_ep_create(ia2, pz2, dto, dto, conn, NULL, &x), DAT_SUCCESS))
    goto out;
  expect("xia: ep_query", dat_ep_query(x, DAT_EP_FIELD_ALL, &param), DAT_SUCCESS);
  truth("xia: ep_query names IA 2's PZ and DTO EVD and IA 1's connect EVD",
        param.pz_handle == pz2 && param.recv_evd_handle == dto && param.connect_evd_handle == conn);
  dat_ep_create(ia, pz, dto1, dto1, s_conn, NULL, &s);
  expect("xia: psp_create", dat_psp_create(ia, port, cr, DAT_PSP_CONSUMER_FLAG, &psp), DAT_SUCCESS);
  if (!connect_pair("xia", x, s, addr, port, cr, conn, s_conn)) goto out;
  truth("xia: the EP of IA 2 is CONNECTED",
        dat_ep_query(x, DAT_EP_FIELD_EP_STATE, &param) == DAT_SUCCESS &&
            param.ep_state == DAT_EP_STATE_CONNECTED);
  expect("xia: ia_close (abrupt) of IA 1 while IA 2's EP uses its EVD",
         dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_INVALID_STATE);
  expect("xia: evd_free of the connect EVD in use", dat_evd_free(conn), DAT_INVALID_STATE);
  expect("xia: ep_disconnect (abrupt)", dat_ep_disconnect(x, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
  truth("xia: DISCONNECTED on IA 1's EVD, naming IA 2's EP",
        next_event(conn, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED &&
            ev.event_data.connect_event_data.ep_handle == x);
  truth("xia: DISCONNECTED at the peer",
        next_event(s_conn, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
out:
  if (x != DAT_HANDLE_NULL) expect("xia: ep_free", dat_ep_free(x), DAT_SUCCESS);
  if (bad != DAT_HANDLE_NULL) dat_ep_free(bad);
  if (s != DAT_HANDLE_NULL) dat_ep_free(s);
  if (psp != DAT_HANDLE_NULL) dat_psp_free(psp);
  expect("xia: evd_free of the connect EVD once the EP is gone", dat_evd_free(conn), DAT_SUCCESS);
  dat_evd_free(s_conn);
  dat_evd_free(cr);
  dat_evd_free(dto);
  dat_evd_free(dto1);
  dat_pz_free(pz2);
  dat_pz_free(pz);
}

static void data_path(DAT_IA_HANDLE ia, DAT_IA_ADDRESS_PTR addr, DAT_CONN_QUAL port) {
  static char cbuf[8192], sbuf[8192];
  DAT_PZ_HANDLE pz = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE c_conn = DAT_HANDLE_NULL, c_req = DAT_HANDLE_NULL, c_rcv = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE s_req = DAT_HANDLE_NULL, s_shared = DAT_HANDLE_NULL, cr_evd = DAT_HANDLE_NULL;
  DAT_EP_HANDLE c = DAT_HANDLE_NULL, s = DAT_HANDLE_NULL;
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  DAT_LMR_HANDLE c_lmr = DAT_HANDLE_NULL, s_lmr = DAT_HANDLE_NULL;
  DAT_LMR_CONTEXT c_l = 0, s_l = 0;
  DAT_RMR_CONTEXT c_r = 0, s_r = 0;
  DAT_VLEN len;
  DAT_VADDR va;
  DAT_REGION_DESCRIPTION region;
  DAT_DTO_COOKIE ck;
  DAT_EVENT ev;
  DAT_LMR_TRIPLET iov[3];
  DAT_RMR_TRIPLET rmr;
  DAT_EP_ATTR attr;

  expect("dp: pz_create", dat_pz_create(ia, &pz), DAT_SUCCESS);
  expect("dp: evd_create", dat_evd_create(ia, 16, NULL, DAT_EVD_CONNECTION_FLAG, &c_conn),
         DAT_SUCCESS);
  dat_evd_create(ia, 16, NULL, DAT_EVD_DTO_FLAG, &c_req);
  dat_evd_create(ia, 16, NULL, DAT_EVD_DTO_FLAG, &c_rcv);
  dat_evd_create(ia, 16, NULL, DAT_EVD_DTO_FLAG, &s_req);
  dat_evd_create(ia, 16, NULL, DAT_EVD_CR_FLAG, &cr_evd);
  expect("dp: evd_create DTO|CONNECTION (shared)",
         dat_evd_create(ia, 16, NULL, DAT_EVD_DTO_FLAG | DAT_EVD_CONNECTION_FLAG, &s_shared),
         DAT_SUCCESS);
  memset(&attr, 0, sizeof(attr));
  attr.service_type = DAT_SERVICE_TYPE_RC;
  attr.max_message_size = 1 << 20;
  attr.max_rdma_size = 1 << 20;
  attr.qos = DAT_QOS_BEST_EFFORT;
  attr.max_recv_dtos = 4;
  attr.max_request_dtos = 8;
  attr.max_recv_iov = 2;
  attr.max_request_iov = 2;
  attr.max_rdma_read_in = 4;
  attr.max_rdma_read_out = 4;
  expect("dp: ep_create (client)", dat_ep_create(ia, pz, c_rcv, c_req, c_conn, &attr, &c),
         DAT_SUCCESS);
  expect("dp: ep_create (server, shared EVD)",
         dat_ep_create(ia, pz, s_shared, s_req, s_shared, &attr, &s), DAT_SUCCESS);
  {
    DAT_LMR_HANDLE none = DAT_HANDLE_NULL;
    region.for_va = cbuf;
    expect("dp: lmr_create of 0 bytes (dapltest FFT mem case 2)",
           dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, 0, pz, DAT_MEM_PRIV_ALL_FLAG,
                          DAT_VA_TYPE_VA, &none, &c_l, &c_r, &len, &va),
           DAT_LENGTH_ERROR);
    region.for_va = NULL;
    expect("dp: lmr_create at NULL",
           dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, 64, pz, DAT_MEM_PRIV_ALL_FLAG,
                          DAT_VA_TYPE_VA, &none, &c_l, &c_r, &len, &va),
           DAT_INVALID_PARAMETER);
    truth("dp: no LMR handed out", none == DAT_HANDLE_NULL);
  }
  region.for_va = cbuf;
  expect("dp: lmr_create (client)",
         dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, sizeof(cbuf), pz, DAT_MEM_PRIV_ALL_FLAG,
                        DAT_VA_TYPE_VA, &c_lmr, &c_l, &c_r, &len, &va),
         DAT_SUCCESS);
  region.for_va = sbuf;
  expect("dp: lmr_create (server)",
         dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, sizeof(sbuf), pz, DAT_MEM_PRIV_ALL_FLAG,
                        DAT_VA_TYPE_VA, &s_lmr, &s_l, &s_r, &len, &va),
         DAT_SUCCESS);
  for (size_t i = 0; i < sizeof(cbuf); ++i) cbuf[i] = (char)(i * 7 + 1);
  for (size_t i = 0; i < sizeof(sbuf); ++i) sbuf[i] = (char)(i * 13 + 5);

  /* wrong state and bad arguments */
  iov[0] = triplet(c_l, cbuf, 64);
  ck.as_64 = 0x51;
  expect("dp: post_send on an UNCONNECTED EP",
         dat_ep_post_send(c, 1, iov, ck, DAT_COMPLETION_DEFAULT_FLAG), DAT_INVALID_STATE);
  rmr.rmr_context = s_r;
  rmr.virtual_address = (DAT_VADDR)(uintptr_t)sbuf;
  rmr.segment_length = 64;
  expect("dp: post_rdma_write on an UNCONNECTED EP",
         dat_ep_post_rdma_write(c, 1, iov, ck, &rmr, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_INVALID_STATE);
  expect("dp: post_rdma_read on an UNCONNECTED EP",
         dat_ep_post_rdma_read(c, 1, iov, ck, &rmr, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_INVALID_STATE);
  iov[1] = iov[2] = iov[0];
  expect("dp: post_recv with more segments than max_recv_iov",
         dat_ep_post_recv(s, 3, iov, ck, DAT_COMPLETION_DEFAULT_FLAG), DAT_INVALID_PARAMETER);
  expect("dp: post_recv with NULL segments",
         dat_ep_post_recv(s, 1, NULL, ck, DAT_COMPLETION_DEFAULT_FLAG), DAT_INVALID_PARAMETER);
  /* the server's receives, posted before the connection: #1 gets the send, 2..4 are flushed */
  for (uint64_t i = 1; i <= 4; ++i) {
    iov[0] = triplet(s_l, sbuf + 64 * (i - 1), 64);
    ck.as_64 = i;
    expect("dp: post_recv before the connection",
           dat_ep_post_recv(s, 1, iov, ck, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
  }
  iov[0] = triplet(s_l, sbuf + 512, 64);
  ck.as_64 = 9;
  expect("dp: post_recv beyond max_recv_dtos",
         dat_ep_post_recv(s, 1, iov, ck, DAT_COMPLETION_DEFAULT_FLAG), DAT_INSUFFICIENT_RESOURCES);

  /* connect */
  expect("dp: psp_create", dat_psp_create(ia, port, cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
         DAT_SUCCESS);
  expect("dp: ep_connect",
         dat_ep_connect(c, addr, port, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT,
                        DAT_CONNECT_DEFAULT_FLAG),
         DAT_SUCCESS);
  if (next_event(cr_evd, &ev) != DAT_CONNECTION_REQUEST_EVENT) {
    truth("dp: connection request", 0);
    goto out;
  }
  expect("dp: cr_accept (user-owned QP)",
         dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, s, 0, NULL), DAT_SUCCESS);
  truth("dp: server ESTABLISHED on the shared EVD",
        next_event(s_shared, &ev) == DAT_CONNECTION_EVENT_ESTABLISHED);
  if (!truth("dp: client ESTABLISHED", next_event(c_conn, &ev) == DAT_CONNECTION_EVENT_ESTABLISHED))
    goto out;

  /* send/recv */
  iov[0] = triplet(c_l, cbuf, 40);
  iov[1] = triplet(c_l, cbuf + 100, 24);
  ck.as_64 = 0x51;
  expect("dp: post_send (2 segments)", dat_ep_post_send(c, 2, iov, ck, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_SUCCESS);
  dto_done("dp: send", c_req, 0x51, 64, DAT_DTO_SUCCESS);
  dto_done("dp: recv #1 on the shared EVD", s_shared, 1, 64, DAT_DTO_SUCCESS);
  truth("dp: received bytes are the sent ones",
        memcmp(sbuf, cbuf, 40) == 0 && memcmp(sbuf + 40, cbuf + 100, 24) == 0);

  /* RDMA write: client -> server's sbuf[1024..2048) */
  iov[0] = triplet(c_l, cbuf + 1024, 512);
  iov[1] = triplet(c_l, cbuf + 1536, 512);
  rmr.rmr_context = s_r;
  rmr.virtual_address = (DAT_VADDR)(uintptr_t)(sbuf + 1024);
  rmr.segment_length = 1024;
  ck.as_64 = 0x52;
  expect("dp: post_rdma_write",
         dat_ep_post_rdma_write(c, 2, iov, ck, &rmr, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
  dto_done("dp: rdma write", c_req, 0x52, 1024, DAT_DTO_SUCCESS);
  truth("dp: RDMA write: target bytes equal the source",
        memcmp(sbuf + 1024, cbuf + 1024, 1024) == 0);

  /* RDMA read: server's sbuf[4096..4096+700) -> client's cbuf[4096..) */
  iov[0] = triplet(c_l, cbuf + 4096, 700);
  rmr.virtual_address = (DAT_VADDR)(uintptr_t)(sbuf + 4096);
  rmr.segment_length = 700;
  ck.as_64 = 0x53;
  expect("dp: post_rdma_read",
         dat_ep_post_rdma_read(c, 1, iov, ck, &rmr, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
  dto_done("dp: rdma read", c_req, 0x53, 700, DAT_DTO_SUCCESS);
  truth("dp: RDMA read: local bytes equal the remote ones",
        memcmp(cbuf + 4096, sbuf + 4096, 700) == 0);

  /* a thread asleep in evd_wait is woken by a completion (its CQ was armed before it slept:
   * no lost wakeup); the 64-byte write goes inline */
  {
    pthread_t t;
    struct waiter w;
    iov[0] = triplet(c_l, cbuf + 2048, 64);
    rmr.virtual_address = (DAT_VADDR)(uintptr_t)(sbuf + 2048);
    rmr.segment_length = 64;
    ck.as_64 = 0x55;
    if (truth("dp: a thread waits in evd_wait on the request EVD", start_waiter(&t, &w, c_req))) {
      const struct timespec nap = {0, 100 * 1000 * 1000};
      nanosleep(&nap, NULL); /* let it reach its sleep */
      expect("dp: post_rdma_write (64 bytes) while the thread sleeps",
             dat_ep_post_rdma_write(c, 1, iov, ck, &rmr, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
      pthread_join(t, NULL);
      truth("dp: the sleeping waiter got the write's completion",
            w.result == DAT_SUCCESS && w.event.event_number == DAT_DTO_COMPLETION_EVENT &&
                w.event.event_data.dto_completion_event_data.user_cookie.as_64 == 0x55 &&
                w.event.event_data.dto_completion_event_data.status == DAT_DTO_SUCCESS);
      truth("dp: 64-byte RDMA write: target bytes equal the source",
            memcmp(sbuf + 2048, cbuf + 2048, 64) == 0);
    }
  }

  /* max_request_dtos (8) suppressed writes nobody dequeues, then one more: the post reaps the
   * finished ones instead of refusing it */
  {
    int posted = 0;
    for (int i = 0; i < 8; ++i) {
      iov[0] = triplet(c_l, cbuf + 3072 + 64 * i, 64);
      rmr.virtual_address = (DAT_VADDR)(uintptr_t)(sbuf + 3072 + 64 * i);
      rmr.segment_length = 64;
      ck.as_64 = 0x60 + (uint64_t)i;
      posted +=
          dat_ep_post_rdma_write(c, 1, iov, ck, &rmr, DAT_COMPLETION_SUPPRESS_FLAG) == DAT_SUCCESS;
    }
    truth("dp: 8 suppressed RDMA writes posted", posted == 8);
    const struct timespec nap = {0, 300 * 1000 * 1000};
    nanosleep(&nap, NULL); /* they complete */
    iov[0] = triplet(c_l, cbuf + 3584, 64);
    rmr.virtual_address = (DAT_VADDR)(uintptr_t)(sbuf + 3584);
    ck.as_64 = 0x68;
    expect("dp: a 9th write once the 8 completed",
           dat_ep_post_rdma_write(c, 1, iov, ck, &rmr, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
    dto_done("dp: the 9th write (only it reports)", c_req, 0x68, 64, DAT_DTO_SUCCESS);
    truth("dp: the 9 writes' target bytes equal the source",
          memcmp(sbuf + 3072, cbuf + 3072, 576) == 0);
  }

  /* a suppressed send completes silently */
  iov[0] = triplet(c_l, cbuf, 8);
  ck.as_64 = 0x54;
  expect("dp: post_send suppressed", dat_ep_post_send(c, 1, iov, ck, DAT_COMPLETION_SUPPRESS_FLAG),
         DAT_SUCCESS);
  dto_done("dp: recv #2 (of the suppressed send)", s_shared, 2, 8, DAT_DTO_SUCCESS);
  expect("dp: no event for the suppressed send", dat_evd_wait(c_req, 200000, 1, &ev, NULL),
         DAT_TIMEOUT_EXPIRED);
  {
    DAT_EP_STATE st;
    DAT_BOOLEAN in_idle = DAT_TRUE, out_idle = DAT_FALSE;
    dat_ep_get_status(s, &st, &in_idle, &out_idle);
    truth("dp: ep_get_status: server has receives outstanding", in_idle == DAT_FALSE);
  }

  /* the client ends the connection: the server's two remaining receives are flushed and
   * reported on the shared EVD before its DISCONNECTED */
  expect("dp: ep_disconnect abrupt", dat_ep_disconnect(c, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
  dto_done("dp: recv #3 flushed before DISCONNECTED", s_shared, 3, (DAT_VLEN)-1,
           DAT_DTO_ERR_FLUSHED);
  dto_done("dp: recv #4 flushed before DISCONNECTED", s_shared, 4, (DAT_VLEN)-1,
           DAT_DTO_ERR_FLUSHED);
  truth("dp: then the server's DISCONNECTED",
        next_event(s_shared, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED &&
            ev.event_data.connect_event_data.ep_handle == s);
  truth("dp: client DISCONNECTED", next_event(c_conn, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
  iov[0] = triplet(c_l, cbuf, 8);
  expect("dp: post_send on a DISCONNECTED EP",
         dat_ep_post_send(c, 1, iov, ck, DAT_COMPLETION_DEFAULT_FLAG), DAT_INVALID_STATE);
  iov[0] = triplet(s_l, sbuf, 8);
  expect("dp: post_recv on a DISCONNECTED EP",
         dat_ep_post_recv(s, 1, iov, ck, DAT_COMPLETION_DEFAULT_FLAG), DAT_INVALID_STATE);
  {
    DAT_EP_STATE st;
    DAT_BOOLEAN in_idle = DAT_FALSE, out_idle = DAT_FALSE;
    dat_ep_get_status(s, &st, &in_idle, &out_idle);
    truth("dp: ep_get_status: server idle after the flush", in_idle == DAT_TRUE);
  }
  rdma_read_out_zero(ia, addr, port, pz, cr_evd, c_l, s_r, cbuf, sbuf);
  flush_many(ia, addr, port, pz, cr_evd, s_l, sbuf);
  peer_gone_while_waiting(ia, addr, port, pz, cr_evd, s_l, sbuf, 0);
  peer_gone_while_waiting(ia, addr, port, pz, cr_evd, s_l, sbuf, 1);
  graceful_drains_sends(ia, addr, port, pz, cr_evd);
  graceful_drain_limit(ia, addr, port, pz, cr_evd, c_l, cbuf, s_l, sbuf);
  srq_shared(ia, addr, port, pz, cr_evd, c_l, cbuf, s_l, sbuf);
  memory_windows(ia, addr, port, pz, cr_evd, c_l, cbuf, s_lmr, s_l, sbuf);
out:
  expect("dp: ep_free (client)", dat_ep_free(c), DAT_SUCCESS);
  expect("dp: ep_free (server)", dat_ep_free(s), DAT_SUCCESS);
  if (psp != DAT_HANDLE_NULL) dat_psp_free(psp);
  expect("dp: lmr_free", dat_lmr_free(c_lmr), DAT_SUCCESS);
  dat_lmr_free(s_lmr);
  expect("dp: evd_free (shared)", dat_evd_free(s_shared), DAT_SUCCESS);
  dat_evd_free(c_conn);
  dat_evd_free(c_req);
  dat_evd_free(c_rcv);
  dat_evd_free(s_req);
  dat_evd_free(cr_evd);
  expect("dp: pz_free", dat_pz_free(pz), DAT_SUCCESS);
}

/* ---- the IB extensions (dat_ib_extensions.h) */

static const char *named_attr(const DAT_PROVIDER_ATTR *pa, const char *name) {
  for (DAT_COUNT i = 0; i < pa->num_provider_specific_attr; ++i)
    if (strcmp(pa->provider_specific_attr[i].name, name) == 0)
      return pa->provider_specific_attr[i].value;
  return NULL;
}

static int attr_true(const DAT_PROVIDER_ATTR *pa, const char *name) {
  const char *v = named_attr(pa, name);
  return v != NULL && strcmp(v, "TRUE") == 0;
}

/* Waits for an extended DTO event (DAT_IB_DTO_EVENT) on evd and checks what it says; fills *ev. */
static int ext_done(const char *what, DAT_EVD_HANDLE evd, uint64_t cookie, DAT_VLEN length,
                    DAT_IB_EXT_TYPE type, int operation, DAT_DTO_COMPLETION_STATUS status,
                    DAT_EVENT *ev) {
  DAT_EVENT_NUMBER n = next_event(evd, ev);
  const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev->event_data.dto_completion_event_data;
  const DAT_IB_EXTENSION_EVENT_DATA *x =
      (const DAT_IB_EXTENSION_EVENT_DATA *)ev->event_extension_data;
  char line[200], size[24] = "any";
  if (length != (DAT_VLEN)-1) snprintf(size, sizeof(size), "%llu", (unsigned long long)length);
  snprintf(line, sizeof(line),
           "%s: DAT_IB_DTO_EVENT type %d op 0x%x, cookie 0x%llx, length %s, status %d", what,
           (int)type, operation, (unsigned long long)cookie, size, (int)status);
  int ok = n == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT && d->user_cookie.as_64 == cookie &&
           d->status == status && x->type == type && (int)d->operation == operation &&
           (length == (DAT_VLEN)-1 || d->transfered_length == length);
  if (!ok)
    printf("     (event 0x%x type %d op 0x%x cookie 0x%llx length %llu status %d)\n", n,
           (int)x->type, (int)d->operation, (unsigned long long)d->user_cookie.as_64,
           (unsigned long long)d->transfered_length, (int)d->status);
  return truth(line, ok);
}

static int no_event(DAT_EVD_HANDLE evd) {
  DAT_EVENT ev;
  return DAT_GET_TYPE(dat_evd_wait(evd, 200000, 1, &ev, NULL)) == DAT_TIMEOUT_EXPIRED;
}

/* dat_ib_query_counters of all counters of `handle` into out[n]. */
static int all_counters(DAT_HANDLE handle, int n, DAT_UINT64 *out) {
  memset(out, 0, sizeof(DAT_UINT64) * (size_t)n);
  return dat_ib_query_counters(handle, n, out, 0) == DAT_SUCCESS;
}

static void extensions(DAT_IA_HANDLE ia, DAT_IA_ADDRESS_PTR addr, DAT_CONN_QUAL port,
                       const char *provider, const DAT_IA_ATTR *ia_attr,
                       const DAT_PROVIDER_ATTR *pr_attr) {
  /* 8-aligned: atomics work on aligned 64-bit words */
  static uint64_t cmem[64], smem[64], plain[8], readonly[8];
  DAT_PZ_HANDLE pz = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE c_conn = DAT_HANDLE_NULL, c_dto = DAT_HANDLE_NULL, s_conn = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE s_dto = DAT_HANDLE_NULL, cr_evd = DAT_HANDLE_NULL;
  DAT_EP_HANDLE c = DAT_HANDLE_NULL, s = DAT_HANDLE_NULL;
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  DAT_LMR_HANDLE c_lmr = DAT_HANDLE_NULL, s_lmr = DAT_HANDLE_NULL, p_lmr = DAT_HANDLE_NULL;
  DAT_LMR_HANDLE ro_lmr = DAT_HANDLE_NULL;
  DAT_LMR_CONTEXT c_l = 0, s_l = 0, p_l = 0, ro_l = 0;
  DAT_RMR_CONTEXT c_r = 0, s_r = 0, p_r = 0, ro_r = 0;
  DAT_VLEN len;
  DAT_VADDR va;
  DAT_REGION_DESCRIPTION region;
  DAT_DTO_COOKIE ck;
  DAT_EVENT ev;
  DAT_LMR_TRIPLET iov[2];
  DAT_RMR_TRIPLET rmr;
  DAT_EP_ATTR attr;
  const DAT_IB_EXTENSION_EVENT_DATA *x =
      (const DAT_IB_EXTENSION_EVENT_DATA *)ev.event_extension_data;
  int established = 0;

  /* what ia_query says, as libdaplofa says it (dtestx needs these) */
  truth("ext: ia_query: extension_supported is DAT_EXTENSION_IB",
        ia_attr->extension_supported == DAT_EXTENSION_IB);
  truth("ext: ia_query: extension_version is DAT_IB_EXTENSION_VERSION",
        ia_attr->extension_version == DAT_IB_EXTENSION_VERSION);
  truth(
      "ext: provider attributes name immediate data, atomics and counters TRUE",
      attr_true(pr_attr, DAT_IB_ATTR_IMMED_DATA) && attr_true(pr_attr, DAT_IB_ATTR_FETCH_AND_ADD) &&
          attr_true(pr_attr, DAT_IB_ATTR_CMP_AND_SWAP) && attr_true(pr_attr, DAT_IB_ATTR_COUNTERS));
  truth("ext: provider attributes name UD (TRUE or FALSE: see ud:)",
        named_attr(pr_attr, DAT_IB_ATTR_UD) != NULL);

  expect("ext: pz_create", dat_pz_create(ia, &pz), DAT_SUCCESS);
  dat_evd_create(ia, 16, NULL, DAT_EVD_CONNECTION_FLAG, &c_conn);
  dat_evd_create(ia, 16, NULL, DAT_EVD_CONNECTION_FLAG, &s_conn);
  dat_evd_create(ia, 32, NULL, DAT_EVD_DTO_FLAG, &c_dto);
  dat_evd_create(ia, 32, NULL, DAT_EVD_DTO_FLAG, &s_dto);
  dat_evd_create(ia, 16, NULL, DAT_EVD_CR_FLAG, &cr_evd);
  memset(&attr, 0, sizeof(attr));
  attr.qos = DAT_QOS_BEST_EFFORT;
  attr.service_type = DAT_SERVICE_TYPE_RC;
  attr.max_recv_dtos = attr.max_request_dtos = 8;
  attr.max_recv_iov = attr.max_request_iov = 1;
  attr.max_rdma_read_in = attr.max_rdma_read_out = 4;
  expect("ext: ep_create (client)", dat_ep_create(ia, pz, c_dto, c_dto, c_conn, &attr, &c),
         DAT_SUCCESS);
  expect("ext: ep_create (server)", dat_ep_create(ia, pz, s_dto, s_dto, s_conn, &attr, &s),
         DAT_SUCCESS);
  region.for_va = cmem;
  expect("ext: lmr_create with DAT_IB_MEM_PRIV_REMOTE_ATOMIC",
         dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, sizeof(cmem), pz,
                        DAT_MEM_PRIV_ALL_FLAG | DAT_IB_MEM_PRIV_REMOTE_ATOMIC, DAT_VA_TYPE_VA,
                        &c_lmr, &c_l, &c_r, &len, &va),
         DAT_SUCCESS);
  region.for_va = smem;
  dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, sizeof(smem), pz,
                 DAT_MEM_PRIV_ALL_FLAG | DAT_IB_MEM_PRIV_REMOTE_ATOMIC, DAT_VA_TYPE_VA, &s_lmr,
                 &s_l, &s_r, &len, &va);
  region.for_va = plain; /* no remote atomics */
  dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, sizeof(plain), pz, DAT_MEM_PRIV_ALL_FLAG,
                 DAT_VA_TYPE_VA, &p_lmr, &p_l, &p_r, &len, &va);
  region.for_va = readonly; /* no local write: an atomic's original value cannot land here */
  dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, sizeof(readonly), pz,
                 DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_REMOTE_READ_FLAG, DAT_VA_TYPE_VA,
                 &ro_lmr, &ro_l, &ro_r, &len, &va);
  for (int i = 0; i < 64; ++i) cmem[i] = 0x0101010101010101ULL * (uint64_t)(i + 1);

  iov[0] = triplet(c_l, cmem, 100);
  rmr.rmr_context = s_r;
  rmr.virtual_address = (DAT_VADDR)(uintptr_t)(smem + 8);
  rmr.segment_length = 100;
  ck.as_64 = 0x61;
  expect("ext: rdma_write_immed on an UNCONNECTED EP",
         dat_ib_post_rdma_write_immed(c, 1, iov, ck, &rmr, 0x1234, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_INVALID_STATE);
  /* the server's receives: the immediate data completes them */
  for (uint64_t i = 0; i < 2; ++i) {
    iov[0] = triplet(s_l, smem + 40 + i, 8);
    ck.as_64 = 0x71 + i;
    dat_ep_post_recv(s, 1, iov, ck, DAT_COMPLETION_DEFAULT_FLAG);
  }
  expect("ext: psp_create", dat_psp_create(ia, port, cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
         DAT_SUCCESS);
  dat_ep_connect(c, addr, port, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG);
  if (next_event(cr_evd, &ev) == DAT_CONNECTION_REQUEST_EVENT)
    dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, s, 0, NULL);
  established += next_event(s_conn, &ev) == DAT_CONNECTION_EVENT_ESTABLISHED;
  established += next_event(c_conn, &ev) == DAT_CONNECTION_EVENT_ESTABLISHED;
  if (!truth("ext: both EPs ESTABLISHED", established == 2)) goto out;

  /* RDMA write with immediate data: 100 bytes, the immediate data completes receive 0x71 */
  iov[0] = triplet(c_l, cmem, 100);
  ck.as_64 = 0x61;
  expect("ext: rdma_write_immed",
         dat_ib_post_rdma_write_immed(c, 1, iov, ck, &rmr, 0xfeedf00d, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_SUCCESS);
  ext_done("ext: write_immed completes (requester)", c_dto, 0x61, 100, DAT_IB_RDMA_WRITE_IMMED,
           DAT_IB_DTO_RDMA_WRITE_IMMED, DAT_DTO_SUCCESS, &ev);
  ext_done("ext: receive 0x71 has the immediate data (responder)", s_dto, 0x71, 100,
           DAT_IB_RDMA_WRITE_IMMED_DATA, DAT_IB_DTO_RECV_IMMED, DAT_DTO_SUCCESS, &ev);
  truth("ext: the immediate data arrives exactly (0xfeedf00d)", x->val.immed.data == 0xfeedf00d);
  truth("ext: write_immed: target bytes equal the source", memcmp(smem + 8, cmem, 100) == 0);
  /* no data, immediate data only */
  ck.as_64 = 0x62;
  expect("ext: rdma_write_immed of 0 segments",
         dat_ib_post_rdma_write_immed(c, 0, iov, ck, &rmr, 0x2a, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_SUCCESS);
  ext_done("ext: 0-byte write_immed completes", c_dto, 0x62, 0, DAT_IB_RDMA_WRITE_IMMED,
           DAT_IB_DTO_RDMA_WRITE_IMMED, DAT_DTO_SUCCESS, &ev);
  ext_done("ext: receive 0x72 has it", s_dto, 0x72, 0, DAT_IB_RDMA_WRITE_IMMED_DATA,
           DAT_IB_DTO_RECV_IMMED, DAT_DTO_SUCCESS, &ev);
  truth("ext: its immediate data arrives exactly (0x2a)", x->val.immed.data == 0x2a);

  /* compare-and-swap on smem[32]: equal (swaps), then unequal (does not) */
  smem[32] = 0x1122334455667788ULL;
  cmem[0] = 0;
  iov[0] = triplet(c_l, cmem, 8);
  rmr.virtual_address = (DAT_VADDR)(uintptr_t)(smem + 32);
  rmr.segment_length = 8;
  ck.as_64 = 0x63;
  expect("ext: cmp_and_swap (equal)",
         dat_ib_post_cmp_and_swap(c, 0x1122334455667788ULL, 0x8877665544332211ULL, iov, ck, &rmr,
                                  DAT_COMPLETION_DEFAULT_FLAG),
         DAT_SUCCESS);
  ext_done("ext: cmp_and_swap completes", c_dto, 0x63, 8, DAT_IB_CMP_AND_SWAP, DAT_IB_DTO_CMP_SWAP,
           DAT_DTO_SUCCESS, &ev);
  truth("ext: cmp_and_swap: the original value arrives exactly", cmem[0] == 0x1122334455667788ULL);
  truth("ext: cmp_and_swap: the target holds the swap value", smem[32] == 0x8877665544332211ULL);
  ck.as_64 = 0x64;
  expect("ext: cmp_and_swap (unequal)",
         dat_ib_post_cmp_and_swap(c, 5, 6, iov, ck, &rmr, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_SUCCESS);
  ext_done("ext: cmp_and_swap (unequal) completes", c_dto, 0x64, 8, DAT_IB_CMP_AND_SWAP,
           DAT_IB_DTO_CMP_SWAP, DAT_DTO_SUCCESS, &ev);
  truth("ext: cmp_and_swap (unequal): original returned, target unchanged",
        cmem[0] == 0x8877665544332211ULL && smem[32] == 0x8877665544332211ULL);
  /* fetch-and-add */
  ck.as_64 = 0x65;
  expect("ext: fetch_and_add",
         dat_ib_post_fetch_and_add(c, 0x10, iov, ck, &rmr, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_SUCCESS);
  ext_done("ext: fetch_and_add completes", c_dto, 0x65, 8, DAT_IB_FETCH_AND_ADD,
           DAT_IB_DTO_FETCH_ADD, DAT_DTO_SUCCESS, &ev);
  truth("ext: fetch_and_add: the original value arrives exactly, the target is added to",
        cmem[0] == 0x8877665544332211ULL && smem[32] == 0x8877665544332221ULL);

  /* posts that could not complete (or not as asked) are refused at once */
  ck.as_64 = 0x66;
  iov[0] = triplet(c_l, cmem, 4);
  expect("ext: atomic into 4 bytes",
         dat_ib_post_fetch_and_add(c, 1, iov, ck, &rmr, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_LENGTH_ERROR);
  iov[0] = triplet(c_l, cmem, 8);
  rmr.virtual_address = (DAT_VADDR)(uintptr_t)((char *)(smem + 32) + 4);
  expect("ext: atomic on a misaligned remote address",
         dat_ib_post_cmp_and_swap(c, 1, 2, iov, ck, &rmr, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_INVALID_PARAMETER);
  rmr.virtual_address = (DAT_VADDR)(uintptr_t)(smem + 32);
  iov[0] = triplet(ro_l, readonly, 8);
  expect("ext: atomic into an LMR without local write",
         dat_ib_post_fetch_and_add(c, 1, iov, ck, &rmr, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_PRIVILEGES_VIOLATION);
  iov[0] = triplet(c_l, plain, 8);
  expect("ext: atomic into memory outside the LMR named",
         dat_ib_post_fetch_and_add(c, 1, iov, ck, &rmr, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_PRIVILEGES_VIOLATION);
  expect("ext: atomic with a NULL local buffer",
         dat_ib_post_fetch_and_add(c, 1, NULL, ck, &rmr, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_INVALID_PARAMETER);
  iov[0] = triplet(c_l, cmem, 8);
  expect("ext: atomic with a NULL remote buffer",
         dat_ib_post_cmp_and_swap(c, 1, 2, iov, ck, NULL, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_INVALID_PARAMETER);
  iov[1] = iov[0];
  expect("ext: write_immed with more segments than max_request_iov",
         dat_ib_post_rdma_write_immed(c, 2, iov, ck, &rmr, 1, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_INVALID_PARAMETER);
  expect("ext: UD send on an RC EP",
         dat_ib_post_send_ud(c, 1, iov, NULL, ck, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_MODEL_NOT_SUPPORTED);
  truth("ext: no completion for the refused posts", no_event(c_dto));
  truth("ext: the target was not touched by them", smem[32] == 0x8877665544332221ULL);

  /* counters: the posts above, counted where they happened */
  {
    DAT_UINT64 epc[DCNT_EP_ALL_COUNTERS], iac[DCNT_IA_ALL_COUNTERS], evc[DCNT_EVD_ALL_COUNTERS];
    DAT_PZ_HANDLE bad = pz;
    if (truth("ext: query_counters (client EP, all)", all_counters(c, DCNT_EP_ALL_COUNTERS, epc)))
      truth(
          "ext: client EP counts 2 write_immed (100 bytes), 2 cmp_and_swap, 1 fetch_and_add, 1 "
          "connect",
          epc[DCNT_EP_POST_WRITE_IMM] == 2 && epc[DCNT_EP_POST_WRITE_IMM_DATA] == 100 &&
              epc[DCNT_EP_POST_CMP_SWAP] == 2 && epc[DCNT_EP_POST_FETCH_ADD] == 1 &&
              epc[DCNT_EP_CONNECT] == 1 && epc[DCNT_EP_POST_SEND] == 0);
    if (truth("ext: query_counters (server EP, all)", all_counters(s, DCNT_EP_ALL_COUNTERS, epc)))
      truth("ext: server EP counts 2 receives posted, 2 with RDMA immediate data (100 bytes)",
            epc[DCNT_EP_POST_RECV] == 2 && epc[DCNT_EP_POST_RECV_DATA] == 16 &&
                epc[DCNT_EP_RECV_RDMA_IMM] == 2 && epc[DCNT_EP_RECV_RDMA_IMM_DATA] == 100 &&
                epc[DCNT_EP_RECV] == 0);
    if (truth("ext: query_counters (IA)", all_counters(ia, DCNT_IA_ALL_COUNTERS, iac)))
      truth("ext: IA counts EPs, LMRs, the CR and both ends' establishment",
            iac[DCNT_IA_EP_CREATE] >= 2 && iac[DCNT_IA_LMR_CREATE] >= 4 &&
                iac[DCNT_IA_SP_CR] >= 1 && iac[DCNT_IA_SP_CR_ACCEPTED] >= 1 &&
                iac[DCNT_IA_CM_ACTIVE_EST] >= 1 && iac[DCNT_IA_CM_PASSIVE_EST] >= 1);
    if (truth("ext: query_counters (EVD)", all_counters(c_dto, DCNT_EVD_ALL_COUNTERS, evc)))
      truth("ext: the client's DTO EVD counts its 5 completions and the waits for them",
            evc[DCNT_EVD_DTO_CALLBACK] == 5 && evc[DCNT_EVD_WAIT] >= 5);
    /* one counter: it goes to out[counter] (as libdaplofa); the others are left alone */
    memset(epc, 0xee, sizeof(epc));
    expect("ext: query_counters (one)", dat_ib_query_counters(c, DCNT_EP_POST_CMP_SWAP, epc, 0),
           DAT_SUCCESS);
    truth("ext: one counter lands at its index, nothing else written",
          epc[DCNT_EP_POST_CMP_SWAP] == 2 && epc[DCNT_EP_POST_FETCH_ADD] == 0xeeeeeeeeeeeeeeeeULL);
    expect("ext: query_counters with reset", dat_ib_query_counters(c, DCNT_EP_ALL_COUNTERS, epc, 1),
           DAT_SUCCESS);
    all_counters(c, DCNT_EP_ALL_COUNTERS, epc);
    truth("ext: reset sets them to 0",
          epc[DCNT_EP_POST_CMP_SWAP] == 0 && epc[DCNT_EP_CONNECT] == 0);
    expect("ext: query_counters beyond the last",
           dat_ib_query_counters(c, DCNT_EP_ALL_COUNTERS + 1, epc, 0), DAT_INVALID_PARAMETER);
    expect("ext: query_counters with NULL out",
           dat_ib_query_counters(c, DCNT_EP_ALL_COUNTERS, NULL, 0), DAT_INVALID_PARAMETER);
    expect("ext: query_counters of a PZ", dat_ib_query_counters(bad, 0, epc, 0),
           DAT_INVALID_HANDLE);
    expect("ext: print_counters (EVD)", dat_ib_print_counters(s_dto, DCNT_EVD_ALL_COUNTERS, 0),
           DAT_SUCCESS);
  }

  /* the peer's memory does not allow remote atomics: an error completion, not a hang */
  iov[0] = triplet(c_l, cmem, 8);
  rmr.rmr_context = p_r;
  rmr.virtual_address = (DAT_VADDR)(uintptr_t)plain;
  ck.as_64 = 0x67;
  expect("ext: fetch_and_add on an LMR without remote atomics",
         dat_ib_post_fetch_and_add(c, 1, iov, ck, &rmr, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
  ext_done("ext: it completes with DAT_DTO_ERR_REMOTE_ACCESS", c_dto, 0x67, (DAT_VLEN)-1,
           DAT_IB_FETCH_AND_ADD, DAT_IB_DTO_FETCH_ADD, DAT_DTO_ERR_REMOTE_ACCESS, &ev);
  truth("ext: its extension status is DAT_IB_OP_ERR", x->status == DAT_IB_OP_ERR);

  dat_ep_disconnect(c, DAT_CLOSE_ABRUPT_FLAG);
  truth("ext: client DISCONNECTED", next_event(c_conn, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
  truth("ext: server DISCONNECTED", next_event(s_conn, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
out:
  expect("ext: ep_free (client)", dat_ep_free(c), DAT_SUCCESS);
  expect("ext: ep_free (server)", dat_ep_free(s), DAT_SUCCESS);
  if (psp != DAT_HANDLE_NULL) dat_psp_free(psp);
  expect("ext: lmr_free", dat_lmr_free(c_lmr), DAT_SUCCESS);
  dat_lmr_free(s_lmr);
  dat_lmr_free(p_lmr);
  dat_lmr_free(ro_lmr);
  dat_evd_free(c_dto);
  dat_evd_free(s_dto);
  dat_evd_free(c_conn);
  dat_evd_free(s_conn);
  dat_evd_free(cr_evd);
  expect("ext: pz_free", dat_pz_free(pz), DAT_SUCCESS);

  /* the open query: an IA for its attributes only, closed by close_query */
  {
    DAT_HANDLE q = DAT_HANDLE_NULL;
    DAT_IA_ATTR qa;
    DAT_PROVIDER_ATTR qp;
    memset(&qa, 0, sizeof(qa));
    memset(&qp, 0, sizeof(qp));
    if (expect("ext: open_query",
               dat_ib_open_query((DAT_NAME_PTR)provider, &q, DAT_IA_FIELD_ALL, &qa,
                                 DAT_PROVIDER_FIELD_ALL, &qp),
               DAT_SUCCESS)) {
      truth("ext: open_query: an IA handle and the extension's attributes",
            q != DAT_HANDLE_NULL && qa.extension_supported == DAT_EXTENSION_IB &&
                qa.ia_address_ptr != NULL && attr_true(&qp, DAT_IB_ATTR_COUNTERS));
      expect("ext: close_query", dat_ib_close_query(q), DAT_SUCCESS);
    }
    expect("ext: open_query of an unknown provider",
           dat_ib_open_query((DAT_NAME_PTR) "kdat-nonexistent", &q, DAT_IA_FIELD_ALL, &qa,
                             DAT_PROVIDER_FIELD_ALL, &qp),
           DAT_PROVIDER_NOT_FOUND);
  }
}

/* ---- UD (DAT_IB_SERVICE_TYPE_UD): address exchanges and datagrams between two EPs */

/* Waits for a UD connection event on evd and checks it: its number, the extension type, the EP
 * it names and its private data; an ESTABLISHED one must name the peer (an AH, a QPN).  Fills
 * *ev; returns the check's verdict. */
static int ud_event(const char *what, DAT_EVD_HANDLE evd, DAT_EVENT *ev, DAT_EVENT_NUMBER number,
                    DAT_IB_EXT_TYPE type, DAT_EP_HANDLE ep, const char *pdata) {
  DAT_EVENT_NUMBER n = next_event(evd, ev);
  const DAT_CONNECTION_EVENT_DATA *d = &ev->event_data.connect_event_data;
  const DAT_IB_EXTENSION_EVENT_DATA *x =
      (const DAT_IB_EXTENSION_EVENT_DATA *)ev->event_extension_data;
  const int size = (int)strlen(pdata);
  char line[200];
  int ok = n == number && x->type == type && d->ep_handle == ep && d->private_data_size == size &&
           (size == 0 || (d->private_data != NULL && memcmp(d->private_data, pdata, size) == 0));
  if (number == (DAT_EVENT_NUMBER)DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED)
    ok = ok && x->status == DAT_OP_SUCCESS && x->remote_ah.ah != NULL && x->remote_ah.qpn != 0 &&
         x->context.as_ptr != NULL;
  snprintf(line, sizeof(line), "%s: event 0x%x type %d, its EP, private data \"%s\"%s", what,
           (unsigned)number, (int)type, pdata,
           number == (DAT_EVENT_NUMBER)DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED
               ? ", an AH and the peer's QPN"
               : "");
  if (!ok)
    printf("     (event 0x%x type %d status %d ep %p/%p pdata %d bytes ah %p qpn 0x%x)\n", n,
           (int)x->type, (int)x->status, (void *)d->ep_handle, (void *)ep, d->private_data_size,
           (void *)x->remote_ah.ah, x->remote_ah.qpn);
  return truth(line, ok);
}

static void ud_datagrams(DAT_IA_HANDLE ia, DAT_IA_ADDRESS_PTR addr, DAT_CONN_QUAL port,
                         const DAT_PROVIDER_ATTR *pr_attr) {
  static char cbuf[8192], sbuf[8192];
  static const char ping[] = "ping from the client", pong[] = "pong from the server!";
  DAT_PZ_HANDLE pz = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE c_conn = DAT_HANDLE_NULL, s_conn = DAT_HANDLE_NULL, c_dto = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE s_dto = DAT_HANDLE_NULL, cr_evd = DAT_HANDLE_NULL, rc_conn = DAT_HANDLE_NULL;
  DAT_EP_HANDLE c = DAT_HANDLE_NULL, s = DAT_HANDLE_NULL, rc = DAT_HANDLE_NULL;
  DAT_EP_HANDLE none = DAT_HANDLE_NULL;
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL;
  DAT_LMR_HANDLE c_lmr = DAT_HANDLE_NULL, s_lmr = DAT_HANDLE_NULL;
  DAT_LMR_CONTEXT c_l = 0, s_l = 0;
  DAT_RMR_CONTEXT c_r = 0, s_r = 0;
  DAT_VLEN len;
  DAT_VADDR va;
  DAT_REGION_DESCRIPTION region;
  DAT_DTO_COOKIE ck;
  DAT_EVENT ev;
  DAT_LMR_TRIPLET iov;
  DAT_RMR_TRIPLET rmr;
  DAT_EP_ATTR attr;
  DAT_EP_PARAM param;
  DAT_CR_PARAM crp;
  DAT_CR_HANDLE cr = DAT_HANDLE_NULL;
  DAT_IB_ADDR_HANDLE to_server, to_client, nothing;
  DAT_CONTEXT c_cm, s_cm;
  DAT_EP_STATE state;
  DAT_VLEN mtu = 0;
  const DAT_IB_EXTENSION_EVENT_DATA *x =
      (const DAT_IB_EXTENSION_EVENT_DATA *)ev.event_extension_data;
  const char *named_mtu = named_attr(pr_attr, "DAT_IB_TRANSPORT_MTU");
  int exchanged = 0;

  memset(&attr, 0, sizeof(attr));
  attr.service_type = (DAT_SERVICE_TYPE)DAT_IB_SERVICE_TYPE_UD;
  attr.qos = DAT_QOS_BEST_EFFORT;
  attr.max_message_size = 4096; /* more than rxe's MTU: the provider takes the MTU */
  attr.max_recv_dtos = attr.max_request_dtos = 8;
  attr.max_recv_iov = attr.max_request_iov = 1;
  dat_evd_create(ia, 16, NULL, DAT_EVD_CONNECTION_FLAG, &c_conn);
  dat_evd_create(ia, 16, NULL, DAT_EVD_CONNECTION_FLAG, &s_conn);
  dat_evd_create(ia, 16, NULL, DAT_EVD_CONNECTION_FLAG, &rc_conn);
  dat_evd_create(ia, 32, NULL, DAT_EVD_DTO_FLAG, &c_dto);
  dat_evd_create(ia, 32, NULL, DAT_EVD_DTO_FLAG, &s_dto);
  dat_evd_create(ia, 16, NULL, DAT_EVD_CR_FLAG, &cr_evd);
  expect("ud: pz_create", dat_pz_create(ia, &pz), DAT_SUCCESS);
  if (!attr_true(pr_attr, DAT_IB_ATTR_UD)) {
    /* an iWARP device or an older kdat.ko: UD is refused, and named FALSE */
    expect("ud: ep_create of a UD EP (UD not offered)",
           dat_ep_create(ia, pz, c_dto, c_dto, c_conn, &attr, &c), DAT_MODEL_NOT_SUPPORTED);
    goto out;
  }
  expect("ud: ep_create of a UD EP without a PZ",
         dat_ep_create(ia, DAT_HANDLE_NULL, c_dto, c_dto, c_conn, &attr, &none),
         DAT_INVALID_HANDLE);
  expect("ud: ep_create (client)", dat_ep_create(ia, pz, c_dto, c_dto, c_conn, &attr, &c),
         DAT_SUCCESS);
  expect("ud: ep_create (server)", dat_ep_create(ia, pz, s_dto, s_dto, s_conn, &attr, &s),
         DAT_SUCCESS);
  memset(&param, 0, sizeof(param));
  if (expect("ud: ep_query", dat_ep_query(c, DAT_EP_FIELD_ALL, &param), DAT_SUCCESS)) {
    mtu = param.ep_attr.max_message_size;
    truth("ud: ep_query: a UD EP, UNCONNECTED, no RDMA reads",
          param.ep_attr.service_type == (DAT_SERVICE_TYPE)DAT_IB_SERVICE_TYPE_UD &&
              param.ep_state == DAT_EP_STATE_UNCONNECTED && param.ep_attr.max_rdma_read_in == 0 &&
              param.ep_attr.max_rdma_read_out == 0);
    truth("ud: max_message_size 4096 taken as the port's MTU (DAT_IB_TRANSPORT_MTU)",
          mtu > 0 && mtu <= 4096 &&
              (named_mtu == NULL || mtu == (DAT_VLEN)strtoul(named_mtu, NULL, 10)));
  }
  attr.service_type = DAT_SERVICE_TYPE_RC;
  attr.max_rdma_read_in = attr.max_rdma_read_out = 1;
  expect("ud: ep_create (an RC EP beside them)",
         dat_ep_create(ia, pz, c_dto, c_dto, rc_conn, &attr, &rc), DAT_SUCCESS);
  region.for_va = cbuf;
  dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, sizeof(cbuf), pz, DAT_MEM_PRIV_ALL_FLAG,
                 DAT_VA_TYPE_VA, &c_lmr, &c_l, &c_r, &len, &va);
  region.for_va = sbuf;
  dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, sizeof(sbuf), pz, DAT_MEM_PRIV_ALL_FLAG,
                 DAT_VA_TYPE_VA, &s_lmr, &s_l, &s_r, &len, &va);
  /* receives before any exchange (the QP is ready from its creation); room for the GRH */
  for (uint64_t i = 0; i < 2; ++i) {
    iov = triplet(s_l, sbuf + 512 * i, 512);
    ck.as_64 = 0x81 + i;
    expect("ud: post_recv (server, UNCONNECTED)",
           dat_ep_post_recv(s, 1, &iov, ck, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
    iov = triplet(c_l, cbuf + 512 * i, 512);
    ck.as_64 = 0x91 + i;
    expect("ud: post_recv (client, UNCONNECTED)",
           dat_ep_post_recv(c, 1, &iov, ck, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
  }
  expect("ud: psp_create", dat_psp_create(ia, port, cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
         DAT_SUCCESS);

  /* one exchange: the client asks with "hello", the server accepts with "world!" */
  expect("ud: ep_connect (client)",
         dat_ep_connect(c, addr, port, WAIT_US, 5, (DAT_PVOID) "hello", DAT_QOS_BEST_EFFORT,
                        DAT_CONNECT_DEFAULT_FLAG),
         DAT_SUCCESS);
  if (!truth("ud: a CONNECTION_REQUEST_EVENT on the PSP",
             next_event(cr_evd, &ev) == DAT_CONNECTION_REQUEST_EVENT))
    goto out;
  cr = ev.event_data.cr_arrival_event_data.cr_handle;
  memset(&crp, 0, sizeof(crp));
  expect("ud: cr_query", dat_cr_query(cr, DAT_CR_FIELD_ALL, &crp), DAT_SUCCESS);
  truth("ud: the request's private data is \"hello\"",
        crp.private_data_size == 5 && memcmp(crp.private_data, "hello", 5) == 0);
  expect("ud: cr_accept of a UD request on an RC EP", dat_cr_accept(cr, rc, 0, NULL),
         DAT_INVALID_PARAMETER);
  expect("ud: cr_accept (server UD EP)", dat_cr_accept(cr, s, 6, (DAT_PVOID) "world!"),
         DAT_SUCCESS);
  exchanged +=
      ud_event("ud: server", s_conn, &ev, (DAT_EVENT_NUMBER)DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED,
               DAT_IB_UD_PASSIVE_REMOTE_AH, s, "hello");
  to_client = x->remote_ah;
  s_cm = x->context;
  exchanged +=
      ud_event("ud: client", c_conn, &ev, (DAT_EVENT_NUMBER)DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED,
               DAT_IB_UD_REMOTE_AH, c, "world!");
  to_server = x->remote_ah;
  c_cm = x->context;
  if (!truth("ud: both exchanges ended ESTABLISHED", exchanged == 2)) goto out;
  state = DAT_EP_STATE_UNCONNECTED;
  dat_ep_get_status(c, &state, NULL, NULL);
  truth("ud: the client EP is CONNECTED", state == DAT_EP_STATE_CONNECTED);
  state = DAT_EP_STATE_UNCONNECTED;
  dat_ep_get_status(s, &state, NULL, NULL);
  truth("ud: the server EP is CONNECTED", state == DAT_EP_STATE_CONNECTED);
  truth("ud: each side names the other's QPN",
        to_server.qpn != to_client.qpn && to_server.qpn != 0 && to_client.qpn != 0);

  /* a datagram each way: the receive's length counts the 40-byte GRH before the payload */
  memcpy(cbuf + 1024, ping, sizeof(ping));
  iov = triplet(c_l, cbuf + 1024, sizeof(ping));
  ck.as_64 = 0xa1;
  expect("ud: post_send_ud (client to server)",
         dat_ib_post_send_ud(c, 1, &iov, &to_server, ck, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
  ext_done("ud: the client's send completes", c_dto, 0xa1, sizeof(ping), DAT_IB_UD_SEND,
           DAT_IB_DTO_SEND_UD, DAT_DTO_SUCCESS, &ev);
  ext_done("ud: the server receives it (payload + 40)", s_dto, 0x81, sizeof(ping) + 40,
           DAT_IB_UD_RECV, DAT_IB_DTO_RECV_UD, DAT_DTO_SUCCESS, &ev);
  truth("ud: the payload is at +40, exactly", memcmp(sbuf + 40, ping, sizeof(ping)) == 0);
  truth("ud: the receive names the client's QP", x->remote_ah.qpn == to_client.qpn);
  memcpy(sbuf + 1024, pong, sizeof(pong));
  iov = triplet(s_l, sbuf + 1024, sizeof(pong));
  ck.as_64 = 0xb1;
  expect("ud: post_send_ud (server to client, suppressed)",
         dat_ib_post_send_ud(s, 1, &iov, &to_client, ck, DAT_COMPLETION_SUPPRESS_FLAG),
         DAT_SUCCESS);
  ext_done("ud: the client receives it (payload + 40)", c_dto, 0x91, sizeof(pong) + 40,
           DAT_IB_UD_RECV, DAT_IB_DTO_RECV_UD, DAT_DTO_SUCCESS, &ev);
  truth("ud: the payload is at +40, exactly", memcmp(cbuf + 40, pong, sizeof(pong)) == 0);
  truth("ud: no completion for the suppressed send", no_event(s_dto));

  /* what a UD EP does not do, and what a UD send needs */
  iov = triplet(c_l, cbuf + 1024, 16);
  rmr.rmr_context = s_r;
  rmr.virtual_address = (DAT_VADDR)(uintptr_t)(sbuf + 2048);
  rmr.segment_length = 16;
  ck.as_64 = 0xc1;
  expect("ud: RDMA write on a UD EP",
         dat_ep_post_rdma_write(c, 1, &iov, ck, &rmr, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_MODEL_NOT_SUPPORTED);
  expect("ud: RDMA read on a UD EP",
         dat_ep_post_rdma_read(c, 1, &iov, ck, &rmr, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_MODEL_NOT_SUPPORTED);
  expect("ud: a plain post_send on a UD EP (no address)",
         dat_ep_post_send(c, 1, &iov, ck, DAT_COMPLETION_DEFAULT_FLAG), DAT_MODEL_NOT_SUPPORTED);
  iov = triplet(c_l, cbuf, 8);
  expect("ud: fetch_and_add on a UD EP",
         dat_ib_post_fetch_and_add(c, 1, &iov, ck, &rmr, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_MODEL_NOT_SUPPORTED);
  expect("ud: post_send_ud without an address handle",
         dat_ib_post_send_ud(c, 1, &iov, NULL, ck, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_INVALID_PARAMETER);
  nothing = to_server;
  nothing.ah = NULL;
  expect("ud: post_send_ud to a NULL AH",
         dat_ib_post_send_ud(c, 1, &iov, &nothing, ck, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_INVALID_PARAMETER);
  if (mtu > 0 && mtu < sizeof(cbuf)) {
    iov = triplet(c_l, cbuf, mtu + 1);
    expect("ud: post_send_ud of more than the MTU",
           dat_ib_post_send_ud(c, 1, &iov, &to_server, ck, DAT_COMPLETION_DEFAULT_FLAG),
           DAT_LENGTH_ERROR);
  }
  expect("ud: post_send_ud on an RC EP",
         dat_ib_post_send_ud(rc, 1, &iov, &to_server, ck, DAT_COMPLETION_DEFAULT_FLAG),
         DAT_MODEL_NOT_SUPPORTED);
  truth("ud: no completion for the refused posts", no_event(c_dto));
  {
    DAT_UINT64 epc[DCNT_EP_ALL_COUNTERS];
    if (truth("ud: query_counters (client EP)", all_counters(c, DCNT_EP_ALL_COUNTERS, epc)))
      truth("ud: client EP counts 1 UD send, 1 UD receive (payload + 40), 1 connect",
            epc[DCNT_EP_POST_SEND_UD] == 1 && epc[DCNT_EP_POST_SEND_UD_DATA] == sizeof(ping) &&
                epc[DCNT_EP_RECV_UD] == 1 && epc[DCNT_EP_RECV_UD_DATA] == sizeof(pong) + 40 &&
                epc[DCNT_EP_CONNECT] == 1 && epc[DCNT_EP_POST_SEND] == 0);
  }

  /* the exchange's records: its CM object, its AH */
  expect("ud: ud_cm_free (client)", dat_ib_ud_cm_free(c, c_cm.as_ptr), DAT_SUCCESS);
  expect("ud: ud_cm_free of a freed one", dat_ib_ud_cm_free(c, c_cm.as_ptr), DAT_INVALID_PARAMETER);
  expect("ud: ud_cm_free (server)", dat_ib_ud_cm_free(s, s_cm.as_ptr), DAT_SUCCESS);
  expect("ud: ud_ah_free (the client's AH of the server)", dat_ib_ud_ah_free(c, &to_server),
         DAT_SUCCESS);
  expect("ud: ud_ah_free of a freed AH", dat_ib_ud_ah_free(c, &to_server), DAT_INVALID_PARAMETER);
  expect("ud: ud_ah_free of no AH", dat_ib_ud_ah_free(c, &nothing), DAT_SUCCESS);
  expect("ud: ud_cm_free on an RC EP", dat_ib_ud_cm_free(rc, NULL), DAT_MODEL_NOT_SUPPORTED);

  /* two exchanges at once on the CONNECTED client EP, both accepted on the server EP (dtestx
   * -u's pattern); their AHs are left for ep_free */
  exchanged = 0;
  for (int i = 0; i < 2; ++i)
    expect("ud: ep_connect again (CONNECTED client)",
           dat_ep_connect(c, addr, port, WAIT_US, 4, (DAT_PVOID) "more", DAT_QOS_BEST_EFFORT,
                          DAT_CONNECT_DEFAULT_FLAG),
           DAT_SUCCESS);
  for (int i = 0; i < 2; ++i)
    if (next_event(cr_evd, &ev) == DAT_CONNECTION_REQUEST_EVENT)
      exchanged += dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, s, 4,
                                 (DAT_PVOID) "back") == DAT_SUCCESS;
  for (int i = 0; i < 2; ++i) {
    exchanged += ud_event("ud: server (again)", s_conn, &ev,
                          (DAT_EVENT_NUMBER)DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED,
                          DAT_IB_UD_PASSIVE_REMOTE_AH, s, "more");
    exchanged += ud_event("ud: client (again)", c_conn, &ev,
                          (DAT_EVENT_NUMBER)DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED,
                          DAT_IB_UD_REMOTE_AH, c, "back");
  }
  truth("ud: two concurrent exchanges: 2 accepts, 4 events", exchanged == 6);
  /* a request nobody listens for */
  expect("ud: ep_connect to a port nobody listens on",
         dat_ep_connect(c, addr, port + 9, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT,
                        DAT_CONNECT_DEFAULT_FLAG),
         DAT_SUCCESS);
  {
    DAT_EVENT_NUMBER n = next_event(c_conn, &ev);
    truth("ud: it ends in a UD reject or error event, the EP still CONNECTED",
          (n == (DAT_EVENT_NUMBER)DAT_IB_UD_CONNECTION_REJECT_EVENT ||
           n == (DAT_EVENT_NUMBER)DAT_IB_UD_CONNECTION_ERROR_EVENT) &&
              ev.event_data.connect_event_data.ep_handle == c &&
              dat_ep_get_status(c, &state, NULL, NULL) == DAT_SUCCESS &&
              state == DAT_EP_STATE_CONNECTED);
  }

  /* a UD EP's disconnect is abrupt, whatever is asked: its posted receive flushes */
  expect("ud: ep_disconnect graceful (client)", dat_ep_disconnect(c, DAT_CLOSE_GRACEFUL_FLAG),
         DAT_SUCCESS);
  truth("ud: client DISCONNECTED", next_event(c_conn, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
  ext_done("ud: the client's posted receive flushes", c_dto, 0x92, (DAT_VLEN)-1, DAT_IB_UD_RECV,
           DAT_IB_DTO_RECV_UD, DAT_DTO_ERR_FLUSHED, &ev);
out:
  /* the server EP goes without a disconnect (as dtestx's do), its AHs with it */
  if (s != DAT_HANDLE_NULL) expect("ud: ep_free (server, CONNECTED)", dat_ep_free(s), DAT_SUCCESS);
  if (c != DAT_HANDLE_NULL) expect("ud: ep_free (client)", dat_ep_free(c), DAT_SUCCESS);
  if (rc != DAT_HANDLE_NULL) dat_ep_free(rc);
  if (none != DAT_HANDLE_NULL) dat_ep_free(none);
  if (psp != DAT_HANDLE_NULL) dat_psp_free(psp);
  if (c_lmr != DAT_HANDLE_NULL) dat_lmr_free(c_lmr);
  if (s_lmr != DAT_HANDLE_NULL) dat_lmr_free(s_lmr);
  dat_evd_free(c_dto);
  dat_evd_free(s_dto);
  dat_evd_free(c_conn);
  dat_evd_free(s_conn);
  dat_evd_free(rc_conn);
  dat_evd_free(cr_evd);
  expect("ud: pz_free", dat_pz_free(pz), DAT_SUCCESS);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* a crash still shows the last check it passed */
  if (argc == 4 && strcmp(argv[1], "--open-fails") == 0) return open_fails(argv[2], argv[3]);
  const int free_only = argc == 5 && strcmp(argv[1], "--free-connected") == 0;
  if (free_only) {
    ++argv;
    --argc;
  }
  if (argc != 4) {
    fprintf(stderr, "usage: %s [--free-connected] PROVIDER IP PORT\n", argv[0]);
    return 2;
  }
  char *provider = argv[1];
  DAT_CONN_QUAL port = (DAT_CONN_QUAL)strtoul(argv[3], NULL, 0);
  struct sockaddr_in server = {0};
  server.sin_family = AF_INET;
  if (inet_pton(AF_INET, argv[2], &server.sin_addr) != 1) return 2;
  DAT_IA_ADDRESS_PTR server_addr = (DAT_IA_ADDRESS_PTR)&server;
  if (free_only) return free_connected_only(provider, server_addr, port);

  DAT_IA_HANDLE ia = DAT_HANDLE_NULL, ia2 = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE async = DAT_HANDLE_NULL, async2 = DAT_HANDLE_NULL;
  DAT_EVENT ev;
  DAT_COUNT nmore;

  /* ---- IA */
  expect("ia_open of an unknown provider", dat_ia_open("kdat-nonexistent", 8, &async, &ia),
         DAT_PROVIDER_NOT_FOUND);
  async = DAT_HANDLE_NULL;
  if (!expect("ia_open", dat_ia_open(provider, 8, &async, &ia), DAT_SUCCESS)) goto out;
  truth("ia_open made an async EVD", async != DAT_HANDLE_NULL);

  DAT_IA_ATTR ia_attr;
  DAT_PROVIDER_ATTR pr_attr;
  expect("ia_query", dat_ia_query(ia, NULL, DAT_IA_ALL, &ia_attr, DAT_PROVIDER_FIELD_ALL, &pr_attr),
         DAT_SUCCESS);
  {
    const struct sockaddr_in *a = (const struct sockaddr_in *)ia_attr.ia_address_ptr;
    truth("ia_query: the IA's address is the server's",
          a != NULL && a->sin_family == AF_INET && a->sin_addr.s_addr == server.sin_addr.s_addr);
    truth("ia_query: max_private_data_size > 0", pr_attr.max_private_data_size > 0);
    truth("ia_query: max_eps >= 1000", ia_attr.max_eps >= 1000);
    /* the verbs device's limits, as libdaplofa reports them (dapltest sizes buffers by them) */
    truth("ia_query: max_lmr_block_size >= 1 MB", ia_attr.max_lmr_block_size >= (1u << 20));
    truth("ia_query: max_lmrs and max_lmr_virtual_address > 0",
          ia_attr.max_lmrs > 0 && ia_attr.max_lmr_virtual_address > 0);
    truth(
        "ia_query: RDMA read/write iov limits > 0",
        ia_attr.max_iov_segments_per_rdma_read > 0 && ia_attr.max_iov_segments_per_rdma_write > 0);
    truth("ia_query: max_rdma_read_in/out > 0", ia_attr.max_rdma_read_in > 0 &&
                                                    ia_attr.max_rdma_read_out > 0 &&
                                                    ia_attr.max_rdma_read_per_ep_out > 0);
    truth("ia_query: max_message_size and max_rdma_size > 0",
          ia_attr.max_message_size > 0 && ia_attr.max_rdma_size > 0);
  }

  /* ---- PZ, EVDs */
  DAT_PZ_HANDLE pz = DAT_HANDLE_NULL;
  DAT_EVD_HANDLE conn_evd, cr_evd, dto_evd, bad_evd = DAT_HANDLE_NULL;
  expect("pz_create", dat_pz_create(ia, &pz), DAT_SUCCESS);
  expect("evd_create qlen 0",
         dat_evd_create(ia, 0, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &bad_evd),
         DAT_INVALID_PARAMETER);
  expect("evd_create flags 0", dat_evd_create(ia, 8, DAT_HANDLE_NULL, 0, &bad_evd),
         DAT_INVALID_PARAMETER);
  expect("evd_create connection",
         dat_evd_create(ia, 64, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &conn_evd), DAT_SUCCESS);
  expect("evd_create cr", dat_evd_create(ia, 64, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &cr_evd),
         DAT_SUCCESS);
  expect("evd_create dto", dat_evd_create(ia, 64, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &dto_evd),
         DAT_SUCCESS);
  expect("evd_dequeue on an empty EVD", dat_evd_dequeue(conn_evd, &ev), DAT_QUEUE_EMPTY);
  /* as libdaplofa: an EVD with a CQ (DTO) answers a bare DAT_QUEUE_EMPTY (dtest -p compares
   * with ==), one without (connection, CR, async) DAT_QUEUE_EMPTY with the error class */
  truth("evd_dequeue on an empty DTO EVD: DAT_QUEUE_EMPTY without the error class",
        dat_evd_dequeue(dto_evd, &ev) == DAT_QUEUE_EMPTY);
  truth("evd_dequeue on an empty connection EVD: DAT_QUEUE_EMPTY with the error class",
        dat_evd_dequeue(conn_evd, &ev) == (DAT_RETURN)(DAT_CLASS_ERROR | DAT_QUEUE_EMPTY));
  truth("evd_dequeue on the empty async EVD: DAT_QUEUE_EMPTY with the error class",
        dat_evd_dequeue(async, &ev) == (DAT_RETURN)(DAT_CLASS_ERROR | DAT_QUEUE_EMPTY));
  expect("evd_wait times out", dat_evd_wait(conn_evd, 1000, 1, &ev, &nmore), DAT_TIMEOUT_EXPIRED);
  expect("evd_wait threshold 0", dat_evd_wait(conn_evd, 1000, 0, &ev, &nmore),
         DAT_INVALID_PARAMETER);

  /* software events */
  {
    DAT_EVENT se;
    memset(&se, 0, sizeof(se));
    se.event_number = DAT_SOFTWARE_EVENT;
    se.event_data.software_event_data.pointer = &se;
    expect("evd_post_se", dat_evd_post_se(dto_evd, &se), DAT_SUCCESS);
    expect("evd_wait gets the software event", dat_evd_wait(dto_evd, WAIT_US, 1, &ev, &nmore),
           DAT_SUCCESS);
    truth("software event: number, evd and pointer round-trip",
          ev.event_number == DAT_SOFTWARE_EVENT && ev.evd_handle == dto_evd &&
              ev.event_data.software_event_data.pointer == &se);
    se.event_number = DAT_CONNECTION_EVENT_ESTABLISHED;
    expect("evd_post_se of a non-software event", dat_evd_post_se(dto_evd, &se),
           DAT_INVALID_PARAMETER);
  }

  threads(ia);

  /* ---- EP create: handle and type checks */
  DAT_EP_HANDLE ep = DAT_HANDLE_NULL, bad_ep = DAT_HANDLE_NULL;
  expect("ep_create: a CR EVD as connect EVD",
         dat_ep_create(ia, pz, dto_evd, dto_evd, cr_evd, NULL, &bad_ep), DAT_INVALID_HANDLE);
  expect("ep_create: an EVD as PZ",
         dat_ep_create(ia, conn_evd, dto_evd, dto_evd, conn_evd, NULL, &bad_ep),
         DAT_INVALID_HANDLE);
  expect("ep_create: a connection EVD as recv EVD",
         dat_ep_create(ia, pz, conn_evd, dto_evd, conn_evd, NULL, &bad_ep), DAT_INVALID_HANDLE);
  expect("ep_create", dat_ep_create(ia, pz, dto_evd, dto_evd, conn_evd, NULL, &ep), DAT_SUCCESS);
  {
    /* ep_attr NULL: libdaplofa's defaults (consumers such as dapltest copy them) */
    DAT_EP_PARAM param;
    expect("ep_query (ep_attr NULL)", dat_ep_query(ep, DAT_EP_FIELD_ALL, &param), DAT_SUCCESS);
    truth("ep_attr NULL: RDMA read in/out 4/4",
          param.ep_attr.max_rdma_read_in == 4 && param.ep_attr.max_rdma_read_out == 4);
    truth("ep_attr NULL: 16 DTOs and 4 segments each way",
          param.ep_attr.max_recv_dtos == 16 && param.ep_attr.max_request_dtos == 16 &&
              param.ep_attr.max_recv_iov == 4 && param.ep_attr.max_request_iov == 4);
    truth("ep_attr NULL: RC, message and RDMA sizes > 0",
          param.ep_attr.service_type == DAT_SERVICE_TYPE_RC && param.ep_attr.max_message_size > 0 &&
              param.ep_attr.max_rdma_size > 0 && param.ep_attr.max_rdma_read_iov > 0 &&
              param.ep_attr.max_rdma_write_iov > 0);
  }
  {
    DAT_HANDLE_TYPE type = DAT_HANDLE_TYPE_IA;
    DAT_CONTEXT ctx = {0}, back = {0};
    expect("get_handle_type(ep)", dat_get_handle_type(ep, &type), DAT_SUCCESS);
    truth("get_handle_type(ep) is EP", type == DAT_HANDLE_TYPE_EP);
    expect("get_handle_type(pz)", dat_get_handle_type(pz, &type), DAT_SUCCESS);
    truth("get_handle_type(pz) is PZ", type == DAT_HANDLE_TYPE_PZ);
    ctx.as_64 = 0x1234567890ull;
    expect("set_consumer_context(ep)", dat_set_consumer_context(ep, ctx), DAT_SUCCESS);
    expect("get_consumer_context(ep)", dat_get_consumer_context(ep, &back), DAT_SUCCESS);
    truth("consumer context round-trips", back.as_64 == ctx.as_64);
  }
  {
    DAT_EP_STATE state = DAT_EP_STATE_CONNECTED;
    DAT_BOOLEAN in_idle, out_idle;
    DAT_EP_PARAM param;
    expect("ep_get_status", dat_ep_get_status(ep, &state, &in_idle, &out_idle), DAT_SUCCESS);
    truth("new EP is UNCONNECTED", state == DAT_EP_STATE_UNCONNECTED);
    in_idle = out_idle = (DAT_BOOLEAN)7;
    expect("ep_get_status without the state (dtestx)",
           dat_ep_get_status(ep, NULL, &in_idle, &out_idle), DAT_SUCCESS);
    truth("ep_get_status without the state: both idle flags TRUE",
          in_idle == DAT_TRUE && out_idle == DAT_TRUE);
    expect("ep_query", dat_ep_query(ep, DAT_EP_FIELD_ALL, &param), DAT_SUCCESS);
    truth("ep_query: state and EVDs",
          param.ep_state == DAT_EP_STATE_UNCONNECTED && param.connect_evd_handle == conn_evd &&
              param.recv_evd_handle == dto_evd && param.pz_handle == pz);
  }
  expect("evd_free of an EVD an EP uses", dat_evd_free(conn_evd), DAT_INVALID_STATE);
  expect("pz_free of a PZ an EP uses", dat_pz_free(pz), DAT_INVALID_STATE);

  /* ---- data path: memory registration is real (verbs PD/MR); posting is not implemented yet */
  static char buf[4096];
  DAT_LMR_HANDLE keep_lmr = DAT_HANDLE_NULL; /* left for the abrupt IA close to free */
  {
    DAT_REGION_DESCRIPTION region;
    DAT_LMR_HANDLE lmr = DAT_HANDLE_NULL;
    DAT_LMR_CONTEXT lctx = 0;
    DAT_RMR_CONTEXT rctx = 0;
    DAT_VLEN rlen = 0;
    DAT_VADDR raddr = 0;
    DAT_LMR_TRIPLET iov = {0};
    DAT_DTO_COOKIE cookie = {0};
    DAT_PZ_HANDLE pz2 = DAT_HANDLE_NULL;
    DAT_LMR_PARAM lp;
    region.for_va = NULL;
    expect("lmr_create of NULL memory",
           dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, sizeof(buf), pz, DAT_MEM_PRIV_ALL_FLAG,
                          DAT_VA_TYPE_VA, &lmr, &lctx, &rctx, &rlen, &raddr),
           DAT_INVALID_PARAMETER);
    region.for_va = buf;
    expect("lmr_create with an EVD as PZ",
           dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, sizeof(buf), conn_evd,
                          DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr, &lctx, &rctx, &rlen, &raddr),
           DAT_INVALID_HANDLE);
    expect("pz_create (LMRs)", dat_pz_create(ia, &pz2), DAT_SUCCESS);
    expect("lmr_create (verbs MR)",
           dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, sizeof(buf), pz2, DAT_MEM_PRIV_ALL_FLAG,
                          DAT_VA_TYPE_VA, &lmr, &lctx, &rctx, &rlen, &raddr),
           DAT_SUCCESS);
    truth("lmr_create: registered the buffer",
          rlen >= sizeof(buf) && raddr <= (DAT_VADDR)(uintptr_t)buf && lctx != 0);
    expect("lmr_query", dat_lmr_query(lmr, DAT_LMR_FIELD_ALL, &lp), DAT_SUCCESS);
    truth("lmr_query: keys, PZ, address", lp.lmr_context == lctx && lp.rmr_context == rctx &&
                                              lp.pz_handle == pz2 && lp.region_desc.for_va == buf &&
                                              lp.length == sizeof(buf));
    expect("pz_free of a PZ an LMR uses", dat_pz_free(pz2), DAT_INVALID_STATE);
    expect("lmr_free", dat_lmr_free(lmr), DAT_SUCCESS);
    expect("lmr_free of a freed LMR", dat_lmr_free(lmr), DAT_INVALID_HANDLE);
    expect("pz_free (LMRs)", dat_pz_free(pz2), DAT_SUCCESS);
    expect("lmr_create (kept until IA close)",
           dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, sizeof(buf), pz, DAT_MEM_PRIV_ALL_FLAG,
                          DAT_VA_TYPE_VA, &keep_lmr, &lctx, &rctx, &rlen, &raddr),
           DAT_SUCCESS);
    iov.lmr_context = lctx;
    iov.virtual_address = (DAT_VADDR)(uintptr_t)buf;
    iov.segment_length = 64;
    expect("ep_post_recv before the connection",
           dat_ep_post_recv(ep, 1, &iov, cookie, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
    expect("ep_post_send on an UNCONNECTED EP",
           dat_ep_post_send(ep, 1, &iov, cookie, DAT_COMPLETION_DEFAULT_FLAG), DAT_INVALID_STATE);
    expect("ep_post_send on a PZ handle",
           dat_ep_post_send(pz, 1, &iov, cookie, DAT_COMPLETION_DEFAULT_FLAG), DAT_INVALID_HANDLE);
  }

  /* ---- connect errors */
  expect("ep_connect to a NULL address",
         dat_ep_connect(ep, NULL, port, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT,
                        DAT_CONNECT_DEFAULT_FLAG),
         DAT_INVALID_PARAMETER);
  expect("ep_connect with private data size -1",
         dat_ep_connect(ep, server_addr, port, WAIT_US, -1, NULL, DAT_QOS_BEST_EFFORT,
                        DAT_CONNECT_DEFAULT_FLAG),
         DAT_INVALID_PARAMETER);
  {
    char big[1024] = {0};
    expect("ep_connect with too much private data",
           dat_ep_connect(ep, server_addr, port, WAIT_US, sizeof(big), big, DAT_QOS_BEST_EFFORT,
                          DAT_CONNECT_DEFAULT_FLAG),
           DAT_LENGTH_ERROR);
  }
  expect("ep_connect with an unsupported QoS",
         dat_ep_connect(ep, server_addr, port, WAIT_US, 0, NULL, DAT_QOS_PREMIUM,
                        DAT_CONNECT_DEFAULT_FLAG),
         DAT_MODEL_NOT_SUPPORTED);
  /* nobody listens on port+9: the connect is refused by the remote CM */
  expect("ep_connect to a port nobody listens on",
         dat_ep_connect(ep, server_addr, port + 9, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT,
                        DAT_CONNECT_DEFAULT_FLAG),
         DAT_SUCCESS);
  {
    DAT_EVENT_NUMBER n = next_event(conn_evd, &ev);
    truth("...ends in a rejection or unreachable event for that EP",
          (n == DAT_CONNECTION_EVENT_NON_PEER_REJECTED || n == DAT_CONNECTION_EVENT_UNREACHABLE ||
           n == DAT_CONNECTION_EVENT_PEER_REJECTED) &&
              ev.event_data.connect_event_data.ep_handle == ep);
    printf("     (event 0x%x)\n", n);
  }
  expect("ep_reset", dat_ep_reset(ep), DAT_SUCCESS);

  /* ---- PSP: consumer EPs, accept with private data */
  DAT_PSP_HANDLE psp = DAT_HANDLE_NULL, psp2 = DAT_HANDLE_NULL;
  expect("psp_create with a connection EVD",
         dat_psp_create(ia, port, conn_evd, DAT_PSP_CONSUMER_FLAG, &psp2), DAT_INVALID_HANDLE);
  expect("psp_create", dat_psp_create(ia, port, cr_evd, DAT_PSP_CONSUMER_FLAG, &psp), DAT_SUCCESS);
  expect("psp_create on a port in use",
         dat_psp_create(ia, port, cr_evd, DAT_PSP_CONSUMER_FLAG, &psp2), DAT_CONN_QUAL_IN_USE);
  {
    DAT_PSP_PARAM pp;
    expect("psp_query", dat_psp_query(psp, DAT_PSP_FIELD_ALL, &pp), DAT_SUCCESS);
    truth("psp_query: qualifier and EVD", pp.conn_qual == port && pp.evd_handle == cr_evd);
  }
  DAT_EP_HANDLE srv_ep = DAT_HANDLE_NULL;
  expect("ep_create (server side)",
         dat_ep_create(ia, pz, dto_evd, dto_evd, conn_evd, NULL, &srv_ep), DAT_SUCCESS);
  const char hello[] = "hello from the client";
  const char welcome[] = "welcome";
  expect("ep_connect with private data",
         dat_ep_connect(ep, server_addr, port, WAIT_US, sizeof(hello), (DAT_PVOID)hello,
                        DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
         DAT_SUCCESS);
  DAT_CR_HANDLE cr = DAT_HANDLE_NULL;
  if (truth("CR event arrives on the CR EVD",
            next_event(cr_evd, &ev) == DAT_CONNECTION_REQUEST_EVENT)) {
    cr = ev.event_data.cr_arrival_event_data.cr_handle;
    truth("CR event: PSP, qualifier",
          ev.event_data.cr_arrival_event_data.sp_handle.psp_handle == psp &&
              ev.event_data.cr_arrival_event_data.conn_qual == port);
    DAT_CR_PARAM cp;
    expect("cr_query", dat_cr_query(cr, DAT_CR_FIELD_ALL, &cp), DAT_SUCCESS);
    truth("cr_query: private data byte-exact",
          cp.private_data_size == (DAT_COUNT)sizeof(hello) &&
              memcmp(cp.private_data, hello, sizeof(hello)) == 0);
    truth("cr_query: remote address",
          cp.remote_ia_address_ptr != NULL &&
              ((struct sockaddr_in *)cp.remote_ia_address_ptr)->sin_addr.s_addr ==
                  server.sin_addr.s_addr);
    expect("cr_accept on an EVD handle", dat_cr_accept(cr, cr_evd, 0, NULL), DAT_INVALID_HANDLE);
    expect("cr_accept with private data",
           dat_cr_accept(cr, srv_ep, sizeof(welcome), (DAT_PVOID)welcome), DAT_SUCCESS);
    expect("cr_accept of a spent (freed) CR", dat_cr_accept(cr, srv_ep, 0, NULL),
           DAT_INVALID_HANDLE);
    expect("cr_query of a spent CR", dat_cr_query(cr, DAT_CR_FIELD_ALL, &cp), DAT_INVALID_HANDLE);
  }
  /* both EPs share conn_evd: two ESTABLISHED events, one each */
  {
    int client_ok = 0, server_ok = 0;
    for (int i = 0; i < 2; ++i) {
      if (next_event(conn_evd, &ev) != DAT_CONNECTION_EVENT_ESTABLISHED) break;
      DAT_CONNECTION_EVENT_DATA *d = &ev.event_data.connect_event_data;
      if (d->ep_handle == ep)
        client_ok = d->private_data_size == (DAT_COUNT)sizeof(welcome) &&
                    memcmp(d->private_data, welcome, sizeof(welcome)) == 0;
      if (d->ep_handle == srv_ep) server_ok = 1;
    }
    truth("client ESTABLISHED with the accept's private data", client_ok);
    truth("server ESTABLISHED", server_ok);
    DAT_EP_STATE state;
    dat_ep_get_status(ep, &state, NULL, NULL);
    truth("client EP is CONNECTED", state == DAT_EP_STATE_CONNECTED);
    DAT_EP_PARAM param;
    expect("ep_query (connected)", dat_ep_query(srv_ep, DAT_EP_FIELD_ALL, &param), DAT_SUCCESS);
    truth("ep_query: CONNECTED, remote address set",
          param.ep_state == DAT_EP_STATE_CONNECTED && param.remote_ia_address_ptr != NULL &&
              ((struct sockaddr_in *)param.remote_ia_address_ptr)->sin_family == AF_INET);
  }
  expect("ep_connect on a connected EP",
         dat_ep_connect(ep, server_addr, port, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT,
                        DAT_CONNECT_DEFAULT_FLAG),
         DAT_INVALID_STATE);

  /* dup_connect: a second connection to where `ep` is connected */
  {
    DAT_EP_HANDLE dup = DAT_HANDLE_NULL, dup_srv = DAT_HANDLE_NULL;
    dat_ep_create(ia, pz, dto_evd, dto_evd, conn_evd, NULL, &dup);
    dat_ep_create(ia, pz, dto_evd, dto_evd, conn_evd, NULL, &dup_srv);
    expect("ep_dup_connect with a PZ as dup",
           dat_ep_dup_connect(dup, pz, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT), DAT_INVALID_HANDLE);
    expect("ep_dup_connect", dat_ep_dup_connect(dup, ep, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT),
           DAT_SUCCESS);
    if (truth("dup_connect: CR on the same PSP",
              next_event(cr_evd, &ev) == DAT_CONNECTION_REQUEST_EVENT &&
                  ev.event_data.cr_arrival_event_data.sp_handle.psp_handle == psp)) {
      expect("cr_accept (dup)",
             dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, dup_srv, 0, NULL),
             DAT_SUCCESS);
      int n = 0;
      for (int i = 0; i < 2; ++i)
        n += next_event(conn_evd, &ev) == DAT_CONNECTION_EVENT_ESTABLISHED;
      truth("dup_connect: both ends ESTABLISHED", n == 2);
    }
    expect("ep_free (connected dup)", dat_ep_free(dup), DAT_SUCCESS);
    /* the freed EP's own DISCONNECTED first (posted before ep_free returned), as over DAPL */
    truth("a freed connected EP gets DISCONNECTED, naming it",
          next_event(conn_evd, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED &&
              ev.event_data.connect_event_data.ep_handle == dup);
    /* the peer sees the abrupt teardown */
    truth("peer of a freed EP gets DISCONNECTED",
          next_event(conn_evd, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED &&
              ev.event_data.connect_event_data.ep_handle == dup_srv);
    expect("ep_free (server dup)", dat_ep_free(dup_srv), DAT_SUCCESS);
  }

  expect("ep_disconnect with bad flags", dat_ep_disconnect(ep, 7), DAT_INVALID_PARAMETER);
  expect("ep_disconnect graceful", dat_ep_disconnect(ep, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
  {
    int n = 0;
    for (int i = 0; i < 2; ++i) {
      if (next_event(conn_evd, &ev) != DAT_CONNECTION_EVENT_DISCONNECTED) break;
      n += ev.event_data.connect_event_data.ep_handle == ep ||
           ev.event_data.connect_event_data.ep_handle == srv_ep;
    }
    truth("both ends DISCONNECTED", n == 2);
  }

  /* ---- reject with private data */
  {
    const char no[] = "go away";
    expect("ep_reset after disconnect", dat_ep_reset(ep), DAT_SUCCESS);
    expect("ep_connect (to be rejected)",
           dat_ep_connect(ep, server_addr, port, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT,
                          DAT_CONNECT_DEFAULT_FLAG),
           DAT_SUCCESS);
    if (next_event(cr_evd, &ev) == DAT_CONNECTION_REQUEST_EVENT) {
      DAT_CR_HANDLE rcr = ev.event_data.cr_arrival_event_data.cr_handle;
      expect("cr_reject with private data size -1", dat_cr_reject(rcr, -1, NULL),
             DAT_INVALID_PARAMETER);
      expect("cr_reject with private data", dat_cr_reject(rcr, sizeof(no), (DAT_PVOID)no),
             DAT_SUCCESS);
      expect("cr_reject of a spent CR", dat_cr_reject(rcr, 0, NULL), DAT_INVALID_HANDLE);
    }
    truth("client gets PEER_REJECTED",
          next_event(conn_evd, &ev) == DAT_CONNECTION_EVENT_PEER_REJECTED &&
              ev.event_data.connect_event_data.ep_handle == ep);
  }

  /* ---- RSP: the request names its EP; accept without one */
  {
    DAT_EP_HANDLE rsp_ep = DAT_HANDLE_NULL, cl = DAT_HANDLE_NULL;
    DAT_RSP_HANDLE rsp = DAT_HANDLE_NULL;
    dat_ep_create(ia, pz, dto_evd, dto_evd, conn_evd, NULL, &rsp_ep);
    dat_ep_create(ia, pz, dto_evd, dto_evd, conn_evd, NULL, &cl);
    expect("rsp_create", dat_rsp_create(ia, port + 1, rsp_ep, cr_evd, &rsp), DAT_SUCCESS);
    DAT_EP_STATE state;
    dat_ep_get_status(rsp_ep, &state, NULL, NULL);
    truth("RSP's EP is RESERVED", state == DAT_EP_STATE_RESERVED);
    dat_ep_connect(cl, server_addr, port + 1, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT,
                   DAT_CONNECT_DEFAULT_FLAG);
    if (truth("RSP: CR arrives", next_event(cr_evd, &ev) == DAT_CONNECTION_REQUEST_EVENT)) {
      DAT_CR_PARAM cp;
      DAT_CR_HANDLE rcr = ev.event_data.cr_arrival_event_data.cr_handle;
      truth("RSP: CR names the RSP",
            ev.event_data.cr_arrival_event_data.sp_handle.rsp_handle == rsp);
      dat_cr_query(rcr, DAT_CR_FIELD_ALL, &cp);
      truth("RSP: cr_query names the reserved EP", cp.local_ep_handle == rsp_ep);
      expect("cr_accept without an EP (RSP)", dat_cr_accept(rcr, DAT_HANDLE_NULL, 0, NULL),
             DAT_SUCCESS);
      int n = 0;
      for (int i = 0; i < 2; ++i)
        n += next_event(conn_evd, &ev) == DAT_CONNECTION_EVENT_ESTABLISHED;
      truth("RSP: both ends ESTABLISHED", n == 2);
    }
    expect("rsp_free", dat_rsp_free(rsp), DAT_SUCCESS);
    expect("rsp_free again (stale handle)", dat_rsp_free(rsp), DAT_INVALID_HANDLE);
    dat_ep_disconnect(cl, DAT_CLOSE_ABRUPT_FLAG);
    for (int i = 0; i < 2; ++i) next_event(conn_evd, &ev);
    expect("ep_free (RSP's EP)", dat_ep_free(rsp_ep), DAT_SUCCESS);
    expect("ep_free (RSP client)", dat_ep_free(cl), DAT_SUCCESS);
  }

  /* ---- provider PSP: the provider makes the EP */
  {
    DAT_PSP_HANDLE ppsp = DAT_HANDLE_NULL;
    DAT_EP_HANDLE cl = DAT_HANDLE_NULL;
    expect("psp_create with a bad flag", dat_psp_create(ia, port + 2, cr_evd, 7, &ppsp),
           DAT_INVALID_PARAMETER);
    expect("psp_create (provider flag)",
           dat_psp_create(ia, port + 2, cr_evd, DAT_PSP_PROVIDER_FLAG, &ppsp), DAT_SUCCESS);
    dat_ep_create(ia, pz, dto_evd, dto_evd, conn_evd, NULL, &cl);
    dat_ep_connect(cl, server_addr, port + 2, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT,
                   DAT_CONNECT_DEFAULT_FLAG);
    if (truth("provider PSP: CR arrives",
              next_event(cr_evd, &ev) == DAT_CONNECTION_REQUEST_EVENT)) {
      DAT_CR_PARAM cp;
      DAT_CR_HANDLE pcr = ev.event_data.cr_arrival_event_data.cr_handle;
      dat_cr_query(pcr, DAT_CR_FIELD_ALL, &cp);
      DAT_HANDLE_TYPE type = DAT_HANDLE_TYPE_IA;
      truth("provider PSP: the CR names an EP the provider made",
            cp.local_ep_handle != DAT_HANDLE_NULL &&
                dat_get_handle_type(cp.local_ep_handle, &type) == DAT_SUCCESS &&
                type == DAT_HANDLE_TYPE_EP);
      expect("cr_accept without an EP (provider PSP)", dat_cr_accept(pcr, DAT_HANDLE_NULL, 0, NULL),
             DAT_SUCCESS);
      /* the provider's EP reports to the PSP's EVD (kdat links it there) */
      truth("provider PSP: server ESTABLISHED on the PSP's EVD",
            next_event(cr_evd, &ev) == DAT_CONNECTION_EVENT_ESTABLISHED &&
                ev.event_data.connect_event_data.ep_handle == cp.local_ep_handle);
      truth("provider PSP: client ESTABLISHED",
            next_event(conn_evd, &ev) == DAT_CONNECTION_EVENT_ESTABLISHED &&
                ev.event_data.connect_event_data.ep_handle == cl);
      DAT_EP_PARAM param;
      dat_ep_query(cp.local_ep_handle, DAT_EP_FIELD_ALL, &param);
      truth("provider PSP: ep_query of the provider's EP: CONNECTED, connect EVD = PSP's",
            param.ep_state == DAT_EP_STATE_CONNECTED && param.connect_evd_handle == cr_evd);
      dat_ep_disconnect(cl, DAT_CLOSE_ABRUPT_FLAG);
      next_event(conn_evd, &ev);
      next_event(cr_evd, &ev);
      expect("ep_free (provider-made EP)", dat_ep_free(cp.local_ep_handle), DAT_SUCCESS);
    }
    dat_ep_free(cl);
    expect("psp_free (provider flag)", dat_psp_free(ppsp), DAT_SUCCESS);
  }

  /* ---- CNO */
  {
    DAT_CNO_HANDLE cno = DAT_HANDLE_NULL;
    DAT_EVD_HANDLE cevd = DAT_HANDLE_NULL, got = DAT_HANDLE_NULL;
    DAT_EVENT se;
    expect("cno_create", dat_cno_create(ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno), DAT_SUCCESS);
    expect("evd_create with a CNO",
           dat_evd_create(ia, 8, cno, DAT_EVD_SOFTWARE_FLAG | DAT_EVD_DTO_FLAG, &cevd),
           DAT_SUCCESS);
    expect("cno_wait times out", dat_cno_wait(cno, 1000, &got), DAT_TIMEOUT_EXPIRED);
    memset(&se, 0, sizeof(se));
    se.event_number = DAT_SOFTWARE_EVENT;
    dat_evd_post_se(cevd, &se);
    expect("cno_wait", dat_cno_wait(cno, WAIT_US, &got), DAT_SUCCESS);
    truth("cno_wait names the EVD with the event", got == cevd);
    expect("cno_free while an EVD uses it", dat_cno_free(cno), DAT_INVALID_STATE);
    expect("evd_dequeue (CNO's EVD)", dat_evd_dequeue(cevd, &ev), DAT_SUCCESS);
    expect("evd_free (CNO's EVD)", dat_evd_free(cevd), DAT_SUCCESS);
    expect("cno_free", dat_cno_free(cno), DAT_SUCCESS);
  }

  /* ---- stale handles */
  expect("ep_free (server EP)", dat_ep_free(srv_ep), DAT_SUCCESS);
  expect("ep_free of a freed EP", dat_ep_free(srv_ep), DAT_INVALID_HANDLE);
  {
    DAT_EP_PARAM param;
    expect("ep_query of a freed EP", dat_ep_query(srv_ep, DAT_EP_FIELD_ALL, &param),
           DAT_INVALID_HANDLE);
    expect("ep_connect of a freed EP",
           dat_ep_connect(srv_ep, server_addr, port, WAIT_US, 0, NULL, DAT_QOS_BEST_EFFORT,
                          DAT_CONNECT_DEFAULT_FLAG),
           DAT_INVALID_HANDLE);
  }
  expect("evd_free of the async EVD", dat_evd_free(async), DAT_INVALID_STATE);
  expect("ep_query(NULL) (registry)", dat_ep_query(DAT_HANDLE_NULL, DAT_EP_FIELD_ALL, NULL),
         DAT_INVALID_HANDLE);
  expect("cr_accept(NULL) (registry)", dat_cr_accept(DAT_HANDLE_NULL, ep, 0, NULL),
         DAT_INVALID_HANDLE);

  data_path(ia, server_addr, port + 20);
  extensions(ia, server_addr, port + 30, provider, &ia_attr, &pr_attr);
  ud_datagrams(ia, server_addr, port + 50, &pr_attr);
  big_qualifier(ia, server_addr);

  /* ---- IA close: graceful refuses while objects live; abrupt frees them */
  expect("ia_close graceful with objects", dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG),
         DAT_INVALID_STATE);
  {
    DAT_EVD_HANDLE shared = async;
    DAT_IA_HANDLE ia3 = DAT_HANDLE_NULL;
    expect("ia_open with another IA's async EVD", dat_ia_open(provider, 8, &shared, &ia3),
           DAT_NOT_IMPLEMENTED);
  }
  {
    /* IA handles are the registry's small integers, mapped to the provider's */
    DAT_HANDLE_TYPE type = DAT_HANDLE_TYPE_EP;
    expect("get_handle_type(ia)", dat_get_handle_type(ia, &type), DAT_SUCCESS);
    truth("get_handle_type(ia) is IA", type == DAT_HANDLE_TYPE_IA);
  }
  /* a second IA keeps the provider loaded while the first is closed abruptly */
  expect("ia_open (second IA)", dat_ia_open(provider, 8, &async2, &ia2), DAT_SUCCESS);
  cross_ia_connect_evd(ia, ia2, server_addr, port + 40);
  DAT_RMR_HANDLE left_rmr = DAT_HANDLE_NULL;
  expect("rmr_create (left for the abrupt close)", dat_rmr_create(pz, &left_rmr), DAT_SUCCESS);
  expect("ia_close abrupt with objects", dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
  {
    DAT_RMR_PARAM rp;
    expect("rmr_query of an RMR an abrupt IA close freed",
           dat_rmr_query(left_rmr, DAT_RMR_FIELD_ALL, &rp), DAT_INVALID_HANDLE);
  }
  {
    DAT_EP_PARAM param;
    expect("ep_query of an EP an abrupt IA close freed", dat_ep_query(ep, DAT_EP_FIELD_ALL, &param),
           DAT_INVALID_HANDLE);
    expect("evd_wait on an EVD an abrupt IA close freed",
           dat_evd_wait(conn_evd, 1000, 1, &ev, &nmore), DAT_INVALID_HANDLE);
    expect("psp_free of a PSP an abrupt IA close freed", dat_psp_free(psp), DAT_INVALID_HANDLE);
    expect("lmr_free of an LMR an abrupt IA close freed", dat_lmr_free(keep_lmr),
           DAT_INVALID_HANDLE);
  }
  expect("ia_close of a closed IA (registry)", dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG),
         DAT_INVALID_HANDLE);
  expect("ia_close graceful (second IA, nothing left)", dat_ia_close(ia2, DAT_CLOSE_GRACEFUL_FLAG),
         DAT_SUCCESS);
  /* every IA is closed: libdat2 called dat_provider_fini and dlclose; the next open must find
   * the provider again (init registers it anew) */
  async = DAT_HANDLE_NULL;
  ia = DAT_HANDLE_NULL;
  if (expect("ia_open again after the last ia_close", dat_ia_open(provider, 8, &async, &ia),
             DAT_SUCCESS)) {
    expect("ia_query (reopened IA)",
           dat_ia_query(ia, NULL, DAT_IA_ALL, &ia_attr, DAT_PROVIDER_FIELD_ALL, &pr_attr),
           DAT_SUCCESS);
    async2 = DAT_HANDLE_NULL;
    expect("ia_open (a second IA beside the reopened one)", dat_ia_open(provider, 8, &async2, &ia2),
           DAT_SUCCESS);
    expect("ia_close (second)", dat_ia_close(ia2, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
    expect("ia_close (reopened IA)", dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
    async = DAT_HANDLE_NULL;
    ia = DAT_HANDLE_NULL;
    expect("ia_open a third time", dat_ia_open(provider, 8, &async, &ia), DAT_SUCCESS);
    expect("ia_close (third)", dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
  }

out:
  printf("checks: %d failed: %d\n", checks, failures);
  return failures == 0 && checks > 0 ? 0 : 1;
}
