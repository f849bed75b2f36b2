// A plain rdma_cm peer (librdmacm, no kdat): what NVMe-oF or iSER look like on the wire to kdat.
// The guest tests run it against kdat EPs to check private data byte for byte, both ways.
//
//   plain_rdmacm_peer server ADDR PORT accept|reject HEX   one request: print it, answer with HEX
//   plain_rdmacm_peer client ADDR PORT HEX                 connect with HEX, print the answer
//   plain_rdmacm_peer client ADDR PORT HEX hold [SEND]     ...and once connected, send SEND's
//       bytes (hex, if given) and stay connected until the peer disconnects ("disconnected by
//       peer") or standard input closes (then disconnect: "disconnected")
//
// Output, one line each: "listening", "request len=N data=HEX", "established len=N data=HEX",
// "rejected status=S len=N data=HEX", "disconnected", "error WHAT". Exit 0 when the exchange
// ran (whatever its outcome), 1 on an error.
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

std::vector<std::uint8_t> from_hex(const std::string &text) {
  if (text.size() % 2 != 0) throw std::runtime_error("odd hex length");
  std::vector<std::uint8_t> out;
  for (std::size_t i = 0; i < text.size(); i += 2) {
    out.push_back(static_cast<std::uint8_t>(std::stoul(text.substr(i, 2), nullptr, 16)));
  }
  return out;
}

std::string to_hex(const void *data, std::size_t len) {
  std::string out;
  char byte[3];
  for (std::size_t i = 0; i < len; ++i) {
    std::snprintf(byte, sizeof(byte), "%02x", static_cast<const std::uint8_t *>(data)[i]);
    out += byte;
  }
  return out;
}

void check(int ret, const char *what) {
  if (ret != 0) throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
}

struct Channel {
  rdma_event_channel *ch = rdma_create_event_channel();
  Channel() {
    if (ch == nullptr) throw std::runtime_error("rdma_create_event_channel");
  }
  ~Channel() { rdma_destroy_event_channel(ch); }
  Channel(const Channel &) = delete;
  Channel &operator=(const Channel &) = delete;

  // The next event, its fields (and private data, if asked) copied out and the event acked.
  rdma_cm_event next_any(std::vector<std::uint8_t> *pdata = nullptr) const {
    rdma_cm_event *ev = nullptr;
    check(rdma_get_cm_event(ch, &ev), "rdma_get_cm_event");
    rdma_cm_event copy = *ev;
    if (pdata != nullptr) {
      const auto *p = static_cast<const std::uint8_t *>(ev->param.conn.private_data);
      pdata->assign(p, p + (p != nullptr ? ev->param.conn.private_data_len : 0));
    }
    rdma_ack_cm_event(ev);
    return copy;
  }

  // ...which must be `want`.
  rdma_cm_event next(rdma_cm_event_type want, std::vector<std::uint8_t> *pdata = nullptr) const {
    const rdma_cm_event ev = next_any(pdata);
    if (ev.event != want) {
      throw std::runtime_error(std::string("unexpected ") + rdma_event_str(ev.event));
    }
    return ev;
  }
};

void make_qp(rdma_cm_id *id) {
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  check(rdma_create_qp(id, nullptr, &attr), "rdma_create_qp");
}

addrinfo *resolve(const char *addr, const char *port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo *res = nullptr;
  if (getaddrinfo(addr, port, &hints, &res) != 0) throw std::runtime_error("getaddrinfo");
  return res;
}

int server(const char *addr, const char *port, bool accept, const std::vector<std::uint8_t> &data) {
  Channel ch;
  rdma_cm_id *listener = nullptr;
  check(rdma_create_id(ch.ch, &listener, nullptr, RDMA_PS_TCP), "rdma_create_id");
  addrinfo *ai = resolve(addr, port, true);
  check(rdma_bind_addr(listener, ai->ai_addr), "rdma_bind_addr");
  freeaddrinfo(ai);
  check(rdma_listen(listener, 1), "rdma_listen");
  std::printf("listening\n");
  std::fflush(stdout);
  std::vector<std::uint8_t> got;
  const rdma_cm_event req = ch.next(RDMA_CM_EVENT_CONNECT_REQUEST, &got);
  std::printf("request len=%zu data=%s\n", got.size(), to_hex(got.data(), got.size()).c_str());
  std::fflush(stdout);
  rdma_cm_id *id = req.id;
  rdma_conn_param param{};
  param.private_data = data.data();
  param.private_data_len = static_cast<std::uint8_t>(data.size());
  if (!accept) {
    check(rdma_reject(id, data.data(), static_cast<std::uint8_t>(data.size())), "rdma_reject");
    rdma_destroy_id(id);
    rdma_destroy_id(listener);
    return 0;
  }
  make_qp(id);
  param.responder_resources = param.initiator_depth = 1;
  param.rnr_retry_count = 7;
  check(rdma_accept(id, &param), "rdma_accept");
  ch.next(RDMA_CM_EVENT_ESTABLISHED);
  std::printf("established len=0 data=\n");
  std::fflush(stdout);
  ch.next(RDMA_CM_EVENT_DISCONNECTED);
  std::printf("disconnected\n");
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  rdma_destroy_id(listener);
  return 0;
}

