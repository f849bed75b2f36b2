// The provider's data path: memory registration and the posting of DTOs.  Everything that moves
// data goes through this one interface, so the kernel-bypass data path (user-owned QPs driven by
// kdat's connection management) replaces a single implementation and nothing else.
//
// Today libkdat gives a userspace EP a QP that the kernel owns, and /dev/kdat has no userspace
// data path, so the only implementation (make_data_path) registers memory with libibverbs on the
// IA's RDMA device (PDs, MRs: what a user-owned QP will need) and answers DAT_NOT_IMPLEMENTED to
// every post.  Connection management never depends on it.
#pragma once

#include <memory>

#include "provider.hpp"

namespace kdat::dapl {

// Per EP: the queue pair DTOs are posted to.
class QueuePair {
 public:
  virtual ~QueuePair() = default;
  virtual DAT_RETURN post_send(DAT_COUNT segments, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
                               DAT_COMPLETION_FLAGS flags) = 0;
  virtual DAT_RETURN post_recv(DAT_COUNT segments, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
                               DAT_COMPLETION_FLAGS flags) = 0;
  virtual DAT_RETURN post_rdma_read(DAT_COUNT segments, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
                                    const DAT_RMR_TRIPLET *remote, DAT_COMPLETION_FLAGS flags) = 0;
  virtual DAT_RETURN post_rdma_write(DAT_COUNT segments, DAT_LMR_TRIPLET *iov,
                                     DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
                                     DAT_COMPLETION_FLAGS flags) = 0;
};

// Per PZ: the device's protection domain.  Destruction releases it (after the PZ's LMRs).
class ProtectionDomain {
 public:
  virtual ~ProtectionDomain() = default;
};

// Per LMR: registered memory.  Destruction deregisters it.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
};

struct MemoryKeys {
  DAT_LMR_CONTEXT lmr_context = 0;
  DAT_RMR_CONTEXT rmr_context = 0;
  DAT_VLEN registered_length = 0;
  DAT_VADDR registered_address = 0;
};

// Per IA: protection domains, memory registration, queue pairs and DTO completions.
class DataPath {
 public:
  virtual ~DataPath() = default;
  // A short name for diagnostics ("kernel-qp").
  [[nodiscard]] virtual const char *name() const = 0;
  // The protection domain for a new PZ; nullptr when the device offers none to this process
  // (connection management does not need one).
  [[nodiscard]] virtual std::unique_ptr<ProtectionDomain> make_protection_domain() = 0;
  // The QP for a new EP.  Never fails: an implementation without a data path returns a QP whose
  // posts fail, so connection management works on every EP.
  [[nodiscard]] virtual std::unique_ptr<QueuePair> make_queue_pair(Ep &ep) = 0;
  // dat_lmr_create for DAT_MEM_TYPE_VIRTUAL memory; throws Failure.
  [[nodiscard]] virtual std::unique_ptr<MemoryRegion> register_memory(Pz &pz, void *address,
                                                                      DAT_VLEN length,
                                                                      DAT_MEM_PRIV_FLAGS privileges,
                                                                      MemoryKeys &keys) = 0;
  // Moves completions of `evd`'s EPs into evd.local; returns how many.  An implementation with
  // a completion channel also exposes its fd for evd_wait/cno_wait (-1: none).
  virtual std::size_t poll_completions(Evd &evd) = 0;
  [[nodiscard]] virtual int completion_fd(const Evd &evd) const = 0;
};

// The data path for `ia` with today's libkdat: kernel-owned QPs, nothing to post to.
[[nodiscard]] std::unique_ptr<DataPath> make_data_path(Ia &ia);

}  // namespace kdat::dapl
