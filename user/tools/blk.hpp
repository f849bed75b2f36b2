// kdatctl blk: kdat_blk's controllers, made through /dev/kdat-blk (an option string written, the
// new controller's name read back, as nvme connect does with /dev/nvme-fabrics), shown from
// /sys/class/kdat-blk and removed through each one's delete_controller.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace kdatctl {

struct BlkConnect {
  std::string target;  // IPv4 or IPv6 literal
  unsigned port = 0;
  std::optional<unsigned> nr_queues, queue_depth, reconnect_delay, io_timeout;
  std::optional<int> ctrl_loss_tmo;
  std::string ia_name;  // empty: the route's device
};

// The option string kdat_blk parses ("target=...,port=...,...").
[[nodiscard]] std::string blk_options(const BlkConnect &c);

// Makes a controller; returns its name (kdatbN).  Throws std::system_error with the write's
// errno and what to do (the kernel log names the option or the failure).
[[nodiscard]] std::string blk_connect(const BlkConnect &c,
                                      const std::string &control = "/dev/kdat-blk");

// Removes one (throws std::system_error naming it when there is none of that name).
void blk_disconnect(const std::string &name,
                    const std::string &sysfs_class = "/sys/class/kdat-blk");

struct BlkController {
  std::string name, state, address, local;
  unsigned queues = 0, queue_depth = 0, resets = 0, reconnects = 0, last_resume_ms = 0;
  int ctrl_loss_tmo = 0, reconnect_delay = 0;
};

// Every controller, in name order (none when kdat_blk is not loaded).
[[nodiscard]] std::vector<BlkController> blk_list(
    const std::string &sysfs_class = "/sys/class/kdat-blk");

void render_blk_text(std::ostream &out, const std::vector<BlkController> &controllers);
void render_blk_json(std::ostream &out, const std::vector<BlkController> &controllers);

}  // namespace kdatctl
