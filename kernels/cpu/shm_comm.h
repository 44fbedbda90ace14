// The CPU backend's communicator between processes of one machine (issue 15): mocbench's launcher creates a
// shared-memory file with a process-shared barrier and one slot per rank; each worker maps it. Means are
// summed in f64 in rank order, so every rank gets the same bits and the result equals LocalCommunicator's.
// It exists so that the multi-process launcher and the data-parallel step run end to end on machines without
// GPUs (CI); it is a reference, not a fast path: data parallelism on GPUs goes through NCCL.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "kernels/comm.h"
#include "kernels/ops.h"

namespace moc {

// Creates (or replaces) the file at `path` for `world` ranks with `slot_bytes` per rank and initializes its
// barrier. The launcher calls it once, before starting the workers.
void create_shm_comm_file(const std::string& path, int world, std::size_t slot_bytes = std::size_t{8} << 20);
// Rank `rank`'s end; throws std::runtime_error when the file is missing or made for another world size.
std::unique_ptr<Communicator> open_shm_communicator(const std::string& path, int rank, int world, Ops& ops);

}  // namespace moc
