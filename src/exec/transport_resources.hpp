#pragma once
// What a transport keeps per context (a UCX worker and its endpoints, an NCCL communicator):
// made by the first executor that needs it, at plan construction, and kept by the context for
// its later plans. The context holds every transport's resources behind one interface, by the
// transport's name, so that adding a transport changes nothing in the context.

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace halox::detail {

/// Per-context state of one transport; each transport derives its own.
class transport_resources {
public:
  transport_resources() = default;
  virtual ~transport_resources() = default;
  transport_resources(transport_resources const&) = delete;
  transport_resources& operator=(transport_resources const&) = delete;
};

/// The transports' resources of one context, by transport name ("ucx", "nccl"). Filled at plan
/// construction only, in the same order on every rank (plans are built collectively).
class transport_slots {
public:
  /// The resources of `name`, or null when none were made (or they are of another type).
  template <class T> [[nodiscard]] std::shared_ptr<T> find(std::string_view name) const {
    entry const* e = lookup(name);
    return e ? std::dynamic_pointer_cast<T>(e->resources) : nullptr;
  }
  /// True when `name`'s resources were made.
  [[nodiscard]] bool started(std::string_view name) const {
    entry const* e = lookup(name);
    return e && e->resources;
  }
  /// Keeps `r` as `name`'s resources.
  void keep(std::string_view name, std::shared_ptr<transport_resources> r) {
    slot(name).resources = std::move(r);
  }
  /// Remembers that `name` could not start on this context (the same reason on every rank):
  /// later plans fail with it at once instead of trying again.
  void fail(std::string_view name, std::string why) { slot(name).failure = std::move(why); }
  /// Why `name` could not start; empty when it did or was never tried.
  [[nodiscard]] std::string failure(std::string_view name) const {
    entry const* e = lookup(name);
    return e ? e->failure : std::string();
  }
  /// "started", "not started" or "failed: <why>", for context::describe().
  [[nodiscard]] std::string state(std::string_view name) const {
    if (started(name)) return "started";
    std::string const why = failure(name);
    return why.empty() ? "not started" : "failed: " + why;
  }

private:
  struct entry {
    std::string name;
    std::shared_ptr<transport_resources> resources;
    std::string failure;
  };
  [[nodiscard]] entry const* lookup(std::string_view name) const {
    for (auto const& e : entries_)
      if (e.name == name) return &e;
    return nullptr;
  }
  entry& slot(std::string_view name) {
    for (auto& e : entries_)
      if (e.name == name) return e;
    return entries_.emplace_back(entry{std::string(name), nullptr, {}});
  }
  std::vector<entry> entries_;
};

} // namespace halox::detail
