// Peer addresses: the one parser of "HOST:PORT" (an IPv4 address, a name, or [IPv6]), used by
// the transport, rumor-peer's --listen/--join and the Python module (rumor.Peer's listen/join),
// so every front end accepts and refuses the same forms. No Asio here: names are resolved by
// the transport when it connects.
#pragma once
#include <cstdint>
#include <string>

namespace rumor::net {

struct HostPort {
  std::string host;  // without the brackets of an IPv6 address
  std::uint16_t port = 0;
  std::string str() const;  // "host:port", "[v6]:port"
};

// Throws std::invalid_argument naming `what` (a flag or keyword: "--join", "join") and the
// accepted form. `allow_zero` accepts port 0 (pick a free one: a listen address).
HostPort parse_host_port(const std::string& s, const char* what, bool allow_zero);

}  // namespace rumor::net
