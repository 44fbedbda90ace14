// Kernels of known length for checking the profiler on the GPU (tests/test_cuda_profiling.cpp): each spins
// for a given time of the device's %globaltimer after its dependency wait, and is stamped whole (kernel
// "spin_kernel", stage "work") while stage stamping is on (Ops::set_stamping). Plain C++ header.
#pragma once
#include <cstdint>
#include <vector>

namespace moc::cuda::probe {

// Launches one single-block spin kernel per entry of spin_ns on the current device's stream `stream`
// (nullptr: the legacy default stream), in order. pdl: each is launched with programmatic stream
// serialization and lets its successor start at once (griddepcontrol.launch_dependents first), so a
// successor's CUPTI record begins while it still waits (griddepcontrol.wait) for its predecessor -- the
// overlap that exclusive device time removes. Without pdl they run one after another.
void spin_chain(const std::vector<std::int64_t>& spin_ns, bool pdl, void* stream);

// Milliseconds between two CUDA events around `reps` repetitions of spin_chain(spin_ns, false), divided by
// reps (the solo time of the chain as CUDA events see it); synchronizes.
double timed_spin_ms(const std::vector<std::int64_t>& spin_ns, int reps, void* stream);

// A stream of the current device (non-blocking), and its end.
void* make_stream();
void destroy_stream(void* stream);
void synchronize(void* stream);

}  // namespace moc::cuda::probe
