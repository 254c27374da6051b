// Swarm key files, nonces and HMAC-SHA256 proofs (auth.hpp, docs/security.md).
#include "net/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace rumor::net {

namespace {
constexpr char kAuthLabel[] = "rumor-auth-v1";  // 13 bytes, no terminator in the MAC
}

SwarmKey load_swarm_key(const std::string& path) {
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument("--swarm-key '" + path + "': " + why +
                                 " (make one with: head -c 32 /dev/urandom > swarm.key)");
  };
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw bad(std::string("cannot read it: ") + std::strerror(errno));
  SwarmKey key;
  struct stat st {};
  if (::fstat(::fileno(f), &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      std::fclose(f);
      throw bad("not a regular file");
    }
    key.readable_by_others = (st.st_mode & (S_IRGRP | S_IROTH)) != 0;
  }
  std::uint8_t buf[4096];
  std::size_t n = 0;
  bool too_long = false;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    if (key.secret.size() + n > kMaxSwarmKeyBytes) {
      too_long = true;
      break;
    }
    key.secret.insert(key.secret.end(), buf, buf + n);
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw bad("read error");
  if (too_long) throw bad("longer than " + std::to_string(kMaxSwarmKeyBytes) + " bytes; not a key file?");
  if (key.secret.size() < kMinSwarmKeyBytes)
    throw bad("only " + std::to_string(key.secret.size()) + " bytes; a swarm key needs at least " +
              std::to_string(kMinSwarmKeyBytes) + " (32 random bytes recommended)");
  return key;
}

Nonce random_nonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1)
    throw std::runtime_error("the OS random generator failed (RAND_bytes)");
  return n;
}

Proof auth_proof(std::span<const std::uint8_t> key, HandshakeRole role, const Nonce& own_nonce,
                 const Nonce& peer_nonce, std::span<const std::uint8_t> hello) {
  Proof out{};
  // The one-shot HMAC() over one contiguous buffer (HMAC_CTX is deprecated in OpenSSL 3); the
  // input is at most a few KiB.
  constexpr std::size_t kLabel = sizeof kAuthLabel - 1;
  Bytes msg(kLabel + 1 + 2 * kNonceSize + hello.size());
  std::uint8_t* p = msg.data();
  std::memcpy(p, kAuthLabel, kLabel);
  p[kLabel] = static_cast<std::uint8_t>(role);
  std::memcpy(p + kLabel + 1, own_nonce.data(), kNonceSize);
  std::memcpy(p + kLabel + 1 + kNonceSize, peer_nonce.data(), kNonceSize);
  if (!hello.empty()) std::memcpy(p + kLabel + 1 + 2 * kNonceSize, hello.data(), hello.size());
  unsigned int len = 0;
  static const std::uint8_t kEmpty = 0;
  const unsigned char* r = HMAC(EVP_sha256(), key.empty() ? &kEmpty : key.data(), static_cast<int>(key.size()),
                                msg.data(), msg.size(), out.data(), &len);
  if (!r || len != out.size()) throw std::runtime_error("HMAC-SHA256 failed");
  return out;
}

bool proofs_equal(const Proof& a, const Proof& b) { return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0; }

}  // namespace rumor::net
