// Data-parallel gradient reduction over NCCL (issue 15, part). Plain C++: callers need no CUDA or NCCL
// headers. Each rank is one process with one GPU; a communicator is made from the 128-byte unique id rank 0
// created (app/harness/dist_launch.h carries it between processes).
#pragma once
#include <memory>
#include <vector>

#include "kernels/comm.h"
#include "kernels/ops.h"

namespace moc::cuda {

// True when this build links NCCL.
bool nccl_available();
// A new unique id (rank 0 makes it; the others receive it). Throws std::runtime_error naming the NCCL call.
std::vector<unsigned char> nccl_unique_id();
// Rank `rank` of `world` on `ops`' device and stream: ncclAllReduce with ncclAvg, one NCCL group per call
// (values in f64 for mean()). Creating it is collective: every rank calls it with the same id.
std::unique_ptr<Communicator> make_nccl_communicator(Ops& ops, const std::vector<unsigned char>& id, int rank, int world);

}  // namespace moc::cuda
