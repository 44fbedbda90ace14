#!/usr/bin/env python3
"""PyTorch peer benchmark for mocbench's training numbers (issue #5): MoC / dense SwiGLU FFN forward and
backward, the row top-K alone, and a whole LLaMA-style training step.

Self-contained (torch only), random bf16 weights on the GPU. Studies:

  ffn    one FFN layer of the paper's 1b model (d 2048, d_ffn 5461, K 1024) on batch 64 x seq 256 = 16384
         rows, bf16, forward and backward timed separately (CUDA events, median). Variants:
           dense          SwiGLU through autograd (stores G, S, U, Z)
           dense_gcp      custom autograd.Function storing G and U, recomputing S and Z in the backward
           moc_k1024      MoC custom autograd.Function (paper eq. 7): stores the K selected values of G, U,
                          S and Z (G', U', S', Z' as [rows, K] bf16) and the indices as int16
           moc_k1024_gcp  MoC + GCP: stores G', U' and the int16 indices, recomputes S', Z'
           moc28          MoC 2:8 (top 2 of every 8 channels; the last group of 5 channels keeps 2), stores
                          G', U', S', Z' and int16 indices like moc_k1024 (1366 kept channels per row); the
                          selection is two max passes over [rows, 683, 8] (torch.topk(2) over 8-wide slices is
                          an order of magnitude slower: see the topk study)
           moc28_gcp      MoC 2:8 + GCP
         The MoC forward scatters Z' into a zeroed dense [rows, d_ffn] matrix and runs a dense GEMM (the
         fastest down projection that plain torch offers); the backward gathers dZ' at the K indices, forms
         dG' and dU' and scatters them into dense matrices for the weight-gradient and dX GEMMs.
         Columns: fwd_us, bwd_us (backward = torch.autograd.grad of x and the three weights), median_us
         (median of fwd+bwd per repetition), stored_mib (bytes the autograd graph saved: saved-tensor hooks,
         storages counted once, x and the weights excluded; eager only), peak_mib
         (torch.cuda.max_memory_allocated during forward+backward minus the allocation before the forward).
         notes: resid_mib (memory still allocated after the forward minus the output), fwd/bwd peak deltas,
         relerr against an fp32 reference with the same selection (max over y, dx, dWg, dWu, dWd of
         max|a-r|/max|r|).
         impl: `eager`; `eager_pad8` (the FFN weights carry zero rows up to d_ffn 5464, a multiple of 8, so
         every GEMM operand has an aligned leading dimension; the zero channels add nothing, get zero gradients
         and are never selected); `compile` (torch.compile, dynamic=False, of the unpadded function; inductor
         pads the strides itself).
  topk   torch.topk(g, K, dim=-1, sorted=False) of bf16 [rows, d_ffn]: 16384 x 5461 K 1024 (1b, b64),
         65536 x 1376 K 256 (60m, b256), 65536 x 2048 K 384 (130m, b256), 32768 x 2736 K 512 (350m, b128),
         plus the 2:8 grouped selection of the same matrices (group2of8_topk: topk(2) over [rows, cols/8, 8];
         group2of8_max2: the two max passes the MoC 2:8 FFN uses); median us.
  train  a training step of a LLaMA-style model (RMSNorm, RoPE rotate-half, fused QKV, causal
         F.scaled_dot_product_attention, SwiGLU or MoC FFN, untied LM head, fp32 cross-entropy, AdamW with
         pure bf16 params, grads and states), presets 350m (hidden 1024, d_ffn 2736, 16 heads, 24 layers,
         K 512) at batch 128 and 1b (hidden 2048, d_ffn 5461, 32 heads, 24 layers, K 1024) at batch 64, seq
         256, vocab 32000; dense vs MoC vs MoC 2:8 (the ffn study's autograd functions). Step = zero_grad,
         forward, backward, optimizer step. median_us = median step time, tokens_per_s = batch*seq/median,
         peak_mib = torch.cuda.max_memory_allocated (reset after the model and optimizer are built, so it
         covers the warm-up steps that allocate the AdamW states), stored_mib = saved-tensor bytes of one
         forward (eager only; parameters, RoPE tables and tokens excluded). An out-of-memory configuration
         is a row with notes `oom`, and the run goes on. notes: act_resid_mib (allocated after the forward
         minus before it), fwd/bwd/opt split, losses. impl `eager_pad8` as in the ffn study (1b only: 350m's
         d_ffn 2736 is a multiple of 8 already); impl `compile`: regional compilation, the per-layer function
         compiled once (torch.compile, dynamic=False) and shared by all layers, plus the compiled final-norm +
         LM head + loss function; embedding and optimizer stay eager.

  MFU (train):  model FLOPs per token  F = 6 * N + 12 * L * d * seq, with
                N = L * (4 d^2 + 3 d d_ffn) + d * vocab   (all matmul weights: QKV, O, gate, up, down and the
                LM head; embedding lookup and norms excluded), 12 * L * d * seq = forward+backward of the
                attention score and value matmuls (PaLM's convention, counting the full seq x seq matrix,
                not half for causal). MFU = F * tokens_per_s / 989.4e12 (H100 SXM dense bf16 peak). MoC rows
                use the dense model's F (this torch MoC runs the same dense GEMMs), so MFU ~ tokens/s.

CSV (stdout and --out):
  study,variant,impl,preset,batch,median_us,fwd_us,bwd_us,tokens_per_s,mfu,peak_mib,stored_mib,notes

Usage: python3 bench/peers/torch_train_peer.py [--studies ffn,topk,train] [--out FILE] [--quick]
           [--budget-s 300] [--impls eager,eager_pad8,compile] [--no-compile] [--presets 350m,1b]
           [--train-variants dense,moc,moc28]
       --tiny --device cpu: a CPU smoke run on tiny shapes (checks the code paths, not a measurement).
"""
import argparse
import csv
import gc
import io
import math
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F

