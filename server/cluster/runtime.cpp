#include "server/cluster/runtime.hpp"

#include <algorithm>
#include <atomic>
#include <stdexcept>

#include "protocol/md5.hpp"

namespace splitpoint::server {

std::shared_ptr<Pool> ShardPools::get(const std::string& client_user, const std::string& client_password,
                                      const std::string& client_database, std::optional<std::size_t> host) {
  BackendTarget t;
  t.shard = shard_.name;
  t.host_index = host ? *host : hosts_->primary();
  t.host = hosts_->endpoint(t.host_index).host;
  t.port = hosts_->endpoint(t.host_index).port;
  t.user = shard_.user.empty() ? client_user : shard_.user;
  t.password = shard_.password.empty() ? client_password : shard_.password;
  t.database = shard_.database.empty() ? client_database : shard_.database;
  t.connect_timeout = connect_timeout_;
  t.tls = shard_.tls;
  std::lock_guard lock(mu_);
  if (shard_.user.empty() && identities_.size() < kMaxIdentities) {
    Identity who{client_user, client_password, client_database};
    if (std::find(identities_.begin(), identities_.end(), who) == identities_.end())
      identities_.push_back(std::move(who));
  }
  auto& pool = pools_[{t.host_index, t.user, t.database}];
  if (!pool) {
    pool = std::make_shared<Pool>(std::move(t), shard_.pool_size);
    if (paused_) pool->set_paused(true);
  }
  return pool;
}

void ShardPools::set_paused(bool paused) {
  std::lock_guard lock(mu_);
  paused_ = paused;
  for (auto& [k, p] : pools_) p->set_paused(paused);
}

bool ShardPools::paused() const {
  std::lock_guard lock(mu_);
  return paused_;
}

std::vector<ShardPools::Identity> ShardPools::identities() const {
  std::lock_guard lock(mu_);
  return identities_;
}

std::vector<std::shared_ptr<Pool>> ShardPools::all() const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<Pool>> v;
  for (auto& [k, p] : pools_) v.push_back(p);
  return v;
}

bool ShardPools::same_definition(const config::Shard& o, std::chrono::milliseconds connect_timeout,
                                 const config::Health& health) const {
  return shard_.host == o.host && shard_.port == o.port && hosts_->same_hosts(o, health) &&
         shard_.database == o.database &&
         shard_.user == o.user && shard_.password == o.password && shard_.pool_size == o.pool_size &&
         shard_.tls == o.tls && connect_timeout_ == connect_timeout;
}

std::shared_ptr<const routing::TableShape> ShapeCache::find(std::string_view table) const {
  std::lock_guard lock(mu_);
  auto it = shapes_.find(table);
  return it == shapes_.end() ? nullptr : it->second;
}

const routing::TableShape* ShapeCache::find_kept(std::string_view table, KeptShapes& keep) const {
  for (const auto& k : keep)
    if (k->table == table) return k.get();
  auto found = find(table);
  if (!found) return nullptr;
  keep.push_back(found);
  return found.get();
}

std::shared_ptr<const routing::TableShape> ShapeCache::put(const std::string& table, routing::TableShape shape) {
  shape.table = table;
  auto made = std::make_shared<const routing::TableShape>(std::move(shape));
  std::lock_guard lock(mu_);
  shapes_[table] = made;
  return made;
}

std::string ShapeCache::collation() const {
  std::lock_guard lock(mu_);
  return collation_;
}

void ShapeCache::set_collation(std::string c) {
  std::lock_guard lock(mu_);
  collation_ = std::move(c);
}

std::optional<KeyCache::Source> KeyCache::source(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = sources_.find(key);
  if (it == sources_.end()) return std::nullopt;
  return it->second;
}

void KeyCache::set_source(const std::string& key, Source s) {
  std::lock_guard lock(mu_);
  sources_[key] = std::move(s);
}

std::vector<std::string> KeyCache::take(const std::string& key, std::size_t n) {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  auto it = blocks_.find(key);
  if (it == blocks_.end()) return out;
  while (out.size() < n && !it->second.empty()) {
    out.push_back(std::move(it->second.front()));
    it->second.pop_front();
  }
  return out;
}

