// txcalc what-if page: reads the controls, asks the server (this machine only) for the JSON of
// the txcalc commands they stand for, and draws it. No other network, no libraries.
"use strict";

const PANELS = ["params", "flops", "memory", "answer"];
const COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
                "#ff9da7", "#9c755f", "#bab0ac"];
const $ = (id) => document.getElementById(id);
let OPTIONS = null;
let generation = 0;
let timer = null;

// --- formatting (display only; the exact value stays in data-value) ---------------------------
const GIB = 2 ** 30;  // memory is shown in GiB (2^30 bytes), as nvidia-smi and torch count it
const fmtGB = (b) => (b / GIB).toLocaleString("en-US", {minimumFractionDigits: 2, maximumFractionDigits: 2}) + " GiB";
const fmtInt = (n) => Math.abs(n) < 2 ** 53 ? Math.round(n).toLocaleString("en-US") : n.toPrecision(6);
function fmtSI(x, unit) {
  const steps = [[1e18, "E"], [1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  for (const [v, p] of steps) if (Math.abs(x) >= v) return (x / v).toFixed(2) + " " + p + unit;
  return x.toFixed(0) + " " + unit;
}
const fmtNum = (x, digits) => x.toLocaleString("en-US", {maximumFractionDigits: digits});
const fmtPct = (x) => (100 * x).toFixed(1) + " %";

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "dataKey") { e.dataset.key = v; } else if (k === "dataValue") { e.dataset.value = String(v); } else { e.setAttribute(k, v); }
  }
  for (const c of children) e.append(c);
  return e;
}
function svg(tag, attrs, text) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
// one shown figure: its text, and the JSON path and value it came from
const fig = (key, value, text) => el("span", {dataKey: key, dataValue: value, title: String(value)}, text);

function dl(target, rows) {
  target.replaceChildren();
  for (const [label, key, value, text] of rows) {
    if (value === null || value === undefined) continue;
    target.append(el("dt", {}, label), el("dd", {}, fig(key, value, text)));
  }
}

function table(target, head, rows) {
  target.replaceChildren(el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h)))));
  const body = el("tbody");
  for (const r of rows) body.append(el("tr", {}, ...r.map((c) => el("td", {}, c))));
  target.append(body);
}

// --- the controls -------------------------------------------------------------------------------
function fill(id, values, labels, group) {
  const s = group ? el("optgroup", {label: group}) : $(id);
  for (const v of values) s.append(el("option", {value: v}, labels ? labels(v) : v));
  if (group) $(id).append(s);
}

function task() {
  return document.querySelector("input[name=task]:checked").value;
}

function showTask() {
  const t = task();
  for (const e of document.querySelectorAll("[data-tasks]")) {
    const on = e.dataset.tasks.split(" ").includes(t);
    e.hidden = !on;
    for (const c of e.querySelectorAll("input, select")) c.disabled = !on;
    if (e.tagName === "FIELDSET") e.disabled = !on;
  }
  const qlora = $("finetune").value === "qlora";
  $("base_format").disabled = t !== "finetune" || !qlora;
  $("base_format").closest("label").hidden = !qlora;
}

function query() {
  const p = new URLSearchParams();
  for (const c of $("controls").elements) {
    if (!c.name || c.disabled || (c.type === "radio" && !c.checked)) continue;
    p.set(c.name, c.value.trim());
  }
  return p.toString();
}

function setControls(values) {
  for (const [k, v] of Object.entries(values)) {
    if (k === "task") {
      const r = document.querySelector(`input[name=task][value="${CSS.escape(v)}"]`);
      if (r) r.checked = true;
    } else {
      const c = $(k);
      if (c) c.value = v;
    }
  }
  syncPreset();
}

function syncPreset() {
  const m = $("model").value.trim();
  $("preset").value = OPTIONS.presets.includes(m) || OPTIONS.hub_models.includes(m) ? m : "";
}

// --- talking to the server ------------------------------------------------------------------------
async function getJSON(url, init) {
  let r;
  try {
    r = await fetch(url, init);
  } catch (e) {
    return {ok: false, error: "the txcalc server does not answer (is `txcalc serve` still running?)"};
  }
  let body;
  try { body = await r.json(); } catch (e) { body = {error: `HTTP ${r.status} without JSON`}; }
  return r.ok ? {ok: true, data: body} : {ok: false, error: body.error || `HTTP ${r.status}`};
}

