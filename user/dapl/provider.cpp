// libdaplkdat: registration with the DAT registry, the IA, the PZ and the handle-level calls.
//
// The registry (libdat2) reads dat.conf, dlopens this library and calls dat_provider_init once
// per dat.conf line that names it; each line becomes an Instance with its own DAT_PROVIDER table
// whose device_name is the line's IA name (dat_ia_close looks the provider up by it).
#include "provider.hpp"

#include <arpa/inet.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <sstream>

#include "data_path.hpp"
#include "devices.hpp"

namespace kdat::dapl {

// DAPL_KDAT_DEBUG set to anything but "" or "0": read once, the first time a call fails.
static bool debug_wanted() {
  static const bool wanted = [] {
    const char *value = std::getenv("DAPL_KDAT_DEBUG");
    return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
  }();
  return wanted;
}

void report_failure(const char *call, DAT_RETURN code, const char *reason) noexcept {
  if (!debug_wanted()) return;
  if (reason != nullptr) {  // libkdat's text names the DAT type and subtype already
    const std::size_t len = std::strlen(call);
    const bool named =
        std::strncmp(reason, call, len) == 0 && (reason[len] == ':' || reason[len] == ' ');
    std::fprintf(stderr, "libdaplkdat: %s%s%s\n", named ? "" : call, named ? "" : ": ", reason);
    return;
  }
  const char *type = "?";
  const char *subtype = "";
  (void)dat_strerror(code, &type, &subtype);
  if (subtype != nullptr && subtype[0] != '\0')
    std::fprintf(stderr, "libdaplkdat: %s: %s (%s)\n", call, type, subtype);
  else
    std::fprintf(stderr, "libdaplkdat: %s: %s\n", call, type);
}

void report_unusable(const kdat::Error &error) noexcept {
  switch (error.sys_errno()) {
    case ENOENT:
    case ENODEV:
    case ENXIO:  // no node, or no module behind it
    case EACCES:
    case EPERM:  // the node's mode and group
    case ENOTTY:
    case E2BIG:  // a module older than libkdat, or a node that is not kdat's
      break;
    default: return;
  }
  static std::atomic_flag said = ATOMIC_FLAG_INIT;
  if (said.test_and_set()) return;
  std::fprintf(stderr, "libdaplkdat: no IA can be opened: %s\n", error.what());
}

namespace {

std::list<Instance> &instances() {
  static std::list<Instance> list;  // stable addresses: handles point at their provider
  return list;
}

const Instance *find_instance(const char *name) {
  for (const auto &inst : instances())
    if (inst.name == name) return &inst;
  return nullptr;
}

const Instance &instance_named(const char *name) {
  const Instance *inst = find_instance(name);
  if (inst == nullptr) fail(DAT_PROVIDER_NOT_FOUND, DAT_NAME_NOT_REGISTERED);
  return *inst;
}

// dat.conf ia_params: "NETDEV|IP|* [device=PATH] [pdata=framed|raw]".  "*" is the netdev of the
// first active RDMA port that has an address, so a packaged dat.conf entry works on any host
// (README).  pdata=raw puts the consumer's private data in the CM's fields as they are, the wire
// format of libdaplofa and plain rdma_cm peers; framed (the default) is kdat's byte-exact one.
constexpr const char *any_interface = "*";

struct Params {
  std::string interface;
  std::string device = kdat::Device::default_path;
  kdat::Ia::PrivateData pdata = kdat::Ia::PrivateData::framed;
};

Params parse_params(const std::string &text) {
  Params p;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    if (word.starts_with("device=")) {
      p.device = word.substr(7);
    } else if (word == "pdata=raw" || word == "pdata=framed") {
      p.pdata = word == "pdata=raw" ? kdat::Ia::PrivateData::raw : kdat::Ia::PrivateData::framed;
    } else if (p.interface.empty()) {
      p.interface = word;
    } else {
      fail(DAT_PROVIDER_NOT_FOUND);  // a malformed dat.conf line names no usable IA
    }
  }
  if (p.interface.empty()) fail(DAT_PROVIDER_NOT_FOUND);
  return p;
}

std::string first_active_netdev() {
  for (const auto &port : kdatctl::list_ports("/sys/class/infiniband", kdatctl::host_addresses))
    if (port.state == "ACTIVE" && !port.netdev.empty() && !port.addresses.empty())
      return port.netdev;
  fail(DAT_PROVIDER_NOT_FOUND, DAT_NAME_NOT_REGISTERED);  // no RDMA port can carry an IA
}

void copy_name(char (&dst)[DAT_NAME_MAX_LENGTH], const std::string &src) {
  std::memset(dst, 0, sizeof(dst));
  std::strncpy(dst, src.c_str(), sizeof(dst) - 1);
}

Evd &make_async_evd(Ia &ia, DAT_COUNT qlen) {
  auto &evd = make_child<Evd>(ia);
  evd.flags = DAT_EVD_ASYNC_FLAG;
  evd.qlen = qlen > 0 ? qlen : 1;
  evd.wake = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (evd.wake.get() < 0) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
  return evd;
}

// Frees everything `ia` owns, dependants first (used by abrupt close and by a failed open).
void free_children(Ia &ia) {
  static constexpr DAT_HANDLE_TYPE order[] = {
      DAT_HANDLE_TYPE_RMR, DAT_HANDLE_TYPE_CR,  DAT_HANDLE_TYPE_RSP, DAT_HANDLE_TYPE_PSP,
      DAT_HANDLE_TYPE_EP,  DAT_HANDLE_TYPE_SRQ, DAT_HANDLE_TYPE_LMR, DAT_HANDLE_TYPE_EVD,
      DAT_HANDLE_TYPE_CNO, DAT_HANDLE_TYPE_PZ};
  for (const auto type : order) {
    std::vector<Object *> victims;
    for (Object *o : ia.children)
      if (o->type == type) victims.push_back(o);
    for (Object *o : victims) {
      if (type == DAT_HANDLE_TYPE_EP) {
        free_ep(static_cast<Ep &>(*o));
      } else if (type == DAT_HANDLE_TYPE_EVD) {
        auto &evd = static_cast<Evd &>(*o);
        evd.users = 0;
        free_evd(evd, true);
      } else {
        drop_child(*o);
      }
    }
  }
  ia.async_evd = nullptr;
}

DAT_RETURN ia_open(const DAT_NAME_PTR name, DAT_COUNT async_qlen, DAT_EVD_HANDLE *async_evd,
                   DAT_IA_HANDLE *ia_handle) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    if (name == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
    if (async_evd == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    if (ia_handle == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
    // Each IA makes its own async EVD; sharing another IA's is not offered (README).
    if (*async_evd != DAT_HANDLE_NULL && *async_evd != DAT_EVD_ASYNC_EXISTS) {
      (void)parse_params(instance_named(name).params);  // an unusable entry fails first
      (void)lookup_as<Evd>(*async_evd, DAT_INVALID_HANDLE_EVD_ASYNC);
      fail(DAT_NOT_IMPLEMENTED);
    }
    Ia &ia = open_ia(name);
    try {
      if (*async_evd == DAT_HANDLE_NULL) {
        ia.async_evd = &make_async_evd(ia, async_qlen);
        ia.own_async_evd = true;
        *async_evd = ia.async_evd->handle;
      }
    } catch (...) {
      free_children(ia);
      retire(ia.handle);
      throw;
    }
    *ia_handle = ia.handle;
    return DAT_SUCCESS;
  });
}

DAT_RETURN ia_close(DAT_IA_HANDLE handle, DAT_CLOSE_FLAGS flags) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &ia = lookup_as<Ia>(handle, DAT_INVALID_HANDLE_IA);
    if (flags != DAT_CLOSE_ABRUPT_FLAG && flags != DAT_CLOSE_GRACEFUL_FLAG)
      fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    if (flags == DAT_CLOSE_GRACEFUL_FLAG) {
      for (Object *o : ia.children) {
        if (ia.own_async_evd && o == ia.async_evd) continue;
        fail(DAT_INVALID_STATE, DAT_INVALID_STATE_IA_IN_USE);
      }
    }
    close_ia(ia);
    return DAT_SUCCESS;
  });
}

