// A bounded load generator for `vlm serve` (Node 20, no dependencies): N clients, each sending streamed chat
// requests with an image back to back for T seconds, R rounds. Per round it prints requests/s, generated tokens/s,
// end-to-end latency and time-to-first-token p50/p99, errors, and the server's resident memory (VmRSS of --pid,
// read after the round). Exit 1 on any error, or (with --max-rss-growth-mb) when the RSS after the last round
// exceeds the first round's by more than that.
//   node bench/serve/load.mjs --url http://127.0.0.1:8000 --model NAME --image FILE [--clients 4] [--seconds 5]
//        [--rounds 3] [--max-tokens 16] [--pid PID] [--api-key KEY] [--max-rss-growth-mb 16] [--json OUT]
import { readFileSync, writeFileSync } from "node:fs";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
const url = args.url ?? "http://127.0.0.1:8000";
const clients = Number(args.clients ?? 4), seconds = Number(args.seconds ?? 5), rounds = Number(args.rounds ?? 3);
const maxTokens = Number(args["max-tokens"] ?? 16);
const image = args.image ? readFileSync(args.image) : null;
const mime = args.image?.endsWith(".png") ? "image/png" : args.image?.endsWith(".webp") ? "image/webp" : "image/jpeg";
const headers = { "Content-Type": "application/json" };
if (args["api-key"]) headers.Authorization = `Bearer ${args["api-key"]}`;

const questions = ["what color is the square?", "how many shapes are there?", "describe the image.", "is there a circle?"];
function body(i) {
  const content = [{ type: "text", text: questions[i % questions.length] }];
  if (image) content.unshift({ type: "image_url", image_url: { url: `data:${mime};base64,${image.toString("base64")}` } });
  return JSON.stringify({
    model: args.model, messages: [{ role: "user", content }], max_tokens: maxTokens, temperature: 0.8,
    ignore_eos: true, stream: true, stream_options: { include_usage: true },
  });
}

// One streamed request: latency, time to the first content delta, generated tokens (from the usage chunk).
async function one(i) {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers, body: body(i) });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${(await res.text()).slice(0, 200)}`);
  let ttft = null, tokens = 0, done = false, buf = "";
  const decoder = new TextDecoder();
  for await (const part of res.body) {
    buf += decoder.decode(part, { stream: true });
    let at;
    while ((at = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, at);
      buf = buf.slice(at + 2);
      if (!event.startsWith("data: ")) continue;
      const data = event.slice(6);
      if (data === "[DONE]") { done = true; continue; }
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(`stream error: ${chunk.error.message}`);
      if (ttft === null && chunk.choices?.some((c) => c.delta?.content)) ttft = performance.now() - t0;
      if (chunk.usage) tokens = chunk.usage.completion_tokens;
    }
  }
  if (!done) throw new Error("the stream ended without [DONE]");
  return { latency: performance.now() - t0, ttft: ttft ?? performance.now() - t0, tokens };
}

function quantile(xs, q) {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
}
function rssMb(pid) {
  if (!pid) return NaN;
  const m = readFileSync(`/proc/${pid}/status`, "utf8").match(/VmRSS:\s+(\d+) kB/);
  return m ? Number(m[1]) / 1024 : NaN;
}

const results = [];
let failed = false;
for (let round = 1; round <= rounds; ++round) {
  const stats = { latency: [], ttft: [], tokens: 0, errors: 0, firstError: null };
  const end = performance.now() + seconds * 1000;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: clients }, async (_, c) => {
    for (let i = c; performance.now() < end; i += clients) {
      try {
        const r = await one(i);
        stats.latency.push(r.latency);
        stats.ttft.push(r.ttft);
        stats.tokens += r.tokens;
      } catch (e) {
        stats.errors += 1;
        stats.firstError ??= String(e);
      }
    }
  }));
  const wall = (performance.now() - t0) / 1000;
  const r = {
    round, clients, requests: stats.latency.length, errors: stats.errors, requests_per_s: stats.latency.length / wall,
    tokens_per_s: stats.tokens / wall, latency_p50_ms: quantile(stats.latency, 0.5), latency_p99_ms: quantile(stats.latency, 0.99),
    ttft_p50_ms: quantile(stats.ttft, 0.5), ttft_p99_ms: quantile(stats.ttft, 0.99), rss_mb: rssMb(args.pid),
  };
  results.push(r);
  console.log(`[load] round ${round}: ${r.requests} requests, ${r.errors} errors, ${r.requests_per_s.toFixed(1)} req/s, ` +
    `${r.tokens_per_s.toFixed(0)} tokens/s, latency p50 ${r.latency_p50_ms.toFixed(1)} ms p99 ${r.latency_p99_ms.toFixed(1)} ms, ` +
    `TTFT p50 ${r.ttft_p50_ms.toFixed(1)} ms p99 ${r.ttft_p99_ms.toFixed(1)} ms, server RSS ${r.rss_mb.toFixed(1)} MiB`);
  if (stats.errors > 0) {
    console.log(`[load] first error: ${stats.firstError}`);
    failed = true;
  }
  if (r.requests === 0) failed = true;
}
if (args["max-rss-growth-mb"] && results.length > 1) {
  const growth = results[results.length - 1].rss_mb - results[0].rss_mb;
  console.log(`[load] server RSS growth from round 1 to ${results.length}: ${growth.toFixed(1)} MiB ` +
    `(limit ${args["max-rss-growth-mb"]} MiB)`);
  if (!(growth <= Number(args["max-rss-growth-mb"]))) failed = true;
}
if (args.json) writeFileSync(args.json, JSON.stringify(results, null, 2) + "\n");
process.exit(failed ? 1 : 0);
