#include "blk.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "json.hpp"

namespace kdatctl {

namespace {

// A file descriptor closed on every path.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd &) = delete;
  Fd &operator=(const Fd &) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const { return fd_; }

 private:
  int fd_;
};

std::string read_attr(const std::filesystem::path &dir, const char *name) {
  std::ifstream in(dir / name);
  std::string value;
  std::getline(in, value);
  return value;
}

template <typename T>
T number_attr(const std::filesystem::path &dir, const char *name) {
  try {
    return static_cast<T>(std::stol(read_attr(dir, name)));
  } catch (const std::exception &) {
    return T{};  // gone while read (deleted)
  }
}

}  // namespace

std::string blk_options(const BlkConnect &c) {
  std::string s = "target=" + c.target + ",port=" + std::to_string(c.port);
  auto add = [&s](const char *key, const auto &value) {
    if (value) s += std::string(",") + key + "=" + std::to_string(*value);
  };
  add("nr_queues", c.nr_queues);
  add("queue_depth", c.queue_depth);
  add("ctrl_loss_tmo", c.ctrl_loss_tmo);
  add("reconnect_delay", c.reconnect_delay);
  add("io_timeout", c.io_timeout);
  if (!c.ia_name.empty()) s += ",ia_name=" + c.ia_name;
  return s;
}

std::string blk_connect(const BlkConnect &c, const std::string &control) {
  const Fd fd(::open(control.c_str(), O_RDWR | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    throw std::system_error(
        err, std::generic_category(),
        "cannot open " + control + (err == ENOENT ? " (is kdat_blk loaded?)" : ""));
  }
  const std::string options = blk_options(c);
  if (::write(fd.get(), options.data(), options.size()) < 0) {
    throw std::system_error(errno, std::generic_category(),
                            "kdat_blk refused " + options + " (the kernel log says why)");
  }
  char reply[128];
  const ssize_t n = ::read(fd.get(), reply, sizeof(reply) - 1);
  if (n <= 0) throw std::system_error(n < 0 ? errno : EIO, std::generic_category(), "no name");
  std::string text(reply, static_cast<std::size_t>(n));
  const auto at = text.find("name=");
  if (at == std::string::npos) throw std::system_error(EIO, std::generic_category(), text);
  std::string name = text.substr(at + 5);
  name.erase(
      std::find_if(name.begin(), name.end(), [](char ch) { return ch == ',' || ch == '\n'; }),
      name.end());
  return name;
}

void blk_disconnect(const std::string &name, const std::string &sysfs_class) {
  // a name is one path component: no "../"
  if (name.empty() || name.find('/') != std::string::npos || name[0] == '.') {
    throw std::system_error(EINVAL, std::generic_category(),
                            "'" + name + "' is no controller name");
  }
  const auto path = std::filesystem::path(sysfs_class) / name / "delete_controller";
  const Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    throw std::system_error(err, std::generic_category(),
                            err == ENOENT ? "no controller " + name : path.string());
  }
  if (::write(fd.get(), "1\n", 2) < 0) {
    throw std::system_error(errno, std::generic_category(), "deleting " + name);
  }
}

std::vector<BlkController> blk_list(const std::string &sysfs_class) {
  std::vector<BlkController> out;
  std::error_code ec;
  for (const auto &entry : std::filesystem::directory_iterator(sysfs_class, ec)) {
    const auto &dir = entry.path();
    BlkController c;
    c.name = dir.filename().string();
    c.state = read_attr(dir, "state");
    c.address = read_attr(dir, "address");
    c.local = read_attr(dir, "local");
    c.queues = number_attr<unsigned>(dir, "queues");
    c.queue_depth = number_attr<unsigned>(dir, "queue_depth");
    c.resets = number_attr<unsigned>(dir, "resets");
    c.reconnects = number_attr<unsigned>(dir, "reconnects");
    c.last_resume_ms = number_attr<unsigned>(dir, "last_resume_ms");
    c.ctrl_loss_tmo = number_attr<int>(dir, "ctrl_loss_tmo");
    c.reconnect_delay = number_attr<int>(dir, "reconnect_delay");
    out.push_back(std::move(c));
  }
  // kdatb2 before kdatb10
  std::sort(out.begin(), out.end(), [](const BlkController &a, const BlkController &b) {
    return a.name.size() != b.name.size() ? a.name.size() < b.name.size() : a.name < b.name;
  });
  return out;
}

void render_blk_text(std::ostream &out, const std::vector<BlkController> &controllers) {
  for (const auto &c : controllers) {
    out << c.name << "  " << c.state << "  " << c.address << "  local " << c.local << "  queues "
        << c.queues << "x" << c.queue_depth << "  resets " << c.resets << "  reconnects "
        << c.reconnects << "  last_resume_ms " << c.last_resume_ms << "  ctrl_loss_tmo "
        << c.ctrl_loss_tmo << '\n';
  }
}

void render_blk_json(std::ostream &out, const std::vector<BlkController> &controllers) {
  Json doc;
  doc["controllers"] = Json::array();
  for (const auto &c : controllers) {
    Json j;
    j["name"] = c.name;
    j["state"] = c.state;
    j["address"] = c.address;
    j["local"] = c.local;
    j["queues"] = c.queues;
    j["queue_depth"] = c.queue_depth;
    j["resets"] = c.resets;
    j["reconnects"] = c.reconnects;
    j["last_resume_ms"] = c.last_resume_ms;
    j["ctrl_loss_tmo"] = c.ctrl_loss_tmo;
    j["reconnect_delay"] = c.reconnect_delay;
    doc["controllers"].push_back(std::move(j));
  }
  print_json(out, doc);
}

}  // namespace kdatctl
