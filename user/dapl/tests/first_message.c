/*
 * first_message: who sends first on a new connection (rdma_connect(3): over iWARP "the active side
 * of the connection send[s] the first message").  The server accepts and posts a send at once, as
 * dtest's does; the client decides when, or whether, it sends.  Both print what happened as
 * key=value lines with times in seconds from their CONNECTED event;
 * tests/wire/test_wire_first_message.py judges them.
 *
 *   first_message server PROVIDER PORT
 *   first_message client PROVIDER SERVER_IP PORT speaks|silent|leaves
 *
 * speaks: the client sends 0.5 s after CONNECTED, then waits for the server's message.
 * silent: the client only waits for the server's message.
 * leaves: the client disconnects 0.3 s after CONNECTED without sending.
 *
 * The server waits for its send's completion on its request EVD while the receive that may
 * release it completes on another EVD (the provider must notice that by itself).  Exit status:
 * 0 if every DAT call succeeded (the outcome of the DTOs is reported, not judged), 1 otherwise.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
/* (after the socket types) */
#include <dat2/udat.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WAIT_US 10000000u /* 10 s: nothing here may hang */
#define MSG_LEN 64

static struct timespec connected_at;

static double since_connected(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - connected_at.tv_sec) +
         (double)(now.tv_nsec - connected_at.tv_nsec) / 1e9;
}

static void mark_connected(void) { clock_gettime(CLOCK_MONOTONIC, &connected_at); }

static void sleep_s(double s) {
  struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&t, &t) != 0) {
  }
}

static int ok(const char *what, DAT_RETURN r) {
  if (r == DAT_SUCCESS) return 1;
  const char *major = "?", *minor = "";
  dat_strerror(r, &major, &minor);
  printf("error=%s %s %s\n", what, major, minor);
  return 0;
}

static const char *status_name(DAT_DTO_COMPLETION_STATUS s) {
  switch (s) {
    case DAT_DTO_SUCCESS: return "SUCCESS";
    case DAT_DTO_ERR_FLUSHED: return "FLUSHED";
    default: return "ERROR";
  }
}

struct side {
  DAT_IA_HANDLE ia;
  DAT_EVD_HANDLE async, conn, cr, recv, req;
  DAT_PZ_HANDLE pz;
  DAT_LMR_HANDLE lmr;
  DAT_LMR_CONTEXT lmr_context;
  DAT_PSP_HANDLE psp;
  DAT_EP_HANDLE ep;
  char buf[3 * MSG_LEN]; /* slot 0: receive, 1: send, 2: the second receive */
};

static DAT_LMR_TRIPLET iov_at(struct side *s, int slot) {
  DAT_LMR_TRIPLET t;
  t.lmr_context = s->lmr_context;
  t.virtual_address = (DAT_VADDR)(uintptr_t)(s->buf + slot * MSG_LEN);
  t.segment_length = MSG_LEN;
  return t;
}

/* Receives in slots 0 and 2 (cookies 1 and 3): iWARP has no RNR retry, so the server's
 * second message must find one posted. */
static int post_recvs(struct side *s) {
  DAT_LMR_TRIPLET r = iov_at(s, 0), r2 = iov_at(s, 2);
  DAT_DTO_COOKIE cookie = {.as_64 = 1}, cookie2 = {.as_64 = 3};
  return ok("post_recv", dat_ep_post_recv(s->ep, 1, &r, cookie, DAT_COMPLETION_DEFAULT_FLAG)) &&
         ok("post_recv", dat_ep_post_recv(s->ep, 1, &r2, cookie2, DAT_COMPLETION_DEFAULT_FLAG));
}

