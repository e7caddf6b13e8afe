#include "runtime/checked_load.h"

#include <cstring>
#include <limits>
#include <sstream>
#include <unordered_map>

#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/unpickler.h>

namespace gpipe {
namespace {

// Every tensor inside `value` (dicts, lists, tuples), depth first.
void ForEachTensor(const c10::IValue& value, const std::function<void(const at::Tensor&)>& visit) {
  if (value.isTensor()) {
    visit(value.toTensor());
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      ForEachTensor(entry.key(), visit);
      ForEachTensor(entry.value(), visit);
    }
  } else if (value.isList()) {
    for (const auto& item : value.toListRef()) ForEachTensor(item, visit);
  } else if (value.isTuple()) {
    for (const auto& item : value.toTupleRef().elements()) ForEachTensor(item, visit);
  }
}

}  // namespace

c10::IValue LoadTorchSaveFile(const std::string& path) {
  // What torch::pickle_load does (readArchiveAndTensors), with the size of
  // each record it hands the unpickler remembered by its address.
  caffe2::serialize::PyTorchStreamReader archive(path);
  auto [pickle, pickle_bytes] = archive.getRecord("data.pkl");
  size_t read = 0;
  auto reader = [&, data = static_cast<const char*>(pickle.get()), size = pickle_bytes](
                    char* buffer, size_t length) -> size_t {
    length = std::min(length, size - read);
    if (length > 0) std::memcpy(buffer, data + read, length);  // data is null for 0 bytes
    read += length;
    return length;
  };
  std::unordered_map<const void*, size_t> record_bytes;
  auto read_record = [&](const std::string& name) {
    auto [data, bytes] = archive.getRecord("data/" + name);
    record_bytes[data.get()] = bytes;
    return std::move(data);
  };
  torch::jit::Unpickler unpickler(reader, nullptr, nullptr, read_record, c10::nullopt);
  unpickler.set_version(archive.version());
  c10::IValue value = unpickler.parse_ivalue();
  ForEachTensor(value, [&](const at::Tensor& tensor) {
    const size_t claimed = tensor.has_storage() ? tensor.storage().nbytes() : 0;
    auto it = record_bytes.find(tensor.has_storage() ? tensor.storage().data() : nullptr);
    const size_t held = it == record_bytes.end() ? 0 : it->second;
    TORCH_CHECK(claimed <= held, "a tensor claims ", claimed,
                " bytes of data, but its record holds ", held, "; the file is damaged");
    CheckWithinStorage(tensor, "a tensor");
  });
  return value;
}

void CheckWithinStorage(const at::Tensor& tensor, const std::string& what) {
  if (!tensor.defined() || tensor.numel() == 0) return;
  std::ostringstream shape;
  shape << tensor.sizes();
  const int64_t storage_bytes =
      tensor.has_storage() ? static_cast<int64_t>(tensor.storage().nbytes()) : 0;
  auto refuse = [&] {
    TORCH_CHECK(false, what, " claims shape ", shape.str(), " but its data holds ", storage_bytes,
                " bytes; the file is damaged");
  };
  // The last element's offset, in elements, with overflow checks.
  const int64_t limit = std::numeric_limits<int64_t>::max() / 16;
  int64_t last = tensor.storage_offset();
  if (last < 0) refuse();
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    const int64_t size = tensor.size(d), stride = tensor.stride(d);
    if (stride < 0 || (stride > 0 && size - 1 > (limit - last) / stride)) refuse();
    last += (size - 1) * stride;
  }
  if ((last + 1) * static_cast<int64_t>(tensor.element_size()) > storage_bytes) refuse();
}

}  // namespace gpipe
