// The streaming pipeline: source (concatenate or k-way merge) -> combine groups ->
// HAVING -> DISTINCT -> buffered sort -> OFFSET/LIMIT -> drop hidden columns.
// Each stage passes at most one row on per call, so next() returns after at most one
// row read or one row emitted.
#include "routing/merge/merger.hpp"

#include <algorithm>

#include "routing/merge/merger_impl.hpp"

namespace splitpoint::routing {

using merge_detail::Row;

namespace {

using Impl = Merger::Impl;
using Step = Merger::Step;

Step error_step() { return Step{Step::Kind::error, 0, {}}; }

// Heap order: the shard whose current row comes first on top; ties to the lower shard.
struct Later {
  const Impl* m;
  bool operator()(std::size_t a, std::size_t b) const {
    const Row& x = m->current[a];
    const Row& y = m->current[b];
    int c = merge_detail::compare_keys(m->source_keys, m->source_keys.size(), x.data.data(), x.keys.data(), y.data.data(),
                                       y.keys.data());
    return c != 0 ? c > 0 : a > b;
  }
};

void malformed_row(Impl& m, std::size_t shard) {
  m.fail("08P01", "shard " + std::to_string(shard) + " sent a DataRow that is malformed or does not have " +
                      std::to_string(m.columns) + " fields");
}

enum class Pulled : std::uint8_t { row, need, end };

// The next shard row into m.in, or which shard must supply one first.
Pulled pull(Impl& m, std::size_t& need) {
  if (m.source_keys.empty()) {
    if (m.inbox_full) {
      m.in.swap(m.inbox);
      m.inbox_full = false;
      return Pulled::row;
    }
    if (m.ended == m.shards) return Pulled::end;
    need = m.awaiting = Merger::kAnyShard;
    return Pulled::need;
  }
  // Every shard must have its next row (or have ended) before the smallest is known.
  if (!m.wanted.empty()) {
    need = m.awaiting = m.wanted.back();
    return Pulled::need;
  }
  if (m.heap.empty()) return Pulled::end;
  std::pop_heap(m.heap.begin(), m.heap.end(), Later{&m});
  std::size_t i = m.heap.back();
  m.heap.pop_back();
  m.in.swap(m.current[i]);
  m.last[i].take(m.in);
  m.state[i] = Impl::ShardState::want;
  m.wanted.push_back(i);
  return Pulled::row;
}

std::optional<Step> output(Impl& m, Row& r);

// After combining: HAVING, DISTINCT, then the buffered sort or straight on.
std::optional<Step> after_combining(Impl& m, Row& r) {
  if (m.agg.having) {
    std::optional<bool> keep = m.agg.having->keep(r);
    if (!keep) {
      m.fail("XX000", "a combined value could not be read for HAVING");
      return std::nullopt;
    }
    if (!*keep) return std::nullopt;
  }
  if (m.distinct.mode != MergePlan::Distinct::none) {
    if (!merge_detail::equality_key(r, m.distinct.columns, m.result_codecs, m.distinct.key, m.decode_error)) {
      m.fail("0A000", m.decode_error);
      return std::nullopt;
    }
    if (m.distinct.mode == MergePlan::Distinct::sorted) {
      if (m.distinct.has_last && m.distinct.key == m.distinct.last) return std::nullopt;
      m.distinct.last = m.distinct.key;
      m.distinct.has_last = true;
    } else {
      if (!m.distinct.seen.insert(m.distinct.key).second) return std::nullopt;
      if (m.distinct.seen.size() > m.bounds.max_buffered) {
        m.fail("SPS02", "DISTINCT would keep more than " + std::to_string(m.bounds.max_buffered) +
                            " rows in the proxy (scatter.max_buffered_rows)");
        return std::nullopt;
      }
    }
  }
  if (!m.bounds.final_keys.empty()) {
    if (!merge_detail::decode_keys(r, m.bounds.final_keys, m.decode_error)) {
      m.fail("0A000", m.decode_error);
      return std::nullopt;
    }
    m.buffer.rows.push_back(std::move(r));
    if (m.buffer.rows.size() > m.bounds.max_buffered)
      m.fail("SPS02", "ORDER BY after combining would keep more than " + std::to_string(m.bounds.max_buffered) +
                          " rows in the proxy (scatter.max_buffered_rows)");
    return std::nullopt;
  }
  return output(m, r);
}

// OFFSET, LIMIT (WITH TIES), and the client's row without hidden columns.
std::optional<Step> output(Impl& m, Row& r) {
  if (m.emit.skipped < m.bounds.offset) {
    ++m.emit.skipped;
    return std::nullopt;
  }
  if (m.bounds.with_ties && !merge_detail::decode_keys(r, m.bounds.tie_keys, m.decode_error)) {
    m.fail("0A000", m.decode_error);
    return std::nullopt;
  }
  if (m.bounds.limit && m.emit.emitted >= *m.bounds.limit) {
    const auto& k = m.emit.last;
    bool tie = m.bounds.with_ties && k.valid &&
               merge_detail::compare_keys(m.bounds.tie_keys, m.bounds.tie_keys.size(), r.data.data(), r.keys.data(), k.bytes.data(),
                                          k.keys.data()) == 0;
    if (!tie) {
      m.finished = true;
      return std::nullopt;
    }
  }
  ++m.emit.emitted;
  if (m.bounds.with_ties) m.emit.last.take(r);
  else if (m.bounds.limit && m.emit.emitted >= *m.bounds.limit) m.finished = true;  // nothing more is needed
  if (m.hidden == 0) return Step{Step::Kind::emit, 0, r.data};
  merge_detail::start_row(m.out, m.columns - m.hidden);
  for (std::size_t c = 0; c + m.hidden < m.columns; ++c) merge_detail::append_field(m.out, r.field(c));
  return Step{Step::Kind::emit, 0, m.out};
}

std::optional<Step> close_group(Impl& m) {
  m.group.open = false;
  MergeError e;
  if (!m.agg.accumulator->finish(m.group.first, m.columns, m.group.combined, e)) {
    m.fail(e.sqlstate.empty() ? "XX000" : e.sqlstate, e.message);
    return std::nullopt;
  }
  return after_combining(m, m.group.combined);
}

void open_group(Impl& m, Row& r) {
  m.agg.accumulator->reset();
  m.group.open = true;
  m.group.first.swap(r);
  m.group.keys.take(m.group.first);
}

// A shard row: plain rows go on; aggregate rows join the open group or close it.
std::optional<Step> process(Impl& m, Row& r) {
  if (!m.agg.aggregate) return after_combining(m, r);
  bool same = m.group.open && (!m.agg.grouped || merge_detail::compare_keys(m.source_keys, m.source_keys.size(), r.data.data(),
                                                                        r.keys.data(), m.group.keys.bytes.data(),
                                                                        m.group.keys.keys.data()) == 0);
  MergeError e;
  if (same) {
    if (!m.agg.accumulator->add(r, e)) m.fail(e.sqlstate, e.message);
    return std::nullopt;
  }
  std::optional<Step> emitted;
  if (m.group.open) {
    emitted = close_group(m);
    if (m.error) return std::nullopt;
  }
  open_group(m, r);
  if (!m.agg.accumulator->add(m.group.first, e)) m.fail(e.sqlstate, e.message);
  return emitted;
}

// Every shard has ended: close the last group (an aggregate without GROUP BY always has
// one row, even over no rows at all) and start emitting the buffered sort.
std::optional<Step> flush(Impl& m) {
  std::optional<Step> s;
  if (m.agg.aggregate && !m.group.open && !m.agg.grouped) {
    m.agg.accumulator->reset();
    m.group.first = Row{};
    m.group.open = true;
  }
  if (m.agg.aggregate && m.group.open) s = close_group(m);
  if (m.error) return std::nullopt;
  if (!m.bounds.final_keys.empty()) {
    std::stable_sort(m.buffer.rows.begin(), m.buffer.rows.end(), [&](const Row& a, const Row& b) {
      return merge_detail::compare_keys(m.bounds.final_keys, m.bounds.final_keys.size(), a.data.data(), a.keys.data(), b.data.data(),
                                        b.keys.data()) < 0;
    });
    m.buffer.draining = true;
  }
  return s;
}

// A push or end_of_shard must answer the shard next() asked for.
bool accept(Impl& m, std::size_t shard) {
  bool ok = shard < m.shards && (m.awaiting == Merger::kAnyShard ? m.state[shard] != Impl::ShardState::ended
                                                                  : m.awaiting == shard);
  if (!ok) return m.fail("XX000", "merger: unexpected input from shard " + std::to_string(shard));
  if (m.awaiting == shard) m.wanted.pop_back();  // sorted merge: it was the last one wanted
  m.awaiting = Impl::kNobody;
  return true;
}

}  // namespace

Merger::Merger(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Step Merger::next() {
  Impl& m = *impl_;
  for (;;) {
    if (m.error) return error_step();
    if (m.finished) return Step{Step::Kind::done, 0, {}};
    if (m.buffer.draining) {
      if (m.buffer.at == m.buffer.rows.size()) {
        m.finished = true;
        continue;
      }
      if (std::optional<Step> s = output(m, m.buffer.rows[m.buffer.at++])) return *s;
      continue;
    }
    if (m.input_done) {
      m.finished = true;
      continue;
    }
    std::size_t need = 0;
    switch (pull(m, need)) {
      case Pulled::need: return Step{Step::Kind::need_row, need, {}};
      case Pulled::end:
        m.input_done = true;
        if (std::optional<Step> s = flush(m)) return *s;
        continue;
      case Pulled::row:
        if (std::optional<Step> s = process(m, m.in)) return *s;
        continue;
    }
  }
}

void Merger::push(std::size_t shard, std::string_view body) {
  Impl& m = *impl_;
  if (m.error || m.finished || !accept(m, shard)) return;
  Row& r = m.source_keys.empty() ? m.inbox : m.current[shard];
  if (!r.assign(body, m.columns)) {
    malformed_row(m, shard);
    return;
  }
  if (m.source_keys.empty()) {
    m.inbox_full = true;
    return;
  }
  if (!merge_detail::decode_keys(r, m.source_keys, m.decode_error)) {
    m.fail("0A000", m.decode_error);
    return;
  }
  const merge_detail::KeySnapshot& prev = m.last[shard];
  if (prev.valid && merge_detail::compare_keys(m.source_keys, m.source_keys.size(), r.data.data(), r.keys.data(),
                                               prev.bytes.data(), prev.keys.data()) < 0) {
    // Merging would interleave wrongly; typically a column collation the proxy does not know.
    m.fail("XX000", "shard " + std::to_string(shard) +
                        " returned rows out of the order the proxy merges by (a column collation other than the "
                        "database's? add COLLATE to the ORDER BY)");
    return;
  }
  m.state[shard] = Impl::ShardState::has_row;
  m.heap.push_back(shard);
  std::push_heap(m.heap.begin(), m.heap.end(), Later{&m});
}

bool Merger::passes_through() const {
  const Impl& m = *impl_;
  return m.source_keys.empty() && !m.agg.aggregate && m.distinct.mode == MergePlan::Distinct::none &&
         m.bounds.final_keys.empty() && !m.bounds.limit && m.bounds.offset == 0 && m.hidden == 0;
}

void Merger::passed(std::size_t shard, std::string_view body) {
  Impl& m = *impl_;
  if (m.error || m.finished || !accept(m, shard)) return;
  const bool columns_match = body.size() >= 2 && ((static_cast<std::size_t>(static_cast<unsigned char>(body[0])) << 8) |
                                                  static_cast<unsigned char>(body[1])) == m.columns;
  if (!columns_match) return malformed_row(m, shard);
  ++m.emit.emitted;
}

void Merger::end_of_shard(std::size_t shard) {
  Impl& m = *impl_;
  if (m.error || m.finished || !accept(m, shard)) return;
  m.state[shard] = Impl::ShardState::ended;
  ++m.ended;
}
Merger::~Merger() = default;

std::uint64_t Merger::rows_emitted() const { return impl_->emit.emitted; }
const MergeError& Merger::error() const { return *impl_->error; }

}  // namespace splitpoint::routing