/* The IA, its EVDs (one for DTOs unless `split`), the PZ and the LMR. */
static int open_side(struct side *s, char *provider, int split) {
  DAT_REGION_DESCRIPTION region;
  DAT_VLEN registered_size;
  DAT_VADDR registered_addr;

  s->async = DAT_HANDLE_NULL;
  if (!ok("ia_open", dat_ia_open(provider, 8, &s->async, &s->ia))) return 0;
  if (!ok("evd_create conn",
          dat_evd_create(s->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &s->conn)) ||
      !ok("evd_create cr", dat_evd_create(s->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &s->cr)) ||
      !ok("evd_create recv", dat_evd_create(s->ia, 8, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->recv)))
    return 0;
  s->req = s->recv;
  if (split &&
      !ok("evd_create req", dat_evd_create(s->ia, 8, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->req)))
    return 0;
  if (!ok("pz_create", dat_pz_create(s->ia, &s->pz))) return 0;
  region.for_va = s->buf;
  if (!ok("lmr_create", dat_lmr_create(s->ia, DAT_MEM_TYPE_VIRTUAL, region, sizeof(s->buf), s->pz,
                                       DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &s->lmr,
                                       &s->lmr_context, NULL, &registered_size, &registered_addr)))
    return 0;
  if (!ok("ep_create", dat_ep_create(s->ia, s->pz, s->recv, s->req, s->conn, NULL, &s->ep)))
    return 0;
  return post_recvs(s);
}

static int post_message(struct side *s, const char *text) {
  snprintf(s->buf + MSG_LEN, MSG_LEN, "%s", text);
  DAT_LMR_TRIPLET t = iov_at(s, 1);
  DAT_DTO_COOKIE cookie = {.as_64 = 2};
  return ok("post_send", dat_ep_post_send(s->ep, 1, &t, cookie, DAT_COMPLETION_DEFAULT_FLAG));
}

static DAT_DTO_COMPLETION_STATUS last_status; /* of the completion await_dto() last reported */

/* Waits for the DTO completion `cookie` on `evd` (other DTO events are reported and skipped);
 * prints NAME_status and NAME_at.  0 if none came in `us`. */
static int await_dto(DAT_EVD_HANDLE evd, uint64_t cookie, const char *name, DAT_TIMEOUT us) {
  for (;;) {
    DAT_EVENT ev;
    DAT_COUNT nmore;
    DAT_RETURN r = dat_evd_wait(evd, us, 1, &ev, &nmore);
    if (r != DAT_SUCCESS) {
      printf("%s_status=NONE\n", name);
      return 0;
    }
    if (ev.event_number != DAT_DTO_COMPLETION_EVENT) {
      printf("unexpected_event=0x%x\n", ev.event_number);
      continue;
    }
    const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
    if (d->user_cookie.as_64 != cookie) {
      printf("other_dto=%llu status=%s at=%.3f\n", (unsigned long long)d->user_cookie.as_64,
             status_name(d->status), since_connected());
      continue;
    }
    printf("%s_status=%s\n%s_at=%.3f\n", name, status_name(d->status), name, since_connected());
    last_status = d->status;
    return 1;
  }
}

static int await_connection_event(struct side *s, DAT_EVENT_NUMBER want, const char *name) {
  DAT_EVENT ev;
  DAT_COUNT nmore;
  if (!ok(name, dat_evd_wait(s->conn, WAIT_US, 1, &ev, &nmore))) return 0;
  if (ev.event_number != want) {
    printf("error=%s got event 0x%x\n", name, ev.event_number);
    return 0;
  }
  return 1;
}

static void close_side(struct side *s) {
  if (s->ep) (void)dat_ep_free(s->ep);
  if (s->psp) (void)dat_psp_free(s->psp);
  if (s->lmr) (void)dat_lmr_free(s->lmr);
  if (s->pz) (void)dat_pz_free(s->pz);
  if (s->req && s->req != s->recv) (void)dat_evd_free(s->req);
  if (s->recv) (void)dat_evd_free(s->recv);
  if (s->cr) (void)dat_evd_free(s->cr);
  if (s->conn) (void)dat_evd_free(s->conn);
  if (s->ia) (void)dat_ia_close(s->ia, DAT_CLOSE_ABRUPT_FLAG);
}