BF16 = torch.bfloat16
EPS = 1e-5
PEAK_FLOPS = 989.4e12          # H100 SXM dense bf16 tensor peak
MIB = float(1 << 20)

T_START = time.time()
DEV = "cuda"
CUDA = True

# ---- shapes (replaced by tiny ones with --tiny)
FFN_SHAPE = dict(d=2048, dffn=5461, k=1024, batch=64, seq=256)
TOPK_SHAPES = [  # preset, batch (x seq 256 = rows), d_ffn, K
    ("1b", 64, 5461, 1024),
    ("60m", 256, 1376, 256),
    ("130m", 256, 2048, 384),
    ("350m", 128, 2736, 512),
]
TOPK_SEQ = 256
PRESETS = {
    "350m": dict(d=1024, dffn=2736, heads=16, layers=24, k=512, batch=128),
    "1b": dict(d=2048, dffn=5461, heads=32, layers=24, k=1024, batch=64),
}
SEQ = 256
VOCAB = 32000


def use_tiny():
    global TOPK_SEQ, SEQ, VOCAB
    FFN_SHAPE.update(d=64, dffn=171, k=32, batch=2, seq=64)   # 171 = 21*8 + 3: a partial last group
    TOPK_SHAPES[:] = [("1b", 2, 171, 32), ("60m", 4, 43, 8)]
    TOPK_SEQ = 32
    PRESETS.clear()
    PRESETS["tiny"] = dict(d=64, dffn=171, heads=4, layers=2, k=32, batch=2)
    SEQ = 16
    VOCAB = 256


def log(msg):
    sys.stderr.write(f"[{time.time() - T_START:7.1f}s] {msg}\n")
    sys.stderr.flush()


def elapsed():
    return time.time() - T_START


class Csv:
    COLS = ["study", "variant", "impl", "preset", "batch", "median_us", "fwd_us", "bwd_us", "tokens_per_s",
            "mfu", "peak_mib", "stored_mib", "notes"]

    def __init__(self, path):
        self.f = open(path, "w", newline="") if path else None
        self._emit(self.COLS)

    def _emit(self, vals):
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(vals)
        s = buf.getvalue()
        sys.stdout.write(s)
        sys.stdout.flush()
        if self.f:
            self.f.write(s)
            self.f.flush()

    def row(self, study, variant, impl, preset, batch, median_us=None, fwd_us=None, bwd_us=None,
            tokens_per_s=None, mfu=None, peak_mib=None, stored_mib=None, notes=""):
        def f(v, fmt):
            return "" if v is None else fmt.format(v)
        self._emit([study, variant, impl, preset, batch, f(median_us, "{:.2f}"), f(fwd_us, "{:.2f}"),
                    f(bwd_us, "{:.2f}"), f(tokens_per_s, "{:.0f}"), f(mfu, "{:.4f}"), f(peak_mib, "{:.1f}"),
                    f(stored_mib, "{:.1f}"), notes])


def err_note(e):
    traceback.print_exc(file=sys.stderr)
    msg = " ".join(f"ERROR {type(e).__name__}: {e}".split())
    return msg[:300]


def is_oom(e):
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


def sync():
    if CUDA:
        torch.cuda.synchronize()


def free():
    gc.collect()
    if CUDA:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def mem_alloc():
    return torch.cuda.memory_allocated() if CUDA else 0


def mem_peak():
    return torch.cuda.max_memory_allocated() if CUDA else 0


def reset_peak():
    if CUDA:
        torch.cuda.reset_peak_memory_stats()


class Ev:
    """A CUDA event, or a wall-clock stamp on the CPU (smoke runs)."""

    def __init__(self):
        self.e = torch.cuda.Event(enable_timing=True) if CUDA else None
        self.t = None

    def record(self):
        if self.e is not None:
            self.e.record()
        else:
            self.t = time.perf_counter()

    def us_to(self, other):
        if self.e is not None:
            return self.e.elapsed_time(other.e) * 1000.0
        return (other.t - self.t) * 1e6


