// Category-tagged memory accounting. Every allocation of every backend carries a MemTag; the
// MemoryTracker keeps live and peak bytes per category (and per activation module) and an event
// timeline. Backends plug their allocator (host malloc now, a caching device allocator later) into the
// same Allocator interface.
#pragma once
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace moc {

enum class MemCategory : std::uint8_t {
  weights, gradients, optimizer_state, activations, workspace, kv_cache, count
};
constexpr std::size_t kMemCategories = static_cast<std::size_t>(MemCategory::count);

// Which module of the model owns an activation (paper §2 breakdown).
enum class ActModule : std::uint8_t { none, embedding, attention, ffn, norm, residual, head, count };
constexpr std::size_t kActModules = static_cast<std::size_t>(ActModule::count);

std::string_view category_name(MemCategory c);
std::string_view module_name(ActModule m);

struct MemTag {
  MemCategory category = MemCategory::workspace;
  ActModule module = ActModule::none;
  std::int16_t layer = -1;  // -1: not tied to a layer
};

inline MemTag weights_tag() { return {MemCategory::weights, ActModule::none, -1}; }
inline MemTag workspace_tag() { return {MemCategory::workspace, ActModule::none, -1}; }
inline MemTag activation_tag(ActModule m, int layer = -1) {
  return {MemCategory::activations, m, static_cast<std::int16_t>(layer)};
}

struct MemEvent {
  std::int64_t t_ns;     // since the tracker was created
  MemTag tag;
  std::int64_t bytes;    // +allocated / -released
};

// Totals at one moment.
struct MemSnapshot {
  std::array<std::int64_t, kMemCategories> by_category{};
  std::array<std::int64_t, kActModules> activations_by_module{};
  std::int64_t total() const;
  std::int64_t category(MemCategory c) const { return by_category[static_cast<std::size_t>(c)]; }
  std::int64_t module(ActModule m) const { return activations_by_module[static_cast<std::size_t>(m)]; }
};

class MemoryTracker {
 public:
  MemoryTracker();
  void on_alloc(const MemTag& tag, std::size_t bytes);
  void on_free(const MemTag& tag, std::size_t bytes);

  MemSnapshot live() const;
  MemSnapshot at_peak() const;          // the breakdown at the moment total live bytes peaked
  std::int64_t peak_total() const;
  std::int64_t peak_of(MemCategory c) const;  // each category's own maximum
  std::vector<MemEvent> events() const;
  // The moment event times count from (MemEvent::t_ns).
  std::chrono::steady_clock::time_point origin() const { return t0_; }
  void set_record_events(bool on);
  // Forget the peaks (live bytes stay) so a phase can be measured on its own.
  void reset_peak();

 private:
  void update_locked(const MemTag& tag, std::int64_t delta);
  mutable std::mutex mu_;
  std::chrono::steady_clock::time_point t0_;
  MemSnapshot live_, at_peak_;
  std::int64_t peak_total_ = 0;
  std::array<std::int64_t, kMemCategories> peak_by_category_{};
  bool record_events_ = true;
  std::vector<MemEvent> events_;
};

class OutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Backend allocators implement this; the tracker is owned by the allocator.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(std::size_t bytes, const MemTag& tag) = 0;  // throws OutOfMemory
  virtual void release(void* p, std::size_t bytes, const MemTag& tag) = 0;
  virtual MemoryTracker& tracker() = 0;
};

// Host memory, 64-byte aligned, with an optional limit so tests (and CPU sweeps) can provoke OOM.
class HostAllocator final : public Allocator {
 public:
  explicit HostAllocator(std::size_t limit_bytes = 0) : limit_bytes_(limit_bytes) {}
  void* allocate(std::size_t bytes, const MemTag& tag) override;
  void release(void* p, std::size_t bytes, const MemTag& tag) override;
  MemoryTracker& tracker() override { return tracker_; }
  void set_limit(std::size_t limit_bytes) { limit_bytes_ = limit_bytes; }

 private:
  std::size_t limit_bytes_;
  MemoryTracker tracker_;
};

std::string format_bytes(std::int64_t bytes);

}  // namespace moc
