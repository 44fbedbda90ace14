#include "model/checkpoint.h"

#include "model/published.h"

#include <cstring>
#include <set>
#include <stdexcept>

#include "model/safetensors.h"

namespace moc {

namespace {

const char* st_dtype(DType d) {
  switch (d) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::i16: return "I16";
  }
  throw std::logic_error("checkpoint: unexpected dtype");
}

// How a stored parameter maps to its logical shape: FFN weights carry zero padding channels.
enum class Pad { none, cols, rows };
Pad pad_of(const std::string& name, const ModelConfig& c) {
  if (c.ffn_cols() == c.d_ffn) return Pad::none;
  if (name.ends_with(".w_gate") || name.ends_with(".w_up")) return Pad::cols;
  if (name.ends_with(".w_down")) return Pad::rows;
  return Pad::none;
}

Shape logical_shape(const Tensor& t, Pad pad, const ModelConfig& c) {
  Shape s = t.shape();
  if (pad == Pad::cols) s[1] = c.d_ffn;
  if (pad == Pad::rows) s[0] = c.d_ffn;
  return s;
}

SafeTensor to_safetensor(Ops& o, const std::string& name, const Tensor& t, Pad pad, const ModelConfig& c) {
  SafeTensor st;
  st.name = name;
  st.dtype = st_dtype(t.dtype());
  const Shape ls = logical_shape(t, pad, c);
  st.shape.assign(ls.begin(), ls.end());
  std::vector<unsigned char> raw(t.nbytes());
  o.download(t, raw.data());
  const std::size_t es = dtype_bytes(t.dtype());
  if (pad == Pad::none) {
    st.data = std::move(raw);
  } else if (pad == Pad::rows) {  // [Fp, d]: the first d_ffn rows
    raw.resize(static_cast<std::size_t>(c.d_ffn) * static_cast<std::size_t>(t.dim(1)) * es);
    st.data = std::move(raw);
  } else {  // [d, Fp]: each row's first d_ffn columns
    const std::size_t rows = static_cast<std::size_t>(t.dim(0)), F = static_cast<std::size_t>(c.d_ffn),
                      Fp = static_cast<std::size_t>(t.dim(1));
    st.data.resize(rows * F * es);
    for (std::size_t r = 0; r < rows; ++r) std::memcpy(st.data.data() + r * F * es, raw.data() + r * Fp * es, F * es);
  }
  return st;
}

// Fills t (stored shape, zero padding) from a file tensor of the logical shape, converting F32 <-> BF16.
void from_safetensor(Ops& o, const SafeTensor& st, Tensor& t, Pad pad, const ModelConfig& c, const std::string& path) {
  const Shape ls = logical_shape(t, pad, c);
  if (std::vector<std::int64_t>(ls.begin(), ls.end()) != st.shape) {
    std::string want, got;
    for (auto x : ls) want += (want.empty() ? "" : ", ") + std::to_string(x);
    for (auto x : st.shape) got += (got.empty() ? "" : ", ") + std::to_string(x);
    throw std::invalid_argument(path + ": tensor '" + st.name + "' is [" + got + "], the model's is [" + want +
                                "]: the checkpoint is of another model configuration");
  }
  // Logical values as f32 (or raw bytes when the dtypes agree).
  const std::size_t n = st.data.size() / safetensors_dtype_size(st.dtype);
  std::vector<unsigned char> logical;
  const std::size_t es = dtype_bytes(t.dtype());
  if (st.dtype == st_dtype(t.dtype())) {
    logical = st.data;
  } else if ((st.dtype == "F32" || st.dtype == "BF16") && is_float(t.dtype())) {
    logical.resize(n * es);
    for (std::size_t i = 0; i < n; ++i) {
      float f;
      if (st.dtype == "F32") std::memcpy(&f, st.data.data() + 4 * i, 4);
      else {
        std::uint16_t h;
        std::memcpy(&h, st.data.data() + 2 * i, 2);
        f = bf16_to_f32(h);
      }
      if (t.dtype() == DType::f32) std::memcpy(logical.data() + 4 * i, &f, 4);
      else {
        const std::uint16_t h = f32_to_bf16(f);
        std::memcpy(logical.data() + 2 * i, &h, 2);
      }
    }
  } else {
    throw std::invalid_argument(path + ": tensor '" + st.name + "' is " + st.dtype + ", the model's " +
                                std::string(st_dtype(t.dtype())));
  }
  std::vector<unsigned char> stored(t.nbytes(), 0);
  if (pad == Pad::cols) {
    const std::size_t rows = static_cast<std::size_t>(t.dim(0)), F = static_cast<std::size_t>(c.d_ffn),
                      Fp = static_cast<std::size_t>(t.dim(1));
    for (std::size_t r = 0; r < rows; ++r) std::memcpy(stored.data() + r * Fp * es, logical.data() + r * F * es, F * es);
  } else {
    std::memcpy(stored.data(), logical.data(), logical.size());
  }
  o.upload(t, stored.data());
}

std::map<std::string, std::string> metadata_of(const Transformer& m, int step, bool optimizer) {
  return {{"format", "mocbench-checkpoint-1"}, {"model", m.config().describe()}, {"preset", m.config().preset},
          {"step", std::to_string(step)}, {"optimizer", optimizer ? "adamw" : "none"}};
}

CheckpointInfo load(const std::string& path, Transformer& model, Trainer* trainer) {
  if (model.decode_layout())
    throw std::logic_error("load_weights: load before prepare_decode (the checkpoint holds the training layout)");
  const SafeTensorsFile f = read_safetensors(path);
  CheckpointInfo info;
  info.metadata = f.metadata;
  if (auto it = f.metadata.find("step"); it != f.metadata.end()) info.step = std::stoi(it->second);
  info.has_optimizer = f.metadata.count("optimizer") && f.metadata.at("optimizer") != "none";
  const ModelConfig& c = model.config();
  std::set<std::string> used;
  auto take = [&](const std::string& name, Tensor& t, Pad pad) {
    const SafeTensor* st = f.find(name);
    if (!st) throw std::invalid_argument(path + ": no tensor '" + name + "': the checkpoint is of another model");
    from_safetensor(model.ops(), *st, t, pad, c, path);
    used.insert(name);
  };
  for (auto& p : model.params()) take(p.name, p.value, pad_of(p.name, c));
  if (trainer) {
    if (trainer->sharded()) throw std::logic_error("load_checkpoint: optimizer state sharded over ranks (zero1) is not checkpointed");
    if (!info.has_optimizer) throw std::invalid_argument(path + ": holds no optimizer state to resume from");
    auto& ps = model.params();
    for (std::size_t i = 0; i < ps.size(); ++i) {
      const Pad pad = pad_of(ps[i].name, c);
      take("optim.m." + ps[i].name, trainer->m_state()[i], pad);
      take("optim.v." + ps[i].name, trainer->v_state()[i], pad);
      if (trainer->has_master()) take("optim.master." + ps[i].name, trainer->master_state()[i], pad);
    }
    trainer->set_steps_done(info.step);
  } else {
    for (const auto& t : f.tensors)
      if (t.name.rfind("optim.", 0) == 0) used.insert(t.name);
  }
  for (const auto& t : f.tensors)
    if (!used.count(t.name))
      throw std::invalid_argument(path + ": tensor '" + t.name + "' is not a parameter of this model");
  return info;
}

}  // namespace