// Sends `bytes` on the connected id's QP (the id's own PD and CQs, as rdma_create_qp made them).
void send_bytes(rdma_cm_id *id, std::vector<std::uint8_t> &bytes) {
  ibv_mr *mr = ibv_reg_mr(id->pd, bytes.data(), bytes.size(), IBV_ACCESS_LOCAL_WRITE);
  if (mr == nullptr) throw std::runtime_error("ibv_reg_mr");
  ibv_sge sge{};
  sge.addr = reinterpret_cast<std::uintptr_t>(bytes.data());
  sge.length = static_cast<std::uint32_t>(bytes.size());
  sge.lkey = mr->lkey;
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  ibv_send_wr *bad = nullptr;
  check(ibv_post_send(id->qp, &wr, &bad), "ibv_post_send");
  std::printf("sent len=%zu\n", bytes.size());
  std::fflush(stdout);
  // the MR stays registered until the process ends: the send may still be reading it
}

// Connected: until the peer disconnects or standard input closes.
void hold(const Channel &ch, rdma_cm_id *id) {
  pollfd fds[2] = {{ch.ch->fd, POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0 && errno != EINTR) throw std::runtime_error("poll");
    if (fds[0].revents & POLLIN) {
      const rdma_cm_event ev = ch.next_any();
      if (ev.event == RDMA_CM_EVENT_DISCONNECTED) {
        std::printf("disconnected by peer\n");
        return;
      }
      std::printf("event %s\n", rdma_event_str(ev.event));
      std::fflush(stdout);
    }
    if (fds[1].revents & (POLLIN | POLLHUP)) {
      char c;
      if (read(STDIN_FILENO, &c, 1) <= 0) {
        check(rdma_disconnect(id), "rdma_disconnect");
        ch.next(RDMA_CM_EVENT_DISCONNECTED);
        std::printf("disconnected\n");
        return;
      }
    }
  }
}

int client(const char *addr, const char *port, const std::vector<std::uint8_t> &data,
           bool stay = false, std::vector<std::uint8_t> to_send = {}) {
  Channel ch;
  rdma_cm_id *id = nullptr;
  check(rdma_create_id(ch.ch, &id, nullptr, RDMA_PS_TCP), "rdma_create_id");
  addrinfo *ai = resolve(addr, port, false);
  check(rdma_resolve_addr(id, nullptr, ai->ai_addr, 5000), "rdma_resolve_addr");
  freeaddrinfo(ai);
  ch.next(RDMA_CM_EVENT_ADDR_RESOLVED);
  check(rdma_resolve_route(id, 5000), "rdma_resolve_route");
  ch.next(RDMA_CM_EVENT_ROUTE_RESOLVED);
  make_qp(id);
  rdma_conn_param param{};
  param.private_data = data.data();
  param.private_data_len = static_cast<std::uint8_t>(data.size());
  param.responder_resources = param.initiator_depth = 1;
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  check(rdma_connect(id, &param), "rdma_connect");
  std::vector<std::uint8_t> got;
  const rdma_cm_event ev = ch.next_any(&got);
  if (ev.event == RDMA_CM_EVENT_ESTABLISHED) {
    std::printf("established len=%zu data=%s\n", got.size(),
                to_hex(got.data(), got.size()).c_str());
    std::fflush(stdout);
    if (stay) {
      if (!to_send.empty()) send_bytes(id, to_send);
      hold(ch, id);
    } else {
      check(rdma_disconnect(id), "rdma_disconnect");
      ch.next(RDMA_CM_EVENT_DISCONNECTED);
      std::printf("disconnected\n");
    }
  } else if (ev.event == RDMA_CM_EVENT_REJECTED) {
    std::printf("rejected status=%d len=%zu data=%s\n", ev.status, got.size(),
                to_hex(got.data(), got.size()).c_str());
  } else {
    std::printf("error %s status=%d\n", rdma_event_str(ev.event), ev.status);
    return 1;
  }
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "server" && argc == 6) {
      const std::string how = argv[4];
      if (how != "accept" && how != "reject") throw std::runtime_error("accept or reject");
      return server(argv[2], argv[3], how == "accept", from_hex(argv[5]));
    }
    if (mode == "client" && argc == 5) return client(argv[2], argv[3], from_hex(argv[4]));
    if (mode == "client" && (argc == 6 || argc == 7) && std::string(argv[5]) == "hold") {
      return client(argv[2], argv[3], from_hex(argv[4]), true,
                    argc == 7 ? from_hex(argv[6]) : std::vector<std::uint8_t>{});
    }
    std::fprintf(stderr,
                 "usage: plain_rdmacm_peer server ADDR PORT accept|reject HEX\n"
                 "       plain_rdmacm_peer client ADDR PORT HEX [hold [SEND]]\n");
    return 2;
  } catch (const std::exception &e) {
    std::printf("error %s\n", e.what());
    return 1;
  }
}
