// kdatctl: the operator's view of kdat.  `kdatctl version` prints the module's ABI and devices.
#include <cstdio>
#include <cstring>
#include <exception>
#include <kdat/device.hpp>

namespace {

int usage() {
  std::fprintf(stderr, "usage: kdatctl version\n");
  return 2;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) return usage();
  try {
    if (std::strcmp(argv[1], "version") == 0) {
      const kdat::Device dev;
      const auto v = dev.version();
      std::printf("kdat ABI %u, DAT %u.%u, %u RDMA device(s)\n", v.abi, v.dat_major, v.dat_minor,
                  v.num_devices);
      return 0;
    }
    return usage();
  } catch (const kdat::Error &e) {
    std::fprintf(stderr, "kdatctl: %s\n", e.what());
    return 1;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "kdatctl: %s\n", e.what());
    return 1;
  }
}
