// kdatctl: the operator's view of kdat: the module's version, every object table this user may
// see (its own processes', and with CAP_SYS_ADMIN everybody's and the kernel consumers'), a live
// trace of state changes, and the connection counters of IAs, devices and the module.  Reads the
// shared tables and never changes them; `kdatctl blk` makes and removes kdat_blk's controllers.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <iostream>
#include <kdat/device.hpp>
#include <kdat/table.hpp>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "blk.hpp"
#include "devices.hpp"
#include "render.hpp"

namespace {

constexpr const char *footer_text = R"(
FILTER options (list, watch, counters) select tables (--table, --pid, --comm) and objects (the
others); all given must match, and with an object filter tables with no matching object are left
out.  --addr and --port match either end of an object; --rdma-dev and --rdma-port the RDMA device
and port of the object's IA.  Handles and numbers are decimal or 0x...

watch reads the tables again as soon as the module says they changed (KDAT_IOC_TABLE_WAIT), at
most once per --interval; an idle watch sleeps.  Objects present at the start are reported as
"new".

Exit status: 0 success, 1 an error (message on stderr), 2 a usage error.
kdatctl(8) describes every output format.)";

std::atomic<bool> stop_requested{false};

void on_signal(int) { stop_requested = true; }

// Without SA_RESTART, so that a signal ends a wait in the kernel at once.
void catch_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

// A usage error found after parsing: said the way CLI11's own are.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int usage_error(const std::string &what) {
  std::fprintf(stderr, "kdatctl: %s\n(kdatctl --help for usage)\n", what.c_str());
  return 2;
}

std::uint64_t boottime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

std::optional<std::uint64_t> parse_u64(const std::string &text) {
  if (text.empty() || text[0] == '-') return std::nullopt;
  char *end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 0);
  if (errno != 0 || end == text.c_str() || *end != '\0') return std::nullopt;
  return value;
}

std::uint64_t number_or_throw(const std::string &option, const std::string &text, std::uint64_t max,
                              const char *what) {
  const auto n = parse_u64(text);
  if (!n || *n > max) throw UsageError(option + " '" + text + "': " + what);
  return *n;
}

// The filter options as given (strings until parsed, so that errors name the option).
struct FilterArgs {
  std::string table, pid, comm, type, state, ia, addr, port, conn_qual, qpn, rdma_dev, rdma_port;
};

void add_filter_options(CLI::App *cmd, FilterArgs &f) {
  const char *g = "FILTER";
  cmd->add_option("--table", f.table, "tables: by id")->option_text("ID")->group(g);
  cmd->add_option("-p,--pid", f.pid, "tables: by the opener's pid")->option_text("PID")->group(g);
  cmd->add_option("--comm", f.comm, "tables: by the opener's name")->option_text("NAME")->group(g);
  cmd->add_option("--type", f.type, "objects of one type: IA, EVD, EP, PSP, RSP, CR")
      ->option_text("TYPE")
      ->group(g);
  cmd->add_option("--state", f.state,
                  "objects in one state as list shows it (CONNECTED, LISTENING, ...); watch: "
                  "before or after")
      ->option_text("STATE")
      ->group(g);
  cmd->add_option("--ia", f.ia, "an IA and every object it owns")->option_text("HANDLE")->group(g);
  cmd->add_option("--addr", f.addr, "objects with this local or remote IP address")
      ->option_text("ADDR")
      ->group(g);
  cmd->add_option("--port", f.port, "objects with this local or remote address port")
      ->option_text("PORT")
      ->group(g);
  cmd->add_option("--conn-qual", f.conn_qual, "EPs, PSPs and RSPs of this connection qualifier")
      ->option_text("QUAL")
      ->group(g);
  cmd->add_option("--qpn", f.qpn, "the EP of this QP number")->option_text("QPN")->group(g);
  cmd->add_option("--rdma-dev", f.rdma_dev, "objects on this RDMA device (rxe0, mlx5_0, ...)")
      ->option_text("NAME")
      ->group(g);
  cmd->add_option("--rdma-port", f.rdma_port, "objects on this RDMA port number")
      ->option_text("N")
      ->group(g);
}

struct Options {
  std::string device = kdat::Device::default_path;
  bool json = false;
  bool all = false;
  unsigned interval_ms = 10;
  std::optional<unsigned long> count;
  std::optional<unsigned long> duration_ms;
  std::vector<std::string> operands;  // show's TABLE HANDLE
  kdatctl::Filter filter;
};

