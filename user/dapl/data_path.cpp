// The data path of today's libkdat: userspace EPs have kernel-owned QPs and /dev/kdat carries no
// DTOs, so every post is DAT_NOT_IMPLEMENTED (see README, "The DAT 2.0 provider").  Memory is
// registered for real, with libibverbs on the IA's RDMA device: a PZ is a verbs PD, an LMR a
// verbs MR (lkey = LMR context, rkey = RMR context), as the user-owned QPs of kernel bypass need.
#include "data_path.hpp"

#include <infiniband/verbs.h>

#include <cstring>

namespace kdat::dapl {
namespace {

struct DeviceCloser {
  void operator()(ibv_context *c) const { (void)ibv_close_device(c); }
};
struct PdFreer {
  void operator()(ibv_pd *pd) const { (void)ibv_dealloc_pd(pd); }
};
struct MrFreer {
  void operator()(ibv_mr *mr) const { (void)ibv_dereg_mr(mr); }
};

class VerbsPd final : public ProtectionDomain {
 public:
  explicit VerbsPd(ibv_pd *pd) : pd_(pd) {}
  [[nodiscard]] ibv_pd *get() const { return pd_.get(); }

 private:
  std::unique_ptr<ibv_pd, PdFreer> pd_;
};

class VerbsMr final : public MemoryRegion {
 public:
  explicit VerbsMr(ibv_mr *mr) : mr_(mr) {}

 private:
  std::unique_ptr<ibv_mr, MrFreer> mr_;
};

// The verbs device named `name` (e.g. rxe_kdat0), or null if this process cannot open it.
std::unique_ptr<ibv_context, DeviceCloser> open_device(const std::string &name) {
  int n = 0;
  ibv_device **list = ibv_get_device_list(&n);
  if (list == nullptr) return nullptr;
  std::unique_ptr<ibv_context, DeviceCloser> context;
  for (int i = 0; i < n && !context; ++i)
    if (name == ibv_get_device_name(list[i])) context.reset(ibv_open_device(list[i]));
  ibv_free_device_list(list);
  return context;
}

int access_flags(DAT_MEM_PRIV_FLAGS privileges) {
  int access = 0;
  if (privileges & DAT_MEM_PRIV_LOCAL_WRITE_FLAG) access |= IBV_ACCESS_LOCAL_WRITE;
  if (privileges & DAT_MEM_PRIV_REMOTE_READ_FLAG) access |= IBV_ACCESS_REMOTE_READ;
  // verbs requires local write along with remote write
  if (privileges & DAT_MEM_PRIV_REMOTE_WRITE_FLAG)
    access |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  return access;
}

class KernelQueuePair final : public QueuePair {
 public:
  DAT_RETURN post_send(DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
                       DAT_COMPLETION_FLAGS) override {
    return error(DAT_NOT_IMPLEMENTED);
  }
  DAT_RETURN post_recv(DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
                       DAT_COMPLETION_FLAGS) override {
    return error(DAT_NOT_IMPLEMENTED);
  }
  DAT_RETURN post_rdma_read(DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE, const DAT_RMR_TRIPLET *,
                            DAT_COMPLETION_FLAGS) override {
    return error(DAT_NOT_IMPLEMENTED);
  }
  DAT_RETURN post_rdma_write(DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE, const DAT_RMR_TRIPLET *,
                             DAT_COMPLETION_FLAGS) override {
    return error(DAT_NOT_IMPLEMENTED);
  }
};

class KernelQpDataPath final : public DataPath {
 public:
  explicit KernelQpDataPath(std::string device) : device_name_(std::move(device)) {}
  [[nodiscard]] const char *name() const override { return "kernel-qp"; }

  [[nodiscard]] std::unique_ptr<ProtectionDomain> make_protection_domain() override {
    if (!context_ && !tried_) {
      tried_ = true;
      context_ = open_device(device_name_);
    }
    if (!context_) return nullptr;
    ibv_pd *pd = ibv_alloc_pd(context_.get());
    if (pd == nullptr) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_PROTECTION_DOMAIN);
    return std::make_unique<VerbsPd>(pd);
  }

  [[nodiscard]] std::unique_ptr<QueuePair> make_queue_pair(Ep &) override {
    return std::make_unique<KernelQueuePair>();
  }

  [[nodiscard]] std::unique_ptr<MemoryRegion> register_memory(Pz &pz, void *address,
                                                              DAT_VLEN length,
                                                              DAT_MEM_PRIV_FLAGS privileges,
                                                              MemoryKeys &keys) override {
    if (!pz.pd) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_PROTECTION_DOMAIN);
    ibv_mr *mr =
        ibv_reg_mr(static_cast<VerbsPd &>(*pz.pd).get(), address, length, access_flags(privileges));
    if (mr == nullptr) fail(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY_REGION);
    auto region = std::make_unique<VerbsMr>(mr);
    keys.lmr_context = mr->lkey;
    keys.rmr_context = mr->rkey;
    keys.registered_length = mr->length;
    keys.registered_address = reinterpret_cast<DAT_VADDR>(mr->addr);
    return region;
  }

  std::size_t poll_completions(Evd &) override { return 0; }
  [[nodiscard]] int completion_fd(const Evd &) const override { return -1; }

  // PDs and MRs hold the context open: the IA frees its PZs and LMRs before this goes.
 private:
  std::string device_name_;
  bool tried_ = false;
  std::unique_ptr<ibv_context, DeviceCloser> context_;
};

}  // namespace

std::unique_ptr<DataPath> make_data_path(Ia &ia) {
  return std::make_unique<KernelQpDataPath>(ia.attributes.device_name);
}

}  // namespace kdat::dapl