void save_checkpoint(const std::string& path, Transformer& model, const Trainer* trainer) {
  if (model.decode_layout())
    throw std::logic_error("save_checkpoint: the model is in the decode layout; save before prepare_decode");
  const ModelConfig& c = model.config();
  Ops& o = model.ops();
  std::vector<SafeTensor> out;
  auto& ps = model.params();
  for (auto& p : ps) out.push_back(to_safetensor(o, p.name, p.value, pad_of(p.name, c), c));
  if (trainer) {
    if (trainer->sharded()) throw std::logic_error("save_checkpoint: optimizer state sharded over ranks (zero1) is not checkpointed");
    const Trainer& t = *trainer;
    for (std::size_t i = 0; i < ps.size(); ++i) {
      const Pad pad = pad_of(ps[i].name, c);
      out.push_back(to_safetensor(o, "optim.m." + ps[i].name, t.m_state()[i], pad, c));
      out.push_back(to_safetensor(o, "optim.v." + ps[i].name, t.v_state()[i], pad, c));
      if (t.has_master()) out.push_back(to_safetensor(o, "optim.master." + ps[i].name, t.master_state()[i], pad, c));
    }
  }
  write_safetensors(path, out, metadata_of(model, trainer ? trainer->steps_done() : 0, trainer != nullptr));
}

CheckpointInfo load_weights(const std::string& path, Transformer& model) {
  if (is_published_checkpoint(path)) {  // a GGUF file or a Hugging Face folder (model/published.h)
    PublishedCheckpoint::open(path).load(model);
    return {};
  }
  return load(path, model, nullptr);
}

CheckpointInfo load_checkpoint(const std::string& path, Transformer& model, Trainer& trainer) {
  return load(path, model, &trainer);
}

}  // namespace moc
