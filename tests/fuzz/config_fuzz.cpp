// libFuzzer target for the configuration loader (SPEC §2): any text as a YAML file.
// Properties: nothing crashes; a file is either loaded or refused with at least one
// error, each with a line within the file (0 = the whole file); what loads is
// consistent enough for the router (every shard index in range, placements of hash
// distributions as long as their partition count) and builds one.
// Build and run: tests/fuzz/run
#include <algorithm>
#include <cstdint>
#include <string>

#include "config/config.hpp"
#include "routing/router.hpp"
#include "tests/fuzz/fuzz_world.hpp"

using namespace splitpoint;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 8192) return 0;
  const std::string yaml(reinterpret_cast<const char*>(data), size);
  config::LoadResult r = config::load_string(yaml);
  if (r.config.has_value() == !r.errors.empty()) fuzz::fail("config_fuzz", "loaded and refused at once, or neither");
  const int lines = static_cast<int>(std::count(yaml.begin(), yaml.end(), '\n')) + 1;
  for (const auto& e : r.errors) {
    if (e.line < 0 || e.line > lines + 1) fuzz::fail("config_fuzz", "error line outside the file: " + e.message);
    if (e.message.empty()) fuzz::fail("config_fuzz", "error without a message");
  }
  if (!r.config) return 0;
  const config::Config& c = *r.config;
  const std::size_t shards = c.shards.size();
  if (shards == 0) fuzz::fail("config_fuzz", "loaded without shards");
  for (const auto& d : c.distributions) {
    if (d.method == config::Method::hash && d.placement.size() != static_cast<std::size_t>(d.partitions))
      fuzz::fail("config_fuzz", "placement size differs from the partition count");
    for (auto s : d.placement)
      if (s >= shards) fuzz::fail("config_fuzz", "placement shard out of range");
    for (const auto& range : d.ranges)
      if (range.shard >= shards) fuzz::fail("config_fuzz", "range shard out of range");
    for (const auto& l : d.lists)
      if (l.shard >= shards) fuzz::fail("config_fuzz", "list shard out of range");
    if (d.default_shard && *d.default_shard >= shards) fuzz::fail("config_fuzz", "default shard out of range");
  }
  if (c.scatter.combine_shard >= shards || (c.catalog_shard && *c.catalog_shard >= shards))
    fuzz::fail("config_fuzz", "combine or catalog shard out of range");
  for (const auto& s : c.shards)
    if (s.all_hosts().empty()) fuzz::fail("config_fuzz", "a shard without a host");
  routing::Router router(c);  // what a reload does with it
  (void)router.route_simple("SELECT 1", routing::SessionRouting{}, fuzz::fuzz_shapes());
  return 0;
}
