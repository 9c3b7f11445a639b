// Access to the real Hugging Face tokenizer fixtures (fixtures/hf): xz-compressed tokenizer.json files of several
// model families, their tokenizer_config.json, the shared corpus and conversations, and the expected outputs written
// by dev/fixtures/make_tokenizer_fixtures.py (fixtures/hf/expected).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace vlm::testing {

std::string hf_fixture_path(const std::string& relative);
// Families with a tokenizer.json.xz, sorted.
std::vector<std::string> hf_families();
// The decompressed tokenizer.json of `family`; aborts the test binary when it cannot be read.
std::string hf_tokenizer_json(const std::string& family);
// A JSON file under fixtures/hf, parsed (insertion order kept); aborts when missing or malformed.
nlohmann::ordered_json hf_json(const std::string& relative);

}  // namespace vlm::testing
