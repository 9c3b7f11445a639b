// `vlm report` end to end: two short runs of the tiny model on synthesized shapes (different learning rates), their
// report rendered by headless Chromium. The DOM after the page's script ran must show every plot drawn with data
// and no script error; the screenshot must show both runs' line colors; Chromium's log must hold no console error.
// Skips only when no Chromium is installed (scripts/install_deps.sh installs Debian's `chromium`).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/options.h"
#include "core/safetensors.h"
#include "data/image/image.h"
#include "testing/test_util.h"
#include "track/report.h"
#include "train/trainer.h"
#include "train_fixture.h"

namespace vlm {
namespace {

std::string find_chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    const std::string cmd = std::string("command -v ") + name + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return name;
  }
  return "";
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Trains `steps` steps with learning rate `lr` into `dir`, with a real resolved config (for the config diff).
void train_run(const std::string& data, const std::string& dir, float lr) {
  RunConfig c = testing::tiny_run_config(data);
  c.train.steps = 6;
  c.train.adamw.lr = lr;
  c.eval.every = 3;
  c.eval.samples = 4;
  TrainerOptions o;
  o.config = c;
  OptionSet options;
  add_run_options(options, o.config);
  o.resolved_toml = options.to_toml();
  o.run_dir = dir;
  o.quiet = true;
  auto r = run_training(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
}

// Pixels within `tol` of `rgb` (per channel).
int count_color(const Image& img, uint32_t rgb, int tol) {
  const int r = (rgb >> 16) & 255, g = (rgb >> 8) & 255, b = rgb & 255;
  int n = 0;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) {
      const uint8_t* p = img.pixel(x, y);
      n += std::abs(p[0] - r) <= tol && std::abs(p[1] - g) <= tol && std::abs(p[2] - b) <= tol;
    }
  return n;
}

TEST(Report, TwoRunsRenderInChromiumWithEveryPlotDrawn) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) GTEST_SKIP() << "no chromium on PATH (scripts/install_deps.sh installs it)";
  const std::string root = testing::scratch_dir("report");
  train_run(root + "/data", root + "/runs/lr_low", 1e-3f);
  train_run(root + "/data", root + "/runs/lr_high", 3e-3f);
  auto page = build_report_html({root + "/runs/lr_low", root + "/runs/lr_high"});
  ASSERT_TRUE(page.ok()) << page.status().to_string();
  const std::string html = root + "/report.html";
  ASSERT_TRUE(write_file_atomic(html, page->data(), page->size()).ok());
  for (const char* fetch : {"src=", "href=", "url(", "@import"})  // self-contained: nothing loaded from elsewhere
    EXPECT_EQ(page->find(fetch), std::string::npos) << fetch;

  const std::string common = "timeout 60 " + chromium + " --headless --no-sandbox --disable-gpu --no-first-run "
                             "--user-data-dir=" + root + "/profile --hide-scrollbars --window-size=1280,2400 ";
  const std::string dom_cmd = common + "--enable-logging=stderr --v=0 --dump-dom file://" + html + " > " + root +
                              "/dom.html 2> " + root + "/chromium.log";
  ASSERT_EQ(std::system(dom_cmd.c_str()), 0) << read_text(root + "/chromium.log");
  const std::string dom = read_text(root + "/dom.html");
  const std::string log = read_text(root + "/chromium.log");
  EXPECT_NE(dom.find("data-rendered=\"done\""), std::string::npos) << "the page's script did not finish";
  EXPECT_EQ(dom.find("data-js-errors"), std::string::npos) << dom.substr(0, 4000);
  EXPECT_NE(dom.find("<pre id=\"js-errors\"></pre>"), std::string::npos);
  EXPECT_EQ(log.find("Uncaught"), std::string::npos) << log;
  EXPECT_EQ(log.find(":CONSOLE"), std::string::npos) << log;  // any console message from the page

  // Every plot: present, with points from both runs (the memory plot: bars).
  std::map<std::string, std::pair<int, int>> plots;  // id -> (points, series)
  const std::regex svg_re("<svg[^>]*data-plot=\"([a-z_0-9]+)\"[^>]*>");
  for (std::sregex_iterator it(dom.begin(), dom.end(), svg_re), end; it != end; ++it) {
    const std::string tag = (*it)[0];
    std::smatch m;
    int points = -1, series = -1;
    if (std::regex_search(tag, m, std::regex("data-points=\"([0-9]+)\""))) points = std::stoi(m[1]);
    if (std::regex_search(tag, m, std::regex("data-series=\"([0-9]+)\""))) series = std::stoi(m[1]);
    plots[(*it)[1]] = {points, series};
  }
  for (const char* id : {"loss", "lr", "grad_norm", "throughput", "mfu", "data_wait", "memory", "eval_0"}) {
    ASSERT_TRUE(plots.count(id)) << "plot " << id << " missing";
    EXPECT_GT(plots[id].first, 0) << "plot " << id << " has no data";
  }
  for (const auto& [id, ps] : plots) {
    EXPECT_GT(ps.first, 0) << "plot " << id << " has no data";
    if (id != "memory") {
      EXPECT_EQ(ps.second, 2) << "plot " << id << ": both runs";
    }
  }
  EXPECT_EQ(plots["loss"].first, 12);  // 6 steps x 2 runs
  EXPECT_NE(dom.find("train.lr"), std::string::npos) << "the config diff names the option that differs";
  EXPECT_NE(dom.find("prediction"), std::string::npos) << "eval examples";

  const std::string shot = root + "/report.png";
  const std::string shot_cmd = common + "--screenshot=" + shot + " file://" + html + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(shot_cmd.c_str()), 0);
  auto bytes = read_file_bytes(shot);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  auto img = decode_image(*bytes);
  ASSERT_TRUE(img.ok()) << img.status().to_string();
  EXPECT_EQ(img->width, 1280);
  int non_white = 0;
  for (int y = 0; y < img->height; ++y)
    for (int x = 0; x < img->width; ++x) {
      const uint8_t* p = img->pixel(x, y);
      non_white += p[0] < 240 || p[1] < 240 || p[2] < 240;
    }
  EXPECT_GT(non_white, img->width * img->height / 50) << "the screenshot is (nearly) blank";
  // The runs' colors (report.cpp's first two) drawn as lines, points and bars.
  EXPECT_GT(count_color(*img, 0x1f77b4, 24), 2000) << "run 1's curves are not on the screenshot";
  EXPECT_GT(count_color(*img, 0xd62728, 24), 2000) << "run 2's curves are not on the screenshot";
}

