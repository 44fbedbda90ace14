#!/usr/bin/env python3
"""PyTorch peer benchmark for mocbench: MoC / dense SwiGLU FFN decode and end-to-end greedy decoding.

Self-contained (torch only). Measures on the GPU the math that mocbench measures:

  ffn     one FFN layer of the paper's 1b model (d 2048, d_ffn 5461, bf16), rows 1..4:
          dense SwiGLU, MoC top-K (K 1024) masked-dense and gathered-rows, MoC 2:8 gathered-rows,
          plus gate-only / gate+selection parts; eager, CUDA graph, torch.compile, compile + CUDA graph.
          Cold weights: calls rotate over >= 8 weight copies (> L2).
  decode  greedy decoding of a LLaMA-style 1b model with random bf16 weights (vocab 32000, hidden 2048,
          24 layers, 32 heads x 64, d_ffn 5461), prompt 128, generate 128; ms per decode step (median).
  copy    device-to-device copy bandwidth of a 1 GiB tensor (always measured).

CSV (stdout and --out): study,variant,impl,batch,median_us,notes

Usage: python3 bench/peers/torch_decode_peer.py [--studies ffn,decode] [--batches 1,2,3,4]
           [--out FILE] [--quick] [--compile-mode default] [--budget-s 240]
"""
import argparse
import csv
import io
import math
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F

# ---- model shape (paper's 1b model)
D = 2048
DFFN = 5461
K_TOP = 1024
N_LAYERS = 24
N_HEADS = 32
HEAD_DIM = 64
VOCAB = 32000
EPS = 1e-5
BF16 = torch.bfloat16
DEV = "cuda"

T_START = time.time()


def log(msg):
    sys.stderr.write(f"[{time.time() - T_START:7.1f}s] {msg}\n")
    sys.stderr.flush()


def elapsed():
    return time.time() - T_START


class Csv:
    COLS = ["study", "variant", "impl", "batch", "median_us", "notes"]

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

    def row(self, study, variant, impl, batch, us, notes=""):
        self._emit([study, variant, impl, batch, "" if us is None else f"{us:.2f}", notes])


def err_note(e):
    traceback.print_exc(file=sys.stderr)
    msg = " ".join(f"ERROR {type(e).__name__}: {e}".split())
    return msg[:300]


def free():
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


# ---- timing helpers

def time_groups(group_fn, reps, warm, per):
    """Median microseconds per call of group_fn (which makes `per` calls), CUDA events around each group."""
    for _ in range(warm):
        group_fn()
    torch.cuda.synchronize()
    st = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    en = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for r in range(reps):
        st[r].record()
        group_fn()
        en[r].record()
    torch.cuda.synchronize()
    ts = [st[r].elapsed_time(en[r]) * 1000.0 / per for r in range(reps)]
    return statistics.median(ts), ts


