// Builds without the CUDA toolkit: no CUPTI tracer (GPU points cannot exist there either).
#include "profiling/tracer.h"

namespace moc::prof {

std::unique_ptr<Tracer> make_cupti_tracer(std::string* why) {
  if (why) *why = "this build has no CUPTI (the CUDA toolkit was not found at configure time)";
  return nullptr;
}

}  // namespace moc::prof
