// The TCP transport of a peer: one I/O thread running Asio, a listening socket, at most one
// cached connection per remote peer, optional TLS 1.3 with mutual certificates, the handshake
// (net/handshake.hpp: Hello with version, peer id and model fingerprint, behind a swarm key's
// challenge-response when there is one) and framing (net/frame.hpp, docs/wire.md). It knows
// nothing of gossip: it moves core Messages between peer ids and reports what went wrong.
//
// Threading contract: every public method is thread-safe. Callbacks in TransportEvents run on
// the I/O thread and must be quick (the daemon just queues them for the compute thread).
// Every network operation has a deadline; nothing here can block a caller.
//
// Asio stays out of this header (pimpl) so that including it costs little compile time.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/message.hpp"

namespace spdlog {
class logger;
}

namespace rumor::net {

struct TransportConfig {
  std::string listen_host = "127.0.0.1";
  std::uint16_t listen_port = 0;          // 0: the OS picks; see Transport::local_id()
  std::string fingerprint;                 // our model's fingerprint; peers must match
  double connect_timeout_s = 3.0;
  double handshake_timeout_s = 3.0;
  // A frame, once its first byte arrived, must be complete within
  // frame_timeout_s + bytes / min_rate_bytes_per_s (defeats trickling peers).
  double frame_timeout_s = 5.0;
  double min_rate_bytes_per_s = 4.0 * 1024 * 1024;
  double idle_timeout_s = 120.0;           // an unused connection is closed after this
  std::size_t max_header_bytes = 1u << 20; // structured header limit
  std::uint64_t max_payload_bytes = 2ull << 30;  // payload limit, checked before allocation
  std::size_t max_queued_bytes = 1ull << 32;     // per-connection write queue bound
  // Received payload buffers, once the application drops them, are kept (up to this many idle
  // bytes) and reused for the next payload of the same size: fresh 100 MB buffers cost more in
  // page faults than the transfer itself. 0 disables.
  std::size_t recycle_payload_bytes = 256u << 20;
  // Trust (docs/security.md). A swarm key (the secret of net::load_swarm_key): every connection
  // must pass a mutual HMAC-SHA256 challenge-response before anything else is read. Empty: an
  // open swarm.
  Bytes swarm_key;
  // TLS 1.3 with mutual certificates: PEM files of our certificate (chain), its private key and
  // the CA that signs every member's certificate. All three or none; start() throws
  // std::invalid_argument naming a file it cannot use.
  std::string tls_cert, tls_key, tls_ca;
};

struct TransportStats {
  std::uint64_t bytes_sent = 0, bytes_recv = 0;
  std::uint64_t frames_sent = 0, frames_recv = 0;  // Hello frames included
  std::uint64_t rejected = 0;  // connections closed for bad input
  std::uint64_t accepted = 0;  // inbound connections accepted
  std::uint64_t dialed = 0;    // outbound connection attempts
};

struct TransportEvents {
  // A complete, checksummed message from an authenticated (handshaken) peer.
  std::function<void(const PeerId& from, Message&& msg)> on_message;
  // We could not deliver to `peer` (connect refused/timed out, write failed, connection lost
  // with messages queued), or it closed the connection with messages we wrote to it unanswered
  // (it stopped or exited; not an idle close). Exchanges with that peer should be given up.
  std::function<void(const PeerId& peer, const std::string& reason)> on_send_failed;
  // A peer (or an unknown remote endpoint) sent bad input and was disconnected: wrong magic or
  // version, oversize lengths, bad checksum, cut-off or trickled frame, fingerprint mismatch,
  // malformed Hello. `peer` is the peer id if the handshake got that far, else "ip:port".
  std::function<void(const PeerId& peer, const std::string& reason)> on_rejected;
};

class Transport {
 public:
  Transport(TransportConfig cfg, TransportEvents events, std::shared_ptr<spdlog::logger> log);
  ~Transport();  // stops and joins the I/O thread
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Loads the TLS files if any (std::invalid_argument naming a bad one), binds and listens
  // (std::runtime_error naming the address on failure) and starts the I/O thread.
  void start();
  // Closes everything and joins the I/O thread. Queued messages may be dropped; call flush()
  // first to give them a chance.
  void stop();
  // Waits up to timeout_s for all write queues to drain and their bytes to be acknowledged by
  // the peers (the kernel's send queues empty: closing a socket with bytes still in it may
  // reset the connection and drop them). Returns true if both happened.
  bool flush(double timeout_s);

  // "host:port" we listen on (the port the OS chose when listen_port was 0). This is our
  // PeerId in Hello.
  PeerId local_id() const;

  // Queues `msg` for `to` (a "host:port" PeerId). Connects (with deadline and handshake) if
  // there is no connection yet. Failures are reported through on_send_failed, never thrown.
  void send(const PeerId& to, Message msg);
  // Runs `fn` on the I/O thread after delay_s seconds (unless stopped first).
  void post_after(double delay_s, std::function<void()> fn);
  // Closes the connection to `peer`, if any.
  void disconnect(const PeerId& peer);

  TransportStats stats() const;
  // The I/O thread's CPU seconds so far (framing, hashing and checking payloads, the sockets'
  // system calls); -1 before start() or once the thread has ended. Call it from the thread
  // that called start().
  double io_cpu_seconds() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rumor::net
