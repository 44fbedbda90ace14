// Decode-time FFN kernels (Ops::ffn_decode): dense GEMVs and the MoC pipeline (gate GEMV, row top-K or a:b
// selection, then the up/down projection over the union of the rows' kept channels). The design is
// described in ffn_decode.cuh; measurements in bench/micro/NOTES.md. Weights are [d_ffn, d] (channel j = one
// contiguous row of d values).
// The kernels live one family per header (ffn_decode_gate/select/updown/generic.cuh, helpers in
// ffn_decode_device.cuh); this file plans and launches them.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/decode_device.cuh"
#include "kernels/cuda/ffn_decode.cuh"
#include "kernels/cuda/ffn_topk.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/stage_stamps.cuh"
#include "kernels/cuda/ffn_decode_device.cuh"
#include "kernels/cuda/ffn_decode_ring_plan.h"
#include "kernels/cuda/ffn_decode_gate.cuh"
#include "kernels/cuda/ffn_decode_generic.cuh"
#include "kernels/cuda/ffn_decode_select.cuh"
#include "kernels/cuda/ffn_decode_updown.cuh"
#include "kernels/cuda/ffn_decode_ring.cuh"
#include "kernels/cuda/ffn_decode_ring_ab.cuh"
#include "kernels/cuda/ffn_decode_ring_topk.cuh"
#include "kernels/op_cost.h"

namespace moc::cuda {
namespace ffn {
namespace {

// ---------------------------------------------------------------------------------------------------------
// Host side

struct Layout {
  int R = 1, Fp = 128, Wp = 4, umax = 1;
  std::size_t ctrl = 0, acc = 0, zero = 0, g = 0, mask = 0, list = 0, info = 0, z = 0, total = 0;
  std::size_t tr = 0, tkeys = 0, tcounts = 0;  // row top-K's ring kernel: histogram and counters, keys, counts
};

int rows_pad(int R) { return R <= 1 ? 1 : R <= 2 ? 2 : R <= 4 ? 4 : 8; }

Layout make_layout(const Problem& p) {
  Layout L;
  L.R = std::max(1, std::min(p.rows, kMaxRows));
  L.Fp = (p.d_ffn + 127) / 128 * 128;
  L.Wp = L.Fp / 32;
  const int kept = p.kept();
  L.umax = std::max(1, p.kind == SelKind::dense ? p.d_ffn : std::min(p.d_ffn, L.R * kept));
  const auto R = static_cast<std::size_t>(L.R);
  std::size_t off = 0;
  L.ctrl = off;
  off += kCtrlBytes;
  L.acc = off;
  off += align256(R * static_cast<std::size_t>(p.d) * 4);
  if (p.kind == SelKind::topk) {  // the top-K ring kernel's histogram and counters (ffn_decode_ring_topk.cuh)
    L.tr = off;
    off += align256(kTrZeroBytes);
  }
  L.zero = off;  // [0, zero): counters and accumulator, zeroed by the kernel before the up/down kernel
  L.g = off;
  off += align256(R * static_cast<std::size_t>(L.Fp) * 4);
  L.mask = off;  // [R, Fp] bytes: top-K's per-row masks (2:8: one row of row masks)
  off += align256(R * static_cast<std::size_t>(L.Fp));
  L.list = off;
  off += align256(static_cast<std::size_t>(L.umax) * 4);
  L.info = off;
  off += 256;  // [0] union length, [32] the threshold-bin word (Buffers::spec)
  L.z = off;
  off += align256(static_cast<std::size_t>(L.umax) * kMaxRows * 4);
  if (p.kind == SelKind::topk) {
    L.tkeys = off;
    off += align256(static_cast<std::size_t>(L.Fp) * 4);
    L.tcounts = off;
    off += align256(static_cast<std::size_t>(kRingMaxGrid) * 4);  // one kept count per block of the top-K ring
  }
  L.total = off;
  return L;
}

// SMs a launch's grid may cover: all, or one fewer when one is left to the selection kernel (Options::spare_sm).
int grid_sms(bool spare) {
  const int sms = device_limits().sms;
  return spare && sms > 2 ? sms - 1 : sms;
}

// Clusters of C blocks (smem bytes each) that can be resident at once, cached per device and kernel.
template <class Kernel>
int max_active_clusters(Kernel kernel, std::size_t smem, int C, int threads = kThreads) {
  static std::mutex mu;
  static std::map<std::tuple<int, std::uintptr_t, std::size_t, int>, int> done;
  int dev = 0;
  MOC_CUDA_CHECK(cudaGetDevice(&dev));
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = done.find({dev, reinterpret_cast<std::uintptr_t>(kernel), smem, C});
    if (it != done.end()) return it->second;
  }
  allow_smem(kernel, smem);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(C));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(C);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int n = 0;
  MOC_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, kernel, &cfg));
  std::lock_guard<std::mutex> lock(mu);
  done[{dev, reinterpret_cast<std::uintptr_t>(kernel), smem, C}] = n;
  return n;
}

