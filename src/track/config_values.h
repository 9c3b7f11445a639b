// A run's configuration as flat "section.key" values: the hparams TensorBoard shows and the config diff of
// `vlm report`, read from the resolved config.toml every run directory holds.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "track/metrics.h"

namespace vlm {

// Every leaf of the TOML document `text`, in document order, keyed "section.key"; integers and floats as numbers,
// booleans as booleans, strings as text, lists as their TOML text ("[1, 2]"). Errors name `source`, line and column.
Expected<std::vector<HParam>> flatten_toml(const std::string& text, const std::string& source);

}  // namespace vlm
