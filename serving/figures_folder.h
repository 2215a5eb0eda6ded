// Folders of figures that `sim plot` wrote, told apart from the user's own. `sim plot` records
// every file it writes into a folder in that folder's kFiguresManifest (one name a line, sorted);
// a folder may receive figures, and a run or group folder holding one may be replaced, only when
// everything in it is a file that manifest names. So a figure of the user's, even one with the
// name `sim plot` would give it, is never overwritten or removed.
#pragma once

#include <string>
#include <vector>

namespace servelab {

// The manifest's name inside a figures folder.
inline constexpr const char* kFiguresManifest = ".servelab-figures";

// Throws ConfigError unless `dir` is absent, an empty folder, or a folder holding only its
// kFiguresManifest and regular files that it names; also for a symlinked `dir` or a symlink in
// it. `refusal` ends the message: what is refused and what the user can do ("refusing to write
// figures there (choose another -o)").
void check_figures_dir(const std::string& dir, const std::string& refusal);

// The names `dir`'s manifest lists (empty when it has none).
std::vector<std::string> figures_manifest(const std::string& dir);

// Writes into `stage_dir` (a folder that will replace the entries of `dir`) a manifest naming the
// files `dir`'s manifest already names and those `written` (file names, no folders). Throws
// ConfigError on I/O failure.
void write_figures_manifest(const std::string& stage_dir, const std::string& dir,
                            const std::vector<std::string>& written);

}  // namespace servelab
