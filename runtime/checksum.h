#pragma once

#include <boost/crc.hpp>
#include <cstddef>
#include <cstdint>

namespace gpipe {

// CRC-32 (zip's polynomial) of a byte range: what the training state's
// header and an artifact's `checksums` record carry, so a damaged file is
// refused before LibTorch parses it (its zip reader skips the zip's CRCs).
inline uint32_t Crc32(const void* data, size_t size) {
  boost::crc_32_type crc;
  crc.process_bytes(data, size);
  return crc.checksum();
}

}  // namespace gpipe
