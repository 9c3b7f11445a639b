// `vlm serve` through the official OpenAI Node client: models, plain and streamed chat with an image (PNG, JPEG,
// WebP), n = 2, stop strings, seed reproducibility, log-probabilities, completions, beam search (its choices against
// `vlm generate`'s), and the error cases (each asserting the status and that the client parsed OpenAI's error
// shape); then a stream dropped mid-way, whose KV blocks must return to the pool (read from /metrics), and a full
// queue answering 429.
// Env: OPENAI_MODULE (path to the installed package), BASE_URL, API_KEY, MODEL, IMAGE_DIR (small.jpg, small.png,
// small.webp, big.png over the server's pixel limit), BEAM_EXPECTED (`vlm generate`'s JSON answer to the beam request).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

const { default: OpenAI } = await import(process.env.OPENAI_MODULE);
const base = process.env.BASE_URL, model = process.env.MODEL, dir = process.env.IMAGE_DIR;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: process.env.API_KEY, maxRetries: 0, timeout: 60000 });
const dataUrl = (file, mime) => `data:${mime};base64,${readFileSync(`${dir}/${file}`).toString("base64")}`;
const jpg = dataUrl("small.jpg", "image/jpeg");
const ask = (url, text = "what color is the square?") => [
  { role: "user", content: [{ type: "image_url", image_url: { url } }, { type: "text", text }] },
];
let checks = 0;
const ok = (what) => { checks += 1; console.log(`[client] ok: ${what}`); };

async function expectError(promise, status, what, check = () => {}) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `${what}: not an APIError: ${e}`);
    assert.equal(e.status, status, `${what}: status ${e.status} (${e.message})`);
    assert.equal(typeof e.error?.message, "string", `${what}: no error message in ${JSON.stringify(e.error)}`);
    check(e);
    return ok(`${what} -> ${status} ${e.constructor.name}: ${e.error.message.slice(0, 90)}`);
  }
  assert.fail(`${what}: expected HTTP ${status}, got a success`);
}

async function metric(name) {
  const text = await (await fetch(`${base}/metrics`, { headers: { Authorization: `Bearer ${process.env.API_KEY}` } })).text();
  const m = text.match(new RegExp(`^${name} ([0-9.e+-]+)$`, "m"));
  assert.ok(m, `${name} missing from /metrics`);
  return Number(m[1]);
}

// Models and health.
const models = await client.models.list();
assert.deepEqual(models.data.map((m) => m.id), [model]);
ok("GET /v1/models lists the served model");
const retrieved = await client.models.retrieve(model);
assert.equal(retrieved.id, model);
assert.ok(retrieved.max_model_len > 0);
ok("GET /v1/models/{id} (models.retrieve)");
await expectError(client.models.retrieve("no-such-model"), 404, "models.retrieve of an unknown model",
  (e) => assert.equal(e.code, "model_not_found"));
assert.equal((await fetch(`${base}/health`)).status, 200);
ok("GET /health");

// Plain chat with an image in each format; greedy, so the streamed text must equal it.
const plain = await client.chat.completions.create({ model, messages: ask(jpg), max_tokens: 12, temperature: 0 });
assert.equal(plain.object, "chat.completion");
assert.equal(plain.choices.length, 1);
assert.equal(typeof plain.choices[0].message.content, "string");
assert.ok(["stop", "length"].includes(plain.choices[0].finish_reason));
assert.ok(plain.usage.prompt_tokens > 4 && plain.usage.completion_tokens >= 1);
assert.equal(plain.usage.total_tokens, plain.usage.prompt_tokens + plain.usage.completion_tokens);
ok(`chat with a JPEG: "${plain.choices[0].message.content}" (${plain.usage.completion_tokens} tokens)`);
for (const [file, mime] of [["small.png", "image/png"], ["small.webp", "image/webp"]]) {
  const r = await client.chat.completions.create({ model, messages: ask(dataUrl(file, mime)), max_tokens: 4 });
  assert.equal(r.choices.length, 1);
  ok(`chat with ${mime}`);
}
const stream = await client.chat.completions.create({
  model, messages: ask(jpg), max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
});
let streamed = "", finish = null, usage = null, chunks = 0;
for await (const chunk of stream) {
  chunks += 1;
  assert.equal(chunk.object, "chat.completion.chunk");
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    streamed += c.delta?.content ?? "";
    finish = c.finish_reason ?? finish;
  }
}
assert.equal(streamed, plain.choices[0].message.content);
assert.equal(finish, plain.choices[0].finish_reason);
assert.equal(usage?.completion_tokens, plain.usage.completion_tokens);
ok(`streamed chat equals the plain answer (${chunks} chunks, usage in the last)`);

