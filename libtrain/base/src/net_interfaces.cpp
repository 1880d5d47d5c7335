// This host's network interfaces and address checks (net_interfaces.h).
#include "train/base/net_interfaces.h"

#include "train/base/error.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>

namespace train::net {
namespace {

std::string numeric(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

}  // namespace

std::vector<Interface> list_interfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_name == nullptr) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const Interface& i) { return i.name == a->ifa_name; });
    if (it == out.end()) {
      out.push_back(Interface{a->ifa_name, {}, {}, false});
      it = out.end() - 1;
    }
    it->up = it->up || (a->ifa_flags & IFF_UP) != 0;
    if (a->ifa_addr == nullptr) continue;
    if (a->ifa_addr->sa_family == AF_INET) it->ipv4.push_back(numeric(a->ifa_addr));
    if (a->ifa_addr->sa_family == AF_INET6) it->ipv6.push_back(numeric(a->ifa_addr));
  }
  freeifaddrs(list);
  return out;
}

std::string describe(const std::vector<Interface>& interfaces) {
  std::string s;
  for (const Interface& i : interfaces) {
    std::string addrs;
    for (const auto* v : {&i.ipv4, &i.ipv6}) {
      for (const std::string& a : *v) addrs += (addrs.empty() ? "" : ", ") + a;
    }
    s += (s.empty() ? "" : "; ") + i.name + " (" + (addrs.empty() ? "no address" : addrs) + (i.up ? "" : ", down") + ")";
  }
  return s.empty() ? "none found (getifaddrs failed)" : s;
}

Interface require_interface(const std::string& name, const std::string& source) {
  const std::vector<Interface> all = list_interfaces();
  const auto it = std::find_if(all.begin(), all.end(), [&](const Interface& i) { return i.name == name; });
  const std::string hint = "pick one of this host's interfaces that the other nodes reach (often ib0, eth0 or "
                           "ens*; `ip addr` lists them), or leave " + source + " out to use the one the host name resolves to.";
  if (it == all.end()) {
    throw ConfigError(source + " '" + name + "': expected a network interface of this host, found none of that "
                          "name. Interfaces here: " + describe(all) + ".", hint);
  }
  if (it->ipv4.empty() && it->ipv6.empty()) {
    throw ConfigError(source + " '" + name + "': expected an interface with an IPv4 or IPv6 address, found " + name +
                          " without one. Interfaces here: " + describe(all) + ".", hint);
  }
  return *it;
}

std::vector<std::string> resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::vector<std::string> v6, v4;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return {};
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    std::vector<std::string>& to = a->ai_family == AF_INET6 ? v6 : v4;
    const std::string n = numeric(a->ai_addr);
    if (!n.empty() && std::find(to.begin(), to.end(), n) == to.end()) to.push_back(n);
  }
  freeaddrinfo(res);
  v6.insert(v6.end(), v4.begin(), v4.end());
  return v6;
}

std::string interface_of(const std::string& address, const std::vector<Interface>& interfaces) {
  for (const Interface& i : interfaces) {
    for (const auto* v : {&i.ipv4, &i.ipv6}) {
      if (std::find(v->begin(), v->end(), address) != v->end()) return i.name;
    }
  }
  return "";
}

}  // namespace train::net

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace train::net {

std::string store_bind_address(const std::string& master_addr, const std::string& interface, std::string* note) {
  const std::vector<Interface> all = list_interfaces();
  std::string any_local, on_interface;
  for (const std::string& a : resolve(master_addr)) {
    if (a.rfind("fe80:", 0) == 0) continue;  // link-local: needs a scope id the other ranks don't have
    const std::string owner = interface_of(a, all);
    if (owner.empty()) continue;
    if (any_local.empty()) any_local = a;
    if (!interface.empty() && owner == interface && on_interface.empty()) on_interface = a;
  }
  std::string why;
  std::string chosen = on_interface.empty() ? any_local : on_interface;
  if (chosen.empty()) {
    why = "MASTER_ADDR " + master_addr + " resolves to no address of this host; the store listens on every interface";
  } else if (!interface.empty() && on_interface.empty()) {
    why = "the store listens on " + chosen + " (" + interface_of(chosen, all) + "), where MASTER_ADDR " + master_addr +
          " resolves and the other ranks look for it, not on --interface " + interface +
          "; set MASTER_ADDR to an address of " + interface + " to move it there";
  } else {
    why = "the store listens on " + chosen + " (" + interface_of(chosen, all) + ") only, MASTER_ADDR " + master_addr;
  }
  if (note != nullptr) *note = why;
  return chosen;
}

int listen_on(const std::string& address, int port, std::string* error) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in6);
  } else {
    if (error != nullptr) *error = "'" + address + "' is not a numeric address";
    return -1;
  }
  const int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    if (error != nullptr) *error = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || listen(fd, 2048) != 0) {
    if (error != nullptr) *error = "bind/listen on " + address + ":" + std::to_string(port) + ": " + std::strerror(errno);
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace train::net