def skipped(args):
    if elapsed() > args.budget_s:
        return f"SKIPPED: time budget ({elapsed():.0f}s > {args.budget_s:.0f}s)"
    return None


def compile_fn(fn, mode, reset=True):
    if reset:
        torch._dynamo.reset()
    if mode == "default":
        return torch.compile(fn, dynamic=False)
    return torch.compile(fn, mode=mode, dynamic=False)


def rms(x, w):
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, EPS)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * w


# ---- selections. g: [rows, n] (n >= dffn; columns past dffn are zero-weight padding channels, which the
# selection sets to -inf IN PLACE, so g must be a temporary); return (values [rows, kept], int64 indices).

def mask_pad(g, dffn):
    if g.shape[1] > dffn:
        g[:, dffn:].fill_(float("-inf"))
    return g


def sel_topk(g, k, dffn):
    return torch.topk(mask_pad(g, dffn), k, dim=-1, largest=True, sorted=False)


def groups8(g, dffn):
    """g as [rows, groups, 8], padded with -inf to a multiple of 8 channels, so the last partial group (5
    channels of 5461) keeps its 2 largest real channels."""
    g = mask_pad(g, dffn)
    pad = (-g.shape[1]) % 8
    if pad:
        g = F.pad(g, (0, pad), value=float("-inf"))
    return g.view(g.shape[0], -1, 8)


def base8(gv):
    return torch.arange(0, gv.shape[1] * 8, 8, device=gv.device).view(1, -1, 1)


def sel_28(g, k, dffn):
    """2:8: top 2 of each group of 8 consecutive channels as two max passes (max, mask the winner with -inf,
    max again): torch.topk over millions of 8-wide slices is ~15x slower (see the topk study)."""
    gv = groups8(g, dffn)
    v1, i1 = gv.max(-1, keepdim=True)
    v2, i2 = gv.scatter(-1, i1, float("-inf")).max(-1, keepdim=True)
    v = torch.cat((v1, v2), -1)
    i = torch.cat((i1, i2), -1) + base8(gv)
    return v.reshape(g.shape[0], -1), i.reshape(g.shape[0], -1)


def sel_28_topk(g, k, dffn):
    """2:8 with torch.topk(2) over the 8-wide groups (the decode peer's formulation)."""
    gv = groups8(g, dffn)
    v, i = gv.topk(2, dim=-1, largest=True, sorted=False)
    i = i + base8(gv)
    return v.reshape(g.shape[0], -1), i.reshape(g.shape[0], -1)


SELECT = {"topk": sel_topk, "28": sel_28}


def ceil8(n):
    return (n + 7) // 8 * 8