// The smaller of two limits where 0 means "none given".
DAT_COUNT at_most(DAT_COUNT a, std::uint32_t b) {
  if (b == 0 || b > static_cast<std::uint32_t>(INT32_MAX)) return a;
  return a == 0 ? static_cast<DAT_COUNT>(b) : std::min(a, static_cast<DAT_COUNT>(b));
}

// Limits come from the verbs device as libdaplofa reports them (ibv_query_device: max_qp_wr,
// max_sge, max_cq(e), max_mr(_size), max_pd, max_qp_(init_)rd_atom; the port's max_msg_sz),
// bounded by what kdat.ko itself accepts (EPs, EVD ring length, RDMA read depths).  Without a
// device this process can open there is no data path: LMR limits stay 0.
void fill_ia_attr(const Ia &ia, const std::optional<DeviceLimits> &d, DAT_IA_ATTR &a) {
  const auto &k = ia.attributes;
  std::memset(&a, 0, sizeof(a));
  copy_name(a.adapter_name, k.device_name);
  copy_name(a.vendor_name, "kdat");
  a.ia_address_ptr =
      reinterpret_cast<DAT_IA_ADDRESS_PTR>(const_cast<sockaddr_storage *>(&ia.address));
  a.max_eps = at_most(d ? d->max_qp : 0, k.max_eps);
  a.max_dto_per_ep = d ? d->max_qp_wr : static_cast<DAT_COUNT>(k.max_dtos);
  a.max_rdma_read_per_ep_in = at_most(d ? d->max_qp_rd_atom : 0, k.max_rdma_read_in);
  a.max_rdma_read_per_ep_out = at_most(d ? d->max_qp_init_rd_atom : 0, k.max_rdma_read_out);
  a.max_evds = d ? d->max_cq : static_cast<DAT_COUNT>(k.max_eps);
  a.max_evd_qlen = at_most(d ? d->max_cqe : 0, k.max_evd_qlen);
  a.max_iov_segments_per_dto = d ? d->max_sge : static_cast<DAT_COUNT>(k.max_iov);
  a.max_pzs = d ? d->max_pd : static_cast<DAT_COUNT>(k.max_eps);
  a.max_message_size = d ? d->max_msg_sz : 1u << 31;
  a.max_rdma_size = a.max_message_size;
  if (d) {
    a.max_lmrs = d->max_mr;
    // DAT_SEG_LENGTH is 32 bits; verbs' max_mr_size is 64 (libdaplofa clamps the same way).
    a.max_lmr_block_size =
        static_cast<DAT_SEG_LENGTH>(std::min<std::uint64_t>(d->max_mr_size, UINT32_MAX));
    a.max_lmr_virtual_address = d->max_mr_size;
    // Verbs' own bound for an RDMA read's scatter list where the device gives one.
    a.max_iov_segments_per_rdma_read =
        d->max_sge_rd > 0 ? std::min(d->max_sge_rd, d->max_sge) : d->max_sge;
    a.max_iov_segments_per_rdma_write = d->max_sge;
  }
  // Memory windows where the device binds them (0 says there are none: rmr_create answers
  // DAT_MODEL_NOT_SUPPORTED), as libdaplofa reports them.
  if (d && d->max_mw > 0) {
    a.max_rmrs = d->max_mw;
    a.max_rmr_target_address = d->max_mr_size;
  }
  if (d && d->max_srq > 0) {
    a.max_srqs = d->max_srq;
    a.max_ep_per_srq = a.max_eps;
    a.max_recv_per_srq = d->max_srq_wr;
  }
  a.max_rdma_read_in = a.max_rdma_read_per_ep_in;
  a.max_rdma_read_out = a.max_rdma_read_per_ep_out;
  a.max_rdma_read_per_ep_in_guaranteed = DAT_TRUE;
  a.max_rdma_read_per_ep_out_guaranteed = DAT_TRUE;
  a.zb_supported = DAT_FALSE;
  // dat_ib_extensions.h's calls (extensions.cpp); which of them work is named in the provider
  // attributes.  libdat2 passes dat_extension_op through only for a provider that says so here.
  a.extension_supported = DAT_EXTENSION_IB;
  a.extension_version = DAT_IB_EXTENSION_VERSION;
}

