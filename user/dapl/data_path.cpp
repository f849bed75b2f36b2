// The data path of today's libkdat: userspace EPs have kernel-owned QPs and /dev/kdat carries no
// DTOs, so every data operation is DAT_NOT_IMPLEMENTED (see README, "The DAT 2.0 provider").
#include "data_path.hpp"

namespace kdat::dapl {
namespace {

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
  [[nodiscard]] const char *name() const override { return "kernel-qp"; }
  [[nodiscard]] std::unique_ptr<QueuePair> make_queue_pair(Ep &) override {
    return std::make_unique<KernelQueuePair>();
  }
  DAT_RETURN register_memory(Pz &, void *, DAT_VLEN, DAT_MEM_PRIV_FLAGS, DAT_LMR_CONTEXT *,
                             DAT_RMR_CONTEXT *, DAT_VLEN *, DAT_VADDR *) override {
    return error(DAT_NOT_IMPLEMENTED);
  }
  std::size_t poll_completions(Evd &) override { return 0; }
  [[nodiscard]] int completion_fd(const Evd &) const override { return -1; }
};

}  // namespace

std::unique_ptr<DataPath> make_data_path(Ia &) { return std::make_unique<KernelQpDataPath>(); }

}  // namespace kdat::dapl
