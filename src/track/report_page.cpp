// The page of `vlm report` (see report.h): HTML and CSS, and the script that draws the embedded data as inline SVG.
// Plain DOM calls and no libraries, so the file works offline and from file://. Text from the runs is only ever set
// through textContent, never parsed as HTML.
#include <string>

#include "track/report.h"

namespace vlm {

namespace {

const char* const kHead = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>vlm report</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 22px; margin: 0 0 8px; } h2 { font-size: 17px; margin: 28px 0 8px; }
#legend span { display: inline-block; margin-right: 18px; }
#legend i { display: inline-block; width: 14px; height: 4px; margin-right: 6px; vertical-align: middle; }
#plots { display: grid; grid-template-columns: repeat(auto-fill, 480px); gap: 12px; }
svg.plot { background: #fff; border: 1px solid #ddd; }
svg text { font: 11px system-ui, sans-serif; fill: #444; }
svg text.title { font-size: 13px; fill: #111; }
table { border-collapse: collapse; margin: 4px 0 12px; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; max-width: 520px; }
th { background: #f4f4f4; } td.right { color: #2a7a2a; } td.wrong { color: #b22; }
#js-errors { color: #b00; white-space: pre-wrap; }
.muted { color: #777; }
</style>
</head>
<body data-rendered="no">
<h1>vlm report</h1>
<div id="legend"></div>
<pre id="js-errors"></pre>
<h2>Curves</h2>
<div id="plots"></div>
<h2>Memory (first step)</h2>
<div id="memory"></div>
<h2>Config differences</h2>
<div id="config"></div>
<h2>Eval examples</h2>
<div id="examples"></div>
<h2>Runs</h2>
<div id="runs"></div>
<script type="application/json" id="report-data">)HTML";

const char* const kTail = R"HTML(</script>
<script>
"use strict";
const errors = [];
function reportError(message) {
  errors.push(message);
  document.getElementById("js-errors").textContent = errors.join("\n");
  document.body.dataset.jsErrors = String(errors.length);
}
window.addEventListener("error", e => reportError("error: " + e.message + " (line " + e.lineno + ")"));

const SVG = "http://www.w3.org/2000/svg";
function el(tag, attrs, parent) {
  const e = document.createElementNS(SVG, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}
function html(tag, text, parent) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
// About n round tick values covering [lo, hi].
function ticks(lo, hi, n) {
  const span = hi - lo, raw = span / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map(f => f * mag).find(s => span / s <= n) || 10 * mag;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
    out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  return out;
}
function fmt(v) {
  const a = Math.abs(v);
  if (a === 0) return "0";
  if (a >= 1e4 || a < 1e-3) return v.toExponential(1);
  return String(Number(v.toPrecision(4)));
}
function bytes(v) {
  if (v >= 1 << 30) return (v / (1 << 30)).toFixed(2) + " GiB";
  if (v >= 1 << 20) return (v / (1 << 20)).toFixed(1) + " MiB";
  return (v / 1024).toFixed(0) + " KiB";
}

const W = 480, H = 270, M = {l: 62, r: 14, t: 26, b: 36};
function frame(title) {
  const svg = el("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, class: "plot"});
  el("text", {x: M.l, y: 17, class: "title"}, svg).textContent = title;
  return svg;
}

function linePlot(plot, runs) {
  const svg = frame(plot.title);
  svg.dataset.plot = plot.id;
  let xs = [], ys = [];
  for (const s of plot.series)
    s.x.forEach((x, i) => { if (s.y[i] !== null) { xs.push(x); ys.push(s.y[i]); } });
  svg.dataset.points = String(ys.length);
  svg.dataset.series = String(plot.series.filter(s => s.y.some(v => v !== null)).length);
  if (ys.length === 0) {
    el("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, svg).textContent = "no data";
    return svg;
  }
  let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (y1 === y0) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
  const pad = (y1 - y0) * 0.05; y0 -= pad; y1 += pad;
  const px = x => M.l + (x - x0) / (x1 - x0) * (W - M.l - M.r);
  const py = y => H - M.b - (y - y0) / (y1 - y0) * (H - M.t - M.b);
  for (const t of ticks(y0, y1, 5)) {
    el("line", {x1: M.l, x2: W - M.r, y1: py(t), y2: py(t), stroke: "#eee"}, svg);
    el("text", {x: M.l - 6, y: py(t) + 4, "text-anchor": "end"}, svg).textContent = fmt(t);
  }
  for (const t of ticks(x0, x1, 6)) {
    el("line", {x1: px(t), x2: px(t), y1: H - M.b, y2: H - M.b + 4, stroke: "#888"}, svg);
    el("text", {x: px(t), y: H - M.b + 16, "text-anchor": "middle"}, svg).textContent = fmt(t);
  }
  el("text", {x: W - M.r, y: H - 4, "text-anchor": "end"}, svg).textContent = "step";
  el("rect", {x: M.l, y: M.t, width: W - M.l - M.r, height: H - M.t - M.b, fill: "none", stroke: "#888"}, svg);
  for (const s of plot.series) {
    const color = runs[s.run].color;
    let pts = [];
    const flush = () => {
      if (pts.length > 1) el("polyline", {points: pts.join(" "), fill: "none", stroke: color, "stroke-width": 2}, svg);
      pts = [];
    };
    s.x.forEach((x, i) => {
      if (s.y[i] === null) { flush(); return; }  // a NaN or inf leaves a gap
      pts.push(px(x).toFixed(1) + "," + py(s.y[i]).toFixed(1));
      if (s.x.length <= 30) {
        const c = el("circle", {cx: px(x), cy: py(s.y[i]), r: 3, fill: color}, svg);
        el("title", {}, c).textContent = runs[s.run].name + " step " + x + ": " + s.y[i];
      }
    });
    flush();
  }
  return svg;
}

function memoryPlot(memory, runs) {
  const rowH = 14, gap = 8, n = runs.length, labels = memory.labels;
  const h = M.t + labels.length * (n * rowH + gap) + 10, left = 150, w = 640;
  const svg = el("svg", {width: w, height: h, viewBox: "0 0 " + w + " " + h, class: "plot"});
  svg.dataset.plot = "memory";
  el("text", {x: 8, y: 17, class: "title"}, svg).textContent = "memory by part (first step)";
  let max = 0, count = 0;
  for (const s of memory.series) for (const v of s.values) if (v !== null) { max = Math.max(max, v); count++; }
  svg.dataset.points = String(count);
  if (count === 0) {
    el("text", {x: w / 2, y: h / 2, "text-anchor": "middle"}, svg).textContent = "no memory.json";
    return svg;
  }
  labels.forEach((label, j) => {
    const y = M.t + j * (n * rowH + gap);
    el("text", {x: left - 8, y: y + n * rowH / 2 + 4, "text-anchor": "end"}, svg).textContent = label;
    memory.series.forEach((s, i) => {
      const v = s.values[j];
      if (v === null) return;
      const bw = Math.max(1, v / max * (w - left - 90));
      el("rect", {x: left, y: y + i * rowH, width: bw, height: rowH - 2, fill: runs[s.run].color}, svg);
      el("text", {x: left + bw + 4, y: y + i * rowH + rowH - 4}, svg).textContent = bytes(v);
    });
  });
  return svg;
}

function table(headers, rows, parent) {
  const t = html("table", null, parent), tr = html("tr", null, t);
  for (const h of headers) html("th", h, tr);
  for (const r of rows) {
    const row = html("tr", null, t);
    for (const c of r) {
      const td = html("td", c === null ? "(absent)" : c, row);
      if (c === null) td.className = "muted";
    }
  }
  return t;
}

function render(data) {
  const runs = data.runs;
  const legend = document.getElementById("legend");
  for (const r of runs) {
    const s = html("span", null, legend), i = html("i", null, s);
    i.style.background = r.color;
    s.appendChild(document.createTextNode(r.name));
  }
  const plots = document.getElementById("plots");
  let drawn = 0;
  for (const p of data.plots) { plots.appendChild(linePlot(p, runs)); drawn++; }
  document.getElementById("memory").appendChild(memoryPlot(data.memory, runs));
  drawn++;

  const config = document.getElementById("config");
  if (runs.length < 2) html("p", "one run: nothing to compare", config).className = "muted";
  else if (data.config.differ.length === 0) html("p", "the runs' configs agree on every option", config);
  else table(["option"].concat(runs.map(r => r.name)), data.config.differ.map(d => [d.key].concat(d.values)), config);
  html("p", data.config.same + " options agree", config).className = "muted";

  const ex = document.getElementById("examples");
  for (const r of runs) {
    html("h3", r.name, ex);
    if (r.examples.length === 0) { html("p", "no eval examples", ex).className = "muted"; continue; }
    const cols = ["key", "question", "answer", "prediction"].filter(k => r.examples.some(e => k in e));
    for (const e of r.examples) for (const k in e) if (!cols.includes(k)) cols.push(k);
    const t = table(cols, r.examples.map(e => cols.map(c => c in e ? e[c] : "")), ex);
    const pi = cols.indexOf("prediction"), ai = cols.indexOf("answer");
    if (pi >= 0 && ai >= 0)
      Array.from(t.rows).slice(1).forEach(row => {
        row.cells[pi].className = row.cells[pi].textContent === row.cells[ai].textContent ? "right" : "wrong";
      });
  }

  const info = document.getElementById("runs");
  const fields = ["command_line", "git_revision", "git_dirty", "host", "cpu_model", "gpus", "gpu_driver",
                  "started_utc"];
  table(["run", "directory"].concat(fields), runs.map(r => [r.name, r.dir].concat(fields.map(f => {
    const v = r.info[f];
    if (v === undefined) return null;
    if (f === "gpus") return v.map(g => g.name + " (" + bytes(g.memory_bytes) + ")").join(", ");
    return typeof v === "string" ? v : JSON.stringify(v);
  }))), info);
  document.body.dataset.plots = String(drawn);
}

try {
  render(JSON.parse(document.getElementById("report-data").textContent));
  document.body.dataset.rendered = "done";
} catch (e) {
  reportError("error: " + e.message);
  document.body.dataset.rendered = "failed";
}
</script>
</body>
</html>
)HTML";

}  // namespace

std::string report_page(const std::string& data_json) { return kHead + data_json + kTail; }

}  // namespace vlm
