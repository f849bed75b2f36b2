// kdatctl: the operator's view of kdat: the module's version, every object table this user may
// see (its own processes', and with CAP_SYS_ADMIN everybody's and the kernel consumers'), and a
// live trace of state changes.  Reads the shared tables; never changes anything.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
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

#include "devices.hpp"
#include "render.hpp"

namespace {

constexpr const char *help_text = R"(usage: kdatctl [--device PATH] COMMAND [OPTIONS]

commands:
  version, --version           kdatctl's version, and the loaded module's version, ABI
                               version, DAT version and RDMA device count
  list [--json] [--all] [FILTER]
                               every object table this user may attach to, and its objects
  watch [--json] [--interval MS] [--count N] [FILTER]
                               one line per object that appears, changes state or goes away
  show [--json] TABLE HANDLE   one object, every field of its record (HANDLE as list shows
                               it, 0x... or decimal)
  counters [--json] [FILTER]   each IA's connection counters (connects, requests, accepts,
                               rejects, rejects by reason, timeouts, disconnects, ...)
  devices [--json]             every RDMA device port, its state and link layer, and the netdev
                               and addresses that name it as an IA (kdat_ia_open, dat.conf)
  help, --help                 this text

FILTER (list, watch and counters; all given must match):
  --table ID  --pid PID  --comm NAME     tables: by id, by the opener's pid or name
  --type TYPE                            objects of one type: IA, EVD, EP, PSP, RSP, CR
  --state STATE                          objects in one state, as list shows it (CONNECTED,
                                         LISTENING, PENDING, UP, ...); watch: before or after
  --ia HANDLE                            an IA and every object it owns
With an object filter, tables with no matching object are left out.

list (text): per table a line
  table ID  pid PID  comm COMM  uid UID  live N  [kernel]  [closed]  age SECONDS
then one line per object, IAs first, then EPs, PSPs, RSPs, CRs, EVDs, with the columns
  HANDLE TYPE STATE LOCAL REMOTE CONN_QUAL IRD ORD TRANS EVENTS LAST_EVENT AGE
STATE is the DAT_EP_STATE name without its prefix for EPs (CONNECTED, ...), LISTENING/USED
for PSPs and RSPs, PENDING/REMOTE_GONE for CRs, UP/DEVICE_REMOVED for IAs, and for EVDs the
event streams that feed them (DTO|CONNECTION|CR); LAST_EVENT is the DAT event name without "DAT_"; "-" marks an empty field.
Closed tables are left out unless --all is given; --all also shows freed slots (type FREE).
kdatctl's own /dev/kdat files are observers (KDAT_TABLE_VIEWER): no list shows their empty
tables, so any number of kdatctl processes can run side by side without listing each other.

list --json: one JSON document:
  {"now_ns": N, "tables": [{"id", "pid", "uid", "comm", "flags": ["kernel"|"closed"|"viewer"],
   "live", "high_water", "updates", "created_ns", "objects": [{"handle", "handle_hex", "slot",
   "generation", "type", "state", "state_value", "owner", "link", "link2", "local", "remote",
   "conn_qual", "ird", "ord", "qp_num", "transitions", "events", "last_event", "flags",
   "created_ns", "changed_ns", "age_ns"}]}]}
"qp_num" is the EP's QP number: 'rdma res show cm_id' and 'rdma res show qp' name it lqpn (a
/dev/kdat process's cm_ids are listed under its own pid and comm there).
Times are CLOCK_BOOTTIME nanoseconds; "local"/"remote" are "ADDR:PORT" or null.

watch: polls every MS milliseconds (default 200) until interrupted or N polls are done.
Objects present at the start are reported as "new".  Text lines:
  SECONDS table ID pid PID COMM TYPE HANDLE new STATE [transitions T] [last_event E]
  SECONDS table ID pid PID COMM TYPE HANDLE change OLD -> NEW [transitions T [(+K unseen)]] ...
  SECONDS table ID pid PID COMM TYPE HANDLE freed (was STATE) ...
  SECONDS table ID closed
"+K unseen" counts state changes that happened between two polls and were not seen.
watch --json prints one JSON object a line: {"time_ns", "table", "pid", "comm", "change":
"new"|"change"|"freed"|"table_closed", "handle", "type", "from", "to", "transitions",
"unseen", "events", "last_event"}.

counters: one line per IA the FILTER selects (--type and --state apply to the IA record):
  table ID pid PID comm COMM ia HANDLE local ADDR NAME VALUE NAME VALUE ...
