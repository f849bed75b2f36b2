// kdat_fuzz: a structure-aware fuzzer of /dev/kdat (issue #8, "hostile input").
//
// Every call is one of kdat's ioctls (or an unknown one) with a struct built from the ABI in
// <kdat/uapi/kdat.h>: handles drawn from live objects of this file, of another file, freed ones or
// random words; sizes exact, truncated or oversized; reserved fields and unknown flags set;
// private-data sizes at and beyond every limit; huge counts; arguments that end at a guard page
// or point at unmapped or kernel memory.  Worker threads share one file while a closer thread
// swaps it for a fresh one and closes the old one, and while the workers free objects that the
// others are using.  Real connections happen too (the file listens and connects to itself).
//
// What counts as failure: an errno outside the set the ABI documents, a call that does not
// return within --hang-ms (a hang), or a final sanity connection that does not work.  A kernel
// crash shows up as the guest dying; KASAN/lockdep/kmemleak reports are checked by the harness.
//
// Reproducible from the printed seed: each thread draws from its own generator (seed + index);
// with --threads 1 --closer-ms 0 the call sequence is exactly the same on every run.
#include <arpa/inet.h>
#include <fcntl.h>
#include <kdat/uapi/kdat.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::uint64_t seed = 1;
  std::uint64_t calls = 1'000'000;
  double seconds = 300;
  unsigned threads = 4;
  unsigned closer_ms = 200;  // swap and close the shared file this often; 0 = never
  unsigned hang_ms = 20'000;
  std::string addr = "192.0.2.1";
  std::string netdev = "kdat0";
};

Options opt;

// ---- the objects a file has, as far as this process knows --------------------------------

enum Kind { IA, EVD, EP, PSP, RSP, CR, NKINDS };
constexpr std::size_t kPoolCap = 24;

struct Pool {
  std::array<std::vector<std::uint32_t>, NKINDS> live;
  std::vector<std::uint32_t> dead;  // freed, or of a file that was closed
};

std::mutex pool_lock;
Pool pool;
std::atomic<int> shared_fd{-1};
std::vector<std::uint32_t> foreign;  // live handles of another open file (read-only after setup)
std::uint32_t limit_connect = 52, limit_accept = 192, limit_reject = 144, max_qlen = 4096;
std::uint16_t port_base = 30000;

void pool_add(Kind k, std::uint32_t h) {
  std::lock_guard g(pool_lock);
  pool.live[k].push_back(h);
}

void pool_kill(std::uint32_t h) {
  std::lock_guard g(pool_lock);
  for (auto &v : pool.live) std::erase(v, h);
  if (pool.dead.size() > 256) pool.dead.erase(pool.dead.begin());
  pool.dead.push_back(h);
}

std::size_t pool_size(Kind k) {
  std::lock_guard g(pool_lock);
  return pool.live[k].size();
}

// ---- outcome accounting -------------------------------------------------------------------

struct Tally {
  std::uint64_t ok = 0, dat_error = 0;
  std::map<int, std::uint64_t> errnos;
};

std::mutex tally_lock;
std::map<std::string, Tally> tallies;
std::atomic<std::uint64_t> total_calls{0}, unexpected{0}, reopens{0}, established{0}, maps{0};
std::atomic<bool> stop{false};

bool errno_documented(int e) {
  switch (e) {
    case EINVAL:  // size field, reserved bits, bad mmap offset/length
    case ENOTTY:  // unknown command
    case EFAULT:  // unreadable or unwritable argument
    case E2BIG:   // a longer struct than the kernel knows, with a non-zero tail
    case EBADF:   // the closer thread closed the fd under us
    case EINTR:   // a signal ended an infinite wait
    case ENOMEM:
    case EACCES:  // writable table mapping
    case ENXIO:   // view mapping before an attach
    case ENODEV:  // mmap of a file without mmap (fd reused by something else)
    case EPERM:   // PROT_EXEC mapping of a noexec file system's node
      return true;
    default: return false;
  }
}

void account(const char *name, long rc, int err, std::uint32_t status) {
  total_calls.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard g(tally_lock);
  Tally &t = tallies[name];
  if (rc < 0) {
    t.errnos[err]++;
    if (!errno_documented(err)) {
      unexpected++;
      std::fprintf(stderr, "kdat_fuzz: %s: undocumented errno %d (%s)\n", name, err,
                   std::strerror(err));
    }
  } else if (status) {
    t.dat_error++;
  } else {
    t.ok++;
  }
}

// ---- per-thread randomness and argument memory ---------------------------------------------

// What a worker is doing, for the watchdog: since = start of its call in ns (negated for a long
// wait the watchdog may interrupt), 0 = between calls.
struct Worker {
  std::atomic<std::int64_t> since{0};
  std::atomic<const char *> what{""};
  pthread_t thread{};
};
std::vector<Worker> workers;
thread_local Worker *self;

thread_local std::mt19937_64 rng;

std::uint64_t rnd() { return rng(); }
unsigned below(unsigned n) { return static_cast<unsigned>(rnd() % n); }
bool chance(unsigned percent) { return below(100) < percent; }

// A page of argument memory followed by a PROT_NONE page: a struct placed at its end that is
// shorter than the kernel reads faults exactly where the guard starts.
struct ArgPages {
  std::uint8_t *base = nullptr;
  long page = sysconf(_SC_PAGESIZE);
  ArgPages() {
    void *m = ::mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) std::abort();
    base = static_cast<std::uint8_t *>(m);
    ::mprotect(base + 2 * page, page, PROT_NONE);
  }
  ~ArgPages() { ::munmap(base, 3 * page); }
  ArgPages(const ArgPages &) = delete;
  ArgPages &operator=(const ArgPages &) = delete;
  std::uint8_t *guard() const { return base + 2 * page; }
};

std::uint32_t pick_handle(Kind want) {
  const unsigned r = below(100);
  std::lock_guard g(pool_lock);
  auto from = [&](const std::vector<std::uint32_t> &v) -> std::uint32_t {
    return v.empty() ? 0 : v[rnd() % v.size()];
  };
  if (r < 72 && !pool.live[want].empty()) return from(pool.live[want]);
  if (r < 80) return from(pool.live[below(NKINDS)]);  // a live object of another type
  if (r < 86 && !pool.dead.empty()) return from(pool.dead);
  if (r < 91 && !foreign.empty()) return from(foreign);
  if (r < 94) return 0;
  if (r < 97) return static_cast<std::uint32_t>(rnd());
  return from(pool.live[want]) ^ (1u << below(32));  // one bit off a live handle
}