TEST(Report, ErrorsNameTheRunDirectoryAndFile) {
  const std::string root = testing::scratch_dir("report_errors");
  auto none = build_report_html({root + "/missing"});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("missing: not a run directory"), std::string::npos) << none.status().message();
  EXPECT_FALSE(build_report_html({}).ok());

  std::filesystem::create_directories(root + "/bad_metrics");
  std::ofstream(root + "/bad_metrics/metrics.jsonl") << "{\"step\": 1, \"loss\": 2}\nnot json\n";
  auto bad = build_report_html({root + "/bad_metrics"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("metrics.jsonl:2"), std::string::npos) << bad.status().message();

  std::filesystem::create_directories(root + "/bad_config");
  std::ofstream(root + "/bad_config/metrics.jsonl") << "{\"step\": 1, \"loss\": 2}\n";
  std::ofstream(root + "/bad_config/config.toml") << "[train\n";
  auto cfg = build_report_html({root + "/bad_config"});
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("config.toml:1"), std::string::npos) << cfg.status().message();

  std::filesystem::create_directories(root + "/bad_eval/eval");
  std::ofstream(root + "/bad_eval/metrics.jsonl") << "{\"step\": 1, \"loss\": 2}\n";
  std::ofstream(root + "/bad_eval/eval/final.json") << "{\"examples\": [";
  auto ev = build_report_html({root + "/bad_eval"});
  ASSERT_FALSE(ev.ok());
  EXPECT_NE(ev.status().message().find("final.json: not valid JSON"), std::string::npos) << ev.status().message();

  // Text from the runs cannot end the data block or inject markup.
  std::filesystem::create_directories(root + "/odd/eval");
  std::ofstream(root + "/odd/metrics.jsonl") << "{\"step\": 1, \"loss\": 2}\n";
  std::ofstream(root + "/odd/eval/final.json")
      << "{\"examples\": [{\"question\": \"</script><script>alert(1)</script>\", \"answer\": \"<!--\"}]}";
  auto odd = build_report_html({root + "/odd"});
  ASSERT_TRUE(odd.ok()) << odd.status().to_string();
  EXPECT_EQ(odd->find("alert(1)</script>"), std::string::npos);
  EXPECT_EQ(odd->find("<!--"), std::string::npos);
}

}  // namespace
}  // namespace vlm
