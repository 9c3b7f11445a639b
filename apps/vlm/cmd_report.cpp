// `vlm report RUN... [--out report.html]`: one self-contained HTML page comparing training runs (track/report.h).
#include <cstdio>

#include "cli.h"
#include "commands.h"
#include "core/safetensors.h"
#include "track/report.h"

namespace vlm::cli {

int cmd_report(int argc, char** argv, int first) {
  std::string out = "report.html";
  Flags f("vlm report RUN_DIR... [--out FILE]",
          "Write one self-contained HTML page (no network needed) comparing training runs: loss, learning rate, "
          "grad norm, throughput, MFU, data wait, memory and eval curves on shared axes, the config options that "
          "differ, eval examples and each run's command line, git revision and hardware.");
  f.add_string("--out", &out, "the HTML file to write");
  if (int code = parse_command_flags(f, argc, argv, first, ""); code >= 0) return code;
  if (f.positional().empty()) {
    std::fprintf(stderr, "error: give at least one run directory (see --help)\n");
    return 2;
  }
  Expected<std::string> page = build_report_html(f.positional());
  if (!page.ok()) {
    std::fprintf(stderr, "error: %s\n", page.status().to_string().c_str());
    return 1;
  }
  if (Status s = write_file_atomic(out, page->data(), page->size()); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
    return 1;
  }
  const size_t runs = f.positional().size();
  std::printf("wrote %s (%zu run%s, %.0f KiB): open it in a browser\n", out.c_str(), runs, runs == 1 ? "" : "s",
              static_cast<double>(page->size()) / 1024);
  return 0;
}

}  // namespace vlm::cli
