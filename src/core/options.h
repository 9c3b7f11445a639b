// Declarative options: one declaration per option drives TOML parsing, `--set a.b=c` overrides, `--help` text and
// the resolved-config dump, so help never drifts from the parser. Precedence: defaults < TOML file < --set.
//
//   OptionSet opts;
//   opts.add("train.lr", &cfg.lr, "peak learning rate", positive<float>());
//   VLM_RETURN_IF_ERROR(opts.load_toml_file("configs/x.toml"));   // unknown keys / wrong types name file and key
//   VLM_RETURN_IF_ERROR(opts.set("train.lr=3e-4"));
//   VLM_RETURN_IF_ERROR(opts.validate());                        // "configs/x.toml: train.lr: must be > 0 (got -1)"
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace vlm {

// A check returns an empty string when the value is fine, else the reason ("must be > 0").
template <class T>
using OptionCheck = std::function<std::string(const T&)>;

template <class T>
OptionCheck<T> positive() {
  return [](const T& v) { return v > T(0) ? std::string() : std::string("must be > 0"); };
}
template <class T>
OptionCheck<T> non_negative() {
  return [](const T& v) { return v >= T(0) ? std::string() : std::string("must be >= 0"); };
}
template <class T>
OptionCheck<T> in_range(T lo, T hi) {
  return [lo, hi](const T& v) {
    return (v >= lo && v <= hi) ? std::string() : str("must be in [", lo, ", ", hi, "]");
  };
}
OptionCheck<std::string> one_of(std::vector<std::string> choices);

class OptionSet {
 public:
  OptionSet();
  ~OptionSet();
  OptionSet(OptionSet&&) noexcept;
  OptionSet& operator=(OptionSet&&) noexcept;

  // Supported T: bool, int, int64_t, float, double, std::string, std::vector<std::string>, std::vector<float>.
  // The current value of *target is the default. `target` must outlive the OptionSet.
  template <class T>
  void add(const std::string& key, T* target, const std::string& help, OptionCheck<T> check = {});

  Status load_toml_file(const std::string& path);
  Status load_toml_string(const std::string& text, const std::string& source);
  // "a.b=value" (value in TOML syntax or bare: strings need no quotes; lists as [1, 2] or a,b).
  Status set(const std::string& assignment);
  // Runs every option's check; the error names where the bad value came from, the key and the reason.
  Status validate() const;
  // A TOML document with every option's current value, grouped by section.
  std::string to_toml() const;
  // One line per option: key, type, default, help.
  std::string help() const;
  bool has(const std::string& key) const;

  struct Option;  // defined in options.cpp

 private:
  void add_option(std::unique_ptr<Option> option);
  std::vector<std::unique_ptr<Option>> options_;
};

// Explicit instantiations live in options.cpp.
extern template void OptionSet::add<bool>(const std::string&, bool*, const std::string&, OptionCheck<bool>);
extern template void OptionSet::add<int>(const std::string&, int*, const std::string&, OptionCheck<int>);
extern template void OptionSet::add<int64_t>(const std::string&, int64_t*, const std::string&, OptionCheck<int64_t>);
extern template void OptionSet::add<float>(const std::string&, float*, const std::string&, OptionCheck<float>);
extern template void OptionSet::add<double>(const std::string&, double*, const std::string&, OptionCheck<double>);
extern template void OptionSet::add<std::string>(const std::string&, std::string*, const std::string&,
                                                 OptionCheck<std::string>);
extern template void OptionSet::add<std::vector<std::string>>(const std::string&, std::vector<std::string>*,
                                                              const std::string&,
                                                              OptionCheck<std::vector<std::string>>);
extern template void OptionSet::add<std::vector<float>>(const std::string&, std::vector<float>*, const std::string&,
                                                        OptionCheck<std::vector<float>>);

}  // namespace vlm
