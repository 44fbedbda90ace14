#include "kernels/memory.h"

#include <cstdio>
#include <cstdlib>
#include <new>

namespace moc {

std::string_view category_name(MemCategory c) {
  switch (c) {
    case MemCategory::weights: return "weights";
    case MemCategory::gradients: return "gradients";
    case MemCategory::optimizer_state: return "optimizer_state";
    case MemCategory::activations: return "activations";
    case MemCategory::workspace: return "workspace";
    case MemCategory::kv_cache: return "kv_cache";
    case MemCategory::count: break;
  }
  return "?";
}

std::string_view module_name(ActModule m) {
  switch (m) {
    case ActModule::none: return "none";
    case ActModule::embedding: return "embedding";
    case ActModule::attention: return "attention";
    case ActModule::ffn: return "ffn";
    case ActModule::norm: return "norm";
    case ActModule::residual: return "residual";
    case ActModule::head: return "head";
    case ActModule::count: break;
  }
  return "?";
}

std::int64_t MemSnapshot::total() const {
  std::int64_t t = 0;
  for (auto b : by_category) t += b;
  return t;
}

MemoryTracker::MemoryTracker() : t0_(std::chrono::steady_clock::now()) {}

void MemoryTracker::update_locked(const MemTag& tag, std::int64_t delta) {
  auto c = static_cast<std::size_t>(tag.category);
  live_.by_category[c] += delta;
  if (tag.category == MemCategory::activations)
    live_.activations_by_module[static_cast<std::size_t>(tag.module)] += delta;
  if (live_.by_category[c] > peak_by_category_[c]) peak_by_category_[c] = live_.by_category[c];
  auto total = live_.total();
  if (total > peak_total_) {
    peak_total_ = total;
    at_peak_ = live_;
  }
  if (record_events_) {
    auto now = std::chrono::steady_clock::now();
    events_.push_back({std::chrono::duration_cast<std::chrono::nanoseconds>(now - t0_).count(), tag, delta});
  }
}

void MemoryTracker::on_alloc(const MemTag& tag, std::size_t bytes) {
  std::lock_guard lk(mu_);
  update_locked(tag, static_cast<std::int64_t>(bytes));
}

void MemoryTracker::on_free(const MemTag& tag, std::size_t bytes) {
  std::lock_guard lk(mu_);
  update_locked(tag, -static_cast<std::int64_t>(bytes));
}

MemSnapshot MemoryTracker::live() const { std::lock_guard lk(mu_); return live_; }
MemSnapshot MemoryTracker::at_peak() const { std::lock_guard lk(mu_); return at_peak_; }
std::int64_t MemoryTracker::peak_total() const { std::lock_guard lk(mu_); return peak_total_; }
std::int64_t MemoryTracker::peak_of(MemCategory c) const {
  std::lock_guard lk(mu_);
  return peak_by_category_[static_cast<std::size_t>(c)];
}
std::vector<MemEvent> MemoryTracker::events() const { std::lock_guard lk(mu_); return events_; }
void MemoryTracker::set_record_events(bool on) { std::lock_guard lk(mu_); record_events_ = on; }
void MemoryTracker::reset_peak() {
  std::lock_guard lk(mu_);
  peak_total_ = live_.total();
  at_peak_ = live_;
  peak_by_category_ = live_.by_category;
}

void* HostAllocator::allocate(std::size_t bytes, const MemTag& tag) {
  if (bytes == 0) bytes = 1;
  if (limit_bytes_ && tracker_.live().total() + static_cast<std::int64_t>(bytes) >
                          static_cast<std::int64_t>(limit_bytes_))
    throw OutOfMemory("host memory limit of " + format_bytes(static_cast<std::int64_t>(limit_bytes_)) +
                      " exceeded allocating " + format_bytes(static_cast<std::int64_t>(bytes)) + " for " +
                      std::string(category_name(tag.category)));
  std::size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw OutOfMemory("host allocation of " + format_bytes(static_cast<std::int64_t>(bytes)) + " failed");
  tracker_.on_alloc(tag, bytes);
  return p;
}

void HostAllocator::release(void* p, std::size_t bytes, const MemTag& tag) {
  if (bytes == 0) bytes = 1;
  std::free(p);
  tracker_.on_free(tag, bytes);
}

std::string format_bytes(std::int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while ((v >= 1024.0 || v <= -1024.0) && u < 4) { v /= 1024.0; ++u; }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", v, units[u]);
  return buf;
}

}  // namespace moc