def capture(body, warm=3):
    """Warm up body on a side stream, then capture one call of it into a CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warm):
            body()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    torch.cuda.synchronize()
    return g


def compile_fn(fn, mode):
    torch._dynamo.reset()
    if mode == "default":
        return torch.compile(fn, dynamic=False)
    return torch.compile(fn, mode=mode, dynamic=False)


# ---- FFN math. Weight layouts: wg, wu, wd all [d_ffn, d] (row j = channel j).
#   g = x @ wg^T, u = x @ wu^T, y = z @ wd.

def rms(x, w):
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, EPS)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * w


def sel_topk(g):
    return torch.topk(g, K_TOP, dim=-1, largest=True, sorted=False)


def sel_28(g):
    """2:8: top 2 of g within each group of 8 consecutive channels (pad with -inf to a multiple of 8)."""
    b, n = g.shape
    pad = (-n) % 8
    if pad:
        g = F.pad(g, (0, pad), value=float("-inf"))
    v, i = g.view(b, -1, 8).topk(2, dim=-1, largest=True, sorted=False)
    i = i + torch.arange(0, g.shape[1], 8, device=g.device, dtype=i.dtype).view(1, -1, 1)
    return v.reshape(b, -1), i.reshape(b, -1)


def ffn_dense(x, wg, wu, wd):
    return (F.silu(F.linear(x, wg)) * F.linear(x, wu)) @ wd


def make_masked(sel):
    def ffn_masked(x, wg, wu, wd):
        g = F.linear(x, wg)
        u = F.linear(x, wu)
        v, i = sel(g)
        z = torch.zeros_like(g).scatter_(-1, i, F.silu(v) * u.gather(-1, i))
        return z @ wd
    return ffn_masked


def make_gather_bmm(sel):
    """Gathered rows: index_select the K selected rows of wu and wd, then batched GEMV (cuBLAS bmm)."""
    def ffn_gather_bmm(x, wg, wu, wd):
        g = F.linear(x, wg)
        v, i = sel(g)
        b, k = i.shape
        flat = i.reshape(-1)
        wu_s = wu.index_select(0, flat).view(b, k, -1)
        u = torch.bmm(wu_s, x.unsqueeze(-1)).squeeze(-1)
        z = F.silu(v) * u
        wd_s = wd.index_select(0, flat).view(b, k, -1)
        return torch.bmm(z.unsqueeze(1), wd_s).squeeze(1)
    return ffn_gather_bmm


def make_gather_sum(sel):
    """Gathered rows as indexing + multiply + sum: torch.compile fuses the gather into the reductions."""
    def ffn_gather_sum(x, wg, wu, wd):
        g = F.linear(x, wg)
        v, i = sel(g)
        u = (wu[i] * x.unsqueeze(1)).sum(-1)
        z = F.silu(v) * u
        return (z.unsqueeze(-1) * wd[i]).sum(1)
    return ffn_gather_sum


def part_gate(x, wg, wu, wd):
    return F.linear(x, wg)


def part_gate_topk(x, wg, wu, wd):
    return sel_topk(F.linear(x, wg))


def part_gate_28(x, wg, wu, wd):
    return sel_28(F.linear(x, wg))


# name -> (fn, selection kind or None, kept channels or None, compile it?, nominal weight bytes fn)
def wbytes_dense(b):
    return 3 * D * DFFN * 2


def wbytes_gather(kept):
    return lambda b: D * DFFN * 2 + 2 * min(b * kept, DFFN) * D * 2


FFN_VARIANTS = [
    ("dense", ffn_dense, "dense", True, wbytes_dense),
    ("moc_k1024_masked", make_masked(sel_topk), "topk", True, wbytes_dense),
    ("moc_k1024_gather_bmm", make_gather_bmm(sel_topk), "topk", True, wbytes_gather(K_TOP)),
    ("moc_k1024_gather_sum", make_gather_sum(sel_topk), "topk", True, wbytes_gather(K_TOP)),
    ("moc28_gather_bmm", make_gather_bmm(sel_28), "28", True, wbytes_gather(DFFN // 4 + 1)),
    ("moc28_gather_sum", make_gather_sum(sel_28), "28", True, wbytes_gather(DFFN // 4 + 1)),
    ("part_gate", part_gate, None, False, lambda b: D * DFFN * 2),
    ("part_gate_topk1024", part_gate_topk, None, False, lambda b: D * DFFN * 2),
    ("part_gate_top2of8", part_gate_28, None, False, lambda b: D * DFFN * 2),
]


def ffn_reference(kind, x, wg, wu, wd):
    """fp32 reference; the selection is taken from the bf16 gate (as the variants do)."""
    xf = x.float()
    uf = xf @ wu.float().t()
    if kind == "dense":
        gf = xf @ wg.float().t()
        return (F.silu(gf) * uf) @ wd.float()
    g = F.linear(x, wg)
    v, i = (sel_topk if kind == "topk" else sel_28)(g)
    z = torch.zeros(g.shape, device=g.device, dtype=torch.float32)
    z.scatter_(-1, i, F.silu(v.float()) * uf.gather(-1, i))
    return z @ wd.float()


class FfnStudy:
    def __init__(self, out, args):
        self.out = out
        self.args = args
        self.ncopies = args.copies
        gen = torch.Generator(device=DEV)
        gen.manual_seed(1234)
        s = 1.0 / math.sqrt(D)
        self.W = []
        for _ in range(self.ncopies):
            ws = tuple(torch.randn(DFFN, D, device=DEV, dtype=BF16, generator=gen).mul_(s if j < 2 else 1.0 / math.sqrt(DFFN))
                       for j in range(3))
            self.W.append(ws)
        self.x = {}
        for b in args.batches:
            self.x[b] = [torch.randn(b, D, device=DEV, dtype=BF16, generator=gen) for _ in range(self.ncopies)]
        self.refs = {}
        mb = 3 * D * DFFN * 2 * self.ncopies / 1e6
        log(f"ffn: {self.ncopies} weight copies, {mb:.0f} MB of weights in rotation")

    def ref(self, kind, b):
        key = (kind, b)
        if key not in self.refs:
            self.refs[key] = ffn_reference(kind, self.x[b][0], *self.W[0])
        return self.refs[key]

    def measure(self, name, fn, kind, wb, impl, b, compile_s=None):
        reps, warm = self.args.reps, self.args.warm
        xs = self.x[b]
        n = self.ncopies
        outs = [None] * n

        def group():
            for i in range(n):
                outs[i] = fn(xs[i], *self.W[i])

        g = None
        try:
            if impl.endswith("graph"):
                g = capture(group)
                med, _ = time_groups(g.replay, reps, warm, n)
            else:
                med, _ = time_groups(group, reps, warm, n)
            notes = [f"copies={n}", f"reps={reps}"]
            nb = wb(b)
            notes.append(f"wMB={nb / 1e6:.1f}")
            notes.append(f"effGBps={nb / (med * 1e-6) / 1e9:.0f}")
            if kind is not None:
                y = outs[0]
                r = self.ref(kind, b)
                e = ((y.float() - r).abs().max() / r.abs().max()).item()
                notes.append(f"relerr={e:.1e}")
            if compile_s is not None:
                notes.append(f"compile_s={compile_s:.1f}")
            self.out.row("ffn-decode", name, impl, b, med, ";".join(notes))
        except Exception as e:  # noqa: BLE001
            self.out.row("ffn-decode", name, impl, b, None, err_note(e))
        finally:
            del outs, g
            free()

    def run_eager(self):
        for b in self.args.batches:
            for name, fn, kind, _, wb in FFN_VARIANTS:
                for impl in ("eager", "eager_graph"):
                    self.measure(name, fn, None if kind is None else kind, wb, impl, b)
            log(f"ffn eager batch {b} done")

    def run_compile(self, batches):
        for b in batches:
            for name, fn, kind, do_compile, wb in FFN_VARIANTS:
                if not do_compile:
                    continue
                if elapsed() > self.args.budget_s:
                    for impl in ("compile", "compile_graph"):
                        self.out.row("ffn-decode", name, impl, b, None,
                                     f"SKIPPED: time budget ({elapsed():.0f}s > {self.args.budget_s:.0f}s)")
                    continue
                try:
                    cf = compile_fn(fn, self.args.compile_mode)
                    t = time.time()
                    cf(self.x[b][0], *self.W[0])
                    torch.cuda.synchronize()
                    cs = time.time() - t
                except Exception as e:  # noqa: BLE001
                    note = err_note(e)
                    for impl in ("compile", "compile_graph"):
                        self.out.row("ffn-decode", name, impl, b, None, note)
                    free()
                    continue
                for impl in ("compile", "compile_graph"):
                    self.measure(name, cf, kind, wb, impl, b, compile_s=cs)
                del cf
                log(f"ffn compile {name} batch {b} done (compile {cs:.1f}s)")

    def close(self):
        del self.W, self.x, self.refs
        free()


# ---- decode model

def rope(x, cos, sin):
    half = x.shape[-1] // 2
    x1 = x[..., :half]
    x2 = x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def make_layer(ffn):
    """One decoder layer for a decode step: h [B, d], caches [B, H, T, hd], pos [1] (int64)."""
    def layer(h, wqkv, wo, n1, n2, wg, wu, wd, kc, vc, pos, cos, sin, mask):
        b = h.shape[0]
        x = rms(h, n1)
        qkv = F.linear(x, wqkv).view(b, 3, N_HEADS, HEAD_DIM)
        qk = rope(qkv[:, :2], cos, sin)
        q = qk[:, 0].unsqueeze(2)
        kc.index_copy_(2, pos, qk[:, 1].unsqueeze(2))
        vc.index_copy_(2, pos, qkv[:, 2].unsqueeze(2))
        o = F.scaled_dot_product_attention(q, kc, vc, attn_mask=mask)
        h = h + F.linear(o.reshape(b, D), wo)
        x = rms(h, n2)
        return h + ffn(x, wg, wu, wd)
    return layer


class Model:
    def __init__(self, args):
        self.P = args.prompt
        self.T = args.prompt + args.gen
        gen = torch.Generator(device=DEV)
        gen.manual_seed(4321)

        def rnd(*shape, std=0.02):
            return torch.randn(*shape, device=DEV, dtype=BF16, generator=gen).mul_(std)

        def ones():
            return torch.ones(D, device=DEV, dtype=BF16)

        self.emb = rnd(VOCAB, D)
        self.lm = rnd(D, VOCAB)
        self.nf = ones()
        # per layer: wqkv [3d, d], wo [d, d], attn norm, ffn norm, wg/wu/wd [d_ffn, d]
        self.layers = [(rnd(3 * D, D), rnd(D, D), ones(), ones(), rnd(DFFN, D), rnd(DFFN, D), rnd(DFFN, D))
                       for _ in range(N_LAYERS)]
        inv = 1.0 / (10000.0 ** (torch.arange(0, HEAD_DIM, 2, device=DEV, dtype=torch.float32) / HEAD_DIM))
        t = torch.arange(self.T, device=DEV, dtype=torch.float32)
        fr = torch.outer(t, inv)
        embf = torch.cat((fr, fr), dim=-1)
        self.cos = embf.cos().to(BF16)
        self.sin = embf.sin().to(BF16)
        self.ar = torch.arange(self.T, device=DEV)
        self.kc = self.vc = None
        self.B = None
        nparam = sum(p.numel() for p in [self.emb, self.lm] + [w for l in self.layers for w in l])
        log(f"decode model: {nparam / 1e9:.3f} B parameters ({nparam * 2 / 1e9:.2f} GB bf16)")

    def alloc_cache(self, b):
        if self.B == b:
            return
        self.kc = self.vc = None
        free()
        shape = (b, N_HEADS, self.T, HEAD_DIM)
        self.kc = [torch.zeros(shape, device=DEV, dtype=BF16) for _ in range(N_LAYERS)]
        self.vc = [torch.zeros(shape, device=DEV, dtype=BF16) for _ in range(N_LAYERS)]
        self.B = b

    def prefill(self, tokens, ffn_pf):
        b, s = tokens.shape
        h = F.embedding(tokens, self.emb)
        cos, sin = self.cos[:s], self.sin[:s]
        for l, (wqkv, wo, n1, n2, wg, wu, wd) in enumerate(self.layers):
            x = rms(h, n1)
            qkv = F.linear(x, wqkv).view(b, s, 3, N_HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
            q = rope(qkv[0], cos, sin)
            k = rope(qkv[1], cos, sin)
            v = qkv[2]
            self.kc[l][:, :, :s].copy_(k)
            self.vc[l][:, :, :s].copy_(v)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            h = h + F.linear(o.transpose(1, 2).reshape(b, s, D), wo)
            x = rms(h, n2)
            h = h + ffn_pf(x.reshape(b * s, D), wg, wu, wd).view(b, s, D)
        x = rms(h[:, -1], self.nf)
        return (x @ self.lm).argmax(-1)

    def step(self, tok, pos, layer):
        """One greedy decode step; updates tok and pos in place (so a CUDA graph of it loops by itself)."""
        h = F.embedding(tok, self.emb)
        cos = self.cos.index_select(0, pos)
        sin = self.sin.index_select(0, pos)
        mask = (self.ar <= pos).view(1, 1, 1, self.T)
        for l, w in enumerate(self.layers):
            h = layer(h, *w, self.kc[l], self.vc[l], pos, cos, sin, mask)
        x = rms(h, self.nf)
        logits = x @ self.lm
        tok.copy_(logits.argmax(-1))
        pos.add_(1)
        return logits


DEC_VARIANTS = [
    # name, selection (None: dense), decode FFN
    ("dense", None, ffn_dense),
    ("moc_k1024_gather_bmm", sel_topk, make_gather_bmm(sel_topk)),
    ("moc_k1024_gather_sum", sel_topk, make_gather_sum(sel_topk)),
    ("moc28_gather_bmm", sel_28, make_gather_bmm(sel_28)),
    ("moc28_gather_sum", sel_28, make_gather_sum(sel_28)),
]


class DecodeStudy:
    def __init__(self, out, args):
        self.out = out
        self.args = args
        self.model = Model(args)
        self.prompts = {}
        self.eager_tokens = {}
        self.eager_logits = {}

    def setup(self, name, sel, b):
        """Allocate caches, prefill (eager, masked-dense FFN for MoC), time the prefill; returns the first token."""
        m = self.model
        m.alloc_cache(b)
        if b not in self.prompts:
            g = torch.Generator(device=DEV)
            g.manual_seed(99 + b)
            self.prompts[b] = torch.randint(0, VOCAB, (b, m.P), device=DEV, generator=g)
        ffn_pf = ffn_dense if sel is None else make_masked(sel)
        first = m.prefill(self.prompts[b], ffn_pf)
        torch.cuda.synchronize()
        return first, ffn_pf

    def time_prefill(self, name, b, ffn_pf):
        m = self.model
        ts = []
        for _ in range(3):
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            first = m.prefill(self.prompts[b], ffn_pf)
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e) * 1000.0)
        med = statistics.median(ts)
        self.out.row("prefill", name, "eager", b, med,
                     f"prompt={m.P};tok_per_s={b * m.P / (med * 1e-6):.0f};MoC prefill uses the masked-dense FFN")
        return first

    def run_one(self, name, sel, ffn, b, impl, state=None):
        m = self.model
        cls = "compile" if impl.startswith("compile") else "eager"
        n_gen = self.args.gen
        notes = []
        g = None
        try:
            first, ffn_pf = self.setup(name, sel, b)
            if impl == "eager" and not name.endswith("_sum"):
                first = self.time_prefill(name.replace("_gather_bmm", ""), b, ffn_pf)
            layer = make_layer(ffn)
            tok = first.clone()
            pos = torch.full((1,), m.P, device=DEV, dtype=torch.long)

            def reset():
                tok.copy_(first)
                pos.fill_(m.P)

            if cls == "compile":
                if state is not None and "layer" in state:
                    layer = state["layer"]
                else:
                    layer = compile_fn(layer, self.args.compile_mode)
                    if state is not None:
                        state["layer"] = layer
                t = time.time()
                m.step(tok, pos, layer)
                torch.cuda.synchronize()
                notes.append(f"first_step_s={time.time() - t:.1f}")
                notes.append("per_layer_compile")
            reset()
            logits = m.step(tok, pos, layer).float()
            key = (name, b)
            if impl == "eager":
                self.eager_logits[key] = logits
            elif key in self.eager_logits:
                r = self.eager_logits[key]
                notes.append(f"logits_relerr_vs_eager={((logits - r).abs().max() / r.abs().max()).item():.1e}")
            del logits
            for _ in range(2):
                m.step(tok, pos, layer)
            torch.cuda.synchronize()
            reset()
            if impl.endswith("graph"):
                g = capture(lambda: m.step(tok, pos, layer))
                reset()
                body = g.replay
            else:
                def body():
                    m.step(tok, pos, layer)
            torch.cuda.synchronize()
            st = [torch.cuda.Event(enable_timing=True) for _ in range(n_gen)]
            en = [torch.cuda.Event(enable_timing=True) for _ in range(n_gen)]
            toks = torch.empty(b, n_gen, device=DEV, dtype=torch.long)
            for s in range(n_gen):
                st[s].record()
                body()
                en[s].record()
                toks[:, s].copy_(tok)
            torch.cuda.synchronize()
            ts = [st[s].elapsed_time(en[s]) * 1000.0 for s in range(n_gen)]
            med = statistics.median(ts)
            notes.append(f"steps={n_gen}")
            notes.append(f"mean_us={statistics.fmean(ts):.1f}")
            notes.append(f"tok_per_s={b / (med * 1e-6):.0f}")
            assert int(pos.item()) == m.P + n_gen, f"pos {pos.item()}"
            if impl == "eager":
                self.eager_tokens[key] = toks
            elif key in self.eager_tokens:
                match = (toks == self.eager_tokens[key]).float().mean().item()
                notes.append(f"tok_match_eager={match:.2f}")
            self.out.row("decode", name, impl, b, med, ";".join(notes))
        except Exception as e:  # noqa: BLE001
            self.out.row("decode", name, impl, b, None, err_note(e))
        finally:
            del g
            free()

    def run_eager(self):
        for name, sel, ffn in DEC_VARIANTS:
            for b in self.args.batches:
                for impl in ("eager", "eager_graph"):
                    if elapsed() > self.args.budget_s:
                        self.out.row("decode", name, impl, b, None,
                                     f"SKIPPED: time budget ({elapsed():.0f}s > {self.args.budget_s:.0f}s)")
                        continue
                    self.run_one(name, sel, ffn, b, impl)
                log(f"decode eager {name} batch {b} done")

    def run_compile(self, batches):
        for b in batches:
            for name, sel, ffn in DEC_VARIANTS:
                if elapsed() > self.args.budget_s:
                    for impl in ("compile", "compile_graph"):
                        self.out.row("decode", name, impl, b, None,
                                     f"SKIPPED: time budget ({elapsed():.0f}s > {self.args.budget_s:.0f}s)")
                    continue
                # compile once, measure both the plain launches and a CUDA graph of the compiled step
                state = {}
                for impl in ("compile", "compile_graph"):
                    self.run_one(name, sel, ffn, b, impl, state)
                state.clear()
                free()
                log(f"decode compile {name} batch {b} done")


def copy_bw(out):
    try:
        n = 1 << 30
        src = torch.empty(n, device=DEV, dtype=torch.uint8).fill_(1)
        dst = torch.empty_like(src)
        med, _ = time_groups(lambda: dst.copy_(src), 20, 3, 1)
        out.row("copy_GBps", "d2d_copy_1GiB", "eager", 1, med,
                f"GBps={2 * n / (med * 1e-6) / 1e9:.0f} (read+write bytes)")
        del src, dst
    except Exception as e:  # noqa: BLE001
        out.row("copy_GBps", "d2d_copy_1GiB", "eager", 1, None, err_note(e))
    free()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--studies", default="ffn,decode")
    ap.add_argument("--batches", default="1,2,3,4")
    ap.add_argument("--out", default="")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions / generated tokens (smoke run)")
    ap.add_argument("--compile-mode", default="default",
                    help="torch.compile mode: default | max-autotune-no-cudagraphs | ... (CUDA graphs are captured "
                         "by hand, so reduce-overhead is not needed)")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--copies", type=int, default=8, help="FFN weight copies in rotation (>= 8)")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=None)
    ap.add_argument("--budget-s", type=float, default=240.0,
                    help="compile configurations starting after this many seconds are skipped (rows say so)")
    args = ap.parse_args()
    args.studies = [s.strip() for s in args.studies.split(",") if s.strip()]
    args.batches = [int(b) for b in args.batches.split(",") if b.strip()]
    if args.reps is None:
        args.reps = 20 if args.quick else 100
    args.warm = 3 if args.quick else 10
    if args.gen is None:
        args.gen = 32 if args.quick else 128
    args.copies = max(args.copies, 1)

    out = Csv(args.out)
    if not torch.cuda.is_available():
        out.row("meta", "device", "-", 0, None, "ERROR: no CUDA device")
        return 1
    torch.manual_seed(0)
    for nm in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, nm):
            setattr(torch._dynamo.config, nm, 64)
    p = torch.cuda.get_device_properties(0)
    l2 = getattr(p, "L2_cache_size", 0)
    out.row("meta", "device", "-", 0, None,
            f"{p.name}; sm_{p.major}{p.minor}; {p.multi_processor_count} SMs; L2 {l2 / 1e6:.0f} MB; "
            f"torch {torch.__version__}; cuda {torch.version.cuda}; compile_mode={args.compile_mode}; "
            f"quick={args.quick}")
    copy_bw(out)

    ffn = dec = None
    if "ffn" in args.studies:
        try:
            ffn = FfnStudy(out, args)
            ffn.run_eager()
        except Exception as e:  # noqa: BLE001
            out.row("ffn-decode", "setup", "-", 0, None, err_note(e))
            ffn = None
    if "decode" in args.studies:
        try:
            dec = DecodeStudy(out, args)
            dec.run_eager()
        except Exception as e:  # noqa: BLE001
            out.row("decode", "setup", "-", 0, None, err_note(e))
            dec = None
    if not args.no_compile:
        first, rest = args.batches[:1], args.batches[1:]
        # most important first: batch 1 (first listed) of both studies, then the other batches
        for bs in (first, rest):
            if ffn is not None and bs:
                ffn.run_compile(bs)
            if dec is not None and bs:
                dec.run_compile(bs)
    if ffn is not None:
        ffn.close()
    log(f"done in {elapsed():.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
