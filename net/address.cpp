// The one parser of HOST:PORT (net/address.hpp).
#include "net/address.hpp"

#include <stdexcept>

namespace rumor::net {

std::string HostPort::str() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

HostPort parse_host_port(const std::string& s, const char* what, bool allow_zero) {
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument(std::string("bad ") + what + " '" + s + "': " + why +
                                 " (expected HOST:PORT, e.g. 127.0.0.1:7000)");
  };
  HostPort hp;
  std::string port;
  if (!s.empty() && s[0] == '[') {
    const auto close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':') throw bad("unterminated [IPv6]");
    hp.host = s.substr(1, close - 1);
    port = s.substr(close + 2);
  } else {
    const auto colon = s.rfind(':');
    if (colon == std::string::npos) throw bad("no port");
    hp.host = s.substr(0, colon);
    port = s.substr(colon + 1);
  }
  if (hp.host.empty()) throw bad("no host");
  for (unsigned char ch : hp.host)
    if (ch <= ' ' || ch == ',' || ch >= 0x7F) throw bad("the host has a space, comma or control character");
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    throw bad("port is not a number");
  const unsigned long p = std::stoul(port);
  if (p > 65535 || (p == 0 && !allow_zero)) throw bad("port out of range");
  hp.port = static_cast<std::uint16_t>(p);
  return hp;
}

}  // namespace rumor::net
