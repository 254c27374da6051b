// Cereal binary encoding of the small structured message headers, with a hardened reader.
//
// Why a custom input archive: cereal's BinaryInputArchive trusts the length prefixes it reads
// and resizes strings and vectors to them before reading, so 8 hostile bytes could ask for an
// exabyte. SafeBinaryInputArchive reads from a span and refuses any length that exceeds the
// bytes left, so allocation is bounded by the (already length-checked) header size.
#pragma once
#include <cereal/cereal.hpp>
#include <cereal/details/traits.hpp>
#include <cereal/archives/binary.hpp>
#include <cereal/types/common.hpp>
#include <cstdint>
#include <cstring>
#include <span>
#include <ostream>
#include <sstream>
#include <streambuf>
#include <stdexcept>
#include <string>
#include <vector>

namespace rumor {

struct DecodeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class SafeBinaryInputArchive
    : public cereal::InputArchive<SafeBinaryInputArchive, cereal::AllowEmptyClassElision> {
 public:
  explicit SafeBinaryInputArchive(std::span<const std::uint8_t> bytes)
      : cereal::InputArchive<SafeBinaryInputArchive, cereal::AllowEmptyClassElision>(this),
        bytes_(bytes) {}
  void loadBinary(void* data, std::size_t size) {
    if (size > bytes_.size() - pos_) throw DecodeError("truncated message header");
    std::memcpy(data, bytes_.data() + pos_, size);
    pos_ += size;
  }
  std::size_t remaining() const { return bytes_.size() - pos_; }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t pos_ = 0;
};

template <class T>
inline typename std::enable_if<std::is_arithmetic<T>::value && !std::is_same<T, bool>::value, void>::type
CEREAL_LOAD_FUNCTION_NAME(SafeBinaryInputArchive& ar, T& t) {
  ar.loadBinary(std::addressof(t), sizeof(t));
}
// A bool travels as one byte, 0 or 1; any other byte would be an invalid bool (undefined
// behaviour to read), so it is refused.
inline void CEREAL_LOAD_FUNCTION_NAME(SafeBinaryInputArchive& ar, bool& t) {
  std::uint8_t b = 0;
  ar.loadBinary(&b, 1);
  if (b > 1) throw DecodeError("boolean field holds " + std::to_string(b) + ", not 0 or 1");
  t = b != 0;
}
template <class T>
inline void CEREAL_SERIALIZE_FUNCTION_NAME(SafeBinaryInputArchive& ar, cereal::NameValuePair<T>& t) {
  ar(t.value);
}
template <class T>
inline void CEREAL_SERIALIZE_FUNCTION_NAME(SafeBinaryInputArchive& ar, cereal::SizeTag<T>& t) {
  ar.loadBinary(std::addressof(t.size), sizeof(t.size));
  // Every element takes at least one byte, so a count beyond the bytes left is a lie.
  if (static_cast<std::uint64_t>(t.size) > ar.remaining())
    throw DecodeError("length prefix exceeds message header size");
}
template <class T>
inline void CEREAL_LOAD_FUNCTION_NAME(SafeBinaryInputArchive& ar, cereal::BinaryData<T>& t) {
  ar.loadBinary(t.data, static_cast<std::size_t>(t.size));
}

// The writing side, in the layout of cereal's BinaryOutputArchive (the wire format,
// docs/wire.md): arithmetic fields as their bytes, a length as a uint64 before a string's
// bytes or a vector's elements. encode_struct runs it twice: once counting (no destination),
// then writing into a header allocated at that exact size, so a field is a memcpy of a size
// known at compile time. (An ostream over a vector cost a stream sentry and a virtual call
// per field, and the vector's regrowths: 5-10% of a 10,000-peer simulation, where every
// message carries 14 member digests.)
class ByteVectorOutputArchive
    : public cereal::OutputArchive<ByteVectorOutputArchive, cereal::AllowEmptyClassElision> {
 public:
  // Writes from dest on (which must have room for size() bytes), or only counts (nullptr).
  explicit ByteVectorOutputArchive(std::uint8_t* dest)
      : cereal::OutputArchive<ByteVectorOutputArchive, cereal::AllowEmptyClassElision>(this), dest_(dest) {}
  void saveBinary(const void* data, std::size_t size) {
    if (dest_) std::memcpy(dest_ + size_, data, size);
    size_ += size;
  }
  std::size_t size() const { return size_; }

 private:
  std::uint8_t* dest_;
  std::size_t size_ = 0;
};

template <class T>
inline typename std::enable_if<std::is_arithmetic<T>::value, void>::type CEREAL_SAVE_FUNCTION_NAME(
    ByteVectorOutputArchive& ar, const T& t) {
  ar.saveBinary(std::addressof(t), sizeof(t));
}
template <class T>
inline void CEREAL_SERIALIZE_FUNCTION_NAME(ByteVectorOutputArchive& ar, cereal::NameValuePair<T>& t) {
  ar(t.value);
}
template <class T>
inline void CEREAL_SERIALIZE_FUNCTION_NAME(ByteVectorOutputArchive& ar, cereal::SizeTag<T>& t) {
  ar(t.size);
}
template <class T>
inline void CEREAL_SAVE_FUNCTION_NAME(ByteVectorOutputArchive& ar, const cereal::BinaryData<T>& t) {
  ar.saveBinary(t.data, static_cast<std::size_t>(t.size));
}

template <class T>
std::vector<std::uint8_t> encode_struct(const T& value) {
  std::size_t size = 0;
  {
    ByteVectorOutputArchive count(nullptr);
    count(value);
    size = count.size();
  }
  std::vector<std::uint8_t> out(size);
  {
    ByteVectorOutputArchive ar(out.data());
    ar(value);
    if (ar.size() != size) throw std::logic_error("encode_struct: the two passes disagree on the size");
  }
  return out;
}

// Throws DecodeError on truncated, oversized or trailing-garbage input.
template <class T>
T decode_struct(std::span<const std::uint8_t> bytes, const char* what) {
  T value{};
  SafeBinaryInputArchive ar(bytes);
  try {
    ar(value);
  } catch (const DecodeError& e) {
    throw DecodeError(std::string("malformed ") + what + ": " + e.what());
  } catch (const std::exception& e) {
    throw DecodeError(std::string("malformed ") + what + ": " + e.what());
  }
  if (ar.remaining() != 0) throw DecodeError(std::string("malformed ") + what + ": trailing bytes");
  return value;
}

}  // namespace rumor

CEREAL_REGISTER_ARCHIVE(rumor::SafeBinaryInputArchive)
CEREAL_REGISTER_ARCHIVE(rumor::ByteVectorOutputArchive)
// Minimal (enum) serialisation needs the output archive paired with ours; only this direction
// is declared, since BinaryOutputArchive is already paired with cereal's own input archive.
namespace cereal::traits::detail {
template <>
struct get_output_from_input<rumor::SafeBinaryInputArchive> {
  using type = cereal::BinaryOutputArchive;
};
template <>
struct get_input_from_output<rumor::ByteVectorOutputArchive> {
  using type = rumor::SafeBinaryInputArchive;
};
}  // namespace cereal::traits::detail
