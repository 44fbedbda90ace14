#include "model/grad_buckets.h"

#include <stdexcept>
#include <string>

namespace moc {

std::vector<GradBucket> plan_buckets(const std::vector<std::size_t>& ready_order, const std::vector<std::size_t>& bytes,
                                     std::size_t cap_bytes, std::size_t align) {
  if (ready_order.size() != bytes.size())
    throw std::invalid_argument("plan_buckets: " + std::to_string(ready_order.size()) + " indices for " +
                                std::to_string(bytes.size()) + " parameters");
  if (align == 0 || (align & (align - 1)) != 0) throw std::invalid_argument("plan_buckets: align must be a power of two");
  std::vector<char> seen(bytes.size(), 0);
  for (std::size_t i : ready_order) {
    if (i >= bytes.size() || seen[i]) throw std::invalid_argument("plan_buckets: ready_order is not a permutation");
    seen[i] = 1;
  }
  auto up = [&](std::size_t n) { return (n + align - 1) & ~(align - 1); };
  std::vector<GradBucket> out;
  GradBucket cur;
  for (std::size_t i : ready_order) {
    const std::size_t at = up(cur.bytes);
    if (!cur.params.empty() && at + bytes[i] > cap_bytes) {
      out.push_back(std::move(cur));
      cur = GradBucket{};
    }
    const std::size_t off = up(cur.bytes);
    cur.params.push_back(i);
    cur.offsets.push_back(off);
    cur.bytes = off + bytes[i];
  }
  if (!cur.params.empty()) out.push_back(std::move(cur));
  for (auto& b : out) b.bytes = up(b.bytes);
  return out;
}

}  // namespace moc
