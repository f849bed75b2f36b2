#include "render.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <kdat/names.hpp>
#include <kdat/types.hpp>
#include <map>

#include "json.hpp"

namespace kdatctl {

using kdat::Record;

std::string rdma_port_text(const Record &r, const DeviceNames &devices) {
  if (r.device == 0) return "-";
  const auto it = devices.find(r.device);
  const std::string name = it != devices.end() ? it->second : "#" + std::to_string(r.device);
  return name + "/" + std::to_string(r.port_num);
}

std::optional<AddressFilter> parse_address(const std::string &text) {
  std::string bare = text;
  if (bare.size() > 2 && bare.front() == '[' && bare.back() == ']') {
    bare = bare.substr(1, bare.size() - 2);
  }
  AddressFilter a;
  if (::inet_pton(AF_INET, bare.c_str(), a.addr) == 1) {
    a.family = KDAT_AF_INET;
    return a;
  }
  if (::inet_pton(AF_INET6, bare.c_str(), a.addr) == 1) {
    a.family = KDAT_AF_INET6;
    return a;
  }
  return std::nullopt;
}

namespace {

// The device and port as JSON: the name (null when the record names none or its device went)
// and the port (null when none).
void add_rdma_port(Json &j, const Record &r, const DeviceNames &devices) {
  const auto it = devices.find(r.device);
  j["rdma_device"] = r.device != 0 && it != devices.end() ? Json(it->second) : Json(nullptr);
  j["rdma_device_number"] = r.device;
  j["rdma_port"] = r.device != 0 ? Json(r.port_num) : Json(nullptr);
}

constexpr std::size_t key_width = 13;  // "show": the longest key and a space

std::string address_text(const kdat_addr &addr) { return kdat::Address{addr}.to_string(); }

std::string age_text(std::uint64_t now_ns, std::uint64_t then_ns) {
  if (then_ns == 0 || now_ns < then_ns) return "-";
  char text[32];
  std::snprintf(text, sizeof(text), "%.3fs", static_cast<double>(now_ns - then_ns) / 1e9);
  return text;
}

std::string flags_text(const Record &r) {
  std::string text;
  if (r.flags & KDAT_RECF_ACTIVE) text += "active,";
  if (r.flags & KDAT_RECF_PROVIDER) text += "provider,";
  if (r.flags & KDAT_RECF_RING) text += "ring,";
  if (r.flags & KDAT_RECF_USER_QP) text += "user_qp,";
  if (!text.empty()) text.pop_back();
  return text;
}

Json table_flags_json(const kdat::TableHeader &h) {
  Json flags = Json::array();
  if (h.kernel()) flags.push_back("kernel");
  if (h.closed()) flags.push_back("closed");
  if ((h.flags & KDAT_TABLE_VIEWER) != 0) flags.push_back("viewer");
  return flags;
}

std::vector<Record> ordered(const std::vector<Record> &records) {
  std::vector<Record> out = records;
  std::stable_sort(out.begin(), out.end(), [](const Record &a, const Record &b) {
    const int ra = type_rank(a.type), rb = type_rank(b.type);
    if (ra != rb) return ra < rb;
    return KDAT_HANDLE_SLOT(a.handle) < KDAT_HANDLE_SLOT(b.handle);
  });
  return out;
}

// Addresses and qualifiers only where the ABI defines them for the type.
bool has_local(const Record &r) { return r.type != KDAT_REC_EVD && r.local_addr.family != 0; }
bool has_remote(const Record &r) {
  return (r.type == KDAT_REC_EP || r.type == KDAT_REC_CR) && r.remote_addr.family != 0;
}
bool has_conn_qual(const Record &r) {
  return r.type == KDAT_REC_EP || r.type == KDAT_REC_PSP || r.type == KDAT_REC_RSP;
}

Json address_json(bool present, const kdat_addr &addr) {
  return present ? Json(address_text(addr)) : Json(nullptr);
}

Json record_json(const Record &r, std::uint64_t now_ns, const DeviceNames &devices) {
  Json j;
  j["handle"] = r.handle;
  j["handle_hex"] = handle_text(r.handle);
  j["slot"] = KDAT_HANDLE_SLOT(r.handle);
  j["generation"] = r.generation;
  j["type"] = kdat::record_type_name(r.type);
  j["state"] = kdat::record_state_name(r);
  j["state_value"] = r.state;
  j["owner"] = r.owner;
  j["link"] = r.link;
  j["link2"] = r.link2;
  j["local"] = address_json(has_local(r), r.local_addr);
  j["remote"] = address_json(has_remote(r), r.remote_addr);
  j["conn_qual"] = r.conn_qual;
  j["ird"] = r.ird;
  j["ord"] = r.ord;
  j["qp_num"] = r.qp_num;
  add_rdma_port(j, r, devices);
  j["transitions"] = r.transitions;
  j["events"] = r.events;
  j["last_event"] = kdat::event_name(r.last_event);
  j["flags"] = flags_text(r);
  j["created_ns"] = r.created_ns;
  j["changed_ns"] = r.changed_ns;
  j["age_ns"] = r.created_ns != 0 && now_ns >= r.created_ns ? now_ns - r.created_ns : 0;
  return j;
}

bool address_matches(const AddressFilter &want, bool present, const kdat_addr &addr) {
  const std::size_t len = want.family == KDAT_AF_INET ? 4 : 16;
  return present && addr.family == want.family && std::memcmp(addr.addr, want.addr, len) == 0;
}

bool same_name(const std::string &a, const std::string &b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::toupper(static_cast<unsigned char>(x)) ==
           std::toupper(static_cast<unsigned char>(y));
  });
}

}  // namespace