// n = 2: two sampled completions.
const two = await client.chat.completions.create({ model, messages: ask(jpg), max_tokens: 8, temperature: 1, n: 2, seed: 1 });
assert.deepEqual(two.choices.map((c) => c.index), [0, 1]);
const twoStreamed = ["", ""];
for await (const chunk of await client.chat.completions.create({
  model, messages: ask(jpg), max_tokens: 8, temperature: 1, n: 2, seed: 1, stream: true,
})) for (const c of chunk.choices) twoStreamed[c.index] += c.delta?.content ?? "";
assert.deepEqual(twoStreamed, two.choices.map((c) => c.message.content));
ok("n = 2 gives choices 0 and 1; streamed with the same seed, each choice's text is the same");

// Seeds: the same seed repeats the sample; some other seed differs.
const sample = (seed) => client.chat.completions.create({
  model, messages: ask(jpg, "describe the image."), max_tokens: 16, temperature: 1.5, seed,
  ignore_eos: true,
}).then((r) => r.choices[0].message.content);
const a = await sample(42), b = await sample(42);
assert.equal(a, b);
const others = await Promise.all([43, 44, 45].map(sample));
assert.ok(others.some((t) => t !== a), "three other seeds all gave the same text");
ok("seed 42 twice gives the same text; other seeds differ");

// Stop strings: cut the greedy text before the stop string, plain and streamed.
const long = (await client.chat.completions.create({
  model, messages: ask(jpg), max_tokens: 24, temperature: 0, ignore_eos: true,
})).choices[0].message.content;
const at = [...long].findIndex((ch, i) => i >= 2 && /[a-z ]/.test(ch));
if (at > 0) {
  const stop = long.slice(at, at + 1);
  const cut = long.slice(0, long.indexOf(stop));
  const stopped = await client.chat.completions.create({
    model, messages: ask(jpg), max_tokens: 24, temperature: 0, ignore_eos: true, stop: [stop, "\u0001never"],
  });
  assert.equal(stopped.choices[0].message.content, cut);
  assert.equal(stopped.choices[0].finish_reason, "stop");
  let text = "";
  for await (const chunk of await client.chat.completions.create({
    model, messages: ask(jpg), max_tokens: 24, temperature: 0, ignore_eos: true, stop, stream: true,
  })) text += chunk.choices[0]?.delta?.content ?? "";
  assert.equal(text, cut);
  ok(`stop ${JSON.stringify(stop)} cuts "${long}" to "${cut}", streamed too`);
} else {
  console.log(`[client] note: greedy text ${JSON.stringify(long)} has no letter to stop at; stop check skipped`);
}

// Log-probabilities, and the completions endpoint.
const lp = await client.chat.completions.create({ model, messages: ask(jpg), max_tokens: 4, logprobs: true, top_logprobs: 2, ignore_eos: true });
assert.equal(lp.choices[0].logprobs.content.length, 4);
for (const t of lp.choices[0].logprobs.content) {
  assert.ok(t.logprob <= 0 && t.top_logprobs.length === 2 && Array.isArray(t.bytes));
}
ok("logprobs with top_logprobs 2");
const comp = await client.completions.create({ model, prompt: "what color is the", max_tokens: 5, ignore_eos: true, logprobs: 1 });
assert.equal(comp.object, "text_completion");
assert.equal(comp.usage.completion_tokens, 5);
assert.equal(comp.choices[0].logprobs.tokens.length, 5);
ok(`completions: "${comp.choices[0].text}"`);

// Beam search (vLLM's extension fields, passed through the client as extra body params): width best_of = 4, the
// n = 2 best, length_penalty 0.7. Deterministic, so the choices must be what `vlm generate --beam-width 4 --n 2
// --length-penalty 0.7 --max-tokens 8` answered for the same image and question (BEAM_EXPECTED), streamed or not.
const expected = JSON.parse(readFileSync(process.env.BEAM_EXPECTED, "utf8").trim().split("\n")[0]);
assert.equal(expected.completions?.length, 2, `vlm generate's beam answer: ${JSON.stringify(expected)}`);
const beamParams = {
  model, messages: ask(jpg), max_tokens: 8, use_beam_search: true, best_of: 4, n: 2, length_penalty: 0.7,
};
const beam = await client.chat.completions.create(beamParams);
assert.deepEqual(beam.choices.map((c) => [c.index, c.message.content, c.finish_reason]),
  expected.completions.map((c, i) => [i, c.text, c.finish_reason]));
