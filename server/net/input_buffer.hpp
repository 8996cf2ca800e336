// Bytes read from a socket and not consumed yet (a client's messages, a backend's
// responses). Not a std::string because of what a read costs with one: the string
// has to be resized over the space offered to the read, which writes every byte of
// it — 16 KB of memset for a 100-byte message, half the proxy's instructions in a
// pgbench -S round trip (docs/performance.md). This buffer offers uninitialised
// space, consumes from the front without moving what follows, and gives its memory
// back when asked while empty (an idle client keeps none of a large read's buffer).
// It reads as a std::string_view, so framing code takes it unchanged.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <string_view>

namespace splitpoint::server {

class InputBuffer {
 public:
  static constexpr std::size_t npos = std::string_view::npos;

  InputBuffer() = default;
  InputBuffer(InputBuffer&& o) noexcept
      : data_(std::move(o.data_)), capacity_(o.capacity_), begin_(o.begin_), end_(o.end_) {
    o.capacity_ = o.begin_ = o.end_ = 0;
  }
  InputBuffer& operator=(InputBuffer&& o) noexcept {
    data_ = std::move(o.data_);
    capacity_ = o.capacity_;
    begin_ = o.begin_;
    end_ = o.end_;
    o.capacity_ = o.begin_ = o.end_ = 0;
    return *this;
  }

  const char* data() const { return data_.get() + begin_; }
  std::size_t size() const { return end_ - begin_; }
  bool empty() const { return end_ == begin_; }
  std::size_t capacity() const { return capacity_; }
  operator std::string_view() const { return {data(), size()}; }

  void clear() { begin_ = end_ = 0; }

  // As std::string::erase: removes up to `n` bytes at `pos`. From the front it only
  // moves the start.
  void erase(std::size_t pos, std::size_t n = npos) {
    pos = std::min(pos, size());
    n = std::min(n, size() - pos);
    if (pos == 0) {
      begin_ += n;
    } else {
      char* at = data_.get() + begin_ + pos;
      std::memmove(at, at + n, size() - pos - n);
      end_ -= n;
    }
    if (begin_ == end_) begin_ = end_ = 0;
  }

  // Frees the memory when empty; otherwise keeps only what the data needs.
  void shrink_to_fit() {
    if (empty()) {
      data_.reset();
      capacity_ = begin_ = end_ = 0;
    } else if (size() < capacity_) {
      reallocate(size());
    }
  }

  // The free space after the data, at least `n` bytes and uninitialised, to read
  // into; commit() then keeps the bytes that were read. Grows geometrically, as a
  // string would.
  std::span<char> prepare(std::size_t n) {
    if (capacity_ - end_ < n) {
      if (capacity_ - size() >= n) {
        std::memmove(data_.get(), data(), size());
        end_ -= begin_;
        begin_ = 0;
      } else {
        reallocate(std::max(size() + n, 2 * capacity_));
      }
    }
    return {data_.get() + end_, capacity_ - end_};
  }
  void commit(std::size_t n) { end_ += std::min(n, capacity_ - end_); }

  void append(std::string_view bytes) {
    std::memcpy(prepare(bytes.size()).data(), bytes.data(), bytes.size());
    commit(bytes.size());
  }

 private:
  void reallocate(std::size_t capacity) {
    std::unique_ptr<char[]> fresh(new char[capacity]);  // not value-initialised: no memset
    if (!empty()) std::memcpy(fresh.get(), data(), size());
    end_ = size();
    begin_ = 0;
    data_ = std::move(fresh);
    capacity_ = capacity;
  }

  std::unique_ptr<char[]> data_;
  std::size_t capacity_ = 0;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
};

}  // namespace splitpoint::server