static int server(char *provider, DAT_CONN_QUAL port) {
  struct side s = {0};
  int good = open_side(&s, provider, 1);
  DAT_EVENT ev;
  DAT_COUNT nmore;

  good = good && ok("psp_create", dat_psp_create(s.ia, port, s.cr, DAT_PSP_CONSUMER_FLAG, &s.psp));
  if (good) {
    printf("ready\n");
    fflush(stdout);
  }
  good = good && ok("cr wait", dat_evd_wait(s.cr, 60000000u, 1, &ev, &nmore));
  good = good && ev.event_number == DAT_CONNECTION_REQUEST_EVENT;
  good = good && ok("cr_accept",
                    dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, s.ep, 0, NULL));
  good = good && await_connection_event(&s, DAT_CONNECTION_EVENT_ESTABLISHED, "connected");
  if (good) {
    mark_connected();
    printf("connected=1\n");
    /* as dtest's server: the first send right after CONNECTED */
    good = post_message(&s, "server speaks");
    good = good && await_dto(s.req, 2, "send", WAIT_US);
    /* A second message once the first has completed; the client ends the connection only
     * after it, so its disconnect cannot race the first send's completion (siw may complete a
     * send in error when the connection ends, even one whose data the peer has read). */
    if (good && last_status == DAT_DTO_SUCCESS && post_message(&s, "server done"))
      (void)await_dto(s.req, 2, "done", WAIT_US);
    (void)await_dto(s.recv, 1, "recv", 3000000u);
    /* the client ends the connection */
    good = good && await_connection_event(&s, DAT_CONNECTION_EVENT_DISCONNECTED, "disconnected");
  }
  close_side(&s);
  printf("server_done=%d\n", good);
  return good ? 0 : 1;
}

static int client(char *provider, const char *ip, DAT_CONN_QUAL port, const char *mode) {
  struct side s = {0};
  struct sockaddr_in addr = {0};
  addr.sin_family = AF_INET;
  if (inet_pton(AF_INET, ip, &addr.sin_addr) != 1) return 2;
  int good = open_side(&s, provider, 0);

  good =
      good && ok("ep_connect", dat_ep_connect(s.ep, (DAT_IA_ADDRESS_PTR)&addr, port, WAIT_US, 0,
                                              NULL, DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
  good = good && await_connection_event(&s, DAT_CONNECTION_EVENT_ESTABLISHED, "connected");
  if (good) {
    mark_connected();
    printf("connected=1\n");
    if (strcmp(mode, "leaves") == 0) {
      sleep_s(0.3);
      good = ok("ep_disconnect", dat_ep_disconnect(s.ep, DAT_CLOSE_ABRUPT_FLAG));
    } else {
      if (strcmp(mode, "speaks") == 0) {
        sleep_s(0.5);
        printf("sent_at=%.3f\n", since_connected());
        good = post_message(&s, "client speaks");
      }
      good = good && await_dto(s.recv, 1, "recv", 5000000u);
      if (good) printf("message=%s\n", s.buf);
      /* the server's second message: its first send has completed (see server()) */
      good = good && await_dto(s.recv, 3, "done", 5000000u);
      good = good && ok("ep_disconnect", dat_ep_disconnect(s.ep, DAT_CLOSE_GRACEFUL_FLAG));
    }
    good = good && await_connection_event(&s, DAT_CONNECTION_EVENT_DISCONNECTED, "disconnected");
  }
  close_side(&s);
  printf("client_done=%d\n", good);
  return good ? 0 : 1;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 4 && strcmp(argv[1], "server") == 0)
    return server(argv[2], (DAT_CONN_QUAL)strtoul(argv[3], NULL, 0));
  if (argc == 6 && strcmp(argv[1], "client") == 0 &&
      (strcmp(argv[5], "speaks") == 0 || strcmp(argv[5], "silent") == 0 ||
       strcmp(argv[5], "leaves") == 0))
    return client(argv[2], argv[3], (DAT_CONN_QUAL)strtoul(argv[4], NULL, 0), argv[5]);
  fprintf(stderr,
          "usage: %s server PROVIDER PORT\n"
          "       %s client PROVIDER SERVER_IP PORT speaks|silent|leaves\n",
          argv[0], argv[0]);
  return 2;
}
