// Bounded reading and length-prefixed writing of PostgreSQL protocol bodies.
// https://www.postgresql.org/docs/15/protocol-message-types.html
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace splitpoint::protocol {

// Reads a message body; can never run past its end. Any read past the end or a
// missing string terminator makes the reader fail (sticky); values read after a
// failure are zero/empty. Check ok() once at the end of a decode.
class Reader {
 public:
  explicit Reader(std::string_view body) : data_(body) {}

  std::uint8_t u8() {
    if (!need(1)) return 0;
    return static_cast<std::uint8_t>(data_[pos_++]);
  }
  std::int16_t i16() {
    if (!need(2)) return 0;
    auto v = static_cast<std::int16_t>((std::uint8_t(data_[pos_]) << 8) | std::uint8_t(data_[pos_ + 1]));
    pos_ += 2;
    return v;
  }
  std::int32_t i32() {
    if (!need(4)) return 0;
    std::uint32_t v = (std::uint32_t(std::uint8_t(data_[pos_])) << 24) |
                      (std::uint32_t(std::uint8_t(data_[pos_ + 1])) << 16) |
                      (std::uint32_t(std::uint8_t(data_[pos_ + 2])) << 8) |
                      std::uint32_t(std::uint8_t(data_[pos_ + 3]));
    pos_ += 4;
    return static_cast<std::int32_t>(v);
  }
  // A NUL-terminated string; the view excludes the terminator.
  std::string_view cstr() {
    if (failed_) return {};
    auto end = data_.find('\0', pos_);
    if (end == std::string_view::npos) {
      failed_ = true;
      return {};
    }
    auto s = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  std::string_view bytes(std::size_t n) {
    if (!need(n)) return {};
    auto s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::string_view rest() {
    auto s = failed_ ? std::string_view{} : data_.substr(pos_);
    pos_ = data_.size();
    return s;
  }

  std::size_t remaining() const { return failed_ ? 0 : data_.size() - pos_; }
  bool at_end() const { return !failed_ && pos_ == data_.size(); }
  bool ok() const { return !failed_; }
  void fail() { failed_ = true; }

 private:
  bool need(std::size_t n) {
    if (failed_ || data_.size() - pos_ < n) {
      failed_ = true;
      return false;
    }
    return true;
  }

  std::string_view data_;
  std::size_t pos_ = 0;
  bool failed_ = false;
};

// Appends one message to `out`: type byte (none for startup-phase packets),
// a length placeholder patched by finish(), then the body.
class Writer {
 public:
  // type == 0 writes a startup-style packet without a type byte.
  Writer(std::string& out, char type) : out_(out) {
    if (type != 0) out_.push_back(type);
    start_ = out_.size();
    out_.append(4, '\0');
  }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  Writer& u8(std::uint8_t v) {
    out_.push_back(static_cast<char>(v));
    return *this;
  }
  Writer& i16(std::int16_t v) {
    auto u = static_cast<std::uint16_t>(v);
    char b[2] = {char(u >> 8), char(u)};
    out_.append(b, 2);
    return *this;
  }
  Writer& i32(std::int32_t v) {
    auto u = static_cast<std::uint32_t>(v);
    char b[4] = {char(u >> 24), char(u >> 16), char(u >> 8), char(u)};
    out_.append(b, 4);
    return *this;
  }
  Writer& cstr(std::string_view s) {
    out_.append(s);
    out_.push_back('\0');
    return *this;
  }
  Writer& bytes(std::string_view s) {
    out_.append(s);
    return *this;
  }
  // Patches the length field. Must be called exactly once.
  void finish() {
    auto len = static_cast<std::uint32_t>(out_.size() - start_);
    char b[4] = {char(len >> 24), char(len >> 16), char(len >> 8), char(len)};
    std::memcpy(out_.data() + start_, b, 4);
  }

 private:
  std::string& out_;
  std::size_t start_ = 0;
};

inline std::int32_t read_i32(const char* p) {
  return static_cast<std::int32_t>((std::uint32_t(std::uint8_t(p[0])) << 24) |
                                   (std::uint32_t(std::uint8_t(p[1])) << 16) |
                                   (std::uint32_t(std::uint8_t(p[2])) << 8) |
                                   std::uint32_t(std::uint8_t(p[3])));
}

}  // namespace splitpoint::protocol