// RDMA device names by number, as the module lists them; none from a module older than ABI 8.
kdatctl::DeviceNames device_names(const kdat::Device &dev) {
  kdatctl::DeviceNames names;
  try {
    for (const auto &d : kdat::counter_totals(dev)) {
      if (d.number != 0) names[d.number] = d.name;
    }
  } catch (const kdat::Error &) {
    // an older module: records name no devices either
  }
  return names;
}

// Parses the filter options into opt.filter; --rdma-dev needs the module's device names.
void parse_filter(const FilterArgs &f, Options &opt, const kdat::Device *dev) {
  auto &flt = opt.filter;
  if (!f.table.empty())
    flt.table = number_or_throw("--table", f.table, UINT64_MAX, "not a table id");
  if (!f.pid.empty()) {
    flt.pid = static_cast<std::uint32_t>(number_or_throw("--pid", f.pid, UINT32_MAX, "not a pid"));
  }
  if (!f.ia.empty()) {
    flt.ia = static_cast<std::uint32_t>(
        number_or_throw("--ia", f.ia, UINT32_MAX, "not an IA handle (0x... or decimal)"));
  }
  flt.comm = f.comm;
  flt.state = f.state;
  if (!f.type.empty() && !kdatctl::known_type(f.type)) {
    throw UsageError("--type '" + f.type + "': one of IA, EVD, EP, PSP, RSP, CR");
  }
  flt.type = f.type;
  if (!f.addr.empty()) {
    flt.addr = kdatctl::parse_address(f.addr);
    if (!flt.addr) throw UsageError("--addr '" + f.addr + "': not an IPv4 or IPv6 address");
  }
  if (!f.port.empty()) {
    flt.port = static_cast<std::uint16_t>(number_or_throw("--port", f.port, 65535, "not a port"));
  }
  if (!f.conn_qual.empty()) {
    flt.conn_qual = number_or_throw("--conn-qual", f.conn_qual, UINT64_MAX, "not a qualifier");
  }
  if (!f.qpn.empty()) {
    flt.qp_num = static_cast<std::uint32_t>(
        number_or_throw("--qpn", f.qpn, 0xffffff, "not a QP number (24 bits)"));
  }
  if (!f.rdma_port.empty()) {
    flt.rdma_port =
        static_cast<std::uint32_t>(number_or_throw("--rdma-port", f.rdma_port, 255, "not a port"));
  }
  if (!f.rdma_dev.empty() && dev != nullptr) {
    for (const auto &[number, name] : device_names(*dev)) {
      if (name == f.rdma_dev) flt.device = number;
    }
    if (!flt.device) {
      throw std::runtime_error("no RDMA device '" + f.rdma_dev +
                               "' known to kdat ('kdatctl totals' lists them)");
    }
  }
}

// kdatctl only looks: each of its files attaches a view (its own table, for the file it lists
// with), which makes the file an observer, and the kernel leaves observers' empty tables out of
// every list.
kdat::Device open_observer(const std::string &path) {
  kdat::Device device(path);
  (void)kdat::ObjectTable::attach(device, device.table().header().id);
  return device;
}

// An attached table: its own Device (one view per file) and mapping.
struct Attached {
  kdat::Device device;
  kdat::ObjectTable table;
  kdat::TableSnapshot last;
  kdat::TableInfo info;
};

// A table's header numbers its opener as the opener's own namespaces do; the list numbers it as
// ours do, and that is what we show.
kdat::TableSnapshot snapshot(const Attached &a, bool all = false) {
  auto snap = a.table.snapshot(all);
  snap.header.pid = a.info.pid;
  snap.header.uid = a.info.uid;
  return snap;
}

std::optional<Attached> attach(const Options &opt, const kdat::TableInfo &info) {
  try {
    kdat::Device device(opt.device);
    auto table = kdat::ObjectTable::attach(device, info.id);  // an observer from here on
    return Attached{std::move(device), std::move(table), {}, info};
  } catch (const kdat::Error &e) {
    // Tables can vanish between list and attach, or belong to someone else: skip them.
    std::fprintf(stderr, "kdatctl: table %llu (pid %u %s): %s\n",
                 static_cast<unsigned long long>(info.id), info.pid, info.comm.c_str(), e.what());
    return std::nullopt;
  }
}