with the names of <kdat/uapi/kdat_counters.h> (kdat(7) says what each counts); --json prints
an array of {"table", "pid", "comm", "ia", "ia_hex", "local", NAME: VALUE, ...}.  Counters
count from the IA's open and go with it.

devices: sysfs (/sys/class/infiniband) and the netdevs' addresses; works without the module.
--json prints {"ports": [{"device", "port", "state", "link_layer", "netdev", "addresses"}]}.

show: "key  value" lines (table, handle, type, state, owner, link, link2, local, remote,
conn_qual, ird/ord, qp_num, transitions, events, last_event, flags, age, changed); --json prints
{"now_ns", "table", "pid", "comm", "object": {as in list --json}}.

exit status: 0 success, 1 an error (message on stderr), 2 a usage error.
)";

std::atomic<bool> stop_requested{false};

void on_signal(int) { stop_requested = true; }

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

struct Options {
  std::string device = kdat::Device::default_path;
  std::string command;
  std::vector<std::string> operands;  // show's TABLE HANDLE
  bool json = false;
  bool all = false;
  unsigned interval_ms = 200;
  std::optional<unsigned long> count;
  kdatctl::Filter filter;
};

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

int cmd_list(const Options &opt) {
  const kdat::Device dev = open_observer(opt.device);
  const auto snapshots = selected_snapshots(opt, dev);
  if (opt.json) {
    kdatctl::render_json(std::cout, snapshots, boottime_ns());
  } else {
    kdatctl::render_text(std::cout, snapshots, boottime_ns());
  }
  std::cout.flush();
  return 0;
}

std::optional<std::uint64_t> parse_u64(const std::string &text) {
  if (text.empty()) return std::nullopt;
  char *end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 0);
  if (errno != 0 || end == text.c_str() || *end != '\0' || text[0] == '-') return std::nullopt;
  return value;
}