def kept_28(dffn):
    return 2 * ((dffn + 7) // 8)


# ---- FFN autograd functions. Weight layouts: wg, wu, wd all [d_ffn, d] (row j = channel j):
#   G = x wg^T, U = x wu^T, y = Z wd.

def ffn_dense(x, wg, wu, wd):
    return (F.silu(F.linear(x, wg)) * F.linear(x, wu)) @ wd


class DenseGcpFn(torch.autograd.Function):
    """Dense SwiGLU with gradient checkpointing of the element-wise part: stores G and U only."""

    @staticmethod
    def forward(ctx, x, wg, wu, wd):
        g = F.linear(x, wg)
        u = F.linear(x, wu)
        y = (F.silu(g) * u) @ wd
        ctx.save_for_backward(x, wg, wu, wd, g, u)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, wg, wu, wd, g, u = ctx.saved_tensors
        dy = dy.contiguous()
        s = F.silu(g)                                   # recompute S and Z
        z = s * u
        dwd = z.t() @ dy
        del z
        dz = dy @ wd.t()
        du = dz * s
        del s
        dg = torch.ops.aten.silu_backward(dz * u, g)
        del dz
        dwg = dg.t() @ x
        dwu = du.t() @ x
        dx = torch.addmm(dg @ wg, du, wu)
        return dx, dwg, dwu, dwd


def ffn_dense_gcp(x, wg, wu, wd):
    return DenseGcpFn.apply(x, wg, wu, wd)


class MocFn(torch.autograd.Function):
    """MoC FFN (paper eq. 4-7). Saves x, the selected G' and U' values ([rows, kept] bf16), S' and Z' too
    unless gcp, and the channel indices as int16. Z' is scattered into a dense matrix for the down GEMM."""

    @staticmethod
    def forward(ctx, x, wg, wu, wd, kind, k, gcp, dffn):
        g = F.linear(x, wg)
        u = F.linear(x, wu)
        gk, idx = SELECT[kind](g, k, dffn)
        uk = u.gather(1, idx)
        del u
        sk = F.silu(gk)
        zk = sk * uk
        z = torch.zeros_like(g).scatter_(1, idx, zk)
        del g
        y = z @ wd
        del z
        idx16 = idx.to(torch.int16)
        if gcp:
            ctx.save_for_backward(x, wg, wu, wd, gk, uk, idx16)
        else:
            ctx.save_for_backward(x, wg, wu, wd, gk, uk, idx16, sk, zk)
        ctx.gcp = gcp
        ctx.dffn = wg.shape[0]
        return y

    @staticmethod
    def backward(ctx, dy):
        if ctx.gcp:
            x, wg, wu, wd, gk, uk, idx16 = ctx.saved_tensors
            sk = F.silu(gk)                             # recompute S' and Z'
            zk = sk * uk
        else:
            x, wg, wu, wd, gk, uk, idx16, sk, zk = ctx.saved_tensors
        idx = idx16.long()
        dy = dy.contiguous()
        n = x.shape[0]
        zd = torch.zeros(n, ctx.dffn, device=dy.device, dtype=dy.dtype).scatter_(1, idx, zk)
        dwd = zd.t() @ dy                               # grad W_down = Z'^T dD
        del zd
        dz = dy @ wd.t()                                # grad Z' = dD W_down^T (dense GEMM, then gather)
        dzk = dz.gather(1, idx)
        duk = sk * dzk                                  # grad U = S' . grad Z'
        dgk = torch.ops.aten.silu_backward(uk * dzk, gk)  # grad G = (U' . grad Z') . SiLU'(G')
        dgd = dz.zero_().scatter_(1, idx, dgk)
        dud = torch.zeros_like(dgd).scatter_(1, idx, duk)
        dwg = dgd.t() @ x
        dwu = dud.t() @ x
        dx = torch.addmm(dgd @ wg, dud, wu)
        return dx, dwg, dwu, dwd, None, None, None, None


def make_moc(kind, k, gcp, dffn):
    """dffn: the logical width; the weights may carry zero padding rows past it (eager_pad8)."""
    def ffn_moc(x, wg, wu, wd):
        return MocFn.apply(x, wg, wu, wd, kind, k, gcp, dffn)
    return ffn_moc


def ffn_variants(k, dffn):
    """name -> (fn, selection kind or 'dense', kept channels)."""
    return [
        ("dense", ffn_dense, "dense", dffn),
        ("dense_gcp", ffn_dense_gcp, "dense", dffn),
        (f"moc_k{k}", make_moc("topk", k, False, dffn), "topk", k),
        (f"moc_k{k}_gcp", make_moc("topk", k, True, dffn), "topk", k),
        ("moc28", make_moc("28", k, False, dffn), "28", kept_28(dffn)),
        ("moc28_gcp", make_moc("28", k, True, dffn), "28", kept_28(dffn)),
    ]


def pad_rows(w, rows):
    """w [n, d] with zero rows appended up to `rows` (zero channels: they add nothing to y, get zero gradients,
    and AdamW without weight decay keeps them zero)."""
    if rows == w.shape[0]:
        return w
    return torch.cat((w, w.new_zeros(rows - w.shape[0], w.shape[1])))


def saved_bytes(fn, exclude):
    """Run fn() under saved-tensor hooks; return (its result, bytes of the distinct storages the autograd
    graph saved, those of `exclude` left out)."""
    excl = {t.untyped_storage().data_ptr() for t in exclude}
    seen = {}

    def pack(t):
        try:
            st = t.untyped_storage()
            p = st.data_ptr()
            if p not in excl and p not in seen:
                seen[p] = st.nbytes()
        except Exception:  # noqa: BLE001  (tensors without storage)
            pass
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(seen.values())


def relerr(a, r):
    return ((a.float() - r.float()).abs().max() / r.float().abs().max().clamp_min(1e-30)).item()


# ---- study: ffn

class FfnStudy:
    def __init__(self, out, args, pad):
        self.out = out
        self.args = args
        s = FFN_SHAPE
        self.d, self.dffn, self.k = s["d"], s["dffn"], s["k"]
        rows = ceil8(self.dffn) if pad else self.dffn
        self.batch = s["batch"]
        self.n = s["batch"] * s["seq"]
        gen = torch.Generator(device=DEV)
        gen.manual_seed(1234)

        def rnd(*shape, std, rows=None):
            w = torch.randn(*shape, device=DEV, dtype=BF16, generator=gen) * std
            return (w if rows is None else pad_rows(w, rows)).requires_grad_()

        self.wg = rnd(self.dffn, self.d, std=1.0 / math.sqrt(self.d), rows=rows)
        self.wu = rnd(self.dffn, self.d, std=1.0 / math.sqrt(self.d), rows=rows)
        self.wd = rnd(self.dffn, self.d, std=1.0 / math.sqrt(self.dffn), rows=rows)
        self.x = rnd(self.n, self.d, std=1.0)
        self.dy = torch.randn(self.n, self.d, device=DEV, dtype=BF16, generator=gen)
        self.inputs = [self.x, self.wg, self.wu, self.wd]
        self.refs = {}
        self.variants = ffn_variants(self.k, self.dffn)
        log(f"ffn: rows {self.n}, d {self.d}, d_ffn {self.dffn} (weights {rows} rows), K {self.k}")

    def ref(self, kind):
        """fp32 reference (y, dx, dWg, dWu, dWd); the selection is taken from the bf16 gate."""
        if kind in self.refs:
            return self.refs[kind]
        with torch.no_grad():
            idx = None
            if kind != "dense":
                _, idx = SELECT[kind](F.linear(self.x, self.wg), self.k, self.dffn)
        xf, wgf, wuf, wdf = [t.detach().float().requires_grad_() for t in self.inputs]
        gf = xf @ wgf.t()
        uf = xf @ wuf.t()
        zf = F.silu(gf) * uf
        if idx is not None:
            zf = zf * torch.zeros_like(gf).scatter_(1, idx, 1.0)
        yf = zf @ wdf
        grads = torch.autograd.grad(yf, [xf, wgf, wuf, wdf], self.dy.float())
        r = [yf.detach()] + [g.detach() for g in grads]
        del xf, wgf, wuf, wdf, gf, uf, zf, yf, grads
        self.refs = {kind: r}                           # keep one reference at a time
        return r

    def measure(self, name, fn, kind, kept, impl, compile_s=None):
        args = self.args
        notes = [f"rows={self.n}", f"kept={kept}"]
        ins = self.inputs
        try:
            # memory pass (eager: also the saved-tensor bytes)
            free()
            reset_peak()
            base = mem_alloc()
            stored = None
            if impl.startswith("eager"):
                y, stored = saved_bytes(lambda: fn(*ins), exclude=ins)
            else:
                y = fn(*ins)
            sync()
            fwd_peak = mem_peak() - base
            resid = mem_alloc() - base - y.untyped_storage().nbytes()
            grads = torch.autograd.grad(y, ins, self.dy)
            sync()
            peak = mem_peak() - base
            r = self.ref(kind)
            err = max(relerr(a, b) for a, b in zip([y] + list(grads), r))
            del y, grads, r
            free()
            # timing
            reps, warm = args.reps, args.warm
            for _ in range(warm):
                y = fn(*ins)
                g = torch.autograd.grad(y, ins, self.dy)
                del y, g
            sync()
            evs = [(Ev(), Ev(), Ev()) for _ in range(reps)]
            for e0, e1, e2 in evs:
                e0.record()
                y = fn(*ins)
                e1.record()
                g = torch.autograd.grad(y, ins, self.dy)
                e2.record()
                del y, g
            sync()
            fwd = statistics.median(e0.us_to(e1) for e0, e1, _ in evs)
            bwd = statistics.median(e1.us_to(e2) for _, e1, e2 in evs)
            tot = statistics.median(e0.us_to(e2) for e0, _, e2 in evs)
            notes += [f"reps={reps}", f"resid_mib={resid / MIB:.1f}", f"fwd_peak_mib={fwd_peak / MIB:.1f}",
                      f"relerr={err:.1e}"]
            if compile_s is not None:
                notes.append(f"compile_s={compile_s:.1f}")
            self.out.row("ffn", name, impl, "1b", self.batch, median_us=tot, fwd_us=fwd, bwd_us=bwd,
                         tokens_per_s=self.n / (tot * 1e-6), peak_mib=peak / MIB,
                         stored_mib=None if stored is None else stored / MIB, notes=";".join(notes))
        except Exception as e:  # noqa: BLE001
            note = "oom" if is_oom(e) else err_note(e)
            self.out.row("ffn", name, impl, "1b", self.batch, notes=note)
        free()

    def run(self, impl):
        for name, fn, kind, kept in self.variants:
            sk = skipped(self.args)
            if sk:
                self.out.row("ffn", name, impl, "1b", self.batch, notes=sk)
                continue
            if impl.startswith("eager"):
                self.measure(name, fn, kind, kept, impl)
            else:
                try:
                    cf = compile_fn(fn, self.args.compile_mode)
                    t = time.time()
                    y = cf(*self.inputs)
                    torch.autograd.grad(y, self.inputs, self.dy)
                    del y
                    sync()
                    cs = time.time() - t
                except Exception as e:  # noqa: BLE001
                    self.out.row("ffn", name, impl, "1b", self.batch, notes=err_note(e))
                    free()
                    continue
                self.measure(name, cf, kind, kept, impl, compile_s=cs)
                del cf
                torch._dynamo.reset()
            log(f"ffn {impl} {name} done")

    def close(self):
        del self.inputs, self.x, self.wg, self.wu, self.wd, self.dy, self.refs
        free()


# ---- study: topk

def topk_study(out, args):
    reps = args.reps
    for preset, b, dffn, k in TOPK_SHAPES:
        rows = b * TOPK_SEQ
        g = None
        for variant in (f"topk_k{k}", "group2of8_topk", "group2of8_max2"):
            sk = skipped(args)
            if sk:
                out.row("topk", variant, "eager", preset, b, notes=sk)
                continue
            try:
                if g is None:
                    gen = torch.Generator(device=DEV)
                    gen.manual_seed(7)
                    g = torch.randn(rows, dffn, device=DEV, dtype=BF16, generator=gen)
                extra = ""
                if variant.startswith("group2of8"):
                    kept = kept_28(dffn)
                    sel = sel_28_topk if variant.endswith("topk") else sel_28
                    fn = lambda: sel(g, 2, dffn)               # noqa: E731
                    if sel is sel_28:      # same selected values as the topk formulation (indices differ at ties)?
                        a = g.gather(1, sel_28(g, 2, dffn)[1]).sort(-1).values
                        b2 = g.gather(1, sel_28_topk(g, 2, dffn)[1]).sort(-1).values
                        extra = f";same_values_as_topk={bool(torch.equal(a, b2))}"
                        del a, b2
                else:
                    kept = k
                    fn = lambda: torch.topk(g, k, dim=-1, largest=True, sorted=False)  # noqa: E731
                for _ in range(args.warm):
                    fn()
                sync()
                evs = [(Ev(), Ev()) for _ in range(reps)]
                for e0, e1 in evs:
                    e0.record()
                    fn()
                    e1.record()
                sync()
                med = statistics.median(a.us_to(c) for a, c in evs)
                nbytes = rows * dffn * 2 + rows * kept * (2 + 8)
                out.row("topk", variant, "eager", preset, b, median_us=med,
                        notes=f"rows={rows};cols={dffn};kept={kept};sorted=False;reps={reps};"
                              f"GBps={nbytes / (med * 1e-6) / 1e9:.0f} (g read + values/int64 idx written){extra}")
            except Exception as e:  # noqa: BLE001
                out.row("topk", variant, "eager", preset, b, notes="oom" if is_oom(e) else err_note(e))
        g = fn = None
        free()
    log("topk done")


# ---- study: train

def rope(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def make_layer(ffn, heads):
    def layer(h, cos, sin, n1, wqkv, wo, n2, wg, wu, wd):
        b, s, d = h.shape
        x = rms(h, n1)
        qkv = F.linear(x, wqkv).view(b, s, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        q = rope(qkv[0], cos, sin)
        k = rope(qkv[1], cos, sin)
        o = F.scaled_dot_product_attention(q, k, qkv[2], is_causal=True)
        h = h + F.linear(o.transpose(1, 2).reshape(b, s, d), wo)
        x = rms(h, n2)
        return h + ffn(x.reshape(b * s, d), wg, wu, wd).view(b, s, d)
    return layer


def head_loss(h, nf, head, targets):
    x = rms(h, nf)
    logits = F.linear(x, head)
    return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.reshape(-1))


def train_variants(k, dffn):
    return {
        "dense": ffn_dense,
        "dense_gcp": ffn_dense_gcp,
        "moc": make_moc("topk", k, False, dffn),
        "moc_gcp": make_moc("topk", k, True, dffn),
        "moc28": make_moc("28", k, False, dffn),
        "moc28_gcp": make_moc("28", k, True, dffn),
    }


def flops_per_token(p):
    L, d, dffn = p["layers"], p["d"], p["dffn"]
    n = L * (4 * d * d + 3 * d * dffn) + d * VOCAB
    return 6 * n + 12 * L * d * SEQ, n


class TrainRun:
    def __init__(self, p, batch, pad):
        d, dffn, L, H = p["d"], p["dffn"], p["layers"], p["heads"]
        rows = ceil8(dffn) if pad else dffn
        self.p = p
        gen = torch.Generator(device=DEV)
        gen.manual_seed(4321)

        def rnd(*shape, std=0.02, rows=None):
            w = torch.randn(*shape, device=DEV, dtype=BF16, generator=gen) * std
            return (w if rows is None else pad_rows(w, rows)).requires_grad_()

        def ones():
            return torch.ones(d, device=DEV, dtype=BF16).requires_grad_()

        self.emb = rnd(VOCAB, d)
        self.layers = [(ones(), rnd(3 * d, d), rnd(d, d), ones(), rnd(dffn, d, rows=rows), rnd(dffn, d, rows=rows),
                        rnd(dffn, d, rows=rows)) for _ in range(L)]
        self.nf = ones()
        self.head = rnd(VOCAB, d)
        self.params = [self.emb, self.nf, self.head] + [w for lw in self.layers for w in lw]
        hd = d // H
        inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, device=DEV, dtype=torch.float32) / hd))
        fr = torch.outer(torch.arange(SEQ, device=DEV, dtype=torch.float32), inv)
        embf = torch.cat((fr, fr), dim=-1)
        self.cos = embf.cos().to(BF16)
        self.sin = embf.sin().to(BF16)
        tok = torch.randint(0, VOCAB, (batch, SEQ + 1), device=DEV, generator=gen)
        self.inp = tok[:, :-1].contiguous()
        self.tgt = tok[:, 1:].contiguous()
        self.fused = False
        try:
            self.opt = torch.optim.AdamW(self.params, lr=1e-4, betas=(0.9, 0.999), weight_decay=0.0, fused=True)
            self.fused = True
        except Exception:  # noqa: BLE001
            self.opt = torch.optim.AdamW(self.params, lr=1e-4, betas=(0.9, 0.999), weight_decay=0.0)
        self.nalloc = sum(t.numel() for t in self.params)
        self.nparam = self.nalloc - 3 * L * (rows - dffn) * d      # logical (padding rows not counted)

    def consts(self):
        return self.params + [self.cos, self.sin, self.inp, self.tgt]

    def loss(self, layer, headf):
        h = F.embedding(self.inp, self.emb)
        for w in self.layers:
            h = layer(h, self.cos, self.sin, *w)
        return headf(h, self.nf, self.head, self.tgt)

    def step(self, layer, headf, evs=None, hooks=False):
        if evs:
            evs[0].record()
        self.opt.zero_grad(set_to_none=True)
        stored = None
        m0 = mem_alloc()
        if hooks:
            loss, stored = saved_bytes(lambda: self.loss(layer, headf), exclude=self.consts())
        else:
            loss = self.loss(layer, headf)
        self.act_bytes = mem_alloc() - m0           # what the forward left allocated for the backward
        if evs:
            evs[1].record()
        loss.backward()
        if evs:
            evs[2].record()
        self.opt.step()
        if evs:
            evs[3].record()
        return loss.detach(), stored


