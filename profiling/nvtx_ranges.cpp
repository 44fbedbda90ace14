// NVTX3 is header-only (it loads the tool's injection library at run time, if one is attached), so this
// file needs the toolkit's headers but links no CUDA library.
#include <string>

#include "profiling/ranges.h"
#ifdef MOCBENCH_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace moc {

void NvtxRangeSink::push(std::string_view name) {
#ifdef MOCBENCH_HAVE_NVTX
  nvtxRangePushA(std::string(name).c_str());
#else
  (void)name;
#endif
}

void NvtxRangeSink::pop() {
#ifdef MOCBENCH_HAVE_NVTX
  nvtxRangePop();
#endif
}

bool NvtxRangeSink::nvtx_available() {
#ifdef MOCBENCH_HAVE_NVTX
  return true;
#else
  return false;
#endif
}

}  // namespace moc