int cmd_show(const Options &opt) {
  const auto id = parse_u64(opt.operands[0]);
  const auto handle = parse_u64(opt.operands[1]);
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
    if (opt.json) {
      kdatctl::render_object_json(std::cout, header, *record, boottime_ns());
    } else {
      kdatctl::render_object_text(std::cout, header, *record, boottime_ns());
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

int cmd_counters(const Options &opt) {
  const kdat::Device dev = open_observer(opt.device);
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
  if (opt.json) {
    kdatctl::render_counters_json(std::cout, rows);
  } else {
    kdatctl::render_counters_text(std::cout, rows);
  }
  std::cout.flush();
  return 0;
}

bool change_wanted(const Options &opt, const kdatctl::Change &c) {
  return opt.filter.record_matches(c.after) || opt.filter.record_matches(c.before);
}

int cmd_watch(const Options &opt) {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  const kdat::Device dev = open_observer(opt.device);
  std::map<std::uint64_t, Attached> tables;
  for (unsigned long poll = 0; !stop_requested && (!opt.count || poll < *opt.count); ++poll) {
    if (poll != 0) std::this_thread::sleep_for(std::chrono::milliseconds(opt.interval_ms));
    const auto now = boottime_ns();
    std::map<std::uint64_t, bool> listed;
    for (const auto &info : kdat::list_tables(dev)) {
      if (!wanted(opt, info)) continue;
      listed[info.id] = true;
      if (tables.contains(info.id)) continue;
      auto attached = attach(opt, info);
      if (!attached) continue;
      attached->last = snapshot(*attached);
      for (const auto &c : kdatctl::initial(attached->last)) {
        if (!change_wanted(opt, c)) continue;
        if (opt.json) {
          kdatctl::render_change_json(std::cout, c, now);
        } else {
          kdatctl::render_change_text(std::cout, c, now);
        }
      }
      tables.emplace(info.id, std::move(*attached));
    }
    for (auto it = tables.begin(); it != tables.end();) {
      auto &t = it->second;
      auto snap = snapshot(t);
      for (const auto &c : kdatctl::diff(t.last, snap)) {
        if (!change_wanted(opt, c)) continue;
        if (opt.json) {
          kdatctl::render_change_json(std::cout, c, now);
        } else {
          kdatctl::render_change_text(std::cout, c, now);
        }
      }
      t.last = std::move(snap);
      if (!listed.contains(it->first) || t.last.header.closed()) {
        if (opt.json) {
          std::cout << "{\"time_ns\":" << now << ",\"table\":" << it->first
                    << ",\"change\":\"table_closed\"}\n";
        } else {
          std::printf("%.6f table %llu closed\n", static_cast<double>(now) / 1e9,
                      static_cast<unsigned long long>(it->first));
          std::fflush(stdout);
        }
        it = tables.erase(it);
      } else {
        ++it;
      }
    }
    std::cout.flush();
  }
  return 0;
}

std::optional<unsigned long> parse_number(const char *text) {
  char *end = nullptr;
  errno = 0;
  const unsigned long value = std::strtoul(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') return std::nullopt;
  return value;
}

}  // namespace

int main(int argc, char **argv) {
  Options opt;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    const auto value = [&]() -> const char * {
      return i + 1 < args.size() ? args[++i].c_str() : nullptr;
    };
    if (a == "--help" || a == "-h" || a == "help") {
      std::fputs(help_text, stdout);
      return 0;
    } else if (a == "--version" && opt.command.empty()) {
      opt.command = "version";
    } else if (a == "--json") {
      opt.json = true;
    } else if (a == "--all") {
      opt.all = true;
    } else if (a == "--device") {
      const char *v = value();
      if (v == nullptr) return usage_error("--device wants a path");
      opt.device = v;
    } else if (a == "--interval") {
      const char *v = value();
      const auto n = v != nullptr ? parse_number(v) : std::nullopt;
      if (!n || *n == 0 || *n > 3600000) return usage_error("--interval wants milliseconds");
      opt.interval_ms = static_cast<unsigned>(*n);
    } else if (a == "--count") {
      const char *v = value();
      const auto n = v != nullptr ? parse_number(v) : std::nullopt;
      if (!n || *n == 0) return usage_error("--count wants a positive number");
      opt.count = *n;
    } else if (a == "--table" || a == "--pid" || a == "--ia") {
      const char *v = value();
      const auto n = v != nullptr ? parse_u64(v) : std::nullopt;
      if (!n || (a != "--table" && *n > UINT32_MAX)) {
        return usage_error(a + (a == "--table" ? " wants a table id"
                                : a == "--pid" ? " wants a process id"
                                               : " wants an IA handle (0x... or decimal)"));
      }
      if (a == "--table") opt.filter.table = *n;
      if (a == "--pid") opt.filter.pid = static_cast<std::uint32_t>(*n);
      if (a == "--ia") opt.filter.ia = static_cast<std::uint32_t>(*n);
    } else if (a == "--comm" || a == "--state" || a == "--type") {
      const char *v = value();
      if (v == nullptr || *v == '\0') return usage_error(a + " wants a name");
      if (a == "--type" && !kdatctl::known_type(v)) {
        return usage_error(std::string("--type '") + v + "': one of IA, EVD, EP, PSP, RSP, CR");
      }
      (a == "--comm" ? opt.filter.comm : a == "--state" ? opt.filter.state : opt.filter.type) = v;
    } else if (opt.command.empty() && a[0] != '-') {
      opt.command = a;
    } else if (opt.command == "show" && a[0] != '-') {
      opt.operands.push_back(a);
    } else {
      return usage_error("unexpected argument '" + a + "'");
    }
  }
  if (opt.command.empty()) return usage_error("no command");
  const bool list_opts = opt.all;
  const bool watch_opts = opt.count || opt.interval_ms != 200;
  const auto &f = opt.filter;
  const bool filter_opts =
      f.table || f.pid || f.ia || !f.comm.empty() || !f.state.empty() || !f.type.empty();
  try {
    if (opt.command == "version") {
      if (opt.json || list_opts || watch_opts || filter_opts) {
        return usage_error("version takes no options");
      }
      return cmd_version(opt);
    }
    if (opt.command == "list") {
      if (watch_opts) return usage_error("list takes --json, --all and filters");
      return cmd_list(opt);
    }
    if (opt.command == "watch") return cmd_watch(opt);
    if (opt.command == "counters") {
      if (list_opts || watch_opts) return usage_error("counters takes --json and filters");
      return cmd_counters(opt);
    }
    if (opt.command == "devices") {
      if (list_opts || watch_opts || filter_opts) return usage_error("devices takes only --json");
      const auto ports = kdatctl::list_ports("/sys/class/infiniband", kdatctl::host_addresses);
      if (opt.json) {
        kdatctl::render_ports_json(std::cout, ports);
      } else {
        kdatctl::render_ports_text(std::cout, ports);
      }
      return 0;
    }
    if (opt.command == "show") {
      if (list_opts || watch_opts || filter_opts) return usage_error("show takes only --json");
      if (opt.operands.size() != 2) return usage_error("show wants TABLE HANDLE");
      return cmd_show(opt);
    }
    return usage_error("unknown command '" + opt.command + "'");
  } catch (const std::exception &e) {
    std::fprintf(stderr, "kdatctl: %s\n", e.what());
    return 1;
  }
}