def train_one(out, args, pname, vname, impl):
    p = PRESETS[pname]
    batch = p["batch"]
    tokens = batch * SEQ
    fpt, nmat = flops_per_token(p)
    run = layer = headf = None
    notes = []
    try:
        free()
        run = TrainRun(p, batch, pad=impl.endswith("pad8"))
        ffn = train_variants(p["k"], p["dffn"])[vname]
        layer = make_layer(ffn, p["heads"])
        headf = head_loss
        if impl == "compile":
            torch._dynamo.reset()
            layer = compile_fn(layer, args.compile_mode)
            headf = compile_fn(head_loss, args.compile_mode, reset=False)
        sync()
        reset_peak()
        base = mem_alloc()
        t = time.time()
        loss0, stored = run.step(layer, headf, hooks=impl.startswith("eager"))
        sync()
        if impl == "compile":
            notes.append(f"first_step_s={time.time() - t:.1f}")
            notes.append("regional_compile=layer_fn+head_loss")
        for _ in range(max(args.train_warm - 1, 0)):
            run.step(layer, headf)
        sync()
        evs = [tuple(Ev() for _ in range(4)) for _ in range(args.train_reps)]
        losses = []
        for e in evs:
            loss, _ = run.step(layer, headf, evs=e)
            losses.append(loss)
        sync()
        step = statistics.median(e[0].us_to(e[3]) for e in evs)
        fwd = statistics.median(e[0].us_to(e[1]) for e in evs)
        bwd = statistics.median(e[1].us_to(e[2]) for e in evs)
        opt = statistics.median(e[2].us_to(e[3]) for e in evs)
        peak = mem_peak()
        tps = tokens / (step * 1e-6)
        pbytes = run.nalloc * 2
        notes += [f"steps={args.train_reps}", f"seq={SEQ}", f"tokens={tokens}", f"opt_us={opt:.0f}",
                  f"params={run.nparam / 1e6:.1f}M", f"params_mib={pbytes / MIB:.0f}",
                  f"peak_minus_weights_grads_adam_mib={(peak - 4 * pbytes) / MIB:.0f}",
                  f"act_resid_mib={run.act_bytes / MIB:.0f}", f"base_mib={base / MIB:.0f}",
                  f"loss0={loss0.item():.3f}",
                  f"loss_last={losses[-1].item():.3f}", f"fused_adamw={run.fused}",
                  f"flops_per_token={fpt / 1e9:.3f}G"]
        if run.nalloc != run.nparam:
            notes.append(f"ffn_weight_rows={ceil8(p['dffn'])}")
        out.row("train", vname, impl, pname, batch, median_us=step, fwd_us=fwd, bwd_us=bwd, tokens_per_s=tps,
                mfu=fpt * tps / PEAK_FLOPS, peak_mib=peak / MIB,
                stored_mib=None if stored is None else stored / MIB, notes=";".join(notes))
    except Exception as e:  # noqa: BLE001
        if is_oom(e):
            log(f"train {pname} {vname} {impl}: out of memory ({' '.join(str(e).split())[:200]})")
            out.row("train", vname, impl, pname, batch, notes="oom")
        else:
            out.row("train", vname, impl, pname, batch, notes=err_note(e))
    del run, layer, headf
    if impl == "compile":
        torch._dynamo.reset()
    free()
    log(f"train {pname} {vname} {impl} done")


