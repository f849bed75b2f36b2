// Uses the installed headers (<kdat/kdat.hpp> and through it <kdat/uapi/kdat.h>, <kdat/ep_table.h>)
// and libkdat.so without a module: names, the state table, and the error of a missing device.
#include <kdat/ep_table.h>
#include <kdat/uapi/kdat.h>

#include <cstdio>
#include <kdat/kdat.hpp>

int main() {
  static_assert(KDAT_ABI_VERSION >= 3);
  if (!kdat::allows(kdat::EpState::UNCONNECTED, kdat::Stimulus::CONNECT)) return 1;
  try {
    const kdat::Device dev("/nonexistent/kdat");
    return 1;
  } catch (const kdat::Error &e) {
    if (e.code().type() != KDAT_DAT_PROVIDER_NOT_FOUND) return 1;
  }
  std::printf("consumer ok: %s\n", kdat::ep_state_name(KDAT_EP_CONNECTED));
  return 0;
}