bool known_type(const std::string &name) {
  for (const std::uint32_t type :
       {KDAT_REC_IA, KDAT_REC_EVD, KDAT_REC_EP, KDAT_REC_PSP, KDAT_REC_RSP, KDAT_REC_CR}) {
    if (same_name(name, kdat::record_type_name(type))) return true;
  }
  return false;
}

bool Filter::table_matches(const kdat::TableHeader &header) const {
  return (!table || header.id == *table) && (!pid || header.pid == *pid) &&
         (comm.empty() || header.comm == comm);
}

bool Filter::record_matches(const kdat::Record &r) const {
  if (!type.empty() && !same_name(type, kdat::record_type_name(r.type))) return false;
  if (!state.empty() && !same_name(state, kdat::record_state_name(r))) return false;
  if (ia && !(r.handle == *ia && r.type == KDAT_REC_IA) && r.owner != *ia) return false;
  if (addr && !address_matches(*addr, has_local(r), r.local_addr) &&
      !address_matches(*addr, has_remote(r), r.remote_addr)) {
    return false;
  }
  if (port && !(has_local(r) && r.local_addr.port == *port) &&
      !(has_remote(r) && r.remote_addr.port == *port)) {
    return false;
  }
  if (conn_qual && !(has_conn_qual(r) && r.conn_qual == *conn_qual)) return false;
  if (qp_num && r.qp_num != *qp_num) return false;
  if (device && r.device != *device) return false;
  if (rdma_port && !(r.device != 0 && r.port_num == *rdma_port)) return false;
  return true;
}

std::vector<kdat::TableSnapshot> filtered(std::vector<kdat::TableSnapshot> tables,
                                          const Filter &filter) {
  std::vector<kdat::TableSnapshot> out;
  for (auto &t : tables) {
    if (!filter.table_matches(t.header)) continue;
    std::erase_if(t.records, [&](const Record &r) { return !filter.record_matches(r); });
    if (filter.selects_objects() && t.records.empty()) continue;
    out.push_back(std::move(t));
  }
  return out;
}

