// Helpers for the tokenizer tests: fixture paths, file reading (gzip-aware when zlib is available) and a small
// hand-written tokenizer.json whose encodings the tests derive by hand.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace vlm::testing {

std::string tokenizer_fixture_path(const std::string& name);
// Reads a file whole; aborts the test binary with a message when it is missing.
std::string read_file_or_die(const std::string& path);
// Reads and gunzips a .gz file (zlib); aborts on failure.
std::string read_gzip_or_die(const std::string& path);

// A tiny byte-level BPE tokenizer.json (see fixtures.cpp for the table of ids and merges).
nlohmann::json tiny_tokenizer_json();

}  // namespace vlm::testing