template <class Kernel, class... Args>
void launch_ex(Kernel kernel, unsigned grid, unsigned block, std::size_t smem, cudaStream_t stream, int cluster,
               bool pdl, Args... args) {
  allow_smem(kernel, smem);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attrs[2];
  unsigned n = 0;
  if (cluster > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = static_cast<unsigned>(cluster);
    attrs[n].val.clusterDim.y = 1;
    attrs[n].val.clusterDim.z = 1;
    ++n;
  }
  if (pdl) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = attrs;
  cfg.numAttrs = n;
  MOC_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

template <class Fn>
void with_rows(int R, Fn&& fn) {
  switch (rows_pad(R)) {
    case 1: fn(std::integral_constant<int, 1>{}); break;
    case 2: fn(std::integral_constant<int, 2>{}); break;
    case 4: fn(std::integral_constant<int, 4>{}); break;
    default: fn(std::integral_constant<int, 8>{}); break;
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

struct Buffers {
  unsigned* ctrl;
  float* acc;
  float* G;
  unsigned char* mask;
  unsigned* list;
  unsigned* ucount;
  float* z;
  uint4* zero;
  unsigned zero_n16;
  unsigned* spec;  // the selection's threshold-bin word (Options::topk_speculate): its own line of the info area
  unsigned* tr;                // the top-K ring kernel's histogram and counters (zeroed)
  unsigned* tkeys;             // ... its key array
  unsigned* tcounts;           // ... its per-block kept counts
};
Buffers buffers(const Layout& L, void* ws) {
  auto* b = static_cast<unsigned char*>(ws);
  return {reinterpret_cast<unsigned*>(b + L.ctrl), reinterpret_cast<float*>(b + L.acc),
          reinterpret_cast<float*>(b + L.g),       b + L.mask,
          reinterpret_cast<unsigned*>(b + L.list), reinterpret_cast<unsigned*>(b + L.info),
          reinterpret_cast<float*>(b + L.z),       reinterpret_cast<uint4*>(b),
          static_cast<unsigned>(L.zero / 16),      reinterpret_cast<unsigned*>(b + L.info) + 32,
          reinterpret_cast<unsigned*>(b + L.tr),   reinterpret_cast<unsigned*>(b + L.tkeys),
          reinterpret_cast<unsigned*>(b + L.tcounts)};
}

// Sequential launches of one call: the first may overlap the stream's previous kernel (entry_pdl), the
// others their predecessor (pdl).
struct Chain {
  cudaStream_t st;
  bool pdl, entry_pdl, first = true;
  bool next() {
    const bool v = first ? entry_pdl : pdl;
    first = false;
    return v;
  }
};

// What each kernel of a chunk must move (kernels/op_cost.h): the chunk's shape.
cost::FfnDecodeShape cost_shape(const Problem& p) {
  cost::FfnDecodeShape s;
  s.rows = p.rows;
  s.d = p.d;
  s.d_ffn = p.d_ffn;
  s.kept = p.kept();
  s.elem = static_cast<std::int64_t>(dtype_bytes(p.dtype));
  s.moc = p.kind != SelKind::dense;
  return s;
}
OpCost named(OpCost c, const char* op) {
  c.op = op;
  return c;
}

void launch_prep(const Buffers& B, Chain& ch) {
  MOC_OP_COST((OpCost{"ffn_decode.prep", static_cast<std::int64_t>(B.zero_n16) * 16, 0}));
  launch_ex(k_prep, 1, kThreads, 0, ch.st, 1, ch.next(), B.zero, B.zero_n16);
  MOC_CUDA_LAUNCHED("k_prep");
}

// The buffers of a kernel that needs its accumulator and counters zero on entry (and leaves them zero): in `zeroed`
// (already zero: no prep kernel), else in the workspace, zeroed first by the prep kernel.
Buffers zeroed_or_prep(const Buffers& B, const Layout& L, void* zeroed, Chain& ch) {
  if (!zeroed) {
    launch_prep(B, ch);
    return B;
  }
  Buffers U = B;
  U.ctrl = static_cast<unsigned*>(zeroed);
  U.acc = reinterpret_cast<float*>(static_cast<unsigned char*>(zeroed) + L.acc);
  U.tr = reinterpret_cast<unsigned*>(static_cast<unsigned char*>(zeroed) + L.tr);
  return U;
}

// spare: a grid of one SM fewer (a selection kernel follows, Options::spare_sm).
void launch_gate(const Problem& p, const Layout& L, const Buffers& B, int mode, bool zero_next, Chain& ch,
                 const Options& opt, bool spare = false) {
  // kGateGroupLocal also picks each group's channels (2:8): gate and selection in one kernel.
  MOC_OP_COST(mode == kGateGroupLocal ? named(cost::plus(cost::ffn_decode_gate(cost_shape(p)),
                                                          cost::ffn_decode_select(cost_shape(p))),
                                               "ffn_decode.gate_select")
                                      : cost::ffn_decode_gate(cost_shape(p)));
  GateArgs a{};
  a.stamps = step::stamp_buffer_if_made();
  a.x = static_cast<const bf16*>(p.x);
  a.wg = static_cast<const bf16*>(p.w_gate_t);
  a.G = B.G;
  a.mask = B.mask;
  a.idx_out = p.idx_out;
  a.zero = zero_next ? B.zero : nullptr;
  a.zero_n16 = B.zero_n16;
  const bool pf = mode == kGateGroupLocal && zero_next && (opt.prefetch & 4);  // zero_next: up/down follows
  a.pf_up = pf ? p.w_up_t : nullptr;
  a.pf_down = pf ? p.w_down : nullptr;
  a.R = p.rows;
  a.d = p.d;
  a.F = p.d_ffn;
  a.Fp = L.Fp;
  a.kept = p.kept();
  a.mode = mode;
  a.ga = p.group_a;
  a.gb = p.group_b;
  a.rule = static_cast<int>(p.rule);
  a.unit = mode == kGateGroupLocal ? p.group_b : 1;
  a.nunits = (p.d_ffn + a.unit - 1) / a.unit;
  const auto grid = static_cast<unsigned>(std::max(1, std::min(kGateBlocksPerSm * grid_sms(spare), a.nunits)));
  if (opt.gate_unroll >= 8) launch_ex(k_gate<8>, grid, kThreads, 0, ch.st, 1, ch.next(), a);
  else if (opt.specialized && mode == kGateOnly)
    launch_ex(k_gate<4, kGateOnly>, grid, kThreads, 0, ch.st, 1, ch.next(), a);
  else if (opt.specialized && mode == kGateGroupLocal && p.rule == SelectRule::gate)
    launch_ex(k_gate<4, kGateGroupLocal, static_cast<int>(SelectRule::gate)>, grid, kThreads, 0, ch.st, 1, ch.next(), a);
  else launch_ex(k_gate<4>, grid, kThreads, 0, ch.st, 1, ch.next(), a);
  MOC_CUDA_LAUNCHED("k_gate");
}

// prefetch: top-K followed by the up/down kernel on the fast path (16-byte aligned bf16 rows).
int sel_threads(const Options& opt) { return opt.select_threads == 1024 ? 1024 : kSelThreads; }

// The threshold-bin word's tag of a call (ffn_decode_device.cuh ld_acquire_gpu): 16 bits of its W_up pointer, never 0.
unsigned spec_tag(const Problem& p) {
  const auto u = static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(p.w_up_t));
  const unsigned t = static_cast<unsigned>((u >> 8) ^ (u >> 24) ^ (u >> 40)) & 0xffffu;
  return t == 0 ? 1u : t;
}

// want_list: the union list for the up/down kernel; want_mask (top-K): the per-row mask bytes instead.
// Returns whether it publishes the threshold bin for a speculating up/down kernel (Options::topk_speculate: where the
// masks-only kernel runs at one row).
bool launch_select(const Problem& p, const Layout& L, const Buffers& B, int mode, bool want_list, bool zero_next,
                   Chain& ch, const Options& opt, bool prefetch = false, bool want_mask = false) {
  MOC_OP_COST(cost::ffn_decode_select(cost_shape(p)));
  SelArgs a{};
  a.stamps = step::stamp_buffer_if_made();
  a.G = B.G;
  a.force = p.force_idx;
  a.idx_out = mode == kSelForce ? nullptr : p.idx_out;
  want_mask = want_mask && mode == kSelTopK;
  a.mask = want_mask ? B.mask : nullptr;
  a.list = want_list && !want_mask ? B.list : nullptr;
  a.ucount = B.ucount;
  a.zero = zero_next ? B.zero : nullptr;
  a.zero_n16 = B.zero_n16;
  a.R = p.rows;
  a.C = want_mask ? p.rows : rows_pad(p.rows);  // masks: one block per row, no cluster (nothing to merge)
  a.H = 1;
  if (prefetch && mode == kSelTopK) {
    a.pf_up = p.w_up_t;
    a.pf_down = p.w_down;
    a.row_bytes = static_cast<unsigned>(p.d) * 2u;
    a.H = std::max(1, device_limits().sms / a.C);
  }
  a.F = p.d_ffn;
  a.Fp = L.Fp;
  a.Wp = L.Wp;
  a.kept = p.kept();
  a.mode = mode;
  a.k = p.k;
  a.ga = p.group_a;
  a.gb = p.group_b;
  a.rule = static_cast<int>(p.rule);
  a.cache = mode != kSelForce && L.Fp <= kKeyCache ? 1 : 0;
  const std::size_t smem = sel_smem_bytes(mode, L.Fp, L.Wp, a.cache != 0);
  const unsigned grid = static_cast<unsigned>(a.C * a.H);
  const int cl = a.list ? a.C : 1;  // the union list is merged in the cluster's shared memory
  const bool pdl = ch.next();
  bool published = false;
  if (opt.specialized && a.cache && a.mask && !a.idx_out && a.H == 1 && sel_threads(opt) == kSelThreads) {
    if (opt.topk_speculate != 0 && p.rows == 1 && p.rule == SelectRule::gate && pdl) {
      published = true;
      a.spec = B.spec;
      a.spec_tag = spec_tag(p);
      a.spec_shift = opt.topk_speculate == 2 ? 1 : opt.topk_speculate == 3 ? -1 : 0;
    }
    auto go = [&](auto kernel) { launch_ex(kernel, grid, kSelThreads, smem, ch.st, 1, pdl, a); };
    switch (p.rule) {  // the decode engine's MoC selection: nothing but the mask path
      case SelectRule::gate: go(k_select<MasksOnly, kSelThreads, 0>); break;
      case SelectRule::silu: go(k_select<MasksOnly, kSelThreads, 1>); break;
      default: go(k_select<MasksOnly, kSelThreads, 2>); break;
    }
  } else if (sel_threads(opt) == 1024) {
    if (a.cache) launch_ex(k_select<1024, true>, grid, 1024, smem, ch.st, cl, pdl, a);
    else launch_ex(k_select<1024, false>, grid, 1024, smem, ch.st, cl, pdl, a);
  } else if (opt.specialized && a.cache && mode == kSelTopK) {
    auto go = [&](auto kernel) { launch_ex(kernel, grid, kSelThreads, smem, ch.st, cl, pdl, a); };
    const bool one = a.C == 1;
    switch (p.rule) {
      case SelectRule::gate:
        one ? go(k_select<kSelThreads, true, kSelTopK, 0, true>) : go(k_select<kSelThreads, true, kSelTopK, 0>);
        break;
      case SelectRule::silu:
        one ? go(k_select<kSelThreads, true, kSelTopK, 1, true>) : go(k_select<kSelThreads, true, kSelTopK, 1>);
        break;
      default:
        one ? go(k_select<kSelThreads, true, kSelTopK, 2, true>) : go(k_select<kSelThreads, true, kSelTopK, 2>);
        break;
    }
  } else {
    if (a.cache) launch_ex(k_select<kSelThreads, true>, grid, kSelThreads, smem, ch.st, cl, pdl, a);
    else launch_ex(k_select<kSelThreads, false>, grid, kSelThreads, smem, ch.st, cl, pdl, a);
  }
  MOC_CUDA_LAUNCHED("k_select");
  return published;
}

// Grid, cluster and shared memory of one up/down launch.
struct UpDownPlan {
  unsigned grid = 1;
  int C = 1, smax = 1;
  std::size_t smem = 0, launch_smem = 0;
};

template <class Kernel>
UpDownPlan plan_updown(Kernel kernel, int slots, int d, int rp, bool fg, const Options& opt, bool spare = false) {
  DeviceLimits lim = device_limits();
  lim.sms = grid_sms(spare);
  slots = std::max(1, slots);
  // One block per SM: more shared memory than half of the SM's.
  const std::size_t pad = std::min(lim.smem_optin, lim.smem_sm / 2 + 1024);
  auto smax_of = [&](int nb) { return (slots + nb - 1) / nb; };
  auto fits = [&](int nb, int C) { return updown_smem_bytes(smax_of(nb), d, rp, fg, C) <= lim.smem_optin; };
  int C = opt.updown_cluster > 0 ? opt.updown_cluster : kDefaultUpdownCluster;
  C = std::max(1, std::min(kMaxCluster, C));
  while (d % C != 0) C /= 2;
  int nb = std::min(lim.sms, slots);
  for (; C > 1; C /= 2) {
    int n = std::max(C, nb / C * C);
    if (!fits(n, C)) continue;
    const std::size_t smem = std::max(updown_smem_bytes(smax_of(n), d, rp, fg, C), pad);
    const int clusters = max_active_clusters(kernel, smem, C);
    if (clusters < 1) continue;
    if (n > clusters * C) n = clusters * C;
    if (!fits(n, C)) continue;
    nb = n;
    break;
  }
  if (C <= 1) {
    C = 1;
    while (!fits(nb, 1)) nb += lim.sms;  // more than one wave: very wide layers only
  }
  UpDownPlan pl;
  pl.C = C;
  pl.grid = static_cast<unsigned>(nb);
  pl.smax = smax_of(nb);
  pl.smem = updown_smem_bytes(pl.smax, d, rp, fg, C);
  pl.launch_smem = std::max(pl.smem, pad);
  return pl;
}

void launch_updown(const Problem& p, const Layout& L, const Buffers& B, bool fused_gate, int cmode, Chain& ch,
                   const Options& opt, bool spare = false) {
  // Fused gate: the dense FFN in one kernel (all channels), or gate + up/down on forced channels.
  MOC_OP_COST(!fused_gate ? cost::ffn_decode_up_down(cost_shape(p))
              : cmode == kAllChannels
                  ? cost::ffn_decode_dense(cost_shape(p))
                  : named(cost::plus(cost::ffn_decode_gate(cost_shape(p)), cost::ffn_decode_up_down(cost_shape(p))),
                          "ffn_decode.gate_up_down"));
  UpDownArgs a{};
  a.stamps = step::stamp_buffer_if_made();
  a.x = static_cast<const bf16*>(p.x);
  a.wg = static_cast<const bf16*>(p.w_gate_t);
  a.wu = static_cast<const bf16*>(p.w_up_t);
  a.wd = static_cast<const bf16*>(p.w_down);
  a.out = static_cast<bf16*>(p.out);
  a.G = B.G;
  a.mask = B.mask;
  a.list = B.list;
  a.ucount = B.ucount;
  a.acc = B.acc;
  a.ctrl = B.ctrl;
  a.R = p.rows;
  a.d = p.d;
  a.F = p.d_ffn;
  a.Fp = L.Fp;
  a.nslots = L.umax;
  a.mrows = cmode == kMaskChannels && p.kind == SelKind::topk ? p.rows : 1;
  a.prefetch = (opt.prefetch & 2) ? 1 : 0;
  if (cmode == kMaskSpec) {
    a.spec = B.spec;
    a.spec_tag = spec_tag(p);
    a.spec_wait_ns = 50000;
    a.mrows = 1;
  }
  const int slots = cmode == kListChannels ? L.umax : p.d_ffn;
  const bool pdl = ch.next();
  with_rows(p.rows, [&](auto rp) {
    constexpr int RP = decltype(rp)::value;
    // The plan is made for the generic build (same shared memory and registers bound); a MoC plan of
    // cluster 1 or 2 then runs the build compiled for it. The dense (gate-fused) builds stay generic: the
    // cluster-2 build of the dense kernel measured 0.8 us slower at batch 3-4 (bench/micro/NOTES.md).
    auto go = [&](auto kernel, auto k1, auto k2) {
      const UpDownPlan pl = plan_updown(kernel, slots, p.d, RP, fused_gate, opt, spare);
      a.smax = pl.smax;
      a.C = pl.C;
      if (opt.specialized && pl.C == 1) launch_ex(k1, pl.grid, kThreads, pl.launch_smem, ch.st, pl.C, pdl, a);
      else if (opt.specialized && pl.C == 2) launch_ex(k2, pl.grid, kThreads, pl.launch_smem, ch.st, pl.C, pdl, a);
      else launch_ex(kernel, pl.grid, kThreads, pl.launch_smem, ch.st, pl.C, pdl, a);
    };
    if (fused_gate && cmode == kAllChannels)
      go(k_updown<RP, true, kAllChannels>, k_updown<RP, true, kAllChannels>, k_updown<RP, true, kAllChannels>);
    else if (fused_gate)
      go(k_updown<RP, true, kListChannels>, k_updown<RP, true, kListChannels>, k_updown<RP, true, kListChannels>);
    else if (cmode == kMaskSpec) {
      if constexpr (RP == 1)  // (launch decides kMaskSpec at one row only)
        go(k_updown<1, false, kMaskSpec>, k_updown<1, false, kMaskSpec, 1>, k_updown<1, false, kMaskSpec, 2>);
    } else if (cmode == kMaskChannels)
      go(k_updown<RP, false, kMaskChannels>, k_updown<RP, false, kMaskChannels, 1>,
         k_updown<RP, false, kMaskChannels, 2>);
    else
      go(k_updown<RP, false, kListChannels>, k_updown<RP, false, kListChannels, 1>,
         k_updown<RP, false, kListChannels, 2>);
  });
  MOC_CUDA_LAUNCHED("k_updown");
}

// What both ring kernels' arguments (RingArgs, RingAbArgs) take from the problem and the buffers (C: the launch's).
void ring_io(RingIo& a, const Problem& p, const Buffers& B) {
  a.stamps = step::stamp_buffer_if_made();
  a.x = static_cast<const bf16*>(p.x);
  a.norm = static_cast<const bf16*>(p.norm);
  a.eps = p.norm_eps;
  a.wg = static_cast<const bf16*>(p.w_gate_t);
  a.wu = static_cast<const bf16*>(p.w_up_t);
  a.wd = static_cast<const bf16*>(p.w_down);
  a.out = static_cast<bf16*>(p.out);
  a.acc = B.acc;
  a.ctrl = B.ctrl;
  a.R = p.rows;
  a.d = p.d;
  a.F = p.d_ffn;
}

// The ring kernels' plans (ffn_decode_ring_plan.h) on this device: its SMs and shared memory; the grid of clusters of 2
// from the occupancy query of the kernel launched.
template <class Kernel>
auto ring_fit(Kernel kernel) {
  return [kernel](std::size_t smem) { return max_active_clusters(kernel, smem, 2, kRingThreads); };
}

// The dense FFN through the ring kernel (ffn_decode_ring.cuh): rows <= kRingMaxRows (2) and d <= kDownCols (one pass of
// the down projection in registers), at least two slots beside x and the block's gate values on the grid of every SM
// (where clusters of 2 do not fit, the launch takes that grid).
RingDensePlan ring_dense_plan_on(const Problem& p, int nb, int rp) {
  return ring_dense_plan(p.d, p.d_ffn, rp, nb, kRingSlots, device_limits().smem_optin);
}
bool ring_ok(const Problem& p, const Options& opt) {
  if (!opt.dense_ring || p.rows > kRingMaxRows || p.d > kDownCols) return false;
  return ring_dense_plan_on(p, device_limits().sms, kRingMaxRows).ok();
}

void launch_ring(const Problem& p, const Buffers& B, Chain& ch, const Options& opt) {
  MOC_OP_COST(cost::ffn_decode_dense(cost_shape(p)));
  RingArgs a{};
  ring_io(a, p, B);
  const unsigned row = static_cast<unsigned>(p.d) * 2u;
  a.cps = static_cast<int>(std::min(16u, kRingSlotBytes / row));
  a.cpd = static_cast<int>(std::min(32u, kRingSlotBytes / row));
  const bool warm = p.rows == 1 && device_limits().dram_gbs < 4000.0;  // Options::dense_ring_l2_ahead's -1
  a.l2_ahead = opt.dense_ring_l2_ahead >= 0 ? opt.dense_ring_l2_ahead : warm ? kRingL2Ahead : 0;
  const bool pdl = ch.next();
  with_rows(p.rows, [&](auto rp) {
    constexpr int RP = decltype(rp)::value;
    if constexpr (RP <= kRingMaxRows) {
      auto kernel = k_updown<RP>;
      int C = 1;
      const RingDensePlan pl = ring_cluster_grid(
          ring_dense_plan_on(p, device_limits().sms, RP), p.d, [&](int nb) { return ring_dense_plan_on(p, nb, RP); },
          ring_fit(kernel), C);
      a.C = C;
      a.S = pl.S;
      a.nmax = pl.nmax;
      launch_ex(kernel, static_cast<unsigned>(pl.nb), kRingThreads, pl.smem, ch.st, C, pdl, a);
    }
  });
  MOC_CUDA_LAUNCHED("k_updown");
}

// MoC a:b as one kernel (ffn_decode_ring_ab.cuh): rows <= 2, d <= kDownCols (the down projection in one pass), one
// group's W_gate rows in a 32 KB slot (items of cpg rows, at most kRingAbMaxCpg), two slots beside a block's kept rows
// (a group keeps at most min(b, R a) channels over the rows); the selection and the up/down together (no forced
// selection).
int ring_ab_slots(const Options& opt) {
  return opt.ab_ring_slots > 0 ? std::min(opt.ab_ring_slots, kRingMaxSlots) : kRingAbSlots;
}
RingAbPlan ring_ab_plan_on(const Problem& p, int nb, int rp, const Options& opt) {
  return ring_ab_plan(p.d, p.d_ffn, p.rows, p.group_a, p.group_b, rp, nb, ring_ab_slots(opt), device_limits().smem_optin);
}
bool ring_ab_ok(const Problem& p, const Options& opt) {
  if (!opt.ab_ring || p.kind != SelKind::grouped || p.force_idx || p.rows < 1 || p.rows > kRingMaxRows ||
      p.d > kDownCols)
    return false;
  if ((p.parts & (kFfnSelect | kFfnUpDown)) != (kFfnSelect | kFfnUpDown)) return false;
  return ring_ab_plan_on(p, device_limits().sms, rows_pad(p.rows), opt).ok();
}

void launch_ring_ab(const Problem& p, const Buffers& B, Chain& ch, const Options& opt) {
  MOC_OP_COST(named(cost::plus(cost::plus(cost::ffn_decode_gate(cost_shape(p)), cost::ffn_decode_select(cost_shape(p))),
                               cost::ffn_decode_up_down(cost_shape(p))),
                    "ffn_decode.ring_ab"));
  RingAbArgs a{};
  ring_io(a, p, B);
  a.idx_out = p.idx_out;
  a.ga = p.group_a;
  a.gb = p.group_b;
  a.rule = static_cast<int>(p.rule);
  a.kept = p.kept();
  a.groups = (p.d_ffn + p.group_b - 1) / p.group_b;
  const bool pdl = ch.next();
  with_rows(p.rows, [&](auto rp) {
    constexpr int RP = decltype(rp)::value;
    if constexpr (RP <= kRingMaxRows) {
      constexpr int kGateRule = static_cast<int>(SelectRule::gate);
      void (*kernel)(RingAbArgs) = k_updown<RP, -1>;
      if (opt.specialized && p.rule == SelectRule::gate) kernel = k_updown<RP, kGateRule>;
      int C = 1;
      const RingAbPlan pl = ring_cluster_grid(
          ring_ab_plan_on(p, device_limits().sms, RP, opt), p.d,
          [&](int nb) { return ring_ab_plan_on(p, nb, RP, opt); }, ring_fit(kernel), C);
      a.C = C;
      a.cpg = pl.cpg;
      a.S = pl.S;
      a.nmax = pl.nmax;
      a.kmax = pl.kmax;
      launch_ex(kernel, static_cast<unsigned>(pl.nb), kRingThreads, pl.smem, ch.st, C, pdl, a);
    }
  });
  MOC_CUDA_LAUNCHED("k_updown");
}

// MoC row top-K at one row as one kernel (ffn_decode_ring_topk.cuh): d <= kDownCols, a grid whose blocks are all
// resident at once (one per SM; clusters of 2 where that many fit), W_gate through S slots, the kept area of kcap
// channels in the shared memory left (ffn_decode_ring_plan.h ring_topk_plan).
int ring_topk_slots(const Options& opt) {
  return opt.topk_ring_slots > 0 ? std::min(opt.topk_ring_slots, kRingMaxSlots) : kRingTopkSlots;
}
RingTopkPlan ring_topk_plan_on(const Problem& p, int nb, const Options& opt) {
  return ring_topk_plan(p.d, p.d_ffn, nb, ring_topk_slots(opt), device_limits().smem_optin,
                        static_cast<std::size_t>(std::max(0, opt.topk_ring_leave)));
}
bool ring_topk_ok(const Problem& p, const Options& opt) {
  if (!opt.topk_ring || p.kind != SelKind::topk || p.force_idx || p.rows != 1 || p.d > kDownCols) return false;
  if ((p.parts & (kFfnSelect | kFfnUpDown)) != (kFfnSelect | kFfnUpDown)) return false;
  return ring_topk_plan_on(p, device_limits().sms, opt).ok();
}

void launch_ring_topk(const Problem& p, const Buffers& B, Chain& ch, const Options& opt) {
  MOC_OP_COST(named(cost::plus(cost::plus(cost::ffn_decode_gate(cost_shape(p)), cost::ffn_decode_select(cost_shape(p))),
                               cost::ffn_decode_up_down(cost_shape(p))),
                    "ffn_decode.ring_topk"));
  RingTopkArgs a{};
  ring_io(a, p, B);
  a.idx_out = p.idx_out;
  a.hist = B.tr;
  a.keys = B.tkeys;
  a.counts = B.tcounts;
  a.k = p.k;
  a.rule = static_cast<int>(p.rule);
  void (*kernel)(RingTopkArgs) = k_updown<TopK, -1>;
  if (opt.specialized && p.rule == SelectRule::gate) kernel = k_updown<TopK, static_cast<int>(SelectRule::gate)>;
  int C = 1;
  const RingTopkPlan pl = ring_cluster_grid(ring_topk_plan_on(p, device_limits().sms, opt), p.d,
                                            [&](int nb) { return ring_topk_plan_on(p, nb, opt); }, ring_fit(kernel), C);
  a.C = C;
  a.cpg = pl.cpg;
  a.S = pl.S;
  a.nmax = pl.nmax;
  a.kcap = pl.kcap;
  a.xcap = pl.xcap;
  a.xoff = pl.xoff;
  a.prefetch = opt.topk_ring_prefetch ? 1 : 0;
  a.spec = opt.topk_ring_spec ? 1 : 0;
  launch_ex(kernel, static_cast<unsigned>(pl.nb), kRingThreads, pl.smem, ch.st, C, ch.next(), a);
  MOC_CUDA_LAUNCHED("k_updown");
}

// The generic path for one chunk.
template <class T>
void run_generic(const Problem& p, const Layout& L, const Buffers& B, cudaStream_t st) {
  const T* x = static_cast<const T*>(p.x);
  const T* wg = static_cast<const T*>(p.w_gate_t);
  const T* wu = static_cast<const T*>(p.w_up_t);
  const T* wd = static_cast<const T*>(p.w_down);
  T* out = static_cast<T*>(p.out);
  const int R = p.rows, d = p.d, F = p.d_ffn;
  const bool moc = p.kind != SelKind::dense;
  const bool gate = p.parts & kFfnGate, select = p.parts & kFfnSelect, updown = p.parts & kFfnUpDown;
  const auto warps_grid = [](int n) { return static_cast<unsigned>((n + kWarps - 1) / kWarps); };
  Chain ch{st, false, false};
  auto z_and_down = [&](int zmode) {
    MOC_OP_COST(zmode == 0 ? cost::ffn_decode_dense(cost_shape(p)) : cost::ffn_decode_up_down(cost_shape(p)));
    const int slots = zmode == 0 ? F : L.umax;
    k_gen_z<T><<<warps_grid(slots), kThreads, 0, st>>>(x, wg, wu, B.G, B.list, B.ucount, B.z, R, d, F, L.Fp, zmode);
    MOC_CUDA_LAUNCHED("k_gen_z");
    k_gen_down<T><<<ceil_div(static_cast<long long>(R) * d, kThreads), kThreads, 0, st>>>(
        wd, out, B.z, B.list, B.ucount, R, d, F, zmode == 0 ? 1 : 0);
    MOC_CUDA_LAUNCHED("k_gen_down");
  };
  auto gate_only = [&]() {
    MOC_OP_COST(cost::ffn_decode_gate(cost_shape(p)));
    k_gen_gate<T><<<warps_grid(F), kThreads, 0, st>>>(x, wg, B.G, R, d, F, L.Fp);
    MOC_CUDA_LAUNCHED("k_gen_gate");
  };
  if (!moc) {
    if (updown) z_and_down(0);
    else if (gate) gate_only();
    return;
  }
  if (p.force_idx) {
    if (updown) {
      launch_select(p, L, B, kSelForce, true, false, ch, Options{});
      z_and_down(1);
    } else if (gate) {
      gate_only();
    }
    return;
  }
  if (!select) {
    if (gate) gate_only();
    return;
  }
  gate_only();
  launch_select(p, L, B, p.kind == SelKind::topk ? kSelTopK : kSelGroup, updown, false, ch, Options{});
  if (updown) z_and_down(2);
}

// Row top-K on the fast path: the selection handed over as mask bytes (else the union list), and one SM left to the
// selection kernel (Options::topk_list, Options::spare_sm).
bool topk_masks(const Problem& p, const Options& opt) { return p.kind == SelKind::topk && !opt.topk_list; }
bool topk_spare(const Problem& p, const Options& opt) { return p.kind == SelKind::topk && opt.spare_sm; }

bool fast_chunk(const Problem& p, const Options& opt) {
  if (!opt.allow_fast || p.dtype != DType::bf16 || p.d % 8 != 0) return false;
  if (!aligned16(p.x) || !aligned16(p.w_gate_t) || !aligned16(p.w_up_t) || !aligned16(p.w_down) || !aligned16(p.out))
    return false;
  const DeviceLimits lim = device_limits();
  const Layout L = make_layout(p);
  if (updown_smem_bytes(1, p.d, rows_pad(L.R), true, 1) > lim.smem_optin) return false;
  return sel_smem_bytes(kSelTopK, L.Fp, L.Wp, L.Fp <= kKeyCache) <= lim.smem_optin;
}

// One chunk of at most kMaxRows rows. zeroed: see launch().
void run_chunk(const Problem& p, void* ws, cudaStream_t st, const Options& opt, bool entry_pdl, void* zeroed) {
  const Layout L = make_layout(p);
  const Buffers B = buffers(L, ws);
  if (!fast_chunk(p, opt)) {
    if (p.dtype == DType::bf16) run_generic<bf16>(p, L, B, st);
    else run_generic<float>(p, L, B, st);
    return;
  }
  Chain ch{st, opt.pdl, opt.pdl && opt.pdl_entry && entry_pdl};
  const bool moc = p.kind != SelKind::dense;
  const bool gate = p.parts & kFfnGate, select = p.parts & kFfnSelect, updown = p.parts & kFfnUpDown;
  if (!moc) {
    if (updown) {
      const Buffers U = zeroed_or_prep(B, L, zeroed, ch);
      if (ring_ok(p, opt)) launch_ring(p, U, ch, opt);
      else launch_updown(p, L, U, true, kAllChannels, ch, opt);
    } else if (gate) {
      launch_gate(p, L, B, kGateOnly, false, ch, opt);
    }
    return;
  }
  if (p.force_idx) {
    if (updown) {
      launch_select(p, L, B, kSelForce, true, true, ch, opt);
      launch_updown(p, L, B, true, kListChannels, ch, opt);
    } else if (gate) {
      launch_gate(p, L, B, kGateOnly, false, ch, opt);
    }
    return;
  }
  if (!select) {
    if (gate) launch_gate(p, L, B, kGateOnly, false, ch, opt);
    return;
  }
  if (ring_ab_ok(p, opt)) {
    launch_ring_ab(p, zeroed_or_prep(B, L, zeroed, ch), ch, opt);
    return;
  }
  if (p.kind == SelKind::grouped && kGroup % p.group_b == 0) {
    launch_gate(p, L, B, kGateGroupLocal, updown, ch, opt);
    if (updown) launch_updown(p, L, B, false, kMaskChannels, ch, opt);
    return;
  }
  if (ring_topk_ok(p, opt)) {
    launch_ring_topk(p, zeroed_or_prep(B, L, zeroed, ch), ch, opt);
    return;
  }
  const bool masks = topk_masks(p, opt), spare = topk_spare(p, opt);
  launch_gate(p, L, B, kGateOnly, false, ch, opt, spare);
  const bool spec = launch_select(p, L, B, p.kind == SelKind::topk ? kSelTopK : kSelGroup, updown, updown, ch, opt,
                                  updown && (opt.prefetch & 1), updown && masks);
  if (updown) launch_updown(p, L, B, false, masks ? (spec ? kMaskSpec : kMaskChannels) : kListChannels, ch, opt, spare);
}

void validate(const Problem& p, const void* ws, std::size_t ws_size, const Options& opt) {
  const char* op = "ffn_decode";
  require(p.rows >= 0 && p.d > 0 && p.d_ffn > 0, op, "rows, d and d_ffn must be positive");
  require(p.d_ffn <= 65536, op, "d_ffn above 65536 does not fit i16 channel indices");
  require(p.dtype == DType::f32 || p.dtype == DType::bf16, op, "x, weights and out must be f32 or bf16");
  require(p.x && p.w_gate_t && p.w_up_t && p.w_down && p.out, op, "null tensor pointer");
  const bool moc = p.kind != SelKind::dense;
  if (p.kind == SelKind::topk) require(p.k >= 1 && p.k <= p.d_ffn, op, "k must be in [1, d_ffn]");
  if (p.kind == SelKind::grouped)
    require(p.group_a > 0 && p.group_a <= p.group_b, op, "a:b selection needs 0 < a <= b");
  require(moc || (!p.force_idx && !p.idx_out), op, "force_idx and idx_out need a MoC selection");
  if (moc && (p.parts & kFfnUpDown) && !(p.parts & kFfnSelect))
    require(p.force_idx != nullptr, op, "up/down without selection needs force_idx");
  require(ws != nullptr && ws_size >= workspace_bytes(p), op, "workspace too small");
  require(!p.norm || norm_inside(p, opt), op, "the norm runs inside only the ring kernels' calls (norm_inside)");
}

}  // namespace

int Problem::kept() const {
  if (kind == SelKind::dense) return d_ffn;
  MocSelect s;
  s.k = kind == SelKind::topk ? k : 0;
  s.group_a = kind == SelKind::grouped ? group_a : 0;
  s.group_b = kind == SelKind::grouped ? group_b : 0;
  return s.kept(d_ffn);
}

std::size_t workspace_bytes(const Problem& p) { return make_layout(p).total; }

std::size_t zeroed_bytes(const Problem& p) { return make_layout(p).zero; }  // the layout of the largest chunk

bool fast_path(const Problem& p, const Options& opt) {
  Problem c = p;
  c.rows = std::max(1, std::min(p.rows, kMaxRows));
  return fast_chunk(c, opt);
}

bool norm_inside(const Problem& p, const Options& opt) {
  if (p.rows < 1 || !fast_path(p, opt) || (p.norm && !aligned16(p.norm))) return false;
  if (p.kind == SelKind::dense) return (p.parts & kFfnUpDown) && ring_ok(p, opt);
  return ring_ab_ok(p, opt) || ring_topk_ok(p, opt);
}

bool uses_zeroed(const Problem& p, const Options& opt) {
  if (!(p.parts & kFfnUpDown) || p.rows < 1) return false;
  if (p.kind == SelKind::dense) return true;
  Problem c = p;
  c.rows = std::min(p.rows, kMaxRows);
  return fast_path(c, opt) && (ring_ab_ok(c, opt) || ring_topk_ok(c, opt));
}

void launch(const Problem& p, void* workspace, std::size_t workspace_size, cudaStream_t stream, const Options& opt,
            void* zeroed) {
  validate(p, workspace, workspace_size, opt);
  const std::size_t es = dtype_bytes(p.dtype);
  const int kept = p.kept();
  for (int r0 = 0; r0 < p.rows; r0 += kMaxRows) {
    Problem c = p;
    c.rows = std::min(kMaxRows, p.rows - r0);
    const std::size_t xoff = static_cast<std::size_t>(r0) * p.d * es;
    c.x = static_cast<const unsigned char*>(p.x) + xoff;
    c.out = static_cast<unsigned char*>(p.out) + xoff;
    if (p.force_idx) c.force_idx = p.force_idx + static_cast<std::size_t>(r0) * kept;
    if (p.idx_out) c.idx_out = p.idx_out + static_cast<std::size_t>(r0) * kept;
    bool copied = false;
    if (c.force_idx && c.idx_out) {
      MOC_CUDA_CHECK(cudaMemcpyAsync(c.idx_out, c.force_idx, static_cast<std::size_t>(c.rows) * kept * 2,
                                     cudaMemcpyDeviceToDevice, stream));
      copied = true;
    }
    // The first kernel overlaps the stream's previous kernel only when it directly follows a kernel.
    run_chunk(c, workspace, stream, opt, !copied, zeroed);
  }
}

void launch_updown_only(const Problem& p, void* workspace, cudaStream_t stream, const Options& opt) {
  require(p.rows >= 1 && p.rows <= kMaxRows && p.kind != SelKind::dense && !p.force_idx && fast_path(p, opt),
          "ffn_decode", "launch_updown_only needs the fast path, 1..8 rows and a MoC selection");
  require(!ring_ab_ok(p, opt), "ffn_decode",
          "launch_updown_only: the a:b ring leaves no selection in the workspace (Options::ab_ring = false)");
  require(!ring_topk_ok(p, opt), "ffn_decode",
          "launch_updown_only: the top-K ring leaves no selection in the workspace (Options::topk_ring = false)");
  const Layout L = make_layout(p);
  const Buffers B = buffers(L, workspace);
  const bool local = p.kind == SelKind::grouped && kGroup % p.group_b == 0;
  Chain ch{stream, opt.pdl, opt.pdl && opt.pdl_entry};
  launch_updown(p, L, B, false, local || topk_masks(p, opt) ? kMaskChannels : kListChannels, ch, opt,
                topk_spare(p, opt));
}

}  // namespace ffn