void render_object_text(std::ostream &out, const kdat::TableHeader &table, const Record &r,
                        std::uint64_t now_ns, const DeviceNames &devices) {
  const auto line = [&](const char *key, const std::string &value) {
    out << key << std::string(key_width - std::min(key_width, std::strlen(key)), ' ') << value
        << "\n";
  };
  line("table", std::to_string(table.id) + " (pid " + std::to_string(table.pid) + " " + table.comm +
                    (table.kernel() ? ", kernel" : "") + (table.closed() ? ", closed" : "") + ")");
  line("handle", handle_text(r.handle) + " (slot " + std::to_string(KDAT_HANDLE_SLOT(r.handle)) +
                     ", generation " + std::to_string(r.generation) + ")");
  line("type", kdat::record_type_name(r.type));
  line("state", kdat::record_state_name(r) + " (" + std::to_string(r.state) + ")");
  line("owner", r.owner != 0 ? handle_text(r.owner) : "-");
  line("link", r.link != 0 ? handle_text(r.link) : "-");
  line("link2", r.link2 != 0 ? handle_text(r.link2) : "-");
  line("local", has_local(r) ? address_text(r.local_addr) : "-");
  line("remote", has_remote(r) ? address_text(r.remote_addr) : "-");
  line("conn_qual", has_conn_qual(r) ? std::to_string(r.conn_qual) : "-");
  line("ird/ord", std::to_string(r.ird) + "/" + std::to_string(r.ord));
  line("qp_num", r.qp_num != 0 ? std::to_string(r.qp_num) : "-");
  line("rdma_port", rdma_port_text(r, devices));
  line("transitions", std::to_string(r.transitions));
  line("events", std::to_string(r.events));
  line("last_event", kdat::event_name(r.last_event));
  const std::string flags = flags_text(r);
  line("flags", flags.empty() ? "-" : flags);
  line("age", age_text(now_ns, r.created_ns));
  line("changed", r.changed_ns != 0 ? age_text(now_ns, r.changed_ns) + " ago" : "-");
}

void render_object_json(std::ostream &out, const kdat::TableHeader &table, const Record &r,
                        std::uint64_t now_ns, const DeviceNames &devices) {
  Json doc;
  doc["now_ns"] = now_ns;
  doc["table"] = table.id;
  doc["pid"] = table.pid;
  doc["comm"] = table.comm;
  doc["object"] = record_json(r, now_ns, devices);
  print_json(out, doc);
}

int type_rank(std::uint32_t type) {
  switch (type) {
    case KDAT_REC_IA: return 0;
    case KDAT_REC_EP: return 1;
    case KDAT_REC_PSP: return 2;
    case KDAT_REC_RSP: return 3;
    case KDAT_REC_CR: return 4;
    case KDAT_REC_EVD: return 5;
    default: return 6;
  }
}

std::string handle_text(std::uint32_t handle) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08x", handle);
  return text;
}

void render_text(std::ostream &out, const std::vector<kdat::TableSnapshot> &tables,
                 std::uint64_t now_ns, const DeviceNames &devices) {
  if (tables.empty()) {
    out << "no tables\n";
    return;
  }
  for (const auto &t : tables) {
    const auto &h = t.header;
    out << "table " << h.id << "  pid " << h.pid << "  comm " << h.comm << "  uid " << h.uid
        << "  live " << h.live << (h.kernel() ? "  kernel" : "") << (h.closed() ? "  closed" : "")
        << "  age " << age_text(now_ns, h.created_ns) << "\n";
    if (t.records.empty()) {
      out << "  (no objects)\n";
      continue;
    }
    char line[512];
    std::snprintf(line, sizeof(line),
                  "  %-10s %-4s %-28s %-22s %-22s %9s %-12s %8s %4s %4s %5s %6s %-40s %s\n",
                  "HANDLE", "TYPE", "STATE", "LOCAL", "REMOTE", "CONN_QUAL", "RDMA_PORT", "QPN",
                  "IRD", "ORD", "TRANS", "EVENTS", "LAST_EVENT", "AGE");
    out << line;
    for (const auto &r : ordered(t.records)) {
      const std::string conn_qual = has_conn_qual(r) ? std::to_string(r.conn_qual) : "-";
      const std::string qpn = r.qp_num != 0 ? std::to_string(r.qp_num) : "-";
      std::snprintf(line, sizeof(line),
                    "  %-10s %-4s %-28s %-22s %-22s %9s %-12s %8s %4u %4u %5u %6u %-40s %s\n",
                    handle_text(r.handle).c_str(), kdat::record_type_name(r.type),
                    kdat::record_state_name(r).c_str(),
                    has_local(r) ? address_text(r.local_addr).c_str() : "-",
                    has_remote(r) ? address_text(r.remote_addr).c_str() : "-", conn_qual.c_str(),
                    rdma_port_text(r, devices).c_str(), qpn.c_str(), static_cast<unsigned>(r.ird),
                    static_cast<unsigned>(r.ord), r.transitions, r.events,
                    kdat::event_name(r.last_event).c_str(), age_text(now_ns, r.created_ns).c_str());
      out << line;
    }
  }
}