void fill_provider_attr(Ia &ia, const std::optional<DeviceLimits> &d, DAT_PROVIDER_ATTR &a) {
  // DAT_PROVIDER_ATTR has a const array member: build it field by field in place.
  std::memset(static_cast<void *>(&a), 0, sizeof(a));
  copy_name(a.provider_name, "kdat");
  a.provider_version_major = 0;
  a.provider_version_minor = 1;
  a.dapl_version_major = ia.instance->info.dapl_version_major;
  a.dapl_version_minor = ia.instance->info.dapl_version_minor;
  a.lmr_mem_types_supported = DAT_MEM_TYPE_VIRTUAL;
  a.iov_ownership_on_return = DAT_IOV_CONSUMER;
  a.dat_qos_supported = DAT_QOS_BEST_EFFORT;
  a.completion_flags_supported = static_cast<DAT_COMPLETION_FLAGS>(
      DAT_COMPLETION_SUPPRESS_FLAG | DAT_COMPLETION_SOLICITED_WAIT_FLAG |
      DAT_COMPLETION_BARRIER_FENCE_FLAG);
  a.is_thread_safe = ia.instance->info.is_thread_safe;
  a.max_private_data_size = static_cast<DAT_COUNT>(ia.attributes.max_connect_private_data);
  a.supports_multipath = DAT_FALSE;
  a.ep_creator = DAT_PSP_CREATES_EP_IFASKED;
  a.pz_support = DAT_PZ_UNIQUE;
  a.optimal_buffer_alignment = 64;
  // SRQs (srq.cpp) on the data path's device, without watermarks or per-EP receive queries,
  // and only with the EP's own PZ.
  a.srq_supported = d && d->max_srq > 0 ? DAT_TRUE : DAT_FALSE;
  a.srq_watermarks_supported = 0;
  a.srq_ep_pz_difference_supported = DAT_FALSE;
  a.srq_info_supported = 0;
  a.ep_recv_info_supported = 0;
  a.lmr_sync_req = DAT_FALSE;
  a.dto_async_return_guaranteed = DAT_FALSE;
  a.rdma_write_for_rdma_read_req = DAT_FALSE;
  // rmr_create's windows are type 1 (PZ scope), rmr_create_for_ep's type 2 (EP scope).
  a.rmr_scope_supported =
      d && d->max_mw > 0 ? (d->mw_type2 ? DAT_RMR_SCOPE_ANY : DAT_RMR_SCOPE_PZ) : DAT_RMR_SCOPE_EP;
  a.is_signal_safe = DAT_FALSE;
  a.ha_supported = DAT_FALSE;
  a.ha_loadbalancing = DAT_HA_LB_NONE;
  // Read by dtest (dapl2-utils 2.1), which runs its RDMA read and send/recv ping-pong phases
  // only for a provider that names RDMA read here.  The data path (user-owned RC QPs) has it.
  // DAT_IB_TRANSPORT_MTU (the port's active MTU in bytes, as libdaplofa names it) sizes
  // dtestsrq's buffers when it is given no -b.
  // The IB extensions, named as libdaplofa names them (dtestx runs its atomics only for a TRUE
  // DAT_IB_CMP_AND_SWAP/DAT_IB_FETCH_AND_ADD, its counters for a DAT_COUNTERS of any value):
  // immediate data and atomics need the data path (user QPs), atomics also the device's support.
  // UD (DAT_IB_UD: DAT_IB_SERVICE_TYPE_UD EPs, dtestx -u and dtestcm -u) needs user QPs, an IB
  // CM (not iWARP) and kdat.ko's UD EPs (ABI 7).
  std::size_t n = 0;
  ia.provider_specific[n++] = {"DAT_IB_RDMA_READ", "TRUE"};
  if (d && d->active_mtu != 0) {
    if (ia.transport_mtu.empty()) ia.transport_mtu = std::to_string(d->active_mtu);
    ia.provider_specific[n++] = {"DAT_IB_TRANSPORT_MTU", ia.transport_mtu.c_str()};
  }
  ia.provider_specific[n++] = {"DAT_EXTENSION_INTERFACE", "TRUE"};
  ia.provider_specific[n++] = {DAT_IB_ATTR_IMMED_DATA, d ? "TRUE" : "FALSE"};
  ia.provider_specific[n++] = {DAT_IB_ATTR_FETCH_AND_ADD, d && d->atomics ? "TRUE" : "FALSE"};
  ia.provider_specific[n++] = {DAT_IB_ATTR_CMP_AND_SWAP, d && d->atomics ? "TRUE" : "FALSE"};
  ia.provider_specific[n++] = {DAT_IB_ATTR_COUNTERS, "TRUE"};
  ia.provider_specific[n++] = {DAT_IB_ATTR_UD, offers_ud(ia) ? "TRUE" : "FALSE"};
  a.num_provider_specific_attr = static_cast<DAT_COUNT>(n);
  a.provider_specific_attr = ia.provider_specific.data();
}