def train_study(out, args, impl):
    for pname in args.presets:
        if impl.endswith("pad8") and PRESETS[pname]["dffn"] % 8 == 0:
            continue                                    # already aligned: the same as eager
        for vname in args.train_variants:
            sk = skipped(args)
            if sk:
                out.row("train", vname, impl, pname, PRESETS[pname]["batch"], notes=sk)
                continue
            train_one(out, args, pname, vname, impl)


def main():
    global DEV, CUDA
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--studies", default="ffn,topk,train")
    ap.add_argument("--out", default="")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions and steps (smoke run)")
    ap.add_argument("--budget-s", type=float, default=300.0,
                    help="configurations that would start after this many seconds are skipped (rows say so)")
    ap.add_argument("--impls", default="eager,eager_pad8,compile",
                    help="eager: as written (d_ffn 5461 rows); eager_pad8: FFN weights padded with zero rows to a "
                         "multiple of 8 (aligned GEMM leading dimensions; presets whose d_ffn is already a "
                         "multiple of 8 are skipped); compile: torch.compile of the unpadded model")
    ap.add_argument("--no-compile", action="store_true", help="drop `compile` from --impls")
    ap.add_argument("--compile-mode", default="default")
    ap.add_argument("--presets", default="350m,1b")
    ap.add_argument("--train-variants", default="dense,moc,moc28",
                    help="of dense,dense_gcp,moc,moc_gcp,moc28,moc28_gcp")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--train-reps", type=int, default=None)
    ap.add_argument("--device", default="cuda", help="cuda (default); cpu only for --tiny smoke runs")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (code-path check, not a measurement)")
    args = ap.parse_args()
    args.studies = [s.strip() for s in args.studies.split(",") if s.strip()]
    DEV = args.device
    CUDA = DEV.startswith("cuda")
    if args.tiny:
        use_tiny()
        args.presets = "tiny"
    args.presets = [s.strip() for s in args.presets.split(",") if s.strip()]
    args.train_variants = [s.strip() for s in args.train_variants.split(",") if s.strip()]
    if args.reps is None:
        args.reps = 5 if args.quick else 30
    args.warm = 2 if args.quick else 5
    if args.train_reps is None:
        args.train_reps = 3 if args.quick else 10
    args.train_warm = 1 if args.quick else 3

    out = Csv(args.out)
    if CUDA and not torch.cuda.is_available():
        out.row("meta", "device", "-", "-", 0, notes="ERROR: no CUDA device")
        return 1
    torch.manual_seed(0)
    for nm in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, nm):
            setattr(torch._dynamo.config, nm, 64)
    if CUDA:
        pr = torch.cuda.get_device_properties(0)
        dev = (f"{pr.name}; sm_{pr.major}{pr.minor}; {pr.multi_processor_count} SMs; "
               f"{pr.total_memory / (1 << 30):.1f} GiB; cuda {torch.version.cuda}")
    else:
        dev = f"CPU ({DEV})"
    out.row("meta", "device", "-", "-", 0,
            notes=f"{dev}; torch {torch.__version__}; compile_mode={args.compile_mode}; quick={args.quick}; "
                  f"tiny={args.tiny}; budget_s={args.budget_s:.0f}; mfu_peak={PEAK_FLOPS / 1e12:.1f}TFLOPs")

    impls = [s.strip() for s in args.impls.split(",") if s.strip()]
    if args.no_compile:
        impls = [i for i in impls if i != "compile"]
    bad = [i for i in impls if i not in ("eager", "eager_pad8", "compile")]
    if bad:
        ap.error(f"unknown --impls {bad}")
    # order: the cheap studies and every eager configuration first, then the compiled ones
    for impl in impls:
        if "ffn" in args.studies:
            try:
                st = FfnStudy(out, args, pad=impl.endswith("pad8"))
                st.run(impl)
                st.close()
            except Exception as e:  # noqa: BLE001
                out.row("ffn", "setup", impl, "1b", FFN_SHAPE["batch"], notes="oom" if is_oom(e) else err_note(e))
            st = None
            free()
        if "topk" in args.studies and impl == impls[0]:
            topk_study(out, args)
        if "train" in args.studies:
            train_study(out, args, impl)
    log(f"done in {elapsed():.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
