#include "kernels/cpu/shm_comm.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace moc {

namespace {

constexpr std::uint64_t kMagic = 0x6d6f6373686d3031ull;  // "mocshm01"

struct Header {
  std::uint64_t magic;
  std::int64_t world;
  std::int64_t slot_bytes;
  pthread_barrier_t barrier;
};

std::size_t header_bytes() { return (sizeof(Header) + 63) & ~std::size_t{63}; }

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class ShmCommunicator final : public Communicator {
 public:
  ShmCommunicator(void* base, std::size_t size, int rank, int world, Ops& ops)
      : Communicator(ops, rank, world), base_(base), size_(size) {
    hdr_ = static_cast<Header*>(base);
    slot_floats_ = static_cast<std::size_t>(hdr_->slot_bytes) / sizeof(double);
  }
  ~ShmCommunicator() override { munmap(base_, size_); }

  void broadcast(const std::vector<CommItem>& items) override {
    for (const auto& it : items) {
      std::vector<float> v = it.root == rank_ ? ops_->download_f32(*it.tensor) : std::vector<float>(static_cast<std::size_t>(it.tensor->numel()));
      for (std::size_t at = 0; at < v.size(); at += slot_floats_) {
        const std::size_t n = std::min(slot_floats_, v.size() - at);
        if (it.root == rank_) std::copy(v.begin() + static_cast<std::ptrdiff_t>(at), v.begin() + static_cast<std::ptrdiff_t>(at + n), slot(rank_));
        sync();
        if (it.root != rank_) std::copy(slot(it.root), slot(it.root) + n, v.begin() + static_cast<std::ptrdiff_t>(at));
        sync();
      }
      if (it.root != rank_) ops_->upload_f32(*it.tensor, v);
    }
  }
  std::vector<double> all_gather(const std::vector<double>& values) override {
    std::vector<double> out(values.size() * static_cast<std::size_t>(world_));
    std::size_t at = 0;
    do {  // at least once: an empty gather is still a meeting point
      const std::size_t n = std::min(slot_floats_, values.size() - at);
      std::copy(values.begin() + static_cast<std::ptrdiff_t>(at), values.begin() + static_cast<std::ptrdiff_t>(at + n), slot(rank_));
      sync();
      for (int r = 0; r < world_; ++r)
        std::copy(slot(r), slot(r) + n, out.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * values.size() + at));
      sync();
      at += n;
    } while (at < values.size());
    return out;
  }
 protected:
  void reduce_mean(const std::vector<Tensor*>& tensors, int root) override {
    const double t0 = now_ms();
    for (Tensor* t : tensors) {
      std::vector<float> v = ops_->download_f32(*t);
      times_.bytes += static_cast<double>(t->nbytes());
      for (std::size_t at = 0; at < v.size(); at += slot_floats_) {
        const std::size_t n = std::min(slot_floats_, v.size() - at);
        std::copy(v.begin() + static_cast<std::ptrdiff_t>(at), v.begin() + static_cast<std::ptrdiff_t>(at + n), slot(rank_));
        sync();
        if (root < 0 || root == rank_)
          for (std::size_t j = 0; j < n; ++j) {
            double s = 0;
            for (int r = 0; r < world_; ++r) s += slot(r)[j];
            v[at + j] = static_cast<float>(s / world_);
          }
        sync();
      }
      if (root < 0 || root == rank_) ops_->upload_f32(*t, v);
    }
    const double dt = now_ms() - t0;
    times_.busy_ms += dt;
    times_.exposed_ms += dt;
    ++times_.calls;
  }

 private:
  // Slots hold doubles: f32 values widen exactly, and all_gather's doubles pass unchanged.
  double* slot(int r) {
    return reinterpret_cast<double*>(static_cast<char*>(base_) + header_bytes() +
                                     static_cast<std::size_t>(r) * static_cast<std::size_t>(hdr_->slot_bytes));
  }
  void sync() {
    const int rc = pthread_barrier_wait(&hdr_->barrier);
    if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD) throw std::runtime_error("shared-memory barrier failed");
  }
  void* base_;
  std::size_t size_;
  Header* hdr_;
  std::size_t slot_floats_ = 0;
};

}  // namespace

void create_shm_comm_file(const std::string& path, int world, std::size_t slot_bytes) {
  if (world < 1) throw std::invalid_argument("create_shm_comm_file: world must be at least 1");
  slot_bytes = std::max<std::size_t>(slot_bytes / sizeof(double) * sizeof(double), sizeof(double));
  const std::size_t size = header_bytes() + slot_bytes * static_cast<std::size_t>(world);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) fail("cannot create", path);
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    ::close(fd);
    fail("cannot size", path);
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) fail("cannot map", path);
  auto* h = static_cast<Header*>(base);
  h->world = world;
  h->slot_bytes = static_cast<std::int64_t>(slot_bytes);
  pthread_barrierattr_t attr;
  pthread_barrierattr_init(&attr);
  pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  const int rc = pthread_barrier_init(&h->barrier, &attr, static_cast<unsigned>(world));
  pthread_barrierattr_destroy(&attr);
  if (rc != 0) {
    munmap(base, size);
    throw std::runtime_error("cannot initialize the barrier in " + path);
  }
  h->magic = kMagic;  // last: a worker that sees it sees a complete header
  msync(base, size, MS_SYNC);
  munmap(base, size);
}

std::unique_ptr<Communicator> open_shm_communicator(const std::string& path, int rank, int world, Ops& ops) {
  const int fd = ::open(path.c_str(), O_RDWR);
  if (fd < 0) fail("cannot open the shared-memory file", path);
  Header h{};
  if (pread(fd, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h) || h.magic != kMagic) {
    ::close(fd);
    throw std::runtime_error(path + " is not a mocbench shared-memory communicator file");
  }
  if (h.world != world || rank < 0 || rank >= world) {
    ::close(fd);
    throw std::runtime_error(path + " was made for " + std::to_string(h.world) + " ranks, not rank " + std::to_string(rank) +
                             " of " + std::to_string(world));
  }
  const std::size_t size = header_bytes() + static_cast<std::size_t>(h.slot_bytes) * static_cast<std::size_t>(world);
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) fail("cannot map", path);
  return std::make_unique<ShmCommunicator>(base, size, rank, world, ops);
}

}  // namespace moc