std::int32_t pick_pdata_size(std::uint32_t limit) {
  static const std::int32_t odd[] = {
      -1, -4096, INT32_MIN, INT32_MAX, KDAT_PRIVATE_DATA_MAX, KDAT_PRIVATE_DATA_MAX + 1, 65536};
  switch (below(8)) {
    case 0: return 0;
    case 1: return static_cast<std::int32_t>(limit);
    case 2: return static_cast<std::int32_t>(limit) + 1;
    case 3: return static_cast<std::int32_t>(limit) - 1;
    case 4: return odd[below(std::size(odd))];
    default: return static_cast<std::int32_t>(below(limit + 1));
  }
}

std::uint32_t pick_timeout() {
  const unsigned r = below(100);
  if (r < 35) return 0;
  if (r < 97) return 1 + below(1000);
  return r < 99 ? KDAT_TIMEOUT_INFINITE
                : static_cast<std::uint32_t>(rnd());  // the watchdog ends it
}

std::uint32_t pick_qlen() {
  static const std::uint32_t odd[] = {0, 1, 2, max_qlen, max_qlen + 1, 0xffffffffu, 0x80000000u};
  return chance(70) ? 1 + below(64) : odd[below(std::size(odd))];
}

std::uint64_t pick_qual() {
  switch (below(10)) {
    case 0: return 0;
    case 1: return 65535;
    case 2: return 65536;
    case 3: return rnd();
    default: return port_base + below(64);
  }
}

void fill_addr(kdat_addr &a) {
  std::memset(&a, 0, sizeof(a));
  const unsigned r = below(20);
  a.family = r < 14 ? KDAT_AF_INET : r < 16 ? KDAT_AF_INET6 : r < 17 ? 0 : rnd();
  if (a.family == KDAT_AF_INET) {
    if (r < 11)
      inet_pton(AF_INET, opt.addr.c_str(), a.addr);
    else if (r < 12)
      inet_pton(AF_INET, "127.0.0.1", a.addr);
    else
      for (int i = 0; i < 4; i++) a.addr[i] = static_cast<std::uint8_t>(rnd());
  } else {
    for (auto &b : a.addr) b = static_cast<std::uint8_t>(rnd());
  }
  if (chance(5)) a.scope_id = static_cast<std::uint32_t>(rnd());
  a.port = static_cast<std::uint16_t>(rnd());
}

void random_bytes(void *p, std::size_t n) {
  auto *b = static_cast<std::uint8_t *>(p);
  for (std::size_t i = 0; i < n; i++) b[i] = static_cast<std::uint8_t>(rnd());
}

// ---- the calls -------------------------------------------------------------------------------

// One union big enough for every argument struct.
union Arg {
  kdat_version version;
  kdat_ia_open ia_open;
  kdat_ia_close ia_close;
  kdat_ia_query ia_query;
  kdat_evd_create evd_create;
  kdat_evd_free evd_free;
  kdat_evd_wait evd_wait;
  kdat_evd_dequeue evd_dequeue;
  kdat_ep_create ep_create;
  kdat_ep_free ep_free;
  kdat_ep_query ep_query;
  kdat_ep_modify ep_modify;
  kdat_ep_reset ep_reset;
  kdat_ep_connect ep_connect;
  kdat_ep_dup_connect ep_dup_connect;
  kdat_ep_disconnect ep_disconnect;
  kdat_psp_create psp_create;
  kdat_psp_free psp_free;
  kdat_psp_query psp_query;
  kdat_rsp_create rsp_create;
  kdat_rsp_free rsp_free;
  kdat_cr_query cr_query;
  kdat_cr_accept cr_accept;
  kdat_cr_reject cr_reject;
  kdat_table_list table_list;
  kdat_table_attach table_attach;
  kdat_table_wait table_wait;
  kdat_dev_counters dev_counters;
  kdat_evd_ring evd_ring;
  kdat_evd_ring_wait evd_ring_wait;
  kdat_uqp_create uqp_create;
  kdat_uqp_attr uqp_attr;
  kdat_uqp_establish uqp_establish;
  std::uint8_t bytes[512];
};
static_assert(sizeof(Arg) == 512);

struct Cmd {
  const char *name;
  unsigned long nr;
  unsigned weight;
};

