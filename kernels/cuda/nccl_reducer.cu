#include "kernels/cuda/nccl.h"

#include <cuda_runtime.h>

#include <cstring>
#include <stdexcept>
#include <string>

#ifdef MOCBENCH_HAVE_NCCL
#include <nccl.h>
#endif

namespace moc::cuda {

#ifdef MOCBENCH_HAVE_NCCL
namespace {

void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw std::runtime_error(std::string("NCCL: ") + what + ": " + ncclGetErrorString(r));
}
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    default: throw std::invalid_argument("NCCL: all_reduce_mean takes f32 or bf16 tensors");
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Ops& ops, const std::vector<unsigned char>& id, int rank, int world)
      : ops_(&ops), rank_(rank), world_(world) {
    if (id.size() != sizeof(ncclUniqueId)) throw std::invalid_argument("NCCL: the unique id must be 128 bytes");
    ncclUniqueId uid;
    std::memcpy(uid.internal, id.data(), sizeof uid.internal);
    check(ncclCommInitRank(&comm_, world, uid, rank), "ncclCommInitRank");
    check(cudaMalloc(&loss_, sizeof(double)), "cudaMalloc (loss)");
  }
  ~NcclCommunicator() override {
    cudaFree(loss_);
    ncclCommDestroy(comm_);
  }
  void all_reduce_mean(const std::vector<Tensor*>& tensors) override {
    auto s = static_cast<cudaStream_t>(ops_->stream());
    check(ncclGroupStart(), "ncclGroupStart");
    for (Tensor* t : tensors)
      check(ncclAllReduce(t->raw(), t->raw(), static_cast<std::size_t>(t->numel()), nccl_type(t->dtype()), ncclAvg, comm_, s),
            "ncclAllReduce");
    check(ncclGroupEnd(), "ncclGroupEnd");
  }
  double mean(double local) override {
    auto s = static_cast<cudaStream_t>(ops_->stream());
    double out = 0;
    check(cudaMemcpyAsync(loss_, &local, sizeof local, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (loss)");
    check(ncclAllReduce(loss_, loss_, 1, ncclFloat64, ncclAvg, comm_, s), "ncclAllReduce (loss)");
    check(cudaMemcpyAsync(&out, loss_, sizeof out, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync (loss)");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize (loss)");
    return out;
  }
  int rank() const override { return rank_; }
  int world() const override { return world_; }

 private:
  Ops* ops_;
  int rank_, world_;
  ncclComm_t comm_ = nullptr;
  double* loss_ = nullptr;
};

}  // namespace

bool nccl_available() { return true; }

std::vector<unsigned char> nccl_unique_id() {
  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  return std::vector<unsigned char>(id.internal, id.internal + sizeof id.internal);
}

std::unique_ptr<Communicator> make_nccl_communicator(Ops& ops, const std::vector<unsigned char>& id, int rank, int world) {
  return std::make_unique<NcclCommunicator>(ops, id, rank, world);
}
#else
bool nccl_available() { return false; }
std::vector<unsigned char> nccl_unique_id() { throw std::runtime_error("this build has no NCCL"); }
std::unique_ptr<Communicator> make_nccl_communicator(Ops&, const std::vector<unsigned char>&, int, int) {
  throw std::runtime_error("this build has no NCCL");
}
#endif

}  // namespace moc::cuda
