// kdatctl devices: the RDMA devices and ports an IA can be opened on, with the netdev and the
// addresses that name them (kdat's IA names are netdevs and IP addresses), read from sysfs and
// getifaddrs the way 'rdma link' and 'ibv_devinfo' read the kernel's.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace kdatctl {

struct PortInfo {
  std::string device;                  // ib_device name (rxe_kdat0, mlx5_0, ...)
  std::uint32_t port = 0;              // 1-based
  std::string state;                   // ACTIVE, DOWN, ... (ports/N/state without its number)
  std::string link_layer;              // Ethernet (RoCE), InfiniBand, ... (iWARP devices have none)
  std::string netdev;                  // ports/N/gid_attrs/ndevs/0; empty for InfiniBand ports
  std::vector<std::string> addresses;  // the netdev's IPv4/IPv6 addresses: usable IA names
};

// Every port of every device under `sysfs_class` (normally /sys/class/infiniband), in name
// order; `addresses_of` gives a netdev's addresses (getifaddrs in kdatctl, a fake in tests).
[[nodiscard]] std::vector<PortInfo> list_ports(
    const std::string &sysfs_class,
    std::vector<std::string> (*addresses_of)(const std::string &netdev));

// The addresses of a netdev on this host (getifaddrs), link-local IPv6 left out.
[[nodiscard]] std::vector<std::string> host_addresses(const std::string &netdev);

void render_ports_text(std::ostream &out, const std::vector<PortInfo> &ports);
void render_ports_json(std::ostream &out, const std::vector<PortInfo> &ports);

}  // namespace kdatctl