assert.equal(beam.usage.completion_tokens, expected.completions.reduce((s, c) => s + c.tokens.length, 0));
const beamStreamed = ["", ""], beamFinish = [null, null];
for await (const chunk of await client.chat.completions.create({ ...beamParams, stream: true })) {
  for (const c of chunk.choices) {
    beamStreamed[c.index] += c.delta?.content ?? "";
    beamFinish[c.index] = c.finish_reason ?? beamFinish[c.index];
  }
}
assert.deepEqual(beamStreamed, expected.completions.map((c) => c.text));
assert.deepEqual(beamFinish, expected.completions.map((c) => c.finish_reason));
ok(`beam search (best_of 4, n 2) equals vlm generate's: ${JSON.stringify(beamStreamed)}, streamed too`);
const beamComp = await client.completions.create({
  model, prompt: "what color is the", max_tokens: 5, use_beam_search: true, n: 3, ignore_eos: true,
});
assert.deepEqual(beamComp.choices.map((c) => c.index), [0, 1, 2]);
assert.equal(beamComp.usage.completion_tokens, 15);
assert.equal(new Set(beamComp.choices.map((c) => c.text)).size, 3, "three beams, the same text twice");
ok(`completions with beam search (width n = 3): ${JSON.stringify(beamComp.choices.map((c) => c.text))}`);
await expectError(client.chat.completions.create({ ...beamParams, temperature: 0.8 }), 400, "beam search with temperature",
  (e) => assert.equal(e.param, "temperature"));
await expectError(client.chat.completions.create({ ...beamParams, n: 3, best_of: 2 }), 400, "beam search with n > best_of",
  (e) => assert.equal(e.param, "n"));
await expectError(client.chat.completions.create({ ...beamParams, best_of: 64 }), 400,
  "beam width over --max-beam-width", (e) => assert.equal(e.param, "best_of"));
await expectError(client.chat.completions.create({ ...beamParams, stop: "x" }), 400, "beam search with stop strings",
  (e) => assert.equal(e.param, "stop"));

// Errors: status, class and OpenAI's error shape, parsed by the client.
await expectError(client.chat.completions.create({ model: "no-such-model", messages: ask(jpg) }), 404, "unknown model",
  (e) => assert.equal(e.code, "model_not_found"));
await expectError(client.chat.completions.create({ model, messages: ask("data:image/png;base64,%%%notbase64") }), 400,
  "bad base64", (e) => assert.equal(e.param, "messages[0].content[0].image_url.url"));
const corrupt = readFileSync(`${dir}/small.png`).subarray(0, 60).toString("base64");
await expectError(client.chat.completions.create({ model, messages: ask(`data:image/png;base64,${corrupt}`) }), 422,
  "corrupt image", (e) => assert.equal(e.code, "invalid_image"));
await expectError(client.chat.completions.create({ model, messages: ask(dataUrl("big.png", "image/png")) }), 422,
  "image over the pixel limit", (e) => assert.equal(e.code, "image_too_large"));
await expectError(client.chat.completions.create({ model, messages: ask("https://example.com/cat.png") }), 400,
  "remote image URL");
await expectError(client.chat.completions.create({ model, messages: [{ role: "user", content: "what color ".repeat(400) }] }),
  400, "prompt over the context", (e) => assert.equal(e.code, "context_length_exceeded"));
await expectError(client.chat.completions.create({ model, messages: ask(jpg), temperature: 7 }), 400, "temperature 7",
  (e) => assert.equal(e.param, "temperature"));
await expectError(client.chat.completions.create({ model, messages: ask(jpg), max_tokens: "ten" }), 400,
  "max_tokens of the wrong type", (e) => assert.equal(e.param, "max_tokens"));
await expectError(client.chat.completions.create({ model, messages: "hello" }), 400, "messages not a list");
await expectError(client.post("/chat/completions", { body: "{not json", __binaryRequest: true,
  headers: { "Content-Type": "application/json" } }), 400, "malformed JSON", (e) => assert.equal(e.code, "invalid_json"));
await expectError(client.chat.completions.create({ model, messages: ask(`data:image/png;base64,${"A".repeat(3 << 20)}`) }),
  413, "body over --max-body-bytes");