DAT_RETURN ia_query(DAT_IA_HANDLE handle, DAT_EVD_HANDLE *async_evd, DAT_IA_ATTR_MASK ia_mask,
                    DAT_IA_ATTR *ia_attr, DAT_PROVIDER_ATTR_MASK provider_mask,
                    DAT_PROVIDER_ATTR *provider_attr) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &ia = lookup_as<Ia>(handle, DAT_INVALID_HANDLE_IA);
    if (ia_mask != 0 && ia_attr == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
    if (provider_mask != 0 && provider_attr == nullptr)
      fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);
    if (async_evd != nullptr)
      *async_evd = ia.async_evd != nullptr ? ia.async_evd->handle : DAT_HANDLE_NULL;
    query_ia(ia, ia_mask, ia_attr, provider_mask, provider_attr);
    return DAT_SUCCESS;
  });
}

DAT_RETURN set_consumer_context(DAT_HANDLE handle, DAT_CONTEXT context) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    lookup_any(handle).context = context;
    return DAT_SUCCESS;
  });
}

DAT_RETURN get_consumer_context(DAT_HANDLE handle, DAT_CONTEXT *context) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &o = lookup_any(handle);
    if (context == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    *context = o.context;
    return DAT_SUCCESS;
  });
}

DAT_RETURN get_handle_type(DAT_HANDLE handle, DAT_HANDLE_TYPE *type) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &o = lookup_any(handle);
    if (type == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    *type = o.type;
    return DAT_SUCCESS;
  });
}

