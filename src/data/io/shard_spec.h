// Shard lists from a spec string, as webdataset / img2dataset users write them:
//   "dir/shapes-{000000..000009}.tar"  numeric range, zero padding kept (the wider bound's width when padded)
//   "data/{train,val}-{0..3}.tar"      comma alternatives; several braces give the cartesian product, in order
//   "dir/"  or "dir"                   an existing directory: every *.tar in it, sorted by name
//   "@list.txt"                        a text file: one spec per line ("#" comments, blank lines ignored); relative
//                                      entries are relative to the list file's directory
//   "a.tar::b/{0..3}.tar"              several specs joined with "::" (not inside [...], so http://[::1]:80/x works)
//   "http://host/s-{0..9}.tar", "pipe:curl -s URL/s-{0..9}.tar"   URLs and pipe: commands: braces expanded likewise
// Anything else is a plain path or URL, returned as is (existence is checked when the shard is opened).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace vlm {

// Expands braces only (no directory or @list handling). invalid_argument for unbalanced or empty braces, bad ranges,
// or more than `max_results` results.
Expected<std::vector<std::string>> expand_braces(const std::string& pattern, size_t max_results = 10'000'000);

Expected<std::vector<std::string>> expand_shard_spec(const std::string& spec);

}  // namespace vlm
