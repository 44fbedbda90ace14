// The safetensors file format (huggingface/safetensors, docs "Format"), written here from its specification:
//   8 bytes   N, the header's size (little-endian u64)
//   N bytes   a JSON object: {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//             "__metadata__": {"key": "value", ...}} (UTF-8; may end in spaces -- we pad to 8-byte alignment)
//   the rest  the byte buffer: each tensor's row-major little-endian bytes at [begin, end) of it; the tensors
//             cover the buffer exactly, without holes or overlaps.
// The reader checks all of that and refuses anything else with a message naming the file and what is wrong.
#pragma once
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace moc {

struct SafeTensor {
  std::string name;
  std::string dtype;                // F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL ...
  std::vector<std::int64_t> shape;  // [] is a scalar
  std::vector<unsigned char> data;  // numel x dtype size bytes
};

struct SafeTensorsFile {
  std::map<std::string, std::string> metadata;
  std::vector<SafeTensor> tensors;  // in buffer order
  const SafeTensor* find(const std::string& name) const;
};

class SafeTensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bytes per element of a dtype name; throws SafeTensorsError for an unknown one.
std::size_t safetensors_dtype_size(const std::string& dtype);

// Writes atomically (a temporary file beside it, then rename): an interrupted save leaves the old file.
void write_safetensors(const std::string& path, const std::vector<SafeTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
SafeTensorsFile read_safetensors(const std::string& path);
// The same from bytes in memory (tests, fuzzing); `what` names the source in messages.
SafeTensorsFile parse_safetensors(const std::vector<unsigned char>& bytes, const std::string& what);

}  // namespace moc
