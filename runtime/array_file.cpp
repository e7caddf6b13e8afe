#include "runtime/array_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/filesystem.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>

#include <ATen/ATen.h>

namespace gpipe {
namespace {

constexpr char kNpyMagic[] = "\x93NUMPY";
constexpr size_t kNpyMagicBytes = 6;
constexpr size_t kMaxNpyHeader = 1 << 20;  // NumPy writes a few hundred bytes

[[noreturn]] void Refuse(const std::string& path, const std::string& why) {
  TORCH_CHECK(false, "data file '", path, "' ", why);
}

size_t FileSize(const std::string& path) {
  boost::system::error_code error;
  TORCH_CHECK(boost::filesystem::is_regular_file(path, error), "data file '", path,
              "' does not exist");
  auto size = boost::filesystem::file_size(path, error);
  TORCH_CHECK(!error, "cannot read the size of data file '", path, "': ", error.message());
  return static_cast<size_t>(size);
}

// a * b, or nullopt when it does not fit in `limit`.
std::optional<size_t> Multiply(size_t a, size_t b, size_t limit) {
  if (a != 0 && b > limit / a) return std::nullopt;
  return a * b;
}

struct NpyType {
  c10::ScalarType stored;
  size_t bytes;
  bool is_unsigned;  // uint16/uint32, stored as the signed type of that width
};

std::optional<NpyType> ParseDescr(const std::string& descr) {
  if (descr.size() < 3) return std::nullopt;
  const char order = descr[0], kind = descr[1];
  const std::string width = descr.substr(2);
  if (order != '<' && order != '|' && order != '=') return std::nullopt;
  if (kind == 'b' && width == "1") return NpyType{c10::kBool, 1, false};
  if (kind == 'u' && width == "1") return NpyType{c10::kByte, 1, false};
  if (kind == 'u' && width == "2") return NpyType{c10::kShort, 2, true};
  if (kind == 'u' && width == "4") return NpyType{c10::kInt, 4, true};
  if (kind == 'i' && width == "1") return NpyType{c10::kChar, 1, false};
  if (kind == 'i' && width == "2") return NpyType{c10::kShort, 2, false};
  if (kind == 'i' && width == "4") return NpyType{c10::kInt, 4, false};
  if (kind == 'i' && width == "8") return NpyType{c10::kLong, 8, false};
  if (kind == 'f' && width == "2") return NpyType{c10::kHalf, 2, false};
  if (kind == 'f' && width == "4") return NpyType{c10::kFloat, 4, false};
  if (kind == 'f' && width == "8") return NpyType{c10::kDouble, 8, false};
  return std::nullopt;
}

// The value after 'key': in NumPy's header dict, up to the next ',' or '}'
// at depth 0 (the shape tuple has commas inside parentheses).
std::optional<std::string> HeaderField(const std::string& header, const std::string& key) {
  size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) return std::nullopt;
  at = header.find(':', at);
  if (at == std::string::npos) return std::nullopt;
  int depth = 0;
  size_t end = at + 1;
  for (; end < header.size(); ++end) {
    char c = header[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  std::string value = header.substr(at + 1, end - at - 1);
  size_t first = value.find_first_not_of(" \t"), last = value.find_last_not_of(" \t");
  return first == std::string::npos ? "" : value.substr(first, last - first + 1);
}

std::optional<std::vector<int64_t>> ParseShape(const std::string& text) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')') return std::nullopt;
  std::vector<int64_t> shape;
  std::string item;
  for (size_t k = 1; k + 1 <= text.size(); ++k) {
    char c = k + 1 == text.size() ? ',' : text[k];
    if (c == ' ' || c == 'L') continue;
    if (c != ',') {
      if (c < '0' || c > '9' || item.size() >= 18)
        return std::nullopt;  // 18 digits cannot overflow
      item += c;
      continue;
    }
    if (item.empty()) {
      if (k + 1 == text.size()) break;  // "(3,)"
      return std::nullopt;
    }
    shape.push_back(std::stoll(item));
    item.clear();
  }
  return shape;
}

}  // namespace

