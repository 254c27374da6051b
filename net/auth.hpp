// The swarm key and the cryptography of the handshake's challenge-response (docs/security.md):
// reading and checking a `--swarm-key` file, fresh nonces from the OS, and the HMAC-SHA256
// proof that a peer knows the key. OpenSSL (libcrypto) does the work; this file only fixes what
// goes into the MAC, so that both sides compute exactly the same bytes.
//
// Randomness from the OS is allowed here (net/), never in core/.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "core/message.hpp"

namespace rumor::net {

constexpr std::size_t kNonceSize = 32;
constexpr std::size_t kProofSize = 32;  // HMAC-SHA256
using Nonce = std::array<std::uint8_t, kNonceSize>;
using Proof = std::array<std::uint8_t, kProofSize>;

// A key file holds the secret as raw bytes (any content: `head -c 32 /dev/urandom > swarm.key`).
// Shorter than this is refused; 32 bytes or more of real randomness is what we recommend.
constexpr std::size_t kMinSwarmKeyBytes = 16;
constexpr std::size_t kMaxSwarmKeyBytes = 64 * 1024;  // beyond this it is surely not a key file

struct SwarmKey {
  Bytes secret;
  // The file's mode lets group or others read it (worth a warning, not a refusal).
  bool readable_by_others = false;
};

// Reads and checks a key file. Throws std::invalid_argument naming the file and the problem
// (unreadable, shorter than kMinSwarmKeyBytes, longer than kMaxSwarmKeyBytes); the daemon turns
// that into exit code 2.
SwarmKey load_swarm_key(const std::string& path);

// 32 bytes from the OS's random generator (OpenSSL RAND_bytes). Throws std::runtime_error if
// the generator fails, which it does not on a working system.
Nonce random_nonce();

// Which end of the connection a proof comes from; part of the MAC, so that a proof made for one
// role can never be reflected back as the other.
enum class HandshakeRole : std::uint8_t { Dialler = 1, Listener = 2 };

// HMAC-SHA256(key, "rumor-auth-v1" || role || own_nonce || peer_nonce || hello), where `hello`
// is the prover's Hello record exactly as it travels (docs/wire.md).
Proof auth_proof(std::span<const std::uint8_t> key, HandshakeRole role, const Nonce& own_nonce,
                 const Nonce& peer_nonce, std::span<const std::uint8_t> hello);

// Constant-time comparison (CRYPTO_memcmp), so timing reveals nothing about a near miss.
bool proofs_equal(const Proof& a, const Proof& b);

}  // namespace rumor::net
