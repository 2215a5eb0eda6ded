// read_input_file: the whole of a file the user named as an input (a tokenizer.json, a model's
// config.json, a chat template, a run folder's files), for readers that parse text.
//
// Contract: returns the file's bytes. Throws ConfigError (exit 2), naming `path`, when it is a
// directory ("is a directory, expected <what>": read through a stream, a directory failed with a
// C++ library exception, exit 1 "internal error", or read as an empty file), when it cannot be
// opened (with the system's reason) or when reading fails. `what` says what was expected there,
// e.g. "a tokenizer.json file".
#pragma once

#include <filesystem>
#include <string>

namespace servelab {

std::string read_input_file(const std::filesystem::path& path, const std::string& what);

}  // namespace servelab