std::shared_ptr<const ArrayFile> ArrayFile::OpenNpy(const std::string& path) {
  const size_t file_bytes = FileSize(path);
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in, "cannot open data file '", path, "'");
  char preamble[12] = {0};
  in.read(preamble, sizeof preamble);
  if (static_cast<size_t>(in.gcount()) < 10 ||
      std::memcmp(preamble, kNpyMagic, kNpyMagicBytes) != 0) {
    Refuse(path, "is not a NumPy .npy file (no \\x93NUMPY magic); write it with numpy.save");
  }
  const int major = static_cast<uint8_t>(preamble[6]);
  size_t header_bytes = 0, data_offset = 0;
  if (major == 1) {
    header_bytes = static_cast<uint8_t>(preamble[8]) |
                   (static_cast<size_t>(static_cast<uint8_t>(preamble[9])) << 8);
    data_offset = 10 + header_bytes;
  } else if (major == 2 || major == 3) {
    if (in.gcount() < 12) Refuse(path, "is truncated inside its .npy header");
    for (int b = 3; b >= 0; --b)
      header_bytes = (header_bytes << 8) | static_cast<uint8_t>(preamble[8 + b]);
    data_offset = 12 + header_bytes;
  } else {
    Refuse(path, "has .npy format version " + std::to_string(major) + "; versions 1 to 3 are read");
  }
  if (header_bytes > kMaxNpyHeader || data_offset > file_bytes)
    Refuse(path, "is truncated inside its .npy header");
  std::string header(header_bytes, '\0');
  in.seekg(static_cast<std::streamoff>(data_offset - header_bytes));
  in.read(header.data(), static_cast<std::streamsize>(header_bytes));
  if (static_cast<size_t>(in.gcount()) != header_bytes)
    Refuse(path, "is truncated inside its .npy header");

  auto descr = HeaderField(header, "descr");
  auto fortran = HeaderField(header, "fortran_order");
  auto shape_text = HeaderField(header, "shape");
  if (!descr || !fortran || !shape_text)
    Refuse(path, "has a malformed .npy header (descr, fortran_order or shape missing)");
  std::string type_name = descr->size() >= 2 ? descr->substr(1, descr->size() - 2) : "";
  auto type = ParseDescr(type_name);
  if (!type) {
    Refuse(path, "holds dtype '" + type_name +
                     "', which is not read; save it as little-endian bool, int8-64, uint8-32 or "
                     "float16-64 (e.g. arr.astype('<f4'))");
  }
  if (*fortran != "False")
    Refuse(path, "is in Fortran order; save numpy.ascontiguousarray(arr) instead");
  auto shape = ParseShape(*shape_text);
  if (!shape) Refuse(path, "has a malformed shape " + *shape_text + " in its .npy header");
  if (shape->empty()) Refuse(path, "holds a single scalar; data needs one row per example");

  auto array = std::shared_ptr<ArrayFile>(new ArrayFile());
  array->path_ = path;
  array->shape_ = *shape;
  array->row_shape_.assign(shape->begin() + 1, shape->end());
  array->stored_ = type->stored;
  array->unsigned_ = type->is_unsigned;
  array->dtype_ = !type->is_unsigned ? type->stored : (type->bytes == 2 ? c10::kInt : c10::kLong);
  array->item_bytes_ = type->bytes;
  std::optional<size_t> row_bytes = type->bytes;
  for (int64_t d : array->row_shape_)
    row_bytes = row_bytes ? Multiply(*row_bytes, static_cast<size_t>(d), file_bytes) : row_bytes;
  std::optional<size_t> data_bytes =
      row_bytes ? Multiply(*row_bytes, static_cast<size_t>(array->rows()), file_bytes)
                : std::nullopt;
  if (!data_bytes || *data_bytes != file_bytes - data_offset) {
    Refuse(path, "claims shape " + *shape_text + " of " + type_name + " but holds " +
                     std::to_string(file_bytes - data_offset) +
                     " bytes of data; the file is truncated or not what its header says");
  }
  array->row_bytes_ = *row_bytes;
  array->Open(data_offset, *data_bytes);
  return array;
}

