// The DAT IB extensions (dat_ib_extensions.h) through dat_extension_op: libdat2 hands the
// provider's handle_extendedop_func the handle, the operation and the rest of the arguments as a
// va_list, in the order of dat_ib_extensions.h's macros.  Offered: RDMA write with immediate data
// and the atomics on the EP's user-owned QP (data_path.cpp), UD (datagram sends on a UD EP's QP,
// the release of a UD exchange's record and of its address handle: the UD connection events are
// evd.cpp's translate_ud), the counters of IAs, EPs and EVDs, and the open and close query.
// Collectives and sampled counters answer DAT_NOT_IMPLEMENTED.
#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <span>

#include "data_path.hpp"
#include "provider.hpp"

namespace kdat::dapl {
namespace {

// A counter's name, as dat_ib_print_counters prints it: the enumerator's own.
struct Named {
  int id;
  const char *name;
};
#define KDAT_NAMED(counter) \
  Named { counter, #counter }

constexpr Named kIaCounters[] = {
    KDAT_NAMED(DCNT_IA_PZ_CREATE),
    KDAT_NAMED(DCNT_IA_PZ_FREE),
    KDAT_NAMED(DCNT_IA_LMR_CREATE),
    KDAT_NAMED(DCNT_IA_LMR_FREE),
    KDAT_NAMED(DCNT_IA_RMR_CREATE),
    KDAT_NAMED(DCNT_IA_RMR_FREE),
    KDAT_NAMED(DCNT_IA_PSP_CREATE),
    KDAT_NAMED(DCNT_IA_PSP_CREATE_ANY),
    KDAT_NAMED(DCNT_IA_PSP_FREE),
    KDAT_NAMED(DCNT_IA_RSP_CREATE),
    KDAT_NAMED(DCNT_IA_RSP_FREE),
    KDAT_NAMED(DCNT_IA_EVD_CREATE),
    KDAT_NAMED(DCNT_IA_EVD_FREE),
    KDAT_NAMED(DCNT_IA_EP_CREATE),
    KDAT_NAMED(DCNT_IA_EP_FREE),
    KDAT_NAMED(DCNT_IA_SRQ_CREATE),
    KDAT_NAMED(DCNT_IA_SRQ_FREE),
    KDAT_NAMED(DCNT_IA_SP_CR),
    KDAT_NAMED(DCNT_IA_SP_CR_ACCEPTED),
    KDAT_NAMED(DCNT_IA_SP_CR_REJECTED),
    KDAT_NAMED(DCNT_IA_MEM_ALLOC),
    KDAT_NAMED(DCNT_IA_MEM_ALLOC_DATA),
    KDAT_NAMED(DCNT_IA_MEM_FREE),
    KDAT_NAMED(DCNT_IA_ASYNC_ERROR),
    KDAT_NAMED(DCNT_IA_ASYNC_QP_ERROR),
    KDAT_NAMED(DCNT_IA_ASYNC_CQ_ERROR),
    KDAT_NAMED(DCNT_IA_CM_LISTEN),
    KDAT_NAMED(DCNT_IA_CM_REQ_TX),
    KDAT_NAMED(DCNT_IA_CM_REQ_RX),
    KDAT_NAMED(DCNT_IA_CM_REP_TX),
    KDAT_NAMED(DCNT_IA_CM_REP_RX),
    KDAT_NAMED(DCNT_IA_CM_RTU_TX),
    KDAT_NAMED(DCNT_IA_CM_RTU_RX),
    KDAT_NAMED(DCNT_IA_CM_USER_REJ_TX),
    KDAT_NAMED(DCNT_IA_CM_USER_REJ_RX),
    KDAT_NAMED(DCNT_IA_CM_ACTIVE_EST),
    KDAT_NAMED(DCNT_IA_CM_PASSIVE_EST),
    KDAT_NAMED(DCNT_IA_CM_AH_REQ_TX),
    KDAT_NAMED(DCNT_IA_CM_AH_REQ_RX),
    KDAT_NAMED(DCNT_IA_CM_AH_RESOLVED),
    KDAT_NAMED(DCNT_IA_CM_DREQ_TX),
    KDAT_NAMED(DCNT_IA_CM_DREQ_RX),
    KDAT_NAMED(DCNT_IA_CM_DREP_TX),
    KDAT_NAMED(DCNT_IA_CM_DREP_RX),
    KDAT_NAMED(DCNT_IA_CM_MRA_TX),
    KDAT_NAMED(DCNT_IA_CM_MRA_RX),
    KDAT_NAMED(DCNT_IA_CM_REQ_FULLQ_POLL),
    KDAT_NAMED(DCNT_IA_CM_ERR),
    KDAT_NAMED(DCNT_IA_CM_ERR_REQ_FULLQ),
    KDAT_NAMED(DCNT_IA_CM_ERR_REQ_DUP),
    KDAT_NAMED(DCNT_IA_CM_ERR_REQ_RETRY),
    KDAT_NAMED(DCNT_IA_CM_ERR_REP_DUP),
    KDAT_NAMED(DCNT_IA_CM_ERR_REP_RETRY),
    KDAT_NAMED(DCNT_IA_CM_ERR_RTU_DUP),
    KDAT_NAMED(DCNT_IA_CM_ERR_RTU_RETRY),
    KDAT_NAMED(DCNT_IA_CM_ERR_REFUSED),
    KDAT_NAMED(DCNT_IA_CM_ERR_RESET),
    KDAT_NAMED(DCNT_IA_CM_ERR_TIMEOUT),
    KDAT_NAMED(DCNT_IA_CM_ERR_REJ_TX),
    KDAT_NAMED(DCNT_IA_CM_ERR_REJ_RX),
    KDAT_NAMED(DCNT_IA_CM_ERR_DREQ_DUP),
    KDAT_NAMED(DCNT_IA_CM_ERR_DREQ_RETRY),
    KDAT_NAMED(DCNT_IA_CM_ERR_DREP_DUP),
    KDAT_NAMED(DCNT_IA_CM_ERR_DREP_RETRY),
    KDAT_NAMED(DCNT_IA_CM_ERR_MRA_DUP),
    KDAT_NAMED(DCNT_IA_CM_ERR_MRA_RETRY),
    KDAT_NAMED(DCNT_IA_CM_ERR_UNEXPECTED),
    KDAT_NAMED(DCNT_IA_LNK_ERR_RCV),
    KDAT_NAMED(DCNT_IA_LNK_ERR_RCV_REM_PHYS),
    KDAT_NAMED(DCNT_IA_LNK_ERR_RCV_CONSTRAINT),
    KDAT_NAMED(DCNT_IA_LNK_ERR_XMT_DISCARDS),
    KDAT_NAMED(DCNT_IA_LNK_ERR_XMT_CONTRAINT),
    KDAT_NAMED(DCNT_IA_LNK_ERR_INTEGRITY),
    KDAT_NAMED(DCNT_IA_LNK_ERR_EXC_BUF_OVERRUN),
    KDAT_NAMED(DCNT_IA_LNK_WARN_RCV_SW_RELAY),
    KDAT_NAMED(DCNT_IA_LNK_WARN_XMT_WAIT),
    KDAT_NAMED(DCNT_IA_DIAG_ERR_RQ_RAE),
    KDAT_NAMED(DCNT_IA_DIAG_ERR_RQ_OOS),
    KDAT_NAMED(DCNT_IA_DIAG_ERR_RQ_RIRE),
    KDAT_NAMED(DCNT_IA_DIAG_ERR_RQ_UDSDPRD),
    KDAT_NAMED(DCNT_IA_DIAG_ERR_SQ_RAE),
    KDAT_NAMED(DCNT_IA_DIAG_ERR_SQ_OOS),
    KDAT_NAMED(DCNT_IA_DIAG_ERR_SQ_RIRE),
    KDAT_NAMED(DCNT_IA_DIAG_ERR_SQ_RREE),
    KDAT_NAMED(DCNT_IA_DIAG_ERR_SQ_TREE),
};
constexpr Named kEpCounters[] = {
    KDAT_NAMED(DCNT_EP_CONNECT),        KDAT_NAMED(DCNT_EP_DISCONNECT),
    KDAT_NAMED(DCNT_EP_POST_SEND),      KDAT_NAMED(DCNT_EP_POST_SEND_DATA),
    KDAT_NAMED(DCNT_EP_POST_SEND_UD),   KDAT_NAMED(DCNT_EP_POST_SEND_UD_DATA),
    KDAT_NAMED(DCNT_EP_POST_RECV),      KDAT_NAMED(DCNT_EP_POST_RECV_DATA),
    KDAT_NAMED(DCNT_EP_POST_WRITE),     KDAT_NAMED(DCNT_EP_POST_WRITE_DATA),
    KDAT_NAMED(DCNT_EP_POST_WRITE_IMM), KDAT_NAMED(DCNT_EP_POST_WRITE_IMM_DATA),
    KDAT_NAMED(DCNT_EP_POST_READ),      KDAT_NAMED(DCNT_EP_POST_READ_DATA),
    KDAT_NAMED(DCNT_EP_POST_CMP_SWAP),  KDAT_NAMED(DCNT_EP_POST_FETCH_ADD),
    KDAT_NAMED(DCNT_EP_RECV),           KDAT_NAMED(DCNT_EP_RECV_DATA),
    KDAT_NAMED(DCNT_EP_RECV_UD),        KDAT_NAMED(DCNT_EP_RECV_UD_DATA),
    KDAT_NAMED(DCNT_EP_RECV_IMM),       KDAT_NAMED(DCNT_EP_RECV_IMM_DATA),
    KDAT_NAMED(DCNT_EP_RECV_RDMA_IMM),  KDAT_NAMED(DCNT_EP_RECV_RDMA_IMM_DATA),
};
constexpr Named kEvdCounters[] = {
    KDAT_NAMED(DCNT_EVD_WAIT),          KDAT_NAMED(DCNT_EVD_WAIT_BLOCKED),
    KDAT_NAMED(DCNT_EVD_WAIT_NOTIFY),   KDAT_NAMED(DCNT_EVD_DEQUEUE),
    KDAT_NAMED(DCNT_EVD_DEQUEUE_FOUND), KDAT_NAMED(DCNT_EVD_DEQUEUE_NOT_FOUND),
    KDAT_NAMED(DCNT_EVD_DEQUEUE_POLL),  KDAT_NAMED(DCNT_EVD_DEQUEUE_POLL_FOUND),
    KDAT_NAMED(DCNT_EVD_CONN_CALLBACK), KDAT_NAMED(DCNT_EVD_DTO_CALLBACK),
};

#undef KDAT_NAMED

// Each table lists every counter at its own index.
template <std::size_t N>
constexpr bool in_order(const Named (&names)[N]) {
  for (std::size_t i = 0; i < N; ++i)
    if (names[i].id != static_cast<int>(i)) return false;
  return true;
}
static_assert(std::size(kIaCounters) == DCNT_IA_ALL_COUNTERS && in_order(kIaCounters));
static_assert(std::size(kEpCounters) == DCNT_EP_ALL_COUNTERS && in_order(kEpCounters));
static_assert(std::size(kEvdCounters) == DCNT_EVD_ALL_COUNTERS && in_order(kEvdCounters));

// The counters of an IA, EP or EVD with their names.
struct CounterSet {
  std::span<std::uint64_t> values;
  const Named *names;
};

CounterSet counters_of(DAT_HANDLE handle) {
  Object &o = lookup_any(handle);
  switch (o.type) {
    case DAT_HANDLE_TYPE_IA: return {static_cast<Ia &>(o).counters, kIaCounters};
    case DAT_HANDLE_TYPE_EP: return {static_cast<Ep &>(o).counters, kEpCounters};
    case DAT_HANDLE_TYPE_EVD: return {static_cast<Evd &>(o).counters, kEvdCounters};
    default: fail(DAT_INVALID_HANDLE);
  }
}

// The counters `which` selects: one (an index) or all (the set's size, DCNT_*_ALL_COUNTERS).
bool selected(const CounterSet &set, int which, std::size_t i) {
  return static_cast<std::size_t>(which) == set.values.size() ||
         static_cast<std::size_t>(which) == i;
}

void check_selector(const CounterSet &set, int which) {
  if (which < 0 || static_cast<std::size_t>(which) > set.values.size())
    fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
}

// dat_ib_query_counters(handle, which, out, reset).  As libdaplofa: a counter's value goes to
// out[which], all of them to out[0 .. DCNT_*_ALL_COUNTERS).
DAT_RETURN query_counters(DAT_HANDLE handle, va_list args) {
  const int which = va_arg(args, int);
  auto *out = va_arg(args, DAT_UINT64 *);
  const int reset = va_arg(args, int);
  const CounterSet set = counters_of(handle);
  check_selector(set, which);
  if (out == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
  for (std::size_t i = 0; i < set.values.size(); ++i) {
    if (!selected(set, which, i)) continue;
    out[i] = set.values[i];
    if (reset != 0) set.values[i] = 0;
  }
  return DAT_SUCCESS;
}

// dat_ib_print_counters(handle, which, reset): one line per counter on stdout.
DAT_RETURN print_counters(DAT_HANDLE handle, va_list args) {
  const int which = va_arg(args, int);
  const int reset = va_arg(args, int);
  const CounterSet set = counters_of(handle);
  check_selector(set, which);
  for (std::size_t i = 0; i < set.values.size(); ++i) {
    if (!selected(set, which, i)) continue;
    std::printf(" %s = %" PRIu64 "\n", set.names[i].name, set.values[i]);
    if (reset != 0) set.values[i] = 0;
  }
  std::fflush(stdout);
  return DAT_SUCCESS;
}

// dat_ib_open_query(name, &ia, ia_mask, ia_attr, provider_mask, provider_attr): an IA opened for
// its attributes only (no async EVD); libdat2 passes the name where the handle goes.  The IA is
// a whole one: dat_ib_close_query closes it.
DAT_RETURN open_query(const char *name, va_list args) {
  auto *out = va_arg(args, DAT_HANDLE *);
  const auto ia_mask = va_arg(args, DAT_IA_ATTR_MASK);
  auto *ia_attr = va_arg(args, DAT_IA_ATTR *);
  const auto provider_mask = va_arg(args, DAT_PROVIDER_ATTR_MASK);
  auto *provider_attr = va_arg(args, DAT_PROVIDER_ATTR *);
  if (name == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
  if (out == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  if (ia_attr == nullptr && provider_attr == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
  *out = DAT_HANDLE_NULL;
  Ia &ia = open_ia(name);
  try {
    query_ia(ia, ia_mask, ia_attr, provider_mask, provider_attr);
  } catch (...) {
    close_ia(ia);
    throw;
  }
  *out = ia.handle;
  return DAT_SUCCESS;
}

QueuePair &qp_of(DAT_HANDLE handle) { return *lookup_as<Ep>(handle, DAT_INVALID_HANDLE_EP).qp; }

// Enumerations travel through `...` promoted; DAT_COMPLETION_FLAGS' values fit an int.
DAT_COMPLETION_FLAGS flags_arg(va_list args) {
  return static_cast<DAT_COMPLETION_FLAGS>(va_arg(args, int));
}

// dat_ib_post_rdma_write_immed(ep, segments, local, cookie, remote, immed, flags)
DAT_RETURN rdma_write_immed(DAT_HANDLE handle, va_list args) {
  const auto segments = va_arg(args, DAT_COUNT);
  auto *local = va_arg(args, DAT_LMR_TRIPLET *);
  const auto cookie = va_arg(args, DAT_DTO_COOKIE);
  const auto *remote = va_arg(args, DAT_RMR_TRIPLET *);
  const auto immed = va_arg(args, DAT_UINT32);
  const auto flags = flags_arg(args);
  return qp_of(handle).post_rdma_write_immed(segments, local, cookie, remote, immed, flags);
}

// dat_ib_post_cmp_and_swap(ep, compare, swap, local, cookie, remote, flags)
DAT_RETURN compare_and_swap(DAT_HANDLE handle, va_list args) {
  const auto compare = va_arg(args, DAT_UINT64);
  const auto swap = va_arg(args, DAT_UINT64);
  auto *local = va_arg(args, DAT_LMR_TRIPLET *);
  const auto cookie = va_arg(args, DAT_DTO_COOKIE);
  const auto *remote = va_arg(args, DAT_RMR_TRIPLET *);
  const auto flags = flags_arg(args);
  return qp_of(handle).post_atomic(AtomicOp::compare_and_swap, compare, swap, local, cookie, remote,
                                   flags);
}

// dat_ib_post_fetch_and_add(ep, add, local, cookie, remote, flags)
DAT_RETURN fetch_and_add(DAT_HANDLE handle, va_list args) {
  const auto add = va_arg(args, DAT_UINT64);
  auto *local = va_arg(args, DAT_LMR_TRIPLET *);
  const auto cookie = va_arg(args, DAT_DTO_COOKIE);
  const auto *remote = va_arg(args, DAT_RMR_TRIPLET *);
  const auto flags = flags_arg(args);
  return qp_of(handle).post_atomic(AtomicOp::fetch_and_add, add, 0, local, cookie, remote, flags);
}

// dat_ib_post_send_ud(ep, segments, local, ah, cookie, flags)
DAT_RETURN send_ud(DAT_HANDLE handle, va_list args) {
  const auto segments = va_arg(args, DAT_COUNT);
  auto *local = va_arg(args, DAT_LMR_TRIPLET *);
  const auto *ah = va_arg(args, DAT_IB_ADDR_HANDLE *);
  const auto cookie = va_arg(args, DAT_DTO_COOKIE);
  const auto flags = flags_arg(args);
  return qp_of(handle).post_send_ud(segments, local, ah, cookie, flags);
}

// dat_ib_ud_cm_free(ep, context): the exchange whose event carried `context` is done with; its
// private data goes.  NULL is nothing to free; an exchange freed already (or another EP's) is
// DAT_INVALID_PARAMETER.
DAT_RETURN ud_cm_free(DAT_HANDLE handle, va_list args) {
  auto &ep = lookup_as<Ep>(handle, DAT_INVALID_HANDLE_EP);
  const auto context = va_arg(args, DAT_CONTEXT);
  if (!ep.ud) fail(DAT_MODEL_NOT_SUPPORTED);
  if (context.as_ptr == nullptr) return DAT_SUCCESS;
  const auto it = std::find_if(ep.ud_exchanges.begin(), ep.ud_exchanges.end(),
                               [&](const auto &x) { return x.get() == context.as_ptr; });
  if (it == ep.ud_exchanges.end()) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  ep.ud_exchanges.erase(it);
  return DAT_SUCCESS;
}

// dat_ib_ud_ah_free(ep, ah): destroys the address handle a UD connection event gave (NULL, or a
// NULL ah in it -- an event without one -- is nothing to free).  Any UD EP of the IA may name it;
// one no event of the IA made is DAT_INVALID_PARAMETER.
DAT_RETURN ud_ah_free(DAT_HANDLE handle, va_list args) {
  auto &ep = lookup_as<Ep>(handle, DAT_INVALID_HANDLE_EP);
  const auto *ah = va_arg(args, DAT_IB_ADDR_HANDLE *);
  if (!ep.ud) fail(DAT_MODEL_NOT_SUPPORTED);
  if (ah == nullptr || ah->ah == nullptr) return DAT_SUCCESS;
  if (ep.qp->free_address_handle(ah->ah)) return DAT_SUCCESS;
  for (Object *o : ep.ia->children) {
    if (o->type != DAT_HANDLE_TYPE_EP) continue;
    auto &other = static_cast<Ep &>(*o);
    if (other.ud && other.qp && other.qp->free_address_handle(ah->ah)) return DAT_SUCCESS;
  }
  fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
}

DAT_RETURN extension_op(DAT_HANDLE handle, DAT_EXTENDED_OP op, va_list args) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    switch (op) {
      case DAT_IB_OPEN_QUERY_OP: return open_query(static_cast<const char *>(handle), args);
      case DAT_IB_CLOSE_QUERY_OP:
        close_ia(lookup_as<Ia>(handle, DAT_INVALID_HANDLE_IA));
        return DAT_SUCCESS;
      case DAT_IB_RDMA_WRITE_IMMED_OP: return rdma_write_immed(handle, args);
      case DAT_IB_CMP_AND_SWAP_OP: return compare_and_swap(handle, args);
      case DAT_IB_FETCH_AND_ADD_OP: return fetch_and_add(handle, args);
      case DAT_IB_UD_SEND_OP: return send_ud(handle, args);
      case DAT_IB_UD_CM_FREE_OP: return ud_cm_free(handle, args);
      case DAT_IB_UD_AH_FREE_OP: return ud_ah_free(handle, args);
      case DAT_IB_QUERY_COUNTERS_OP: return query_counters(handle, args);
      case DAT_IB_PRINT_COUNTERS_OP: return print_counters(handle, args);
      default:
        // Collectives, sampled link/diag counters.
        return error(DAT_NOT_IMPLEMENTED);
    }
  });
}

}  // namespace

void fill_extension_table(DAT_PROVIDER &p) { p.handle_extendedop_func = &extension_op; }

}  // namespace kdat::dapl