void render_json(std::ostream &out, const std::vector<kdat::TableSnapshot> &tables,
                 std::uint64_t now_ns, const DeviceNames &devices) {
  Json doc;
  doc["now_ns"] = now_ns;
  doc["tables"] = Json::array();
  for (const auto &t : tables) {
    const auto &h = t.header;
    Json table;
    table["id"] = h.id;
    table["pid"] = h.pid;
    table["uid"] = h.uid;
    table["comm"] = h.comm;
    table["flags"] = table_flags_json(h);
    table["live"] = h.live;
    table["high_water"] = h.high_water;
    table["updates"] = h.updates;
    table["created_ns"] = h.created_ns;
    table["objects"] = Json::array();
    for (const auto &r : ordered(t.records))
      table["objects"].push_back(record_json(r, now_ns, devices));
    doc["tables"].push_back(std::move(table));
  }
  print_json(out, doc);
}

bool filled(const Record &r) { return r.type == KDAT_REC_IA ? r.state != 0 : r.owner != 0; }

std::vector<Change> initial(const kdat::TableSnapshot &snapshot) {
  std::vector<Change> changes;
  for (const auto &r : snapshot.records) {
    if (r.handle != 0 && filled(r))
      changes.push_back(Change{Change::Kind::created, snapshot.header, {}, r});
  }
  return changes;
}

std::vector<Change> diff(const kdat::TableSnapshot &before, const kdat::TableSnapshot &after) {
  std::map<std::uint32_t, Record> old_by_slot, new_by_slot;
  for (const auto &r : before.records) {
    if (r.handle != 0 && filled(r)) old_by_slot[KDAT_HANDLE_SLOT(r.handle)] = r;
  }
  for (const auto &r : after.records) {
    if (r.handle != 0 && filled(r)) new_by_slot[KDAT_HANDLE_SLOT(r.handle)] = r;
  }
  std::vector<Change> changes;
  for (const auto &[slot, old] : old_by_slot) {
    const auto it = new_by_slot.find(slot);
    if (it == new_by_slot.end() || it->second.handle != old.handle) {
      changes.push_back(Change{Change::Kind::freed, after.header, old, {}});
    }
  }
  for (const auto &[slot, now] : new_by_slot) {
    const auto it = old_by_slot.find(slot);
    if (it == old_by_slot.end() || it->second.handle != now.handle) {
      changes.push_back(Change{Change::Kind::created, after.header, {}, now});
      continue;
    }
    const Record &old = it->second;
    if (old.seq == now.seq) continue;  // nothing written since
    if (old.state != now.state || old.transitions != now.transitions || old.events != now.events) {
      changes.push_back(Change{Change::Kind::changed, after.header, old, now});
    }
  }
  return changes;
}

namespace {

const char *kind_name(Change::Kind kind) {
  switch (kind) {
    case Change::Kind::created: return "new";
    case Change::Kind::changed: return "change";
    case Change::Kind::freed: return "freed";
  }
  return "?";
}

// State changes the reader did not see: the transitions counter moved more than once.
std::uint32_t unseen(const Change &c) {
  if (c.kind != Change::Kind::changed) return 0;
  const std::uint32_t delta = c.after.transitions - c.before.transitions;
  return delta > 1 ? delta - 1 : 0;
}

}  // namespace

