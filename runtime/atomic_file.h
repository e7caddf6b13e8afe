#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace gpipe {

// Writes `path` as every gpipe output file is written: into a temporary
// `.<name>.tmp.<pid>` in the target's directory, flushed to disk, then
// renamed over `path`. A failure (no such directory, a directory in the way,
// a full disk, a size limit) is one line naming the path and the fix; the
// temporary is removed and any earlier `path` is left as it was. A writer
// killed mid-save leaves its temporary behind; the next save of the same
// target removes those of processes that no longer run.
//
// `write` fills the stream. It sets `write_errno` (if still 0) when a write
// fails instead of throwing, since some writers (LibTorch's zip writer)
// would throw again from their destructor; `before_rename` runs after the
// file is on disk and before it replaces `path` (a test hook).
// `example_name` completes "give a file name such as ..." when `path` is a
// directory.
// What WriteFileAtomically would refuse about `path`, so that a long run
// can check its outputs before it starts instead of losing its work at the
// end: a directory in the way, a missing or unwritable directory, or an
// existing path that is not a regular file (a device, pipe, socket or
// symbolic link, which the rename would replace). `option` names it in the
// message ("--save"; empty: "output path").
void CheckOutputPath(const std::string& path, const std::string& example_name,
                     const std::string& option = "");

void WriteFileAtomically(const std::string& path, const std::string& example_name,
                         const std::function<void(std::ostream& out, int& write_errno)>& write,
                         const std::function<void()>& before_rename = nullptr);

}  // namespace gpipe