bool wanted(const Options &opt, const kdat::TableInfo &info) {
  const kdat::TableHeader h{.flags = info.flags, .id = info.id, .pid = info.pid, .comm = info.comm};
  if (!opt.filter.table_matches(h)) return false;
  return opt.all || (info.flags & KDAT_TABLE_CLOSED) == 0;
}

std::string module_version() {
  std::FILE *f = std::fopen("/sys/module/kdat/version", "r");
  if (f == nullptr) return "";
  char text[64] = {};
  const bool ok = std::fgets(text, sizeof(text), f) != nullptr;
  std::fclose(f);
  std::string v = ok ? text : "";
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  return v;
}

int cmd_version(const Options &opt) {
  std::printf("kdatctl %s\n", KDATCTL_VERSION);
  std::fflush(stdout);  // before any error about the module
  const kdat::Device dev(opt.device);
  const auto v = dev.version();
  const std::string mod = module_version();
  std::printf("kdat.ko %s, ABI %u, DAT %u.%u, %u RDMA device(s)\n",
              mod.empty() ? "(version unknown)" : mod.c_str(), v.abi, v.dat_major, v.dat_minor,
              v.num_devices);
  return 0;
}

// One snapshot of every table (and object) the options select, as `dev` lists them.
std::vector<kdat::TableSnapshot> selected_snapshots(const Options &opt, const kdat::Device &dev) {
  std::vector<kdat::TableSnapshot> snapshots;
  for (const auto &info : kdat::list_tables(dev)) {
    if (!wanted(opt, info)) continue;
    auto attached = attach(opt, info);
    if (attached) snapshots.push_back(snapshot(*attached, opt.all));
  }
  return kdatctl::filtered(std::move(snapshots), opt.filter);
}

int cmd_list(const Options &opt, const kdat::Device &dev) {
  const auto snapshots = selected_snapshots(opt, dev);
  const auto names = device_names(dev);
  if (opt.json) {
    kdatctl::render_json(std::cout, snapshots, boottime_ns(), names);
  } else {
    kdatctl::render_text(std::cout, snapshots, boottime_ns(), names);
  }
  std::cout.flush();
  return 0;
}

int cmd_show(const Options &opt) {
  const auto id = parse_u64(opt.operands.at(0));
  const auto handle = parse_u64(opt.operands.at(1));
  if (!id) return usage_error("show: '" + opt.operands[0] + "' is not a table id");
  if (!handle || *handle == 0 || *handle > UINT32_MAX) {
    return usage_error("show: '" + opt.operands[1] + "' is not a handle (0x... or decimal)");
  }
  const kdat::Device dev = open_observer(opt.device);
  for (const auto &info : kdat::list_tables(dev)) {
    if (info.id != *id) continue;
    auto attached = attach(opt, info);
    if (!attached) return 1;
    const auto header = snapshot(*attached).header;
    const auto record = attached->table.view().find(static_cast<std::uint32_t>(*handle));
    if (!record) {
      std::fprintf(stderr,
                   "kdatctl: table %llu (pid %u %s) has no object %s: it was freed, or the "
                   "handle is wrong ('kdatctl list --table %llu' shows the live ones)\n",
                   static_cast<unsigned long long>(*id), info.pid, info.comm.c_str(),
                   kdatctl::handle_text(static_cast<std::uint32_t>(*handle)).c_str(),
                   static_cast<unsigned long long>(*id));
      return 1;
    }
    const auto names = device_names(dev);
    if (opt.json) {
      kdatctl::render_object_json(std::cout, header, *record, boottime_ns(), names);
    } else {
      kdatctl::render_object_text(std::cout, header, *record, boottime_ns(), names);
    }
    std::cout.flush();
    return 0;
  }
  std::fprintf(stderr,
               "kdatctl: no table %llu: its owner closed it, or it is not yours to see (other "
               "users' and kernel consumers' tables need CAP_SYS_ADMIN); 'kdatctl list' shows "
               "the tables you may see\n",
               static_cast<unsigned long long>(*id));
  return 1;
}