void render_change_text(std::ostream &out, const Change &c, std::uint64_t now_ns,
                        const DeviceNames &devices) {
  const Record &r = c.kind == Change::Kind::freed ? c.before : c.after;
  char stamp[32];
  std::snprintf(stamp, sizeof(stamp), "%.6f", static_cast<double>(now_ns) / 1e9);
  out << stamp << " table " << c.table.id << " pid " << c.table.pid << " " << c.table.comm << " "
      << kdat::record_type_name(r.type) << " " << handle_text(r.handle) << " " << kind_name(c.kind)
      << " ";
  switch (c.kind) {
    case Change::Kind::created: out << kdat::record_state_name(r); break;
    case Change::Kind::freed: out << "(was " << kdat::record_state_name(r) << ")"; break;
    case Change::Kind::changed:
      out << kdat::record_state_name(c.before) << " -> " << kdat::record_state_name(c.after);
      break;
  }
  if (r.type == KDAT_REC_EP) {
    out << " transitions " << r.transitions;
    if (unseen(c) != 0) out << " (+" << unseen(c) << " unseen)";
  }
  if (r.last_event != 0) out << " last_event " << kdat::event_name(r.last_event);
  if (r.device != 0) out << " rdma_port " << rdma_port_text(r, devices);
  out << "\n";
}

void render_change_json(std::ostream &out, const Change &c, std::uint64_t now_ns,
                        const DeviceNames &devices) {
  const Record &r = c.kind == Change::Kind::freed ? c.before : c.after;
  Json j;
  j["time_ns"] = now_ns;
  j["table"] = c.table.id;
  j["pid"] = c.table.pid;
  j["comm"] = c.table.comm;
  j["change"] = kind_name(c.kind);
  j["handle"] = r.handle;
  j["type"] = kdat::record_type_name(r.type);
  j["from"] =
      c.kind == Change::Kind::created ? Json(nullptr) : Json(kdat::record_state_name(c.before));
  j["to"] = c.kind == Change::Kind::freed ? Json(nullptr) : Json(kdat::record_state_name(c.after));
  j["transitions"] = r.transitions;
  j["unseen"] = unseen(c);
  j["events"] = r.events;
  j["last_event"] = kdat::event_name(r.last_event);
  add_rdma_port(j, r, devices);
  print_json(out, j);
}

void render_counters_text(std::ostream &out, const std::vector<IaCountersRow> &rows,
                          const DeviceNames &devices) {
  for (const auto &row : rows) {
    out << "table " << row.table.id << " pid " << row.table.pid << " comm "
        << (row.table.comm.empty() ? "-" : row.table.comm) << " ia " << handle_text(row.ia.handle)
        << " local " << (has_local(row.ia) ? address_text(row.ia.local_addr) : "-") << " dev "
        << rdma_port_text(row.ia, devices);
    for (const auto &c : row.counters) out << ' ' << c.name << ' ' << c.value;
    out << '\n';
  }
}

void render_counters_json(std::ostream &out, const std::vector<IaCountersRow> &rows,
                          const DeviceNames &devices) {
  Json doc = Json::array();
  for (const auto &row : rows) {
    Json j;
    j["table"] = row.table.id;
    j["pid"] = row.table.pid;
    j["comm"] = row.table.comm;
    j["ia"] = row.ia.handle;
    j["ia_hex"] = handle_text(row.ia.handle);
    j["local"] = address_json(has_local(row.ia), row.ia.local_addr);
    add_rdma_port(j, row.ia, devices);
    for (const auto &c : row.counters) j[std::string(c.name)] = c.value;
    doc.push_back(std::move(j));
  }
  print_json(out, doc);
}

void render_totals_text(std::ostream &out, const std::vector<kdat::CounterTotals> &totals) {
  for (const auto &t : totals) {
    if (t.number == 0) {
      out << "module";
    } else {
      out << "device " << (t.name.empty() ? "-" : t.name) << " number " << t.number;
    }
    for (const auto &c : t.counters) out << ' ' << c.name << ' ' << c.value;
    out << '\n';
  }
}

void render_totals_json(std::ostream &out, const std::vector<kdat::CounterTotals> &totals) {
  Json doc;
  doc["module"] = Json::object();
  doc["devices"] = Json::array();
  for (const auto &t : totals) {
    Json j;
    if (t.number != 0) {
      j["device"] = t.name;
      j["number"] = t.number;
    }
    for (const auto &c : t.counters) j[std::string(c.name)] = c.value;
    if (t.number == 0) {
      doc["module"] = std::move(j);
    } else {
      doc["devices"].push_back(std::move(j));
    }
  }
  print_json(out, doc);
}

}  // namespace kdatctl
