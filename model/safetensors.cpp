#include "model/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace moc {

namespace {
using json = nlohmann::json;

[[noreturn]] void fail(const std::string& what, const std::string& msg) {
  throw SafeTensorsError(what + ": not a valid safetensors file: " + msg);
}
}  // namespace

const SafeTensor* SafeTensorsFile::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::size_t safetensors_dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  throw SafeTensorsError("unknown safetensors dtype '" + d + "'");
}

void write_safetensors(const std::string& path, const std::vector<SafeTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") throw SafeTensorsError("safetensors: bad tensor name '" + t.name + "'");
    if (header.contains(t.name)) throw SafeTensorsError("safetensors: tensor '" + t.name + "' given twice");
    std::uint64_t numel = 1;
    for (auto s : t.shape) {
      if (s < 0) throw SafeTensorsError("safetensors: tensor '" + t.name + "' has a negative dimension");
      numel *= static_cast<std::uint64_t>(s);
    }
    if (numel * safetensors_dtype_size(t.dtype) != t.data.size())
      throw SafeTensorsError("safetensors: tensor '" + t.name + "' holds " + std::to_string(t.data.size()) +
                             " bytes, its shape and dtype need " + std::to_string(numel * safetensors_dtype_size(t.dtype)));
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the buffer starts 8-byte aligned
  const std::uint64_t n = text.size();
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    f.write(reinterpret_cast<const char*>(len), 8);
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& t : tensors) f.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size()));
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      throw SafeTensorsError("cannot write " + path + " (disk full or no permission?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw SafeTensorsError("cannot write " + path + ": " + ec.message());
  }
}

SafeTensorsFile parse_safetensors(const std::vector<unsigned char>& bytes, const std::string& what) {
  if (bytes.size() < 8) fail(what, "shorter than its 8-byte header size");
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(bytes[static_cast<std::size_t>(i)]) << (8 * i);
  if (n > bytes.size() - 8) fail(what, "the header size (" + std::to_string(n) + " bytes) runs past the end of the file");
  json header;
  try {
    header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  } catch (const json::exception& e) {
    fail(what, std::string("its header is not JSON (") + e.what() + ")");
  }
  if (!header.is_object()) fail(what, "its header is not a JSON object");
  const std::size_t base = 8 + static_cast<std::size_t>(n), buffer = bytes.size() - base;
  SafeTensorsFile out;
  struct Span {
    std::uint64_t begin, end;
    std::size_t index;
  };
  std::vector<Span> spans;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) fail(what, "__metadata__ is not an object");
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) fail(what, "__metadata__ value of '" + k + "' is not a string");
        out.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      fail(what, "tensor '" + name + "' lacks dtype, shape or data_offsets");
    const auto& d = v["dtype"];
    const auto& sh = v["shape"];
    const auto& off = v["data_offsets"];
    if (!d.is_string() || !sh.is_array() || !off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      fail(what, "tensor '" + name + "' has a malformed entry");
    SafeTensor t;
    t.name = name;
    t.dtype = d.get<std::string>();
    std::size_t es = 0;
    try {
      es = safetensors_dtype_size(t.dtype);
    } catch (const SafeTensorsError& e) {
      fail(what, "tensor '" + name + "': " + e.what());
    }
    std::uint64_t numel = 1;
    for (const auto& s : sh) {
      if (!s.is_number_unsigned()) fail(what, "tensor '" + name + "' has a dimension that is not a non-negative integer");
      const auto x = s.get<std::uint64_t>();
      if (x != 0 && numel > (std::uint64_t(1) << 62) / x) fail(what, "tensor '" + name + "' is impossibly large");
      numel *= x;
      t.shape.push_back(static_cast<std::int64_t>(x));
    }
    const auto b = off[0].get<std::uint64_t>(), e = off[1].get<std::uint64_t>();
    if (b > e || e > buffer) fail(what, "tensor '" + name + "' lies outside the data buffer");
    if (e - b != numel * es)
      fail(what, "tensor '" + name + "' spans " + std::to_string(e - b) + " bytes, its shape and dtype need " +
                     std::to_string(numel * es));
    spans.push_back({b, e, out.tensors.size()});
    out.tensors.push_back(std::move(t));
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& c) { return a.begin < c.begin || (a.begin == c.begin && a.end < c.end); });
  std::uint64_t at = 0;
  for (const auto& s : spans) {
    if (s.begin != at) fail(what, s.begin < at ? "two tensors overlap in the data buffer" : "the data buffer has a hole");
    at = s.end;
  }
  if (at != buffer) fail(what, "the data buffer has " + std::to_string(buffer - at) + " bytes no tensor covers");
  std::vector<SafeTensor> ordered;
  ordered.reserve(spans.size());
  for (const auto& s : spans) {
    SafeTensor& t = out.tensors[s.index];
    t.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(base + s.begin), bytes.begin() + static_cast<std::ptrdiff_t>(base + s.end));
    ordered.push_back(std::move(t));
  }
  out.tensors = std::move(ordered);
  return out;
}

SafeTensorsFile read_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw SafeTensorsError("cannot read " + path);
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return parse_safetensors(bytes, path);
}

}  // namespace moc