std::shared_ptr<const ArrayFile> ArrayFile::OpenTokens(const std::string& path, int bits) {
  TORCH_CHECK(bits == 16 || bits == 32, "token width ", bits, " bits; use uint16 or uint32");
  const size_t file_bytes = FileSize(path);
  const size_t item = static_cast<size_t>(bits / 8);
  if (file_bytes % item != 0) {
    Refuse(path, "has " + std::to_string(file_bytes) + " bytes, not a whole number of uint" +
                     std::to_string(bits) + " tokens; is --token-dtype right?");
  }
  auto array = std::shared_ptr<ArrayFile>(new ArrayFile());
  array->path_ = path;
  array->shape_ = {static_cast<int64_t>(file_bytes / item)};
  array->stored_ = bits == 16 ? c10::kShort : c10::kInt;
  array->unsigned_ = true;
  array->dtype_ = c10::kLong;  // token ids, as embeddings and cross_entropy take them
  array->item_bytes_ = item;
  array->row_bytes_ = item;
  array->Open(0, file_bytes);
  return array;
}

void ArrayFile::Open(size_t data_offset, size_t data_bytes) {
  TORCH_CHECK(data_bytes > 0, "data file '", path_, "' has no rows");
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  TORCH_CHECK(fd_ >= 0, "cannot open data file '", path_, "': ", std::strerror(errno));
  struct stat info {};
  TORCH_CHECK(::fstat(fd_, &info) == 0, "cannot read the size of data file '", path_, "'");
  data_offset_ = data_offset;
  opened_bytes_ = info.st_size;
  opened_mtime_ns_ = info.st_mtim.tv_sec * 1000000000LL + info.st_mtim.tv_nsec;
  TORCH_CHECK(static_cast<size_t>(info.st_size) == data_offset + data_bytes, "data file '", path_,
              "' changed while it was opened; open it again");
}

ArrayFile::~ArrayFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ArrayFile::CheckUnchanged() const {
  struct stat info {};
  const bool same = ::fstat(fd_, &info) == 0 && info.st_size == opened_bytes_ &&
                    info.st_mtim.tv_sec * 1000000000LL + info.st_mtim.tv_nsec == opened_mtime_ns_;
  TORCH_CHECK(same, "data file '", path_, "' was rewritten while this run read it (it held ",
              opened_bytes_, " bytes when opened and now holds ", info.st_size,
              "); restore it, then resume from the last checkpoint (--resume)");
}

void ArrayFile::ReadAt(size_t offset, size_t bytes, uint8_t* dst) const {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t got =
        ::pread(fd_, dst + done, bytes - done, static_cast<off_t>(data_offset_ + offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      CheckUnchanged();  // a truncated file names itself
      TORCH_CHECK(false, "reading data file '", path_,
                  "' failed: ", got < 0 ? std::strerror(errno) : "unexpected end of file");
    }
    done += static_cast<size_t>(got);
  }
}

at::Tensor ArrayFile::Convert(at::Tensor raw) const {
  if (!unsigned_) return raw;
  // The signed type of the same width holds the bits; widen, then drop the sign extension.
  const int64_t mask = item_bytes_ == 2 ? 0xFFFF : 0xFFFFFFFFLL;
  return raw.to(dtype_).bitwise_and_(mask);
}

at::Tensor ArrayFile::Rows(const std::vector<int64_t>& indices) const {
  CheckUnchanged();
  std::vector<int64_t> sizes{static_cast<int64_t>(indices.size())};
  sizes.insert(sizes.end(), row_shape_.begin(), row_shape_.end());
  at::Tensor out = at::empty(sizes, at::TensorOptions().dtype(stored_));
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  for (size_t k = 0; k < indices.size(); ++k) {
    TORCH_CHECK(indices[k] >= 0 && indices[k] < rows(), "row ", indices[k], " of data file '",
                path_, "' is out of range (it has ", rows(), " rows)");
    ReadAt(static_cast<size_t>(indices[k]) * row_bytes_, row_bytes_, dst + k * row_bytes_);
  }
  return Convert(out);
}

at::Tensor ArrayFile::Elements(int64_t start, int64_t count) const {
  TORCH_CHECK(start >= 0 && count >= 0 && start <= rows() - count, "elements [", start, ", ",
              start + count, ") of data file '", path_, "' are out of range (it has ", rows(), ")");
  CheckUnchanged();
  at::Tensor out = at::empty({count}, at::TensorOptions().dtype(stored_));
  ReadAt(static_cast<size_t>(start) * item_bytes_, static_cast<size_t>(count) * item_bytes_,
         static_cast<uint8_t*>(out.data_ptr()));
  return Convert(out);
}

}  // namespace gpipe
