// Rows written per partition (SHOW PARTITIONS rows_written,
// splitpoint_partition_writes_total): what the shards report in their CommandComplete
// tags, counted in the partitions the statement's keys mapped to (docs/metrics.md).
#include "protocol/buffer.hpp"
#include "server/cluster/proxy.hpp"
#include "server/session/session.hpp"
#include "server/net/wire.hpp"

namespace splitpoint::server {

namespace proto = splitpoint::protocol;

RowShares Session::row_shares(const routing::Route& route, std::size_t shard) const {
  if (route.cls != routing::StatementClass::write) return {};  // reads allocate nothing
  return server_.metrics().row_shares(route, shard, *runtime_->topology, *runtime_->slots);
}

// A CommandComplete from the current backend. An Execute's tag counts for the write
// portal whose BindComplete came last (an Execute follows its Bind); a simple Query's
// tags for the Query (all its statements).
void Session::count_written(std::string_view tag) {
  if (!fe_.portal_rows.empty()) {
    metrics_.add_rows(fe_.portal_rows, rows_written_by(tag));
    fe_.portal_rows.clear();  // a portal completes once
    return;
  }
  if (!fe_.expect.empty() && fe_.expect.front().type == 'Z' && !fe_.expect.front().is_sync && !fe_.expect.front().rows.empty())
    metrics_.add_rows(fe_.expect.front().rows, rows_written_by(tag));
}

// A statement the proxy ran on one shard of several (run_on): every tag it answered.
void Session::count_reply_rows(const routing::Route& route, std::size_t shard, const Reply& reply) {
  auto shares = row_shares(route, shard);
  if (shares.empty()) return;
  std::uint64_t rows = 0;
  for_each_message(reply.messages, [&](char type, std::string_view body, std::string_view) {
    if (type == 'C') rows += rows_written_by(body);
  });
  metrics_.add_rows(shares, rows);
}

// A shard's COPY is done with `rows` rows: each partition of it gets the rows the
// splitter sent it (exact when the shard's count agrees, as it does).
void Session::count_copy_rows(std::size_t distribution, std::size_t shard,
                              const std::vector<std::uint64_t>& partition_rows, std::uint64_t rows) {
  const auto& topo = *runtime_->topology;
  RowShares shares;
  for (std::uint32_t p = 0; p < partition_rows.size(); ++p) {
    auto i = runtime_->slots->slot(distribution, p);
    if (partition_rows[p] && topo.shard_of(distribution, p) == shard && i != PartitionSlots::kNone)
      shares.push_back({i, partition_rows[p]});
  }
  metrics_.add_rows(shares, rows);
}

}  // namespace splitpoint::server
