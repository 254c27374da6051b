// gunzip_if_needed over zlib (see gzip.hpp). The input is untrusted: a truncated, corrupt or
// bomb-sized stream is a DataError naming the source, never an unbounded allocation.
#include "data/gzip.hpp"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <limits>

namespace rumor {

Bytes gunzip_if_needed(std::span<const std::uint8_t> bytes, const std::string& source) {
  return gunzip_if_needed(bytes, source, kMaxInflatedBytes);
}

Bytes gunzip_if_needed(std::span<const std::uint8_t> bytes, const std::string& source,
                       std::size_t max_inflated_bytes) {
  auto is_gzip = [](std::span<const std::uint8_t> b) {
    return b.size() >= 2 && b[0] == 0x1f && b[1] == 0x8b;
  };
  if (!is_gzip(bytes)) return Bytes(bytes.begin(), bytes.end());
  // The smallest gzip member is 18 bytes (10 header, 2 empty deflate block, 8 trailer).
  if (bytes.size() < 18)
    throw_data_error(source, "truncated gzip stream (" + std::to_string(bytes.size()) + " bytes)");

  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
    throw_data_error(source, "cannot initialise zlib inflate");
  // inflateEnd on every exit path, including the throws below.
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end{&zs};

  // Start from the size the gzip trailer claims (mod 2^32), but never believe it past what
  // deflate can reach (about 1032:1) or the bound: it is untrusted.
  const std::size_t n = bytes.size();
  const std::size_t claimed = (std::size_t{bytes[n - 1]} << 24) | (std::size_t{bytes[n - 2]} << 16) |
                              (std::size_t{bytes[n - 3]} << 8) | std::size_t{bytes[n - 4]};
  const std::size_t plausible =
      bytes.size() > std::numeric_limits<std::size_t>::max() / 1100 ? max_inflated_bytes
                                                                    : bytes.size() * 1100 + 64;
  // One byte past the bound, so that reaching it proves the output is too large.
  const std::size_t hard_cap =
      max_inflated_bytes == std::numeric_limits<std::size_t>::max() ? max_inflated_bytes
                                                                    : max_inflated_bytes + 1;
  Bytes out(std::min({std::max<std::size_t>(claimed, 4096), plausible, hard_cap}));
  std::size_t produced = 0, consumed = 0;

  for (;;) {
    // Full: grow. produced <= max_inflated_bytes here (checked below), so out < hard_cap.
    if (produced == out.size())
      out.resize(out.size() > hard_cap / 2 ? hard_cap : out.size() * 2);
    const std::size_t in_left = bytes.size() - consumed, out_left = out.size() - produced;
    // z_stream counts in uInt; feed large buffers in pieces.
    zs.next_in = const_cast<Bytef*>(bytes.data() + consumed);
    zs.avail_in = static_cast<uInt>(std::min<std::size_t>(in_left, UINT_MAX));
    zs.next_out = out.data() + produced;
    zs.avail_out = static_cast<uInt>(std::min<std::size_t>(out_left, UINT_MAX));
    const uInt in_given = zs.avail_in, out_given = zs.avail_out;
    const int rc = inflate(&zs, Z_NO_FLUSH);
    consumed += in_given - zs.avail_in;
    produced += out_given - zs.avail_out;
    if (produced > max_inflated_bytes)
      throw_data_error(source, "gzip data inflates to more than " +
                               std::to_string(max_inflated_bytes) + " bytes (limit)");

    if (rc == Z_STREAM_END) {
      if (consumed == bytes.size()) break;
      // Concatenated gzip members (what `cat a.gz b.gz` makes) are one file to gzip -d.
      if (!is_gzip(bytes.subspan(consumed)))
        throw_data_error(source, std::to_string(bytes.size() - consumed) +
                                 " trailing bytes after the gzip stream");
      if (inflateReset(&zs) != Z_OK) throw_data_error(source, "cannot reset zlib inflate");
      continue;
    }
    if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_STREAM_ERROR)
      throw_data_error(source, std::string("corrupt gzip stream (") +
                               (zs.msg ? zs.msg : "invalid data") + ")");
    if (rc == Z_MEM_ERROR) throw_data_error(source, "out of memory inflating gzip data");
    // Z_OK or Z_BUF_ERROR: no progress possible without more input means the file ends early.
    if (consumed == bytes.size() && produced < out.size())
      throw_data_error(source, "truncated gzip stream (ends after " + std::to_string(bytes.size()) +
                               " bytes, " + std::to_string(produced) + " inflated)");
  }
  out.resize(produced);
  return out;
}

}  // namespace rumor