// The kernel's own command list (uapi/kdat_commands.h): which fields are handles, of which kind,
// and which must be zero.
struct HandleField {
  unsigned long nr;
  std::size_t offset;
  Kind kind;
  bool optional;
};
struct ZeroField {
  unsigned long nr;
  std::size_t offset, len;
};
constexpr bool REQUIRED = false, OPTIONAL = true;
#define KDAT_FUZZ_NONE(...)
#define KDAT_FUZZ_HANDLE(name, field, type, use, sub) \
  {kNrOf_##name, offsetof(kdat_##name, field), type, use},
#define KDAT_FUZZ_NR(NAME, name, first) constexpr unsigned long kNrOf_##name = KDAT_IOC_##NAME;
KDAT_COMMANDS(KDAT_FUZZ_NR, KDAT_FUZZ_NONE, KDAT_FUZZ_NONE)
const HandleField kHandleFields[] = {
    KDAT_COMMANDS(KDAT_FUZZ_NONE, KDAT_FUZZ_HANDLE, KDAT_FUZZ_NONE)};
#define KDAT_FUZZ_ZERO(name, field) \
  {kNrOf_##name, offsetof(kdat_##name, field), sizeof(kdat_##name::field)},
const ZeroField kZeroFields[] = {KDAT_COMMANDS(KDAT_FUZZ_NONE, KDAT_FUZZ_NONE, KDAT_FUZZ_ZERO)};
#undef KDAT_FUZZ_HANDLE
#undef KDAT_FUZZ_ZERO
#undef KDAT_FUZZ_NR
#undef KDAT_FUZZ_NONE

#define KDAT_FUZZ_CMD(c, w) \
  { #c, KDAT_IOC_##c, w }
const Cmd cmds[] = {
    KDAT_FUZZ_CMD(VERSION, 1),        KDAT_FUZZ_CMD(IA_OPEN, 3),
    KDAT_FUZZ_CMD(IA_CLOSE, 1),       KDAT_FUZZ_CMD(IA_QUERY, 3),
    KDAT_FUZZ_CMD(EVD_CREATE, 5),     KDAT_FUZZ_CMD(EVD_FREE, 3),
    KDAT_FUZZ_CMD(EVD_WAIT, 6),       KDAT_FUZZ_CMD(EVD_DEQUEUE, 8),
    KDAT_FUZZ_CMD(EP_CREATE, 6),      KDAT_FUZZ_CMD(EP_FREE, 4),
    KDAT_FUZZ_CMD(EP_QUERY, 4),       KDAT_FUZZ_CMD(EP_MODIFY, 3),
    KDAT_FUZZ_CMD(EP_RESET, 3),       KDAT_FUZZ_CMD(EP_CONNECT, 6),
    KDAT_FUZZ_CMD(EP_DUP_CONNECT, 3), KDAT_FUZZ_CMD(EP_DISCONNECT, 5),
    KDAT_FUZZ_CMD(PSP_CREATE, 4),     KDAT_FUZZ_CMD(PSP_FREE, 2),
    KDAT_FUZZ_CMD(PSP_QUERY, 2),      KDAT_FUZZ_CMD(RSP_CREATE, 2),
    KDAT_FUZZ_CMD(RSP_FREE, 2),       KDAT_FUZZ_CMD(CR_QUERY, 3),
    KDAT_FUZZ_CMD(CR_ACCEPT, 4),      KDAT_FUZZ_CMD(CR_REJECT, 3),
    KDAT_FUZZ_CMD(TABLE_LIST, 2),     KDAT_FUZZ_CMD(TABLE_ATTACH, 2),
    KDAT_FUZZ_CMD(EVD_RING, 3),       KDAT_FUZZ_CMD(EVD_RING_WAIT, 3),
    KDAT_FUZZ_CMD(UQP_CREATE, 3),     KDAT_FUZZ_CMD(UQP_ATTR, 3),
    KDAT_FUZZ_CMD(UQP_ESTABLISH, 2),  KDAT_FUZZ_CMD(TABLE_WAIT, 2),
    KDAT_FUZZ_CMD(DEV_COUNTERS, 2),
};
#undef KDAT_FUZZ_CMD
constexpr unsigned kMmapWeight = 4, kUnknownWeight = 2, kConnectWeight = 4;

// special: 0 = the command returned, 1 = an mmap, 2 = an unknown command, 3 = a connection.
const Cmd &pick_cmd(unsigned &special) {
  static const unsigned total = [] {
    unsigned t = kMmapWeight + kUnknownWeight + kConnectWeight;
    for (const auto &c : cmds) t += c.weight;
    return t;
  }();
  unsigned r = below(total);
  special = 0;
  if (r < kMmapWeight)
    special = 1;
  else if (r < kMmapWeight + kUnknownWeight)
    special = 2;
  else if (r < kMmapWeight + kUnknownWeight + kConnectWeight)
    special = 3;
  else
    r -= kMmapWeight + kUnknownWeight + kConnectWeight;
  for (const auto &c : cmds) {
    if (special || r < c.weight) return c;
    r -= c.weight;
  }
  return cmds[0];
}

// Fill a well-formed argument for the command; mutations come afterwards.
void fill(unsigned long nr, Arg &a, std::size_t size) {
  std::memset(&a, 0, sizeof(a));
  a.ia_close.size = static_cast<std::uint32_t>(size);  // every struct starts with size
  switch (nr) {
    case KDAT_IOC_IA_OPEN: {
      const char *names[] = {opt.netdev.c_str(), opt.addr.c_str(), "lo", "", "no-such0", "::1",
                             "192.0.2.77"};
      std::snprintf(a.ia_open.name, sizeof(a.ia_open.name), "%s", names[below(7)]);
      if (chance(3)) std::memset(a.ia_open.name, 'A', sizeof(a.ia_open.name));  // unterminated
      break;
    }
    case KDAT_IOC_IA_CLOSE:
      a.ia_close.flags = chance(90) ? below(2) : static_cast<std::uint32_t>(rnd());
      break;
    case KDAT_IOC_EVD_CREATE:
      a.evd_create.qlen = pick_qlen();
      a.evd_create.flags = chance(90) ? (1 + below(KDAT_EVD_FLAGS_ALL)) & KDAT_EVD_FLAGS_ALL
                                      : static_cast<std::uint32_t>(rnd());
      break;
    case KDAT_IOC_EVD_WAIT:
      a.evd_wait.timeout_us = pick_timeout();
      a.evd_wait.threshold = chance(80) ? 1 : pick_qlen();
      break;
    case KDAT_IOC_EP_CREATE: {
      auto &c = a.ep_create;
      if (chance(30)) {
        c.attr.max_rdma_read_in = pick_qlen();
        c.attr.max_rdma_read_out = pick_qlen();
        c.attr.max_recv_dtos = pick_qlen();
        c.attr.max_request_dtos = pick_qlen();
        c.attr.max_recv_iov = below(40);
        c.attr.max_request_iov = below(40);
        c.attr.retry_count = static_cast<std::uint8_t>(below(10));
        c.attr.rnr_retry_count = static_cast<std::uint8_t>(below(10));
        c.attr.flow_control = static_cast<std::uint8_t>(below(3));
      }
      break;
    }
    case KDAT_IOC_EP_MODIFY:
      a.ep_modify.mask =
          chance(80) ? below(KDAT_EP_ATTR_ALL + 1) : static_cast<std::uint32_t>(rnd());
      a.ep_modify.attr.max_rdma_read_in = pick_qlen();
      a.ep_modify.attr.max_rdma_read_out = pick_qlen();
      a.ep_modify.attr.retry_count = static_cast<std::uint8_t>(below(10));
      a.ep_modify.attr.rnr_retry_count = static_cast<std::uint8_t>(below(10));
      a.ep_modify.attr.flow_control = static_cast<std::uint8_t>(below(3));
      break;
    case KDAT_IOC_EP_CONNECT: {
      auto &c = a.ep_connect;
      c.timeout_us = chance(85) ? 200'000 + below(2'000'000) : pick_timeout();
      fill_addr(c.remote_addr);
      c.conn_qual = pick_qual();
      c.qos = chance(90) ? 0 : static_cast<std::uint32_t>(rnd());
      c.flags = chance(90) ? below(2) : static_cast<std::uint32_t>(rnd());
      c.private_data_size = pick_pdata_size(limit_connect);
      random_bytes(c.private_data, sizeof(c.private_data));
      break;
    }
    case KDAT_IOC_EP_DUP_CONNECT: {
      auto &c = a.ep_dup_connect;
      c.timeout_us = chance(85) ? 200'000 + below(2'000'000) : pick_timeout();
      c.qos = chance(90) ? 0 : static_cast<std::uint32_t>(rnd());
      c.private_data_size = pick_pdata_size(limit_connect);
      random_bytes(c.private_data, sizeof(c.private_data));
      break;
    }
    case KDAT_IOC_EP_DISCONNECT:
      a.ep_disconnect.flags = chance(90) ? below(2) : static_cast<std::uint32_t>(rnd());
      break;
    case KDAT_IOC_PSP_CREATE:
      a.psp_create.conn_qual = pick_qual();
      a.psp_create.flags = chance(90) ? below(2) : static_cast<std::uint32_t>(rnd());
      break;
    case KDAT_IOC_RSP_CREATE: a.rsp_create.conn_qual = pick_qual(); break;
    case KDAT_IOC_CR_ACCEPT:
      a.cr_accept.private_data_size = pick_pdata_size(limit_accept);
      random_bytes(a.cr_accept.private_data, sizeof(a.cr_accept.private_data));
      break;
    case KDAT_IOC_CR_REJECT:
      a.cr_reject.private_data_size = pick_pdata_size(limit_reject);
      random_bytes(a.cr_reject.private_data, sizeof(a.cr_reject.private_data));
      break;
    case KDAT_IOC_TABLE_LIST: {
      static thread_local std::array<kdat_table_info, 8> infos;
      a.table_list.capacity = chance(80) ? below(9) : static_cast<std::uint32_t>(rnd());
      a.table_list.tables = chance(80) ? reinterpret_cast<std::uintptr_t>(infos.data())
                                       : (chance(50) ? 0xffff888000000000ull : rnd());
      break;
    }
    case KDAT_IOC_TABLE_ATTACH: a.table_attach.id = chance(50) ? below(64) : rnd(); break;
    case KDAT_IOC_TABLE_WAIT:
      a.table_wait.timeout_us = pick_timeout();
      a.table_wait.changes = chance(50) ? below(4) : rnd();
      break;
    case KDAT_IOC_DEV_COUNTERS:
      a.dev_counters.device = chance(80) ? below(4) : static_cast<std::uint32_t>(rnd());
      break;
    case KDAT_IOC_EVD_RING_WAIT:
      a.evd_ring_wait.timeout_us = pick_timeout();
      a.evd_ring_wait.threshold = chance(80) ? 1 : pick_qlen();
      break;
    case KDAT_IOC_UQP_CREATE: {
      // QP numbers of nobody's QPs: the kernel cannot tell, and must come to no harm
      static const std::uint32_t odd[] = {0, 1, 0xffffff, 0x1000000, 0xffffffffu};
      a.uqp_create.qp_num = chance(80) ? 2 + below(4096) : odd[below(std::size(odd))];
      break;
    }
    case KDAT_IOC_UQP_ATTR:
      a.uqp_attr.qp_state = chance(85) ? below(7) : static_cast<std::uint32_t>(rnd());
      break;
    case KDAT_IOC_UQP_ESTABLISH:
      a.uqp_establish.flags = chance(85) ? below(2) : static_cast<std::uint32_t>(rnd());
      break;
    default: break;
  }
  // The handles, as the kernel's command list has them: optional ones are often absent.
  for (const auto &h : kHandleFields) {
    if (h.nr != nr) continue;
    const std::uint32_t v = h.optional && chance(40) ? 0 : pick_handle(h.kind);
    std::memcpy(reinterpret_cast<std::uint8_t *>(&a) + h.offset, &v, sizeof(v));
  }
}

// Set one byte of one reserved field (the ABI says: must be zero) where the struct has one.
void set_reserved(unsigned long nr, Arg &a) {
  std::vector<const ZeroField *> mine;
  for (const auto &z : kZeroFields)
    if (z.nr == nr) mine.push_back(&z);
  if (mine.empty()) return;
  const ZeroField &z = *mine[below(static_cast<unsigned>(mine.size()))];
  reinterpret_cast<std::uint8_t *>(&a)[z.offset + below(static_cast<unsigned>(z.len))] =
      static_cast<std::uint8_t>(1 + below(255));
}

// Learn from what succeeded: new handles into the pool, freed ones out of it.
void learn(unsigned long nr, const Arg &a, int fd, const Arg &in);
void keep_or_free(int fd, Kind k, std::uint32_t h);

std::size_t size_of(unsigned long nr) { return _IOC_SIZE(nr); }

// The watchdog interrupts infinite waits (SIGUSR1, no SA_RESTART) and flags real hangs.
void on_sigusr1(int) {}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// A table or ring mapping with odd offsets, lengths and protections; reads what it mapped.
void fuzz_mmap(int fd) {
  static const std::size_t lens[] = {
      0, 1, 4096, 8192, KDAT_TABLE_MAP_SIZE, KDAT_TABLE_MAP_SIZE + 4096, 1ull << 40};
  static const off_t offs[] = {KDAT_MMAP_TABLE,
                               KDAT_MMAP_VIEW,
                               4096,
                               1,
                               KDAT_MMAP_VIEW + 4096,
                               static_cast<off_t>(1ull << 40)};
  int target = fd;
  int ring_fd = -1;
  std::size_t len = lens[below(std::size(lens))];
  off_t off = offs[below(std::size(offs))];
  int prot = chance(80) ? PROT_READ : (chance(50) ? PROT_READ | PROT_WRITE : PROT_EXEC);
  if (chance(30)) {  // an EVD's ring file instead
    Arg a;
    fill(KDAT_IOC_EVD_RING, a, sizeof(kdat_evd_ring));
    long rc = ::ioctl(fd, KDAT_IOC_EVD_RING, &a);
    account("EVD_RING(mmap)", rc, errno, rc < 0 ? 0 : a.evd_ring.status);
    if (rc < 0 || a.evd_ring.status) return;
    ring_fd = target = a.evd_ring.fd;
    len = chance(70) ? a.evd_ring.map_size : lens[below(std::size(lens))];
    off = chance(80) ? 0 : offs[below(std::size(offs))];
    prot = chance(80) ? PROT_READ | PROT_WRITE : PROT_READ;
  }
  void *m = ::mmap(nullptr, len, prot, MAP_SHARED, target, off);
  account(ring_fd >= 0 ? "mmap(ring)" : "mmap(table)", m == MAP_FAILED ? -1 : 0, errno, 0);
  if (m != MAP_FAILED) {
    maps++;
    volatile std::uint32_t sink = 0;
    if (!(prot & PROT_READ)) {
      // exec-only: unreadable by design (x86 protection keys), nothing to look at
    } else if (ring_fd >= 0) {
      auto *hdr = static_cast<kdat_ring_header *>(m);
      sink = sink + hdr->tail + hdr->flags;
      if (prot & PROT_WRITE) hdr->head = static_cast<std::uint32_t>(rnd());  // any head value
      Arg w;
      fill(KDAT_IOC_EVD_RING_WAIT, w, sizeof(kdat_evd_ring_wait));
      w.evd_ring_wait.evd = hdr->evd;
      w.evd_ring_wait.timeout_us = below(2000);
      long rc = ::ioctl(fd, KDAT_IOC_EVD_RING_WAIT, &w);
      account("EVD_RING_WAIT(mmap)", rc, errno, rc < 0 ? 0 : w.evd_ring_wait.status);
    } else if (off == KDAT_MMAP_TABLE && len >= KDAT_TABLE_HEADER_SIZE) {
      auto *hdr = static_cast<const kdat_table_header *>(m);
      const std::uint32_t hw = __atomic_load_n(&hdr->high_water, __ATOMIC_ACQUIRE);
      // The header, then slots 1..high_water (the pages the kernel says exist).
      const std::size_t end = std::min<std::size_t>(
          len, KDAT_TABLE_HEADER_SIZE + std::size_t{hw + 1} * KDAT_TABLE_RECORD_SIZE);
      sink = sink + hdr->live;
      for (std::size_t o = KDAT_TABLE_HEADER_SIZE + KDAT_TABLE_RECORD_SIZE; o + 4 <= end;
           o += KDAT_TABLE_RECORD_SIZE)
        sink = sink + *reinterpret_cast<const volatile std::uint32_t *>(
                          static_cast<const std::uint8_t *>(m) + o);
      int rc = ::mprotect(m, 4096, PROT_READ | PROT_WRITE);
      account("mprotect(table,W)", rc, errno, 0);
      if (rc == 0) {
        std::fprintf(stderr, "kdat_fuzz: a table mapping became writable\n");
        unexpected++;
      }
    }
    (void)sink;
    if (chance(50)) {
      ::munmap(m, len);
    } else {
      // Keep it past the ring's EVD or the file being freed, then read it (after free).
      static thread_local std::vector<std::tuple<void *, std::size_t, int>> kept;
      kept.emplace_back(m, len, prot);
      if (kept.size() > 8) {
        auto [km, kl, kp] = kept.front();
        if (kp & PROT_READ) {
          volatile std::uint8_t b = *static_cast<volatile std::uint8_t *>(km);
          (void)b;
        }
        ::munmap(km, kl);
        kept.erase(kept.begin());
      }
    }
  }
  if (ring_fd >= 0) ::close(ring_fd);
}

// A well-formed connection through the file's own PSP, amid everything else: it keeps the CM
// paths (requests, accepts, rejects, establishment, disconnects) busy while other threads free
// the objects involved and close the file.
void fuzz_connect(int fd) {
  auto call = [&](const char *name, unsigned long nr, Arg &a) {
    a.ia_close.size = static_cast<std::uint32_t>(_IOC_SIZE(nr));
    const long rc = ::ioctl(fd, nr, &a);
    account(name, rc, errno, rc < 0 ? 0 : a.ia_close.status);
    return rc == 0 && a.ia_close.status == 0;
  };
  Arg a{};
  a.psp_query.psp = pick_handle(PSP);
  if (!call("PSP_QUERY(conn)", KDAT_IOC_PSP_QUERY, a)) return;
  const std::uint64_t qual = a.psp_query.conn_qual;
  const std::uint32_t ia = a.psp_query.ia, crevd = a.psp_query.evd;
  const bool provider = a.psp_query.flags & KDAT_PSP_PROVIDER;
  a = Arg{};
  a.ep_create.ia = ia;
  a.ep_create.connect_evd = pick_handle(EVD);
  if (!call("EP_CREATE(conn)", KDAT_IOC_EP_CREATE, a)) return;
  const std::uint32_t cep = a.ep_create.ep;
  keep_or_free(fd, EP, cep);
  a = Arg{};
  a.ep_connect.ep = cep;
  a.ep_connect.timeout_us = 100'000 + below(1'000'000);
  a.ep_connect.remote_addr.family = KDAT_AF_INET;
  inet_pton(AF_INET, opt.addr.c_str(), a.ep_connect.remote_addr.addr);
  a.ep_connect.conn_qual = qual;
  a.ep_connect.private_data_size = static_cast<std::int32_t>(below(limit_connect + 1));
  if (!call("EP_CONNECT(conn)", KDAT_IOC_EP_CONNECT, a)) return;
  for (int i = 0; i < 3; i++) {
    a = Arg{};
    a.evd_wait.evd = crevd;
    a.evd_wait.timeout_us = 5'000;
    a.evd_wait.threshold = 1;
    if (!call("EVD_WAIT(conn)", KDAT_IOC_EVD_WAIT, a)) continue;
    const kdat_event ev = a.evd_wait.event;
    if (!ev.cr) continue;
    if (chance(20)) {
      a = Arg{};
      a.cr_reject.cr = ev.cr;
      a.cr_reject.private_data_size = static_cast<std::int32_t>(below(limit_reject + 1));
      call("CR_REJECT(conn)", KDAT_IOC_CR_REJECT, a);
      return;
    }
    std::uint32_t sep = ev.ep;
    if (!provider) {
      a = Arg{};
      a.ep_create.ia = ia;
      a.ep_create.connect_evd = pick_handle(EVD);
      if (!call("EP_CREATE(conn)", KDAT_IOC_EP_CREATE, a)) return;
      sep = a.ep_create.ep;
    }
    keep_or_free(fd, EP, sep);
    a = Arg{};
    a.cr_accept.cr = ev.cr;
    a.cr_accept.ep = sep;
    a.cr_accept.private_data_size = static_cast<std::int32_t>(below(limit_accept + 1));
    if (call("CR_ACCEPT(conn)", KDAT_IOC_CR_ACCEPT, a)) established++;
    if (chance(50)) {
      a = Arg{};
      a.ep_disconnect.ep = chance(50) ? sep : cep;
      a.ep_disconnect.flags = below(2);
      call("EP_DISCONNECT(conn)", KDAT_IOC_EP_DISCONNECT, a);
    }
    return;
  }
}

void one_call(ArgPages &pages) {
  const int fd = shared_fd.load();
  unsigned special = 0;
  const Cmd &c = pick_cmd(special);
  if (special == 1) return fuzz_mmap(fd);
  if (special == 3) return fuzz_connect(fd);

  unsigned long nr = c.nr;
  std::size_t size = size_of(nr);
  const char *name = c.name;
  Arg a;
  fill(nr, a, size);
  if (special == 2) {  // an unknown command number, or a known one with a bad encoded size
    name = "UNKNOWN";
    nr = chance(50)
             ? _IOWR(KDAT_IOC_MAGIC, 0x70 + below(0x90), std::uint64_t)
             : _IOC(_IOC_READ | _IOC_WRITE, KDAT_IOC_MAGIC, _IOC_NR(c.nr), size + 1 + below(64));
    if (chance(20)) nr = static_cast<unsigned long>(rnd());
  }
  // Mutations.
  if (chance(6))
    a.ia_close.size = chance(50) ? static_cast<std::uint32_t>(size) - 1 - below(8)
                                 : static_cast<std::uint32_t>(size) + 1 + below(8);
  if (chance(2)) a.ia_close.size = chance(50) ? 0 : static_cast<std::uint32_t>(rnd());
  if (chance(5)) set_reserved(nr, a);
  if (chance(2)) random_bytes(&a, size);  // garbage, structure and all
  if (chance(2)) a.ia_close.status = static_cast<std::uint32_t>(rnd());  // status is output only
  bool grown = false, grown_dirty = false;  // a newer program's longer struct
  if (special == 0 && chance(4) && a.ia_close.size == size) {
    const std::size_t longer = size + 8 * (1 + below(4));
    if (longer <= sizeof(a)) {
      grown = true;
      grown_dirty = chance(50);  // with bytes this kernel cannot know
      if (grown_dirty) a.bytes[size + below(static_cast<unsigned>(longer - size))] = 0x5a;
      nr = _IOC(_IOC_READ | _IOC_WRITE, KDAT_IOC_MAGIC, _IOC_NR(nr), longer);
      size = longer;
      a.ia_close.size = static_cast<std::uint32_t>(size);
    }
  }

  void *arg = &a;
  const unsigned where = below(100);
  if (where < 3) {  // a struct cut short by a guard page
    const std::size_t keep = below(static_cast<unsigned>(size));
    std::memcpy(pages.guard() - keep, &a, keep);
    arg = pages.guard() - keep;
  } else if (where < 4) {
    arg = nullptr;
  } else if (where < 5) {
    arg = reinterpret_cast<void *>(0xffff888000000000ull + (rnd() & 0xfffff000));
  } else if (where < 6) {
    arg = pages.guard();
  } else if (where < 8) {  // a readable but read-only argument: output copies fault
    std::memcpy(pages.base + pages.page - size, &a, size);
    ::mprotect(pages.base, pages.page, PROT_READ);
    arg = pages.base + pages.page - size;
  }
  const Arg in = a;
  // Waits longer than 20 ms (infinite ones too) are the watchdog's to interrupt.
  const unsigned long cmd = grown ? c.nr : nr;  // the command, whatever size its number says
  const bool long_wait = (cmd == KDAT_IOC_EVD_WAIT && a.evd_wait.timeout_us > 20'000) ||
                         (cmd == KDAT_IOC_EVD_RING_WAIT && a.evd_ring_wait.timeout_us > 20'000) ||
                         (cmd == KDAT_IOC_TABLE_WAIT && a.table_wait.timeout_us > 20'000);
  self->what.store(name);
  self->since.store(long_wait ? -now_ns() : now_ns());
  const long rc = ::ioctl(fd, nr, arg);
  const int err = errno;
  self->since.store(0);
  if (where >= 6 && where < 8) ::mprotect(pages.base, pages.page, PROT_READ | PROT_WRITE);
  const bool readable = arg == &a;
  // VERSION has no status word: its second word is the ABI version.
  const bool has_status = cmd != KDAT_IOC_VERSION;
  account(name, rc, err, rc < 0 || !readable || !has_status ? 0 : a.ia_close.status);
  if (grown_dirty && rc == 0) {
    unexpected++;
    std::fprintf(stderr, "kdat_fuzz: %s: a longer struct with a non-zero tail was taken\n", name);
  }
  if (rc == 0 && readable && !a.ia_close.status) learn(cmd, a, fd, in);
}

void free_one(int fd, Kind k, std::uint32_t h) {
  Arg a;
  std::memset(&a, 0, sizeof(a));
  unsigned long nr = 0;
  switch (k) {
    case IA:
      nr = KDAT_IOC_IA_CLOSE;
      a.ia_close.ia = h;
      break;
    case EVD:
      nr = KDAT_IOC_EVD_FREE;
      a.evd_free.evd = h;
      break;
    case EP:
      nr = KDAT_IOC_EP_FREE;
      a.ep_free.ep = h;
      break;
    case PSP:
      nr = KDAT_IOC_PSP_FREE;
      a.psp_free.psp = h;
      break;
    case RSP:
      nr = KDAT_IOC_RSP_FREE;
      a.rsp_free.rsp = h;
      break;
    case CR:
      nr = KDAT_IOC_CR_REJECT;
      a.cr_reject.cr = h;
      break;
    default: return;
  }
  a.ia_close.size = static_cast<std::uint32_t>(_IOC_SIZE(nr));
  const long rc = ::ioctl(fd, nr, &a);
  account("free(pool full)", rc, errno, rc < 0 ? 0 : a.ia_close.status);
  pool_kill(h);
}

void keep_or_free(int fd, Kind k, std::uint32_t h) {
  if (pool_size(k) >= kPoolCap) return free_one(fd, k, h);
  pool_add(k, h);
}

void learn(unsigned long nr, const Arg &a, int fd, const Arg &in) {
  const kdat_event *ev = nullptr;
  switch (nr) {
    case KDAT_IOC_IA_OPEN: keep_or_free(fd, IA, a.ia_open.ia); break;
    case KDAT_IOC_IA_CLOSE: pool_kill(in.ia_close.ia); break;
    case KDAT_IOC_EVD_CREATE: keep_or_free(fd, EVD, a.evd_create.evd); break;
    case KDAT_IOC_EVD_FREE: pool_kill(in.evd_free.evd); break;
    case KDAT_IOC_EP_CREATE: keep_or_free(fd, EP, a.ep_create.ep); break;
    case KDAT_IOC_UQP_CREATE: keep_or_free(fd, EP, a.uqp_create.ep); break;
    case KDAT_IOC_EP_FREE: pool_kill(in.ep_free.ep); break;
    case KDAT_IOC_PSP_CREATE: keep_or_free(fd, PSP, a.psp_create.psp); break;
    case KDAT_IOC_PSP_FREE: pool_kill(in.psp_free.psp); break;
    case KDAT_IOC_RSP_CREATE: keep_or_free(fd, RSP, a.rsp_create.rsp); break;
    case KDAT_IOC_RSP_FREE: pool_kill(in.rsp_free.rsp); break;
    case KDAT_IOC_CR_ACCEPT: pool_kill(in.cr_accept.cr); break;
    case KDAT_IOC_CR_REJECT: pool_kill(in.cr_reject.cr); break;
    case KDAT_IOC_EVD_WAIT: ev = &a.evd_wait.event; break;
    case KDAT_IOC_EVD_DEQUEUE: ev = &a.evd_dequeue.event; break;
    case KDAT_IOC_EVD_RING: ::close(a.evd_ring.fd); break;
    default: break;
  }
  if (!ev) return;
  if (ev->cr) keep_or_free(fd, CR, ev->cr);
  if (ev->ep && ev->cr) keep_or_free(fd, EP, ev->ep);  // a provider PSP's EP
}

// Objects every file starts with, so that most calls reach real code quickly.
void populate(int fd, std::vector<std::uint32_t> *out) {
  auto call = [&](unsigned long nr, Arg &a) {
    a.ia_close.size = static_cast<std::uint32_t>(_IOC_SIZE(nr));
    const long rc = ::ioctl(fd, nr, &a);
    return rc == 0 && a.ia_close.status == 0;
  };
  Arg a{};
  std::snprintf(a.ia_open.name, sizeof(a.ia_open.name), "%s", opt.netdev.c_str());
  if (!call(KDAT_IOC_IA_OPEN, a)) return;
  const std::uint32_t ia = a.ia_open.ia;
  std::vector<std::uint32_t> made{ia};
  std::uint32_t evds[2] = {};
  for (int i = 0; i < 2; i++) {
    a = Arg{};
    a.evd_create = {0, 0, ia, 32, KDAT_EVD_FLAGS_ALL, 0};
    if (call(KDAT_IOC_EVD_CREATE, a)) made.push_back(evds[i] = a.evd_create.evd);
  }
  for (int i = 0; i < 2; i++) {
    a = Arg{};
    a.psp_create.ia = ia;
    a.psp_create.evd = evds[i];
    a.psp_create.conn_qual = port_base + below(64);
    a.psp_create.flags = static_cast<std::uint32_t>(i);
    if (call(KDAT_IOC_PSP_CREATE, a)) made.push_back(a.psp_create.psp);
  }
  for (int i = 0; i < 3; i++) {
    a = Arg{};
    a.ep_create.ia = ia;
    a.ep_create.connect_evd = evds[i % 2];
    if (call(KDAT_IOC_EP_CREATE, a)) made.push_back(a.ep_create.ep);
  }
  if (out) {
    *out = made;
    return;
  }
  const Kind kinds[] = {IA, EVD, EVD, PSP, PSP, EP, EP, EP};
  for (std::size_t i = 0; i < made.size() && i < std::size(kinds); i++) pool_add(kinds[i], made[i]);
}

int open_kdat() {
  const int fd = ::open("/dev/kdat", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    std::perror("kdat_fuzz: open /dev/kdat");
    std::exit(2);
  }
  return fd;
}

void worker_main(unsigned index, std::uint64_t budget, Clock::time_point until) {
  rng.seed(opt.seed * 0x9e3779b97f4a7c15ull + index);
  self = &workers[index];
  ArgPages pages;
  for (std::uint64_t i = 0; i < budget && !stop.load(); i++) {
    if ((i & 63) == 0 && Clock::now() > until) break;
    one_call(pages);
  }
}

// Swap the shared file for a fresh one and close the old one while workers use it.
void closer_main(Clock::time_point until) {
  rng.seed(opt.seed ^ 0xc105e);
  while (!stop.load() && Clock::now() < until) {
    std::this_thread::sleep_for(
        std::chrono::milliseconds(opt.closer_ms / 2 + below(opt.closer_ms)));
    const int fresh = open_kdat();
    {
      std::lock_guard g(pool_lock);
      for (auto &v : pool.live) {
        pool.dead.insert(pool.dead.end(), v.begin(), v.end());
        v.clear();
      }
      if (pool.dead.size() > 256) pool.dead.erase(pool.dead.begin(), pool.dead.end() - 256);
    }
    const int old = shared_fd.exchange(fresh);
    populate(fresh, nullptr);
    ::close(old);
    reopens++;
  }
}

void watchdog_main() {
  while (!stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const std::int64_t now = now_ns();
    for (auto &w : workers) {
      const std::int64_t s = w.since.load();
      if (s < 0 && now + s > 10'000'000) {  // a long wait: interrupt it after 10 ms
        pthread_kill(w.thread, SIGUSR1);
      } else if (s > 0 && now - s > std::int64_t{opt.hang_ms} * 1'000'000) {
        std::fprintf(stderr, "kdat_fuzz: HANG: a call (%s) has not returned for %u ms\n",
                     w.what.load(), opt.hang_ms);
        unexpected++;
        stop.store(true);
        std::fflush(stderr);
        std::_Exit(3);
      }
    }
  }
}

// After everything: a fresh file still makes a connection to itself.
bool sanity_connection() {
  const int fd = open_kdat();
  auto call = [&](unsigned long nr, Arg &a) {
    a.ia_close.size = static_cast<std::uint32_t>(_IOC_SIZE(nr));
    return ::ioctl(fd, nr, &a) == 0 && a.ia_close.status == 0;
  };
  bool ok = false;
  Arg a{};
  std::snprintf(a.ia_open.name, sizeof(a.ia_open.name), "%s", opt.netdev.c_str());
  if (call(KDAT_IOC_IA_OPEN, a)) {
    const std::uint32_t ia = a.ia_open.ia;
    a = Arg{};
    a.evd_create = {0, 0, ia, 16, KDAT_EVD_FLAGS_ALL, 0};
    call(KDAT_IOC_EVD_CREATE, a);
    const std::uint32_t evd = a.evd_create.evd;
    a = Arg{};
    a.psp_create.ia = ia;
    a.psp_create.evd = evd;
    a.psp_create.conn_qual = port_base + 100;
    call(KDAT_IOC_PSP_CREATE, a);
    std::uint32_t eps[2] = {};
    for (auto &ep : eps) {
      a = Arg{};
      a.ep_create.ia = ia;
      a.ep_create.connect_evd = evd;
      call(KDAT_IOC_EP_CREATE, a);
      ep = a.ep_create.ep;
    }
    a = Arg{};
    a.ep_connect.ep = eps[0];
    a.ep_connect.timeout_us = 10'000'000;
    a.ep_connect.remote_addr.family = KDAT_AF_INET;
    inet_pton(AF_INET, opt.addr.c_str(), a.ep_connect.remote_addr.addr);
    a.ep_connect.conn_qual = port_base + 100;
    if (call(KDAT_IOC_EP_CONNECT, a)) {
      int seen = 0;
      for (int i = 0; i < 4 && seen < 2; i++) {
        a = Arg{};
        a.evd_wait.evd = evd;
        a.evd_wait.timeout_us = 10'000'000;
        a.evd_wait.threshold = 1;
        if (!call(KDAT_IOC_EVD_WAIT, a)) break;
        if (a.evd_wait.event.cr) {
          const std::uint32_t cr = a.evd_wait.event.cr;
          a = Arg{};
          a.cr_accept.cr = cr;
          a.cr_accept.ep = eps[1];
          call(KDAT_IOC_CR_ACCEPT, a);
        } else if (a.evd_wait.event.number == 0x4001) {
          seen++;
        }
      }
      ok = seen == 2;
    }
  }
  ::close(fd);
  return ok;
}

void usage() {
  std::fprintf(stderr,
               "usage: kdat_fuzz [--seed N] [--calls N] [--seconds S] [--threads N] "
               "[--closer-ms MS] [--hang-ms MS] [--addr IP] [--netdev NAME] [--port-base P]\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char **argv) {
  opt.seed = static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
  for (int i = 1; i < argc; i++) {
    const std::string k = argv[i];
    if (i + 1 >= argc) usage();
    const char *v = argv[++i];
    if (k == "--seed")
      opt.seed = std::strtoull(v, nullptr, 0);
    else if (k == "--calls")
      opt.calls = std::strtoull(v, nullptr, 0);
    else if (k == "--seconds")
      opt.seconds = std::strtod(v, nullptr);
    else if (k == "--threads")
      opt.threads = static_cast<unsigned>(std::strtoul(v, nullptr, 0));
    else if (k == "--closer-ms")
      opt.closer_ms = static_cast<unsigned>(std::strtoul(v, nullptr, 0));
    else if (k == "--hang-ms")
      opt.hang_ms = static_cast<unsigned>(std::strtoul(v, nullptr, 0));
    else if (k == "--addr")
      opt.addr = v;
    else if (k == "--netdev")
      opt.netdev = v;
    else if (k == "--port-base")
      port_base = static_cast<std::uint16_t>(std::strtoul(v, nullptr, 0));
    else
      usage();
  }
  if (opt.threads == 0) usage();
  std::printf("kdat_fuzz: seed %llu, calls %llu, seconds %.0f, threads %u, closer %u ms\n",
              static_cast<unsigned long long>(opt.seed), static_cast<unsigned long long>(opt.calls),
              opt.seconds, opt.threads, opt.closer_ms);
  std::fflush(stdout);

  struct sigaction sa {};
  sa.sa_handler = on_sigusr1;  // no SA_RESTART: an interrupted wait returns
  sigaction(SIGUSR1, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  rng.seed(opt.seed);
  // Another file's objects: their handles must mean nothing in ours.
  const int other = open_kdat();
  populate(other, &foreign);
  {
    const int fd = open_kdat();
    Arg a{};
    std::snprintf(a.ia_open.name, sizeof(a.ia_open.name), "%s", opt.netdev.c_str());
    a.ia_open.size = sizeof(kdat_ia_open);
    if (::ioctl(fd, KDAT_IOC_IA_OPEN, &a) == 0 && a.ia_open.status == 0) {
      const std::uint32_t ia = a.ia_open.ia;
      a = Arg{};
      a.ia_query.size = sizeof(kdat_ia_query);
      a.ia_query.ia = ia;
      if (::ioctl(fd, KDAT_IOC_IA_QUERY, &a) == 0 && a.ia_query.status == 0) {
        limit_connect = a.ia_query.max_connect_private_data;
        limit_accept = a.ia_query.max_accept_private_data;
        limit_reject = a.ia_query.max_reject_private_data;
        max_qlen = a.ia_query.max_evd_qlen;
      }
    } else {
      std::fprintf(stderr, "kdat_fuzz: cannot open an IA on %s\n", opt.netdev.c_str());
      return 2;
    }
    shared_fd.store(fd);
    populate(fd, nullptr);
  }

  const auto t0 = Clock::now();
  const auto until =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt.seconds));
  workers = std::vector<Worker>(opt.threads);
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < opt.threads; i++) {
    const std::uint64_t budget = opt.calls / opt.threads + (i < opt.calls % opt.threads ? 1 : 0);
    threads.emplace_back(worker_main, i, budget, until);
    workers[i].thread = threads.back().native_handle();
  }
  std::thread watchdog(watchdog_main);
  std::thread closer;
  if (opt.closer_ms) closer = std::thread(closer_main, until);
  for (auto &t : threads) t.join();
  stop.store(true);
  if (closer.joinable()) closer.join();
  watchdog.join();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  ::close(shared_fd.load());
  ::close(other);

  std::uint64_t ok = 0, dat_err = 0, errs = 0;
  for (const auto &[name, t] : tallies) {
    std::uint64_t e = 0;
    std::string detail;
    for (const auto &[no, n] : t.errnos) {
      e += n;
      detail += " " + std::string(strerrorname_np(no) ? strerrorname_np(no) : "?") + "=" +
                std::to_string(n);
    }
    ok += t.ok;
    dat_err += t.dat_error;
    errs += e;
    std::printf("  %-22s ok %-8llu dat-error %-8llu errno %-8llu%s\n", name.c_str(),
                static_cast<unsigned long long>(t.ok), static_cast<unsigned long long>(t.dat_error),
                static_cast<unsigned long long>(e), detail.c_str());
  }
  const bool sane = sanity_connection();
  std::printf(
      "kdat_fuzz: seed %llu: %llu calls in %.1f s (%.0f/s): %llu succeeded, %llu DAT errors, "
      "%llu errnos, %llu undocumented; %llu file swaps, %llu requests accepted, %llu "
      "mappings; sanity connection %s\n",
      static_cast<unsigned long long>(opt.seed),
      static_cast<unsigned long long>(total_calls.load()), secs, total_calls.load() / secs,
      static_cast<unsigned long long>(ok), static_cast<unsigned long long>(dat_err),
      static_cast<unsigned long long>(errs), static_cast<unsigned long long>(unexpected.load()),
      static_cast<unsigned long long>(reopens.load()),
      static_cast<unsigned long long>(established.load()),
      static_cast<unsigned long long>(maps.load()), sane ? "ok" : "FAILED");
  return unexpected.load() == 0 && sane ? 0 : 1;
}
