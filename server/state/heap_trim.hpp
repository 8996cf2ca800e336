// When to hand freed heap back to the system after many clients left
// (docs/performance.md, "Idle connections"). glibc keeps what is freed inside the
// process: after a burst of disconnections the heap is mostly free chunks between a
// few live ones, and RSS stays at its peak until malloc_trim(0) returns the free pages
// (madvise). A trim walks the whole heap, so it is done only once many sessions have
// ended: per worker thread, when at least kMinDrop sessions, and at least half of
// those there were at the peak since the last trim, are gone. Pure: unit-tested.
#pragma once

#include <cstddef>

namespace splitpoint::server {

class TrimPolicy {
 public:
  static constexpr std::size_t kMinDrop = 256;

  // The sessions on this thread now, after one started or ended: true when it is time
  // to trim.
  bool note(std::size_t live) {
    if (live >= peak_) {
      peak_ = live;
      return false;
    }
    if (peak_ - live < kMinDrop || live > peak_ / 2) return false;
    peak_ = live;
    return true;
  }

 private:
  std::size_t peak_ = 0;
};

}  // namespace splitpoint::server