void KeyCache::add(const std::string& key, std::vector<std::string> values, std::size_t from) {
  std::lock_guard lock(mu_);
  auto& block = blocks_[key];
  for (std::size_t i = from; i < values.size(); ++i) block.push_back(std::move(values[i]));
}

void KeyCache::put_back(const std::string& key, std::vector<std::string> values) {
  std::lock_guard lock(mu_);
  auto& block = blocks_[key];
  block.insert(block.begin(), std::make_move_iterator(values.begin()), std::make_move_iterator(values.end()));
}

void KeyCache::clear() {
  std::lock_guard lock(mu_);
  sources_.clear();
  blocks_.clear();
}

void ShapeCache::clear() {
  std::lock_guard lock(mu_);
  shapes_.clear();
  scatter_plans_.clear();
}

static UserAuth make_user_auth(const config::User& u) {
  namespace proto = splitpoint::protocol;
  UserAuth a;
  a.name = u.name;
  a.admin = u.admin;
  a.allow = u.allow;
  if (auto v = proto::scram::parse_verifier(u.password)) {
    a.scram = *v;
  } else if (proto::md5::is_verifier(u.password)) {
    a.md5 = u.password;
  } else {
    a.plaintext = u.password;
    a.md5 = proto::md5::verifier(u.name, u.password);
    a.scram = proto::scram::make_verifier(u.password);
  }
  return a;
}

std::shared_ptr<const Runtime> make_runtime(config::Config config, const Runtime* previous,
                                            std::shared_ptr<const MoveView> moves, bool continue_lineage) {
  static std::atomic<std::uint64_t> lineages{0};
  auto rt = std::make_shared<Runtime>();
  if (continue_lineage && previous) {
    rt->lineage = previous->lineage;
    rt->shapes = previous->shapes;
    rt->keys = previous->keys;
  } else {
    rt->lineage = ++lineages;
  }
  if (moves) rt->moves = std::move(moves);
  for (const auto& u : config.users) rt->users.emplace(u.name, make_user_auth(u));
  for (std::size_t i = 0; i < config.shards.size(); ++i) {
    const auto& s = config.shards[i];
    std::shared_ptr<ShardPools> pools;
    std::shared_ptr<ShardHosts> hosts;  // what the checks saw is kept while the hosts stay
    if (previous) {
      for (const auto& old : previous->shards) {
        if (old->shard().name != s.name) continue;
        if (old->same_definition(s, config.timeouts.server_connect, config.health)) pools = old;
        if (old->hosts().same_hosts(s, config.health)) hosts = old->hosts_ptr();
      }
    }
    if (!pools) pools = std::make_shared<ShardPools>(s, config.timeouts.server_connect, config.health, hosts);
    rt->standbys = rt->standbys || pools->hosts().has_standbys();
    rt->shards.push_back(std::move(pools));
  }
  if (const auto& c = config.scatter.combine_database) {
    if (previous && previous->combine && previous->combine->same_definition(*c, config.timeouts.server_connect, config.health))
      rt->combine = previous->combine;
    else
      rt->combine = std::make_shared<ShardPools>(*c, config.timeouts.server_connect, config.health);
  }
  if (config.tls) {
    auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
    ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                     asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                     asio::ssl::context::no_tlsv1_1);
    error_code ec;
    ctx->use_certificate_chain_file(config.tls->cert, ec);
    if (ec) throw std::runtime_error("cannot load TLS certificate " + config.tls->cert + ": " + ec.message());
    ctx->use_private_key_file(config.tls->key, asio::ssl::context::pem, ec);
    if (ec) throw std::runtime_error("cannot load TLS key " + config.tls->key + ": " + ec.message());
    rt->tls = std::move(ctx);
  }
  rt->config = std::move(config);
  rt->router = std::make_shared<routing::Router>(rt->config);
  rt->topology = std::make_shared<routing::Topology>(rt->config);
  rt->slots = previous ? std::make_shared<PartitionSlots>(*rt->topology, *previous->slots)
                       : std::make_shared<PartitionSlots>(*rt->topology);
  return rt;
}

}  // namespace splitpoint::server
