// CPU twin of the decode-time FFN (Ops::ffn_decode): the oracle the GPU decode kernels are tested against.
// Dot products accumulate in double so that the reference is tighter than any fp32 kernel order.
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_ops.h"

namespace moc::cpu {

void CpuOps::ffn_decode(const Tensor& x, const DecodeFfnWeights& w, const MocSelect* sel, Tensor& out,
                        const Tensor* force_idx, Tensor* idx_out, unsigned parts) {
  if (w.norm) {  // the FFN's RMSNorm first: the composed ops (x may be out itself)
    Tensor xn = empty({x.rows(), x.cols()}, x.dtype(), workspace_tag());
    Tensor rstd = empty({x.rows()}, DType::f32, workspace_tag());
    rmsnorm_forward(x, *w.norm, w.norm_eps, xn, rstd);
    DecodeFfnWeights plain = w;
    plain.norm = nullptr;
    ffn_decode(xn, plain, sel, out, force_idx, idx_out, parts);
    return;
  }
  const std::int64_t n = x.rows(), d = x.cols();
  require(w.w_gate_t && w.w_up_t && w.w_down, "ffn_decode", "all three weights are needed");
  const std::int64_t F = w.w_gate_t->rows();
  require(w.w_gate_t->cols() == d && w.w_up_t->rows() == F && w.w_up_t->cols() == d && w.w_down->rows() == F &&
              w.w_down->cols() == d,
          "ffn_decode", "weights must be [d_ffn, d] with d = " + std::to_string(d));
  require(out.rows() == n && out.cols() == d, "ffn_decode", "out must be [rows, d]");
  const int kept = sel ? sel->kept(static_cast<int>(F)) : static_cast<int>(F);
  if (force_idx) require(sel && force_idx->rows() == n && force_idx->cols() == kept, "ffn_decode", "force_idx must be [rows, kept]");
  if (idx_out) require(sel && idx_out->rows() == n && idx_out->cols() == kept, "ffn_decode", "idx_out must be [rows, kept]");
  if (sel && (parts & kFfnUpDown) && !(parts & kFfnSelect))
    require(force_idx != nullptr, "ffn_decode", "up/down without selection needs force_idx");

  F32In X(x), WG(*w.w_gate_t), WU(*w.w_up_t), WD(*w.w_down);
  auto dot = [&](const F32In& W, std::int64_t row, std::int64_t i) {
    double s = 0;
    for (std::int64_t c = 0; c < d; ++c) s += static_cast<double>(X[i * d + c]) * W[row * d + c];
    return static_cast<float>(s);
  };
  // Gate for every channel (the dense path and the MoC selection both need it).
  std::vector<float> g(static_cast<std::size_t>(n * F), 0.0f);
  const bool need_gate = (parts & kFfnGate) || (parts & kFfnUpDown);
#pragma omp parallel for schedule(static) if (need_gate)
  for (std::int64_t j = 0; j < F; ++j)
    for (std::int64_t i = 0; i < n; ++i)
      if (need_gate) g[static_cast<std::size_t>(i * F + j)] = dot(WG, j, i);

  // Kept channels of each row.
  std::vector<std::uint16_t> idx;
  if (sel) {
    Tensor idx_t = empty({n, kept}, DType::i16, workspace_tag());
    if (force_idx) {
      copy(idx_t, *force_idx);
    } else if (parts & kFfnSelect) {
      Tensor gt = empty({n, F}, DType::f32, workspace_tag());
      upload(gt, g.data());
      moc_select(gt, *sel, idx_t);
    }
    idx.assign(idx_t.data<std::uint16_t>(), idx_t.data<std::uint16_t>() + n * kept);
    if (idx_out && (force_idx || (parts & kFfnSelect))) copy(*idx_out, idx_t);
  }
  if (!(parts & kFfnUpDown)) return;

  F32Out O(out, true);
  std::vector<double> acc(static_cast<std::size_t>(n * d), 0.0);
  for (std::int64_t i = 0; i < n; ++i) {
    for (int jj = 0; jj < kept; ++jj) {
      const std::int64_t j = sel ? idx[static_cast<std::size_t>(i * kept + jj)] : jj;
      const float z = silu(g[static_cast<std::size_t>(i * F + j)]) * dot(WU, j, i);
      double* a = acc.data() + i * d;
#pragma omp simd
      for (std::int64_t c = 0; c < d; ++c) a[c] += static_cast<double>(z) * WD[j * d + c];
    }
  }
  for (std::int64_t e = 0; e < n * d; ++e) O[e] = static_cast<float>(O[e] + acc[static_cast<std::size_t>(e)]);
}

}  // namespace moc::cpu