// ---- Ops entry point

void ffn_decode(Ops& ops, const Tensor& x, const DecodeFfnWeights& w, const MocSelect* sel, Tensor& out,
                const Tensor* force_idx, Tensor* idx_out, unsigned parts) {
  const char* op = "ffn_decode";
  require(w.w_gate_t && w.w_up_t && w.w_down, op, "all three weights are needed");
  const Tensor& wg = *w.w_gate_t;
  const Tensor& wu = *w.w_up_t;
  const Tensor& wd = *w.w_down;
  const std::int64_t n = x.rows(), d = x.cols(), F = wg.rows();
  require(wg.cols() == d && wu.rows() == F && wu.cols() == d && wd.rows() == F && wd.cols() == d, op,
          "weights must be [d_ffn, d] with d = " + std::to_string(d));
  require(out.rows() == n && out.cols() == d, op, "out must be [rows, d]");
  require(x.device() == DeviceKind::cuda && wg.device() == DeviceKind::cuda && wu.device() == DeviceKind::cuda &&
              wd.device() == DeviceKind::cuda && out.device() == DeviceKind::cuda,
          op, "tensors must live on the GPU");
  const DType dt = x.dtype();
  require(is_float(dt) && wg.dtype() == dt && wu.dtype() == dt && wd.dtype() == dt && out.dtype() == dt, op,
          "x, the weights and out must share one float dtype (f32 or bf16)");
  require(F <= 65536, op, "d_ffn above 65536 does not fit i16 channel indices");
  if (sel) {
    if (sel->grouped()) require(sel->group_a > 0 && sel->group_a <= sel->group_b, op, "a:b selection needs 0 < a <= b");
    else require(sel->k >= 1 && sel->k <= F, op, "k must be in [1, d_ffn]");
  }
  const int kept = sel ? sel->kept(static_cast<int>(F)) : static_cast<int>(F);
  if (force_idx)
    require(sel && force_idx->dtype() == DType::i16 && force_idx->rows() == n && force_idx->cols() == kept &&
                force_idx->device() == DeviceKind::cuda,
            op, "force_idx must be i16 [rows, kept] on the GPU");
  if (idx_out)
    require(sel && idx_out->dtype() == DType::i16 && idx_out->rows() == n && idx_out->cols() == kept &&
                idx_out->device() == DeviceKind::cuda,
            op, "idx_out must be i16 [rows, kept] on the GPU");
  if (sel && (parts & kFfnUpDown) && !(parts & kFfnSelect))
    require(force_idx != nullptr, op, "up/down without selection needs force_idx");
  if (n == 0) return;

  ffn::Problem p;
  p.rows = static_cast<int>(n);
  p.d = static_cast<int>(d);
  p.d_ffn = static_cast<int>(F);
  p.dtype = dt;
  p.x = x.raw();
  p.w_gate_t = wg.raw();
  p.w_up_t = wu.raw();
  p.w_down = wd.raw();
  p.out = out.raw();
  if (sel) {
    p.kind = sel->grouped() ? ffn::SelKind::grouped : ffn::SelKind::topk;
    p.k = sel->k;
    p.group_a = sel->group_a;
    p.group_b = sel->group_b;
    p.rule = sel->rule;
  }
  p.force_idx = force_idx ? force_idx->data<std::uint16_t>() : nullptr;
  p.idx_out = idx_out ? idx_out->data<std::uint16_t>() : nullptr;
  p.parts = parts;
  const ffn::Options opt{};
  Tensor xn, rstd;
  if (w.norm) {
    require(w.norm->dtype() == dt && w.norm->numel() == d && w.norm->device() == DeviceKind::cuda, op,
            "norm must be [d] of x's dtype on the GPU");
    p.norm = w.norm->raw();
    p.norm_eps = w.norm_eps;
    if (!ffn::norm_inside(p, opt)) {  // elsewhere the norm is its own kernel first (the composed ops)
      xn = ops.empty({n, d}, dt, workspace_tag());
      rstd = ops.empty({n}, DType::f32, workspace_tag());
      ops.rmsnorm_forward(x, *w.norm, w.norm_eps, xn, rstd);
      p.x = xn.raw();
      p.norm = nullptr;
    }
  }
  const std::size_t bytes = ffn::workspace_bytes(p);
  Tensor ws = ops.empty({static_cast<std::int64_t>((bytes + 3) / 4)}, DType::i32, workspace_tag());
  // The dense FFN and the a:b ring keep their accumulator and counters in the ops' zeroed scratch (no prep kernel
  // per call).
  void* zeroed = ffn::uses_zeroed(p, opt) ? zeroed_scratch(ops, ffn::zeroed_bytes(p)) : nullptr;
  ffn::launch(p, ws.raw(), bytes, stream_of(ops), opt, zeroed);
}

}  // namespace moc::cuda