DAT_RETURN pz_create(DAT_IA_HANDLE handle, DAT_PZ_HANDLE *pz) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &ia = lookup_as<Ia>(handle, DAT_INVALID_HANDLE_IA);
    if (pz == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    auto domain = ia.data_path->make_protection_domain();
    auto &made = make_child<Pz>(ia);
    made.pd = std::move(domain);
    ++ia.counters[DCNT_IA_PZ_CREATE];
    *pz = made.handle;
    return DAT_SUCCESS;
  });
}

DAT_RETURN pz_query(DAT_PZ_HANDLE handle, DAT_PZ_PARAM_MASK mask, DAT_PZ_PARAM *param) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &pz = lookup_as<Pz>(handle, DAT_INVALID_HANDLE_PZ);
    if (param == nullptr) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    if ((mask & ~DAT_PZ_FIELD_ALL) != 0) fail(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    param->ia_handle = pz.ia->handle;
    return DAT_SUCCESS;
  });
}

DAT_RETURN pz_free(DAT_PZ_HANDLE handle) {
  return guard([&]() -> DAT_RETURN {
    auto lock = lock_provider();
    auto &pz = lookup_as<Pz>(handle, DAT_INVALID_HANDLE_PZ);
    if (pz.users > 0) fail(DAT_INVALID_STATE, DAT_INVALID_STATE_PZ_IN_USE);
    ++pz.ia->counters[DCNT_IA_PZ_FREE];
    drop_child(pz);
    return DAT_SUCCESS;
  });
}

}  // namespace

