// Data-parallel runs (issue 15): how the processes of one run find each other. One process per GPU;
// the model and ops stay single-GPU, and ranks are joined by an NCCL communicator made from one unique id.
//
// The environment contract (read_dist_env), first match wins:
//   mocbench's own launcher   MOCBENCH_RANK, MOCBENCH_WORLD_SIZE, MOCBENCH_LOCAL_RANK
//   Open MPI (mpirun)         OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   MPICH / Intel MPI         PMI_RANK, PMI_SIZE, MPI_LOCALRANKID
//   Slurm (srun)              SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
//   torchrun-style            RANK, WORLD_SIZE, LOCAL_RANK
// and the NCCL unique id from MOCBENCH_NCCL_ID (256 hex digits: the 128-byte ncclUniqueId) or, across
// machines without one, MOCBENCH_NCCL_ID_FILE: a path on a filesystem every rank sees, where rank 0 writes
// the id (atomically) and the others wait for it (MOCBENCH_NCCL_ID_TIMEOUT_S, default 120). None of these
// set: one process, world size 1. A rank uses GPU local_rank of those it sees, or the only one it sees.
//
// On one machine, `gpus = N` (a scenario axis) or `--gpus N` starts N workers with the first contract and
// CUDA_VISIBLE_DEVICES of one GPU each (worker_environment; app/harness/dist_run.h starts them). NCCL_NVLS_ENABLE=0 in every worker: NVLink
// SHARP (multicast) needs the fabric manager's multicast objects, which the lent multi-GPU machines do not
// provide (KINDS.md), and NCCL would otherwise try it at communicator creation on NVSwitch systems.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/comm.h"

namespace moc {

struct DistEnv {
  int rank = 0, world = 1, local_rank = 0;
  std::string source;    // which contract set it ("" when none: a single process)
  std::string nccl_id;   // 256 hex digits, or "" (then nccl_id_file, or world == 1)
  std::string nccl_id_file;
  double id_timeout_s = 120;
  bool distributed() const { return world > 1; }
};

using EnvLookup = std::function<const char*(const char*)>;

// Reads the contract above. Throws ConfigError naming the variable for a partial or impossible setting
// (rank without world size, rank >= world, a malformed id, world > 1 without an id or id file).
DistEnv read_dist_env(const EnvLookup& env);
DistEnv read_dist_env();  // from the process environment

// The environment of worker `rank` of `n` on this machine, as "NAME=value" strings to add to the parent's:
// the mocbench contract, how to find the NCCL id (`id_setting`, e.g. "MOCBENCH_NCCL_ID_FILE=/tmp/x/nccl.id"),
// its GPU (CUDA_VISIBLE_DEVICES = devices[rank]: an ordinal, UUID or MIG id as the parent sees it) and
// NCCL_NVLS_ENABLE=0.
std::vector<std::string> worker_environment(int rank, int n, const std::string& id_setting,
                                            const std::vector<std::string>& devices);
// The GPUs the parent's workers may use: the entries of CUDA_VISIBLE_DEVICES when it is set (so worker i gets
// the i-th GPU this process sees, not the machine's i-th), else "0".."count-1".
std::vector<std::string> visible_devices(const char* cuda_visible_devices, int count);

// This rank's NCCL unique id: from MOCBENCH_NCCL_ID, or through MOCBENCH_NCCL_ID_FILE (rank 0 calls make()
// and writes it atomically; the others wait for the file up to id_timeout_s and throw ConfigError after).
// The file's path must be new to the job: a stale one from an earlier job would be read as this job's.
std::vector<unsigned char> acquire_nccl_id(const DistEnv& d, const std::function<std::vector<unsigned char>()>& make);

// Checks that `gpus` workers can run on the `available` GPUs this process sees; throws ConfigError with
// what the machine has otherwise (before any work).
void check_gpu_count(int gpus, int available);

// The 128-byte NCCL unique id as 256 lowercase hex digits and back (throws ConfigError on a malformed one).
std::string id_to_hex(const std::vector<unsigned char>& id);
std::vector<unsigned char> id_from_hex(const std::string& hex);

// Every rank calls it with its metrics (the same names in the same order on every rank; refused otherwise).
// On rank 0 they become the point's: rank 0's values per GPU, except the throughput summed over the ranks
// (tokens_per_s, model_tflops; tokens_per_s_per_gpu beside), the step time the slowest rank's, MFU the ranks'
// mean, peak_bytes_max the largest rank's peak, plus rank<r>_<name> for each rank's step time, throughput,
// loss, communication and memory by category. Other ranks' metrics are left as they were.
void join_rank_metrics(Communicator& comm, std::vector<std::pair<std::string, double>>& metrics);

}  // namespace moc