function schedule() {
  showTask();
  document.body.dataset.state = "pending";
  clearTimeout(timer);
  timer = setTimeout(update, 150);
}

async function update() {
  const gen = ++generation;
  const q = query();
  history.replaceState(null, "", "#" + q);
  document.body.dataset.state = "busy";
  const [cmds, ...answers] = await Promise.all(
    [getJSON("/api/commands?" + q), ...PANELS.map((p) => getJSON(`/api/${p}?` + q))]);
  if (gen !== generation) return; // a newer change is on its way
  const res = Object.fromEntries(PANELS.map((p, i) => [p, answers[i]]));
  const errors = [...new Set([cmds, ...answers].filter((a) => !a.ok).map((a) => a.error))];
  const msg = $("message");
  msg.hidden = errors.length === 0;
  msg.textContent = errors.join(" | ");
  render(task(), res, cmds.ok ? cmds.data : null);
  document.body.dataset.state = errors.length ? "error" : "ready";
  document.body.dataset.gen = String(gen);
}

// --- drawing ---------------------------------------------------------------------------------------
function render(t, res, cmds) {
  for (const p of PANELS) $(p + "-panel").classList.toggle("failed", !res[p].ok);
  renderMemory(t, res.memory.ok ? res.memory.data : null, res.answer.ok ? res.answer.data : null);
  renderAnswer(t, res.answer.ok ? res.answer.data : null);
  renderParams(res.params.ok ? res.params.data : null);
  renderFlops(t, res.flops.ok ? res.flops.data : null);
  renderCommands(cmds);
}

function memoryParts(mem) {
  if (mem.peak_by_category) {
    const labels = OPTIONS.peak_labels;
    return Object.entries(mem.peak_by_category).filter(([k]) => k !== "total")
      .map(([k, v]) => [labels[k] || k, "memory.peak_by_category." + k, v]);
  }
  return Object.entries(mem).filter(([k, v]) => k.endsWith("_bytes") && v &&
      !["total_bytes", "gpu_bytes", "kv_cache_bytes_per_token"].includes(k))
    .map(([k, v]) => [k.replace(/_bytes$/, "").replaceAll("_", " "), "memory." + k, v]);
}

