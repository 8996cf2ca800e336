// server/net/input_buffer.hpp: reads go into uninitialised space after the data, bytes
// are consumed from the front, an empty buffer gives its memory back.
#include <catch2/catch.hpp>

#include <string>

#include "server/net/input_buffer.hpp"

using splitpoint::server::InputBuffer;

namespace {

// What a socket read does: fills part of the offered space.
void read(InputBuffer& b, std::string_view bytes, std::size_t min_chunk) {
  auto space = b.prepare(min_chunk);
  REQUIRE(space.size() >= min_chunk);
  REQUIRE(space.size() >= bytes.size());
  std::copy(bytes.begin(), bytes.end(), space.begin());
  b.commit(bytes.size());
}

}  // namespace

TEST_CASE("an input buffer reads, consumes from the front and compacts", "[input_buffer]") {
  InputBuffer b;
  CHECK(b.empty());
  CHECK(b.capacity() == 0);
  read(b, "hello world", 16);
  CHECK(std::string_view(b) == "hello world");
  CHECK(b.capacity() == 16);
  b.erase(0, 6);
  CHECK(std::string_view(b) == "world");
  // 11 bytes free after compacting: no growth, the data moves to the front.
  read(b, "!", 11);
  CHECK(std::string_view(b) == "world!");
  CHECK(b.capacity() == 16);
  // More than fits: grows at least twofold, keeps the data.
  read(b, std::string(20, 'x'), 20);
  CHECK(b.size() == 26);
  CHECK(std::string_view(b).substr(0, 6) == "world!");
  CHECK(b.capacity() >= 32);
  b.erase(0, 100);  // clipped, as std::string::erase
  CHECK(b.empty());
}

TEST_CASE("an input buffer erases in the middle and converts like a string", "[input_buffer]") {
  InputBuffer b;
  b.append("abcdef");
  b.erase(0, 1);
  b.erase(2, 2);  // "bcdef" without "de"
  CHECK(std::string_view(b) == "bcf");
  b.erase(1);
  CHECK(std::string_view(b) == "b");
  b.append("xyz");
  std::string s(b, 1, 2);  // as server/session/execute/copy.cpp copies a frame
  CHECK(s == "xy");
  std::string out;
  out.append(b, 2, 2);
  CHECK(out == "yz");
}

TEST_CASE("an empty input buffer gives its memory back on shrink_to_fit", "[input_buffer]") {
  InputBuffer b;
  read(b, "0123456789", 16384);
  CHECK(b.capacity() >= 16384);
  b.shrink_to_fit();  // not empty: keeps the data only
  CHECK(b.capacity() == 10);
  CHECK(std::string_view(b) == "0123456789");
  b.erase(0, 10);
  b.shrink_to_fit();
  CHECK(b.capacity() == 0);
  read(b, "x", 2048);
  CHECK(b.capacity() == 2048);
  InputBuffer moved = std::move(b);
  CHECK(std::string_view(moved) == "x");
  CHECK(b.empty());
  CHECK(b.capacity() == 0);
}