Ia &open_ia(const char *name) {
  const Instance &inst = instance_named(name);
  Params params = parse_params(inst.params);
  if (params.interface == any_interface) params.interface = first_active_netdev();
  // One open file per device path: see KernelFile.  Under the provider lock.
  static std::unordered_map<std::string, std::weak_ptr<KernelFile>> files;
  std::shared_ptr<KernelFile> file = files[params.device].lock();
  try {
    if (!file) {
      file = std::make_shared<KernelFile>(params.device);
      files[params.device] = file;
    }
    auto object = std::make_shared<Ia>(inst, std::move(file), params.interface, params.pdata);
    Ia &ia = *object;
    publish(inst, DAT_HANDLE_TYPE_IA, std::move(object));
    return ia;
  } catch (const kdat::Error &e) {
    report_unusable(e);
    throw;
  }
}

void close_ia(Ia &ia) {
  // An EP of another IA taking its connection events from one of this IA's EVDs would be left
  // with a freed EVD: that EP is to be freed first (over DAPL it would dangle).
  for (const auto &[handle, ep] : ia.file->eps)
    if (ep->ia != &ia && ep->connect_evd != nullptr && ep->connect_evd->ia == &ia)
      fail(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE);
  for (Object *o : ia.children) {
    if (o->type == DAT_HANDLE_TYPE_EVD && static_cast<Evd *>(o)->waiters > 0)
      fail(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER);
    if (o->type == DAT_HANDLE_TYPE_CNO && static_cast<Cno *>(o)->waiters > 0)
      fail(DAT_INVALID_STATE, DAT_INVALID_STATE_CNO_IN_USE);
  }
  free_children(ia);
  ia.kernel.close(kdat::CloseMode::abrupt);
  retire(ia.handle);
}

void query_ia(Ia &ia, DAT_IA_ATTR_MASK ia_mask, DAT_IA_ATTR *ia_attr,
              DAT_PROVIDER_ATTR_MASK provider_mask, DAT_PROVIDER_ATTR *provider_attr) {
  const bool want_ia = ia_attr != nullptr && ia_mask != 0;
  const bool want_provider = provider_attr != nullptr && provider_mask != 0;
  const auto limits = want_ia || want_provider ? ia.data_path->device_limits() : std::nullopt;
  if (want_ia) fill_ia_attr(ia, limits, *ia_attr);
  if (want_provider) fill_provider_attr(ia, limits, *provider_attr);
}

bool offers_ud(Ia &ia) {
  const auto d = ia.data_path->device_limits();
  if (!d || d->iwarp) return false;
  if (ia.file->abi == 0) {
    try {
      ia.file->abi = ia.file->device.version().abi;
    } catch (const kdat::Error &) {
      return false;  // asked again next time
    }
  }
  return ia.file->abi >= 7;  // KDAT_UQP_UD and the events' UD tail
}

Ia::Ia(const Instance &inst, std::shared_ptr<KernelFile> kernel_file, std::string_view name,
       kdat::Ia::PrivateData pdata)
    : instance(&inst), file(std::move(kernel_file)), kernel(file->device, name, pdata) {
  ia = this;
  attributes = kernel.query();
  to_sockaddr(attributes.local_address, address);
  data_path = make_data_path(*this);
}

Ia::~Ia() = default;
Pz::~Pz() = default;
Lmr::~Lmr() = default;
Rmr::~Rmr() = default;

kdat::Address to_address(const sockaddr *addr) {
  if (addr == nullptr) fail(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNREACHABLE);
  kdat::Address a;
  if (addr->sa_family == AF_INET) {
    sockaddr_in in{};
    std::memcpy(&in, addr, sizeof(in));
    a.raw.family = KDAT_AF_INET;
    a.raw.port = ntohs(in.sin_port);
    std::memcpy(a.raw.addr, &in.sin_addr, 4);
  } else if (addr->sa_family == AF_INET6) {
    sockaddr_in6 in6{};
    std::memcpy(&in6, addr, sizeof(in6));
    a.raw.family = KDAT_AF_INET6;
    a.raw.port = ntohs(in6.sin6_port);
    a.raw.scope_id = in6.sin6_scope_id;
    std::memcpy(a.raw.addr, &in6.sin6_addr, 16);
  } else {
    fail(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_MALFORMED);
  }
  return a;
}

