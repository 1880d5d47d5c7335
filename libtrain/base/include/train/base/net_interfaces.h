// This host's network interfaces (getifaddrs) and the checks `train --interface` and the
// rendezvous store's bind address rest on. No LibTorch here, so trainctl can use it too.
#pragma once

#include <string>
#include <vector>

namespace train::net {

/// One network interface and its addresses (numeric, e.g. "10.0.0.2", "fe80::1").
struct Interface {
  std::string name;
  std::vector<std::string> ipv4;
  std::vector<std::string> ipv6;
  bool up = false;
};

/// Every interface of this host, in getifaddrs order (empty if getifaddrs fails).
std::vector<Interface> list_interfaces();

/// "lo (127.0.0.1), eth0 (10.0.0.2, fe80::1)": the interfaces for an error message.
std::string describe(const std::vector<Interface>& interfaces);

/// The interface `name` when it exists and has an IPv4 or IPv6 address. Throws train::ConfigError
/// naming `source` (e.g. "--interface"), what was found and the interfaces that exist.
Interface require_interface(const std::string& name, const std::string& source);

/// The addresses `host` resolves to (numeric, IPv6 first as torch's store client tries them),
/// empty when it does not resolve.
std::vector<std::string> resolve(const std::string& host);

/// The interface that holds `address` on this host, "" when none does.
std::string interface_of(const std::string& address, const std::vector<Interface>& interfaces);

}  // namespace train::net

namespace train::net {

/// Where rank 0's rendezvous store listens: the address of this host that `master_addr` resolves
/// to (IPv6 first, as the store's clients try them; link-local IPv6 skipped), on `interface` when
/// one is given and MASTER_ADDR resolves to one of its addresses. "" (every interface) when
/// MASTER_ADDR resolves to no address of this host. `note` says what was chosen and why.
std::string store_bind_address(const std::string& master_addr, const std::string& interface, std::string* note);

/// A TCP socket bound to `address`:`port` and listening; -1 with the reason in *error.
int listen_on(const std::string& address, int port, std::string* error);

}  // namespace train::net