await expectError(new OpenAI({ baseURL: `${base}/v1`, apiKey: "wrong-key", maxRetries: 0 }).models.list(), 401, "wrong API key");

// A stream dropped mid-way: its request is cancelled and its KV blocks go back to the pool. 8 completions of 200
// tokens, so that the server cannot finish (and fit the whole answer in the socket's buffers) before the client's
// leaving is noticed, even when the client is scheduled late on a busy machine.
const cancelledBefore = await metric("vlm_requests_cancelled_total");
const dropped = await client.chat.completions.create({
  model, messages: ask(jpg), max_tokens: 200, temperature: 1, ignore_eos: true, n: 8, stream: true,
});
let seen = 0;
for await (const chunk of dropped) {
  if (chunk.choices[0]?.delta?.content && ++seen >= 3) break;  // leaving the loop aborts the HTTP request
}
let used = -1, cancelled = 0;
for (let i = 0; i < 100; ++i) {
  used = await metric("vlm_kv_blocks_used");
  cancelled = await metric("vlm_requests_cancelled_total");
  if (used === 0 && cancelled > cancelledBefore) break;
  await new Promise((r) => setTimeout(r, 50));
}
assert.equal(used, 0, "KV blocks still held after the client left");
assert.ok(cancelled > cancelledBefore, "the dropped stream was not cancelled");
assert.equal(await metric("vlm_kv_blocks_free"), await metric("vlm_kv_blocks_total"));
ok(`dropped stream cancelled; KV blocks used ${used}, free = total`);

// A non-streamed request whose client goes away is cancelled too: aborted once the server is computing it (8
// completions of 200 tokens: far longer than noticing the closed connection takes).
const controller = new AbortController();
const pending = client.chat.completions.create(
  { model, messages: ask(jpg), max_tokens: 200, temperature: 1, ignore_eos: true, n: 8 }, { signal: controller.signal });
for (let i = 0; i < 400 && (await metric("vlm_running_sequences")) === 0; ++i) await new Promise((r) => setTimeout(r, 5));
controller.abort();
await assert.rejects(pending);
for (let i = 0; i < 100 && (await metric("vlm_kv_blocks_used")) !== 0; ++i) await new Promise((r) => setTimeout(r, 50));
assert.equal(await metric("vlm_kv_blocks_used"), 0);
assert.ok((await metric("vlm_requests_cancelled_total")) > cancelled, "the abandoned request was not cancelled");
ok("abandoned non-streamed request cancelled; its blocks are back");

// An abandoned beam search: every beam (the forks share their blocks) leaves the engine and the blocks come back.
const beamAbort = new AbortController();
const beamPending = client.chat.completions.create(
  { model, messages: ask(jpg), max_tokens: 200, ignore_eos: true, use_beam_search: true, best_of: 8 },
  { signal: beamAbort.signal });
let beamsRunning = 0;
for (let i = 0; i < 400 && (beamsRunning = await metric("vlm_running_sequences")) < 2; ++i) {
  await new Promise((r) => setTimeout(r, 5));
}
beamAbort.abort();
await assert.rejects(beamPending);
assert.ok(beamsRunning >= 2, `the beams never ran (${beamsRunning} sequences)`);
for (let i = 0; i < 100 && (await metric("vlm_kv_blocks_used")) !== 0; ++i) await new Promise((r) => setTimeout(r, 50));
assert.equal(await metric("vlm_kv_blocks_used"), 0);
ok(`abandoned beam search (${beamsRunning} beams running) cancelled; its blocks are back`);

// A full queue: more long requests at once than --max-queue; the excess gets 429, the rest finish.
const QUEUE = Number(process.env.MAX_QUEUE);
const burst = await Promise.allSettled(Array.from({ length: QUEUE + 4 }, () => client.chat.completions.create({
  model, messages: ask(jpg), max_tokens: 200, ignore_eos: true,
})));
const limited = burst.filter((r) => r.status === "rejected" && r.reason?.status === 429);
const served = burst.filter((r) => r.status === "fulfilled");
assert.equal(limited.length + served.length, burst.length, `unexpected failures: ${burst.filter((r) => r.status === "rejected" && r.reason?.status !== 429).map((r) => r.reason)}`);
assert.ok(limited.length >= 1 && served.length >= 1, `${limited.length} limited, ${served.length} served`);
assert.ok(limited[0].reason instanceof OpenAI.RateLimitError);
ok(`burst of ${burst.length}: ${served.length} served, ${limited.length} got 429`);
console.log(`[client] all ${checks} checks passed`);