int cmd_counters(const Options &opt, const kdat::Device &dev) {
  std::vector<kdatctl::IaCountersRow> rows;
  for (const auto &snap : selected_snapshots(opt, dev)) {
    for (const auto &r : snap.records) {
      if (r.type != KDAT_REC_IA || !opt.filter.record_matches(r)) continue;
      try {
        rows.push_back({snap.header, r, kdat::ia_counters(dev, snap.header.id, r.handle)});
      } catch (const kdat::Error &e) {
        // closed between the snapshot and now: nothing to count any more
        std::fprintf(stderr, "kdatctl: table %llu ia %s: %s\n",
                     static_cast<unsigned long long>(snap.header.id),
                     kdatctl::handle_text(r.handle).c_str(), e.what());
      }
    }
  }
  const auto names = device_names(dev);
  if (opt.json) {
    kdatctl::render_counters_json(std::cout, rows, names);
  } else {
    kdatctl::render_counters_text(std::cout, rows, names);
  }
  std::cout.flush();
  return 0;
}

int cmd_totals(const Options &opt) {
  const kdat::Device dev(opt.device);
  const auto totals = kdat::counter_totals(dev);
  if (opt.json) {
    kdatctl::render_totals_json(std::cout, totals);
  } else {
    kdatctl::render_totals_text(std::cout, totals);
  }
  std::cout.flush();
  return 0;
}

bool change_wanted(const Options &opt, const kdatctl::Change &c) {
  return opt.filter.record_matches(c.after) || opt.filter.record_matches(c.before);
}

// watch's state: the tables it has attached and what it last saw of each.
class Watcher {
 public:
  Watcher(const Options &opt, const kdat::Device &dev)
      : opt_(opt), dev_(dev), names_(device_names(dev)) {}

  // Reads every wanted table once and prints what changed since the last read.
  void read() {
    const auto now = boottime_ns();
    std::map<std::uint64_t, bool> listed;
    for (const auto &info : kdat::list_tables(dev_)) {
      if (!wanted(opt_, info)) continue;
      listed[info.id] = true;
      if (tables_.contains(info.id)) continue;
      auto attached = attach(opt_, info);
      if (!attached) continue;
      attached->last = snapshot(*attached);
      report(kdatctl::initial(attached->last), now);
      tables_.emplace(info.id, std::move(*attached));
    }
    for (auto it = tables_.begin(); it != tables_.end();) {
      auto &t = it->second;
      auto snap = snapshot(t);
      report(kdatctl::diff(t.last, snap), now);
      t.last = std::move(snap);
      if (!listed.contains(it->first) || t.last.header.closed()) {
        if (opt_.json) {
          kdatctl::Json j;
          j["time_ns"] = now;
          j["table"] = it->first;
          j["change"] = "table_closed";
          kdatctl::print_json(std::cout, j);
        } else {
          std::printf("%.6f table %llu closed\n", static_cast<double>(now) / 1e9,
                      static_cast<unsigned long long>(it->first));
          std::fflush(stdout);
        }
        it = tables_.erase(it);
      } else {
        ++it;
      }
    }
    std::cout.flush();
  }

 private:
  void report(const std::vector<kdatctl::Change> &changes, std::uint64_t now) {
    for (const auto &c : changes) {
      if (!change_wanted(opt_, c)) continue;
      const auto &r = c.kind == kdatctl::Change::Kind::freed ? c.before : c.after;
      if (r.device != 0 && !names_.contains(r.device)) names_ = device_names(dev_);  // a new one
      if (opt_.json) {
        kdatctl::render_change_json(std::cout, c, now, names_);
      } else {
        kdatctl::render_change_text(std::cout, c, now, names_);
      }
    }
  }

  const Options &opt_;
  const kdat::Device &dev_;
  kdatctl::DeviceNames names_;
  std::map<std::uint64_t, Attached> tables_;
};

