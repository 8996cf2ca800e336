// Temporary stand-in while routing/router.cpp is written: every statement may go to
// any shard. Excluded from the build as soon as router.cpp exists (CMakeLists.txt).
#include "routing/router.hpp"

namespace splitpoint::routing {

class Plan {};
struct Router::Impl {};

Router::Router(const config::Config&) {}
Router::~Router() = default;

std::shared_ptr<const Plan> Router::plan(std::string_view, std::span<const std::int32_t>) const {
  return std::make_shared<Plan>();
}

Route Router::route(const Plan&, const BoundParams&, const SessionRouting&, const ShapeLookup&) const {
  return Route{};
}

Route Router::route_simple(std::string_view, const SessionRouting&, const ShapeLookup&) { return Route{}; }

std::vector<std::string> Router::tables_changed_by(const Plan&) const { return {}; }

}  // namespace splitpoint::routing
