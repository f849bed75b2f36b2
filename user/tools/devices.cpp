#include "devices.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "json.hpp"

namespace kdatctl {

namespace fs = std::filesystem;

namespace {

std::string first_line(const fs::path &file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}

std::vector<std::string> sorted_entries(const fs::path &dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto &e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::vector<PortInfo> list_ports(const std::string &sysfs_class,
                                 std::vector<std::string> (*addresses_of)(const std::string &)) {
  std::vector<PortInfo> out;
  for (const auto &device : sorted_entries(sysfs_class)) {
    const fs::path ports = fs::path(sysfs_class) / device / "ports";
    std::vector<std::string> numbers = sorted_entries(ports);
    std::sort(numbers.begin(), numbers.end(), [](const std::string &a, const std::string &b) {
      return std::stoul(a) < std::stoul(b);
    });
    for (const auto &n : numbers) {
      PortInfo p;
      p.device = device;
      p.port = static_cast<std::uint32_t>(std::stoul(n));
      // "4: ACTIVE"
      const std::string state = first_line(ports / n / "state");
      const auto colon = state.find(": ");
      p.state = colon == std::string::npos ? state : state.substr(colon + 2);
      p.link_layer = first_line(ports / n / "link_layer");
      p.netdev = first_line(ports / n / "gid_attrs" / "ndevs" / "0");
      if (!p.netdev.empty()) p.addresses = addresses_of(p.netdev);
      out.push_back(std::move(p));
    }
  }
  return out;
}

std::vector<std::string> host_addresses(const std::string &netdev) {
  ifaddrs *list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  const std::unique_ptr<ifaddrs, void (*)(ifaddrs *)> owner(list, ::freeifaddrs);
  std::vector<std::string> out;
  for (const ifaddrs *a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || netdev != a->ifa_name) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET) {
      const auto *sin = reinterpret_cast<const sockaddr_in *>(a->ifa_addr);
      ::inet_ntop(AF_INET, &sin->sin_addr, text, sizeof(text));
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      const auto *sin6 = reinterpret_cast<const sockaddr_in6 *>(a->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&sin6->sin6_addr)) continue;
      ::inet_ntop(AF_INET6, &sin6->sin6_addr, text, sizeof(text));
    } else {
      continue;
    }
    out.emplace_back(text);
  }
  return out;
}

void render_ports_text(std::ostream &out, const std::vector<PortInfo> &ports) {
  if (ports.empty()) {
    out << "no RDMA devices (load a driver, or add Soft-RoCE: rdma link add rxe0 type rxe "
           "netdev ETH)\n";
    return;
  }
  char line[256];
  std::snprintf(line, sizeof(line), "%-16s %4s %-8s %-10s %-16s %s\n", "DEVICE", "PORT", "STATE",
                "LINK", "NETDEV", "ADDRESSES (IA names)");
  out << line;
  for (const auto &p : ports) {
    std::string addrs;
    for (const auto &a : p.addresses) addrs += (addrs.empty() ? "" : " ") + a;
    std::snprintf(line, sizeof(line), "%-16s %4u %-8s %-10s %-16s %s\n", p.device.c_str(), p.port,
                  p.state.empty() ? "-" : p.state.c_str(),
                  p.link_layer.empty() ? "-" : p.link_layer.c_str(),
                  p.netdev.empty() ? "-" : p.netdev.c_str(), addrs.empty() ? "-" : addrs.c_str());
    out << line;
  }
}

void render_ports_json(std::ostream &out, const std::vector<PortInfo> &ports) {
  Json doc;
  doc["ports"] = Json::array();
  for (const auto &p : ports) {
    Json j;
    j["device"] = p.device;
    j["port"] = p.port;
    j["state"] = p.state;
    j["link_layer"] = p.link_layer;
    j["netdev"] = p.netdev.empty() ? Json(nullptr) : Json(p.netdev);
    j["addresses"] = p.addresses;
    doc["ports"].push_back(std::move(j));
  }
  print_json(out, doc);
}

}  // namespace kdatctl