int cmd_watch(const Options &opt, const kdat::Device &dev) {
  using Clock = std::chrono::steady_clock;
  catch_stop_signals();
  const auto start = Clock::now();
  const auto deadline = opt.duration_ms ? start + std::chrono::milliseconds(*opt.duration_ms)
                                        : Clock::time_point::max();
  const auto interval = std::chrono::milliseconds(opt.interval_ms);
  // The change count before the first read: a change during a read wakes the next wait at once.
  std::optional<std::uint64_t> seen;
  try {
    seen = kdat::wait_tables(dev, 0, kdat::Timeout(0));
  } catch (const kdat::Error &) {
    // a module older than ABI 8: read every interval instead (at least 200 ms)
  }
  Watcher watcher(opt, dev);
  auto last_read = Clock::now();
  for (unsigned long reads = 0; !stop_requested;) {
    last_read = Clock::now();
    watcher.read();
    if (opt.count && ++reads >= *opt.count) break;
    // Sleep until the tables change, in slices of a second at most so that a signal that
    // arrives just before a wait is seen soon.
    while (!stop_requested) {
      auto slice = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::seconds(1));
      if (opt.duration_ms) {
        const auto left =
            std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
        if (left.count() <= 0) return 0;
        slice = std::min(slice, left);
      }
      if (!seen) {
        std::this_thread::sleep_for(std::min<std::chrono::microseconds>(
            slice, std::max(interval, std::chrono::milliseconds(200))));
        break;
      }
      try {
        const auto now_seen = kdat::wait_tables(dev, *seen, slice);
        if (now_seen != *seen) {
          seen = now_seen;
          break;
        }
      } catch (const kdat::Error &e) {
        if (e.code().type() != KDAT_DAT_INTERRUPTED_CALL) throw;
      }
    }
    // At most one read per interval, so that a busy host does not keep watch busy too.
    const auto next = last_read + interval;
    if (Clock::now() < next && !stop_requested) std::this_thread::sleep_until(next);
    if (Clock::now() >= deadline) break;
  }
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  Options opt;
  FilterArgs filter_args;
  std::string interval_arg, count_arg, duration_arg;

  CLI::App app{
      "usage: kdatctl [--device PATH] [-j] COMMAND [OPTIONS]\n"
      "kdatctl: the operator's view of kdat's endpoints, tables and counters",
      "kdatctl"};
  app.footer(footer_text);
  app.require_subcommand(0, 1);
  app.fallthrough();  // -j and --device also after the command
  // --help shows every command's options: one text says everything, as the man page does.
  app.set_help_flag();
  app.set_help_all_flag("-h,--help", "print this help and exit");
  app.add_option("--device", opt.device, "the kdat device node (default /dev/kdat)")
      ->option_text("PATH");
  app.add_flag("-j,--json", opt.json, "print JSON instead of text");
  bool version_flag = false;
  app.add_flag("--version", version_flag, "as the version command");

  auto *version = app.add_subcommand(
      "version",
      "kdatctl's version, and the loaded module's version, ABI, DAT version and RDMA "
      "device count");
  auto *list = app.add_subcommand("list",
                                  "every object table this user may attach to, and its "
                                  "objects");
  list->add_flag("-a,--all", opt.all, "closed tables too, and freed slots (type FREE)");
  add_filter_options(list, filter_args);
  auto *watch = app.add_subcommand(
      "watch", "a line per object that appears, changes state or goes away, as it happens");
  watch
      ->add_option("-i,--interval", interval_arg,
                   "read the tables at most once per MS milliseconds (default 10)")
      ->option_text("MS");
  watch->add_option("-c,--count", count_arg, "stop after N reads of the tables")->option_text("N");
  watch->add_option("--duration", duration_arg, "stop after MS milliseconds")->option_text("MS");
  add_filter_options(watch, filter_args);
  auto *show = app.add_subcommand("show", "one object, every field of its record");
  show->add_option("TABLE HANDLE", opt.operands, "the table id and the object's handle")
      ->expected(2)
      ->required();
  auto *counters = app.add_subcommand("counters", "each IA's connection counters, one line per IA");
  add_filter_options(counters, filter_args);
  auto *totals = app.add_subcommand(
      "totals",
      "the connection counters summed over the module's and each RDMA device's IAs, "
      "closed ones included");
  auto *devices = app.add_subcommand(
      "devices",
      "every RDMA device port, its state and link layer, and the netdev and addresses "
      "that name it as an IA (works without the module)");
  auto *blk = app.add_subcommand(
      "blk", "kdat_blk's block controllers: connect one, disconnect one, list them");
  blk->require_subcommand(1);
  kdatctl::BlkConnect blk_connect;
  std::vector<std::string> blk_names;
  auto *blk_connect_cmd = blk->add_subcommand(
      "connect",
      "make a controller and its disk (/dev/kdatbN) from a kdat_blkt target; prints its name");
  blk_connect_cmd
      ->add_option("-t,--target", blk_connect.target, "the target's IPv4 or IPv6 address")
      ->option_text("ADDRESS")
      ->required();
  blk_connect_cmd->add_option("-p,--port", blk_connect.port, "the target's port")
      ->option_text("PORT")
      ->check(CLI::Range(1, 65535))
      ->required();
  blk_connect_cmd
      ->add_option("-i,--ia-name", blk_connect.ia_name,
                   "the local netdev or address to connect from (default: the route's)")
      ->option_text("NAME");
  blk_connect_cmd->add_option("--nr-queues", blk_connect.nr_queues, "hardware queues (1-16)")
      ->option_text("N");
  blk_connect_cmd
      ->add_option("--queue-depth", blk_connect.queue_depth, "requests per queue (1-128)")
      ->option_text("N");
  blk_connect_cmd
      ->add_option("--ctrl-loss-tmo", blk_connect.ctrl_loss_tmo,
                   "seconds to reconnect before I/O fails (-1: for ever)")
      ->option_text("S");
  blk_connect_cmd
      ->add_option("--reconnect-delay", blk_connect.reconnect_delay,
                   "most seconds between reconnect attempts (1-3600)")
      ->option_text("S");
  blk_connect_cmd
      ->add_option("--io-timeout", blk_connect.io_timeout,
                   "seconds before an unanswered request resets the connection")
      ->option_text("S");
  auto *blk_disconnect_cmd =
      blk->add_subcommand("disconnect", "remove controllers and their disks by name (kdatbN)");
  blk_disconnect_cmd->add_option("NAME", blk_names, "the controllers")->required();
  auto *blk_list_cmd = blk->add_subcommand("list", "every controller, its state and counters");
  auto *help = app.add_subcommand("help", "print this help and exit");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForAllHelp &) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForHelp &) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::ParseError &e) {
    return usage_error(e.what());
  }
  if (*help) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  }
  const bool any_command =
      *version || *list || *watch || *show || *counters || *totals || *devices || *blk;
  if (!any_command && !version_flag) return usage_error("no command");
  try {
    if (!interval_arg.empty()) {
      opt.interval_ms = static_cast<unsigned>(
          number_or_throw("--interval", interval_arg, 3600000, "wants milliseconds"));
    }
    if (!count_arg.empty()) {
      opt.count = number_or_throw("--count", count_arg, ULONG_MAX, "wants a positive number");
      if (*opt.count == 0) throw UsageError("--count wants a positive number");
    }
    if (!duration_arg.empty()) {
      opt.duration_ms =
          number_or_throw("--duration", duration_arg, ULONG_MAX, "wants milliseconds");
    }
    if (version_flag || *version) return cmd_version(opt);
    if (*devices) {
      const auto ports = kdatctl::list_ports("/sys/class/infiniband", kdatctl::host_addresses);
      if (opt.json) {
        kdatctl::render_ports_json(std::cout, ports);
      } else {
        kdatctl::render_ports_text(std::cout, ports);
      }
      return 0;
    }
    if (*blk_connect_cmd) {
      const auto name = kdatctl::blk_connect(blk_connect);
      if (opt.json) {
        kdatctl::print_json(std::cout, kdatctl::Json{{"name", name}});
      } else {
        std::cout << name << '\n';
      }
      return 0;
    }
    if (*blk_disconnect_cmd) {
      for (const auto &name : blk_names) kdatctl::blk_disconnect(name);
      return 0;
    }
    if (*blk_list_cmd) {
      const auto controllers = kdatctl::blk_list();
      if (opt.json) {
        kdatctl::render_blk_json(std::cout, controllers);
      } else {
        kdatctl::render_blk_text(std::cout, controllers);
      }
      return 0;
    }
    if (*show) return cmd_show(opt);
    if (*totals) return cmd_totals(opt);
    parse_filter(filter_args, opt, nullptr);  // usage errors before the device is opened
    const kdat::Device dev = open_observer(opt.device);
    parse_filter(filter_args, opt, &dev);
    if (*list) return cmd_list(opt, dev);
    if (*watch) return cmd_watch(opt, dev);
    return cmd_counters(opt, dev);
  } catch (const UsageError &e) {
    return usage_error(e.what());
  } catch (const std::exception &e) {
    std::fprintf(stderr, "kdatctl: %s\n", e.what());
    return 1;
  }
}