void to_sockaddr(const kdat::Address &address, sockaddr_storage &out) {
  std::memset(&out, 0, sizeof(out));
  if (address.raw.family == KDAT_AF_INET) {
    auto *in = reinterpret_cast<sockaddr_in *>(&out);
    in->sin_family = AF_INET;
    in->sin_port = htons(address.raw.port);
    std::memcpy(&in->sin_addr, address.raw.addr, 4);
  } else if (address.raw.family == KDAT_AF_INET6) {
    auto *in6 = reinterpret_cast<sockaddr_in6 *>(&out);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(address.raw.port);
    in6->sin6_scope_id = address.raw.scope_id;
    std::memcpy(&in6->sin6_addr, address.raw.addr, 16);
  }
}

kdat::PrivateDataView private_data(DAT_COUNT size, const void *data, DAT_RETURN arg) {
  if (size < 0 || (size > 0 && data == nullptr)) fail(DAT_INVALID_PARAMETER, arg);
  if (size == 0) return {};
  return {static_cast<const std::byte *>(data), static_cast<std::size_t>(size)};
}

void fill_provider_table(DAT_PROVIDER &p) {
  p.ia_open_func = &ia_open;
  p.ia_query_func = &ia_query;
  p.ia_close_func = &ia_close;
  p.set_consumer_context_func = &set_consumer_context;
  p.get_consumer_context_func = &get_consumer_context;
  p.get_handle_type_func = &get_handle_type;
  p.pz_create_func = &pz_create;
  p.pz_query_func = &pz_query;
  p.pz_free_func = &pz_free;
  fill_evd_table(p);
  fill_connection_table(p);
  fill_data_table(p);
  fill_srq_table(p);
  // Not offered (README lists them): an EP's share of its SRQ (recv query, soft high
  // watermark), CSPs, HA.
  KDAT_NOT_IMPLEMENTED(p, ep_recv_query_func);
  KDAT_NOT_IMPLEMENTED(p, ep_set_watermark_func);
  KDAT_NOT_IMPLEMENTED(p, csp_create_func);
  KDAT_NOT_IMPLEMENTED(p, csp_query_func);
  KDAT_NOT_IMPLEMENTED(p, csp_free_func);
  KDAT_NOT_IMPLEMENTED(p, ep_common_connect_func);
  KDAT_NOT_IMPLEMENTED(p, ia_ha_related_func);
  fill_extension_table(p);
}

}  // namespace kdat::dapl

using kdat::dapl::Instance;

extern "C" {

// Called by the registry for each dat.conf line naming this library, at the first dat_ia_open
// of that IA name and again at the next open after the last dat_ia_close (which calls
// dat_provider_fini and dlclose).  The library is not unloaded then (it is linked -z nodelete),
// so an Instance may already exist: it is registered again.
__attribute__((visibility("default"))) void dat_provider_init(const DAT_PROVIDER_INFO *info,
                                                              const char *instance_data) {
  if (info == nullptr) return;
  try {
    auto lock = kdat::dapl::lock_provider();
    auto &list = kdat::dapl::instances();
    Instance *inst = nullptr;
    for (auto &known : list)
      if (known.name == info->ia_name) inst = &known;
    if (inst != nullptr && inst->registered) return;
    if (inst == nullptr) {
      inst = &list.emplace_back();
      inst->info = *info;
      inst->name = info->ia_name;
      inst->provider.device_name = inst->name.c_str();
      inst->provider.extension = nullptr;
      kdat::dapl::fill_provider_table(inst->provider);
    }
    // The same table again: stale handles of this instance still reach it (and are refused).
    inst->params = instance_data != nullptr ? instance_data : "";
    inst->registered = dat_registry_add_provider(&inst->provider, &inst->info) == DAT_SUCCESS;
  } catch (...) {  // nothing may escape into the registry: the IA just stays unknown
  }
}

__attribute__((visibility("default"))) void dat_provider_fini(const DAT_PROVIDER_INFO *info) {
  if (info == nullptr) return;
  auto lock = kdat::dapl::lock_provider();
  auto &list = kdat::dapl::instances();
  for (auto it = list.begin(); it != list.end(); ++it) {
    if (it->name == info->ia_name) {
      if (it->registered) (void)dat_registry_remove_provider(&it->provider, &it->info);
      it->registered = false;
      // The Instance stays: handles of this instance may still be looked at (and refused).
      return;
    }
  }
}

}  // extern "C"
