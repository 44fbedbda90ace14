// Hugging Face checkpoint folders, in and out: config.json beside model.safetensors (or a sharded
// model.safetensors.index.json), the layout transformers' save_pretrained writes and from_pretrained reads, for
// the three LLaMA-family architectures mocbench runs:
//   LlamaForCausalLM    dense SwiGLU, GQA, tied or untied head
//   Qwen3ForCausalLM    + RMSNorm on each head's q and k (q_norm / k_norm)
//   MixtralForCausalLM  the FFN a mixture of experts (router "gate", experts w1 = gate, w3 = up, w2 = down)
// Names (HF -> mocbench): model.embed_tokens -> embed; model.layers.L.input_layernorm -> layerL.attn_norm;
// self_attn.{q,k,v,o}_proj -> wq wk wv wo; self_attn.{q,k}_norm -> q_norm k_norm; post_attention_layernorm ->
// ffn_norm; mlp.{gate,up,down}_proj -> w_gate w_up w_down; block_sparse_moe.gate -> router;
// block_sparse_moe.experts.E.{w1,w3,w2} -> expertE.{w_gate,w_up,w_down}; model.norm -> final_norm; lm_head ->
// lm_head. HF stores a projection as [out, in] (y = x W^T), mocbench as [in, out]: every matrix is transposed;
// the embedding is [vocab, d] in both. No permutation (unlike GGUF): HF's RoPE layout is mocbench's.
// What mocbench lacks is refused with the key and the reason (rope_scaling, attention or MLP biases, an
// activation other than SiLU, a head_dim other than hidden / heads, sliding-window attention).
#pragma once
#include <string>

#include "model/checkpoint_config.h"
#include "model/config.h"
#include "model/transformer.h"

namespace moc {

// is_hf_folder, hf_config_from_json and hf_config: model/checkpoint_config.h (configuration without weights).

// Fills every parameter of `model` (built from hf_config(dir), or with a MoC FFN on top of it) from the folder's
// safetensors (F32, BF16 or F16); a missing tensor or a wrong shape is refused with its name.
void load_hf_weights(const std::string& dir, Transformer& model);

// Writes `model` (its training layout) as a folder transformers loads: config.json and model.safetensors,
// F32 or BF16 as the parameters are stored. A MoC FFN is written as the dense SwiGLU it was built from (the
// weights are the same; config.json's "mocbench_ffn" records the variant, which transformers ignores).
void save_hf_checkpoint(const std::string& dir, Transformer& model);

}  // namespace moc