function bar(title, parts, total, capacity, capLabel) {
  const W = 800, H = 64, top = 22, h = 26;
  const scale = W / (1.04 * Math.max(total, capacity));
  const s = svg("svg", {viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img", "aria-label": title});
  s.append(svg("text", {x: 0, y: 14, class: "bar-title"}, title));
  let x = 0;
  parts.forEach(([label, , v], i) => {
    const w = v * scale;
    const r = svg("rect", {x, y: top, width: Math.max(w, 0), height: h, fill: COLORS[i % COLORS.length]});
    r.append(svg("title", {}, `${label}: ${fmtGB(v)}`));
    s.append(r);
    x += w;
  });
  const cx = capacity * scale;
  s.append(svg("line", {x1: cx, x2: cx, y1: top - 6, y2: top + h + 6, class: total > capacity ? "cap over" : "cap"}));
  s.append(svg("text", {x: Math.min(cx, W - 4), y: H - 2, class: "cap-label", "text-anchor": "end"}, capLabel));
  return s;
}

function renderMemory(t, mem, ans) {
  const box = $("memory-bars");
  box.replaceChildren();
  if (!mem) { $("memory-table").replaceChildren(); return; }
  const gpu = $("gpu").value;
  const parts = memoryParts(mem);
  const verdict = mem.fits_one_gpu ? "fits" : "does not fit";
  const what = t === "serve" ? `weights and KV cache of ${fmtInt(mem.concurrency)} sequence(s) of ${fmtInt(mem.context)} tokens` :
    "whole model on one GPU, peak of the step";
  box.append(bar(`${what}: ${fmtGB(mem.total_bytes)}, ${verdict} on one ${gpu}`, parts,
                 mem.total_bytes, mem.gpu_bytes, `${gpu}: ${fmtGB(mem.gpu_bytes)}`));
  const rows = parts.map(([label, key, v], i) => [
    el("span", {class: "swatch", "data-color": i % COLORS.length}, ""), label, fig(key, v, fmtGB(v))]);
  rows.push(["", "total", fig("memory.total_bytes", mem.total_bytes, fmtGB(mem.total_bytes))]);
  rows.push(["", "GPU memory", fig("memory.gpu_bytes", mem.gpu_bytes, fmtGB(mem.gpu_bytes))]);
  if (t === "train" && ans && ans.best) {
    const b = ans.best;
    const bparts = Object.entries(b.memory_bytes).filter(([, v]) => v)
      .map(([k, v]) => [k.replaceAll("_", " "), "answer.best.memory_bytes." + k, v]);
    box.append(bar(`per GPU in the planner's best layout (${b.layout_name}, fullest stage): ${fmtGB(b.total_bytes)}`,
                   bparts, b.total_bytes, ans.gpu_usable_bytes, `${ans.gpu}: ${fmtGB(ans.gpu_usable_bytes)} usable`));
    for (const [label, key, v] of bparts) rows.push(["", "best layout: " + label, fig(key, v, fmtGB(v))]);
  }
  table($("memory-table"), ["", "category", "GiB"], rows);
  for (const s of document.querySelectorAll(".swatch")) s.classList.add("c" + s.dataset.color);
}

function renderAnswer(t, a) {
  const box = $("answer");
  if (!a) { box.replaceChildren(); return; }
  if (t === "train") {
    $("answer-title").textContent = "Training plan (txcalc plan train)";
    const b = a.best;
    dl(box, [
      ["fewest GPUs on which training fits", "answer.min_gpus_to_fit", a.min_gpus_to_fit, fmtInt(a.min_gpus_to_fit)],
      [`GPUs to finish within ${a.days_limit} days`, "answer.gpus_for_deadline", a.gpus_for_deadline, fmtInt(a.gpus_for_deadline ?? 0)],
      ["best layout", "answer.best.layout_name", b.layout_name, b.layout_name],
      ["GPUs of the best layout", "answer.best.gpus", b.gpus, fmtInt(b.gpus)],
      ["days", "answer.best.days", b.days, fmtNum(b.days, 2)],
      ["GPU-hours", "answer.best.gpu_hours", b.gpu_hours, fmtNum(b.gpu_hours, 0)],
      ["cost", "answer.best.cost", b.cost, b.cost === null ? "" : fmtNum(b.cost, 0)],
      ["step time, s", "answer.best.step_time_s", b.step_time_s, fmtNum(b.step_time_s, 3)],
      ["MFU", "answer.best.mfu", b.mfu, fmtPct(b.mfu)],
      ["tokens/s", "answer.best.tokens_per_s", b.tokens_per_s, fmtNum(b.tokens_per_s, 0)],
    ]);
    if (b.cost === null) box.append(el("dt", {}, "cost"), el("dd", {}, "give a price per GPU-hour"));
    notes(box, a.notes);
  } else if (t === "finetune") {
    $("answer-title").textContent = "Fine-tuning on one GPU (txcalc fit)";
    dl(box, [
      ["fits", "answer.fits", a.fits, a.fits ? "yes" : "no"],
      ["method", "answer.finetune", a.finetune, a.finetune],
      ["longest sequence", "answer.max_seq", a.fits ? a.max_seq : null, fmtInt(a.max_seq)],
      ["at micro-batch", "answer.max_batch", a.fits ? a.max_batch : null, fmtInt(a.max_batch)],
      ["memory there", "answer.total_bytes", a.total_bytes, fmtGB(a.total_bytes)],
      ["of the GPU's", "answer.gpu_bytes", a.gpu_bytes, fmtGB(a.gpu_bytes)],
    ]);
    (a.suggestions || []).forEach((s, i) => {
      box.append(el("dt", {}, i ? "then" : "to make it fit"),
                 el("dd", {}, fig(`answer.suggestions.${i}.total_bytes`, s.total_bytes,
                                  `${s.change}: ${fmtGB(s.total_bytes)}${s.fits ? " (fits)" : ""}`)));
    });
  } else {
    $("answer-title").textContent = "Serving plan (txcalc plan infer)";
    dl(box, [
      ["GPUs", "answer.total_gpus", a.total_gpus, fmtInt(a.total_gpus)],
      ["replicas x (TP x PP)", "answer.replicas", a.replicas, `${a.replicas} x (${a.tp} x ${a.pp})`],
      ["TTFT p50, s", "answer.ttft_p50_s", a.ttft_p50_s, fmtNum(a.ttft_p50_s, 4)],
      ["TTFT p99, s", "answer.ttft_p99_s", a.ttft_p99_s, fmtNum(a.ttft_p99_s, 4)],
      ["ITL p50, ms", "answer.itl_p50_s", a.itl_p50_s, fmtNum(1e3 * a.itl_p50_s, 2)],
      ["ITL p99, ms", "answer.itl_p99_s", a.itl_p99_s, fmtNum(1e3 * a.itl_p99_s, 2)],
      ["output tokens/s", "answer.output_tokens_per_s", a.output_tokens_per_s, fmtNum(a.output_tokens_per_s, 0)],
      ["requests/s", "answer.requests_per_s", a.requests_per_s, fmtNum(a.requests_per_s, 3)],
      ["cost per million tokens", "answer.cost_per_million_tokens", a.cost_per_million_tokens, fmtNum(a.cost_per_million_tokens ?? 0, 4)],
      ["cost per million output tokens", "answer.cost_per_million_output_tokens", a.cost_per_million_output_tokens, fmtNum(a.cost_per_million_output_tokens ?? 0, 4)],
      ["meets the SLOs", "answer.meets_slo", a.meets_slo, a.meets_slo ? "yes" : "no"],
    ]);
    if (a.cost_per_million_tokens === null) box.append(el("dt", {}, "cost"), el("dd", {}, "give a price per GPU-hour"));
    notes(box, a.notes);
  }
}

function notes(box, list) {
  for (const n of list || []) box.append(el("dt", {}, "note"), el("dd", {class: "note"}, n));
}

function renderParams(p) {
  if (!p) { $("params-summary").replaceChildren(); $("params-table").replaceChildren(); return; }
  dl($("params-summary"), [
    ["parameters", "params.total_params", p.total_params, fmtInt(p.total_params)],
    ["active per token", "params.active_params", p.active_params, fmtInt(p.active_params)],
    [`checkpoint (${p.weights})`, "params.checkpoint_bytes", p.checkpoint_bytes, fmtGB(p.checkpoint_bytes)],
  ]);
  const top = Math.max(...p.by_component.map((r) => r.params), 1);
  table($("params-table"), ["component", "modules", "params", "share"], p.by_component.map((r, i) => [
    r.component, fmtInt(r.count), fig(`params.by_component.${i}.params`, r.params, fmtInt(r.params)),
    share(r.params / top, fmtPct(r.share))]));
}

function share(frac, text) {
  const s = svg("svg", {viewBox: "0 0 100 10", width: "100", height: "10", class: "mini"});
  s.append(svg("rect", {x: 0, y: 0, width: Math.max(100 * frac, 0.5), height: 10}));
  return el("span", {class: "share"}, s, " " + text);
}

function renderFlops(t, f) {
  if (!f) { $("flops-summary").replaceChildren(); $("flops-table").replaceChildren(); return; }
  const serve = t === "serve";
  $("flops-title").textContent = serve ? `FLOPs by component (forward of ${fmtInt(f.seq)} tokens)` :
    `FLOPs by component (one step of ${fmtInt(f.batch)} x ${fmtInt(f.seq)} tokens)`;
  dl($("flops-summary"), serve ? [
    ["prefill", "flops.prefill_flops", f.prefill_flops, fmtSI(f.prefill_flops, "FLOP")],
    [`decode per token at ${fmtInt(f.decode_context ?? 0)} tokens`, "flops.decode_flops_per_token", f.decode_flops_per_token, fmtSI(f.decode_flops_per_token ?? 0, "FLOP")],
  ] : [
    ["forward", "flops.forward_flops", f.forward_flops, fmtSI(f.forward_flops, "FLOP")],
    ["backward", "flops.backward_flops", f.backward_flops, fmtSI(f.backward_flops, "FLOP")],
    ["model (masked pairs skipped)", "flops.model_flops", f.model_flops, fmtSI(f.model_flops, "FLOP")],
    ["recompute", "flops.recompute_flops", f.recompute_flops, fmtSI(f.recompute_flops, "FLOP")],
  ]);
  const top = Math.max(...f.by_component.map((r) => r.forward_flops + r.backward_flops), 1);
  table($("flops-table"), serve ? ["component", "forward", ""] : ["component", "forward", "backward", ""],
    f.by_component.map((r, i) => [r.component,
      fig(`flops.by_component.${i}.forward_flops`, r.forward_flops, fmtSI(r.forward_flops, "FLOP")),
      ...(serve ? [] : [fig(`flops.by_component.${i}.backward_flops`, r.backward_flops, fmtSI(r.backward_flops, "FLOP"))]),
      share((serve ? r.forward_flops : r.forward_flops + r.backward_flops) / top, "")]));
}

function renderCommands(c) {
  if (!c) { $("cli").textContent = ""; return; }
  $("cli").textContent = PANELS.map((p) => c.commands[p] + " --json").join("\n");
  $("report-link").href = c.report.url;
  $("report-link").textContent = task() === "finetune" ?
    "Full report (of full training: txcalc report has no fine-tuning options)" : "Full report";
  $("report-command").textContent = c.report.command;
}

// --- start ----------------------------------------------------------------------------------------
async function upload(file) {
  if (!file) return;
  if (file.size > 4 * 2 ** 20) { showMessage(`${file.name} is ${fmtInt(file.size)} bytes: a config.json is at most 4 MiB`); return; }
  const r = await getJSON("/api/upload?name=" + encodeURIComponent(file.name), {method: "POST", body: await file.text(), headers: {"Content-Type": "application/json"}});
  if (!r.ok) { showMessage(r.error); return; }
  $("model").value = r.data.model;
  syncPreset();
  schedule();
}

function showMessage(text) {
  $("message").hidden = false;
  $("message").textContent = text;
  document.body.dataset.state = "error";
}

async function start() {
  const r = await getJSON("/api/options");
  if (!r.ok) { showMessage(r.error); return; }
  OPTIONS = r.data;
  const d = OPTIONS.defaults;
  fill("preset", ["", ...OPTIONS.presets], (v) => v || "(other: type or upload)");
  if (OPTIONS.hub_models.length) fill("preset", OPTIONS.hub_models, null, "in the Hugging Face cache");
  fill("gpu", OPTIONS.gpus.map((g) => g.name), (v) => {
    const g = OPTIONS.gpus.find((x) => x.name === v);
    return `${v} (${fmtGB(g.memory_bytes)})`;
  });
  fill("precision", OPTIONS.precisions);
  fill("optimizer", OPTIONS.optimizers);
  fill("attn", OPTIONS.attn);
  // auto: the command's default (none for training; gradient checkpointing, full, when
  // fine-tuning: txcalc.answers.common.default_recompute)
  fill("recompute", ["", ...OPTIONS.recompute], (v) => v || "auto");
  fill("plan_recompute", ["", ...OPTIONS.recompute], (v) => v || "auto");
  fill("finetune", OPTIONS.finetune_modes);
  fill("lora_targets", OPTIONS.lora_targets);
  fill("base_format", OPTIONS.base_formats);
  fill("weights", ["", ...OPTIONS.weights], (v) => v || "the model's own (bf16)");
  fill("kv_dtype", OPTIONS.kv_dtypes);
  setControls(d);
  if (location.hash.length > 1) setControls(Object.fromEntries(new URLSearchParams(location.hash.slice(1))));
  $("preset").addEventListener("change", () => { if ($("preset").value) $("model").value = $("preset").value; });
  $("model").addEventListener("input", syncPreset);
  $("upload").addEventListener("change", () => upload($("upload").files[0]));
  $("controls").addEventListener("input", (e) => { if (e.target.id !== "upload") schedule(); });
  $("controls").addEventListener("change", (e) => { if (e.target.id !== "upload") schedule(); });
  $("copy").addEventListener("click", async () => {
    try { await navigator.clipboard.writeText($("cli").textContent); $("copy").textContent = "Copied"; }
    catch (e) { getSelection().selectAllChildren($("cli")); }
  });
  showTask();
  update();
}

document.addEventListener("DOMContentLoaded", start);
