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
  // a row of one cell is a heading across the table
  for (const r of rows) body.append(el("tr", {}, ...(r.length === 1 ? [el("td", {colspan: head.length, class: "heading"}, r[0])] : r.map((c) => el("td", {}, c)))));
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
  const form = new URLSearchParams(q);  // the controls as asked: drawn with their answers
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
  render(form.get("task"), res, cmds.ok ? cmds.data : null, form);
  document.body.dataset.state = errors.length ? "error" : "ready";
  document.body.dataset.gen = String(gen);
  // the charts are asked for after the panels (each is several answers; asked at once, they
  // would share the server's interpreter with the panels and slow them): drawn when they arrive
  $("charts").dataset.gen = "";
  const charts = await getJSON("/api/charts?" + q);
  if (gen !== generation) return;
  renderCharts(charts.ok ? charts.data.charts : []);
  $("charts").dataset.gen = String(gen);
}

// --- drawing ---------------------------------------------------------------------------------------
// the last answer drawn: redrawn at the new width when the window is resized
let last = null;

function render(t, res, cmds, form) {
  last = {t, res, cmds, form, charts: last && last.t === t ? last.charts : []};
  for (const p of PANELS) $(p + "-panel").classList.toggle("failed", !res[p].ok);
  renderMemory(t, res.memory.ok ? res.memory.data : null, res.answer.ok ? res.answer.data : null, form);
  renderAnswer(t, res.answer.ok ? res.answer.data : null);
  renderParams(res.params.ok ? res.params.data : null);
  renderFlops(t, res.flops.ok ? res.flops.data : null);
  renderCommands(cmds, t);
  renderAssumed(PANELS.map((p) => [p, res[p].ok ? res[p].data.assumed : null]));
}

// the defaults each answer took (its "assumed": the CLI prints them under its answer too)
function renderAssumed(lists) {
  const box = $("assumed");
  box.replaceChildren();
  const seen = new Set();
  for (const [p, list] of lists) {
    (list || []).forEach((words, i) => {
      if (seen.has(words)) return;
      seen.add(words);
      box.append(el("li", {}, fig(`${p}.assumed.${i}`, words, words)));
    });
  }
  $("assumed-panel").hidden = seen.size === 0;
}

// --- memory: one hierarchy (answers.costs.MEMORY_GROUPS), one colour per group ----------------
const GROUP_COLORS = {weights: COLORS[0], gradients: COLORS[1], optimizer: COLORS[2],
                      activations: COLORS[4], transients: COLORS[5], kv_cache: COLORS[3],
                      framework: COLORS[9]};

// [{group, label, key, value}] of one answer's categories (keys of answers.costs.MEMORY_PARTS),
// in the hierarchy's order
function memoryParts(cats, prefix) {
  const groups = Object.keys(OPTIONS.memory_groups);
  const out = [];
  for (const [k, v] of Object.entries(cats)) {
    const part = OPTIONS.memory_parts[k];
    if (!part || !v) continue;
    out.push({group: part[0], label: part[1], key: prefix + k, value: v});
  }
  return out.sort((a, b) => groups.indexOf(a.group) - groups.indexOf(b.group));
}

function legend(parts, y, width) {
  // one swatch per group the bar shows, in the bar's colours; wraps to the next row
  const g = svg("g", {class: "legend"});
  let x = 0, row = 0;
  for (const grp of [...new Set(parts.map((p) => p.group))]) {
    const words = OPTIONS.memory_groups[grp];
    const w = 18 + 7.2 * words.length + 14;
    if (x + w > width && x > 0) { x = 0; row += 1; }
    const item = svg("g", {class: "legend-item", "data-group": grp});
    item.append(svg("rect", {x, y: y + 18 * row, width: 12, height: 12, fill: GROUP_COLORS[grp]}));
    item.append(svg("text", {x: x + 16, y: y + 18 * row + 11, class: "legend-text"}, words));
    g.append(item);
    x += w;
  }
  return [g, row + 1];
}

function bar(title, parts, total, capacity, capLabel, width) {
  const W = width, top = 8, h = 26;
  const [lg, rows] = legend(parts, top + h + 24, W);
  const H = top + h + 26 + 18 * rows;
  const scale = W / (1.04 * Math.max(total, capacity));
  const s = svg("svg", {viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img", "aria-label": title, class: "bar"});
  let x = 0;
  for (const p of parts) {
    const w = p.value * scale;
    const r = svg("rect", {x, y: top, width: Math.max(w, 0), height: h, fill: GROUP_COLORS[p.group],
                           "data-group": p.group, stroke: "#fff", "stroke-width": 0.5});
    r.append(svg("title", {}, `${OPTIONS.memory_groups[p.group]}: ${p.label}: ${fmtGB(p.value)}`));
    s.append(r);
    x += w;
  }
  const cx = capacity * scale;
  s.append(svg("line", {x1: cx, x2: cx, y1: top - 6, y2: top + h + 6, class: total > capacity ? "cap over" : "cap"}));
  s.append(svg("text", {x: Math.min(cx, W - 4), y: top + h + 18, class: "cap-label", "text-anchor": "end"}, capLabel));
  s.append(lg);
  return el("figure", {class: "bar-box"}, el("figcaption", {class: "bar-title"}, title), s);
}

// rows of the memory table: each group (its sum, for display) and, indented, its parts
function groupRows(parts, heading) {
  const rows = heading ? [[el("strong", {}, heading)]] : [];
  for (const grp of [...new Set(parts.map((p) => p.group))]) {
    const mine = parts.filter((p) => p.group === grp);
    const sum = mine.reduce((a, p) => a + p.value, 0);
    const sw = swatch(grp);
    if (mine.length === 1) {
      rows.push([sw, OPTIONS.memory_groups[grp] + (mine[0].label !== OPTIONS.memory_groups[grp] ? `: ${mine[0].label}` : ""),
                 fig(mine[0].key, mine[0].value, fmtGB(mine[0].value))]);
      continue;
    }
    rows.push([sw, OPTIONS.memory_groups[grp], fmtGB(sum)]);
    for (const p of mine) rows.push(["", el("span", {class: "sub"}, p.label), fig(p.key, p.value, fmtGB(p.value))]);
  }
  return rows;
}

function barWidth() {
  return Math.max(320, Math.min(800, $("memory-bars").clientWidth || 800));
}

function renderMemory(t, mem, ans, form) {
  const box = $("memory-bars");
  box.replaceChildren();
  if (!mem) { $("memory-table").replaceChildren(); return; }
  const gpu = form.get("gpu"), W = barWidth(), rate = form.get("rate") || "";
  const rows = [];
  if (t === "serve") {
    const byRate = rate !== "";
    const load = byRate ? `${rate} requests/s` : `${fmtInt(mem.concurrency)} concurrent requests`;
    const kv = ans && ans.kv_capacity;
    if (kv) {
      const cats = Object.fromEntries(Object.entries(kv).filter(([k]) => OPTIONS.memory_parts[k]));
      const parts = memoryParts(cats, "answer.kv_capacity.");
      const total = parts.reduce((a, p) => a + p.value, 0);
      box.append(bar(`per GPU of the plan for ${load} (${ans.replicas} x TP${ans.tp} PP${ans.pp}): KV pool of ` +
                     `${fmtInt(kv.kv_tokens)} tokens, ${fmtNum(kv.max_concurrency, 1)} requests of ${fmtInt(kv.max_model_len)}`,
                     parts, total, kv.total_bytes, `${gpu}: ${fmtGB(kv.total_bytes)}`, W));
      rows.push(...groupRows(parts, "per GPU of the plan (vLLM's profile)"));
    }
    if (!byRate) {
      const parts = memoryParts({weights_bytes: mem.weights_bytes, kv_cache_bytes: mem.kv_cache_bytes}, "memory.");
      box.append(bar(`whole model, weights and the KV cache of ${fmtInt(mem.concurrency)} sequence(s) of ${fmtInt(mem.context)} tokens: ` +
                     `${fmtGB(mem.total_bytes)}, ${mem.fits_one_gpu ? "fits" : "does not fit"} on one ${gpu}`,
                     parts, mem.total_bytes, mem.gpu_bytes, `${gpu}: ${fmtGB(mem.gpu_bytes)}`, W));
      rows.push(...groupRows(parts, "whole model (txcalc memory --inference)"));
      rows.push(["", "total", fig("memory.total_bytes", mem.total_bytes, fmtGB(mem.total_bytes))]);
    } else {
      rows.push(["", "whole model at the concurrency control: weights + KV cache",
                 fig("memory.total_bytes", mem.total_bytes, fmtGB(mem.total_bytes))]);
    }
    rows.push(["", "GPU memory", fig("memory.gpu_bytes", mem.gpu_bytes, fmtGB(mem.gpu_bytes))]);
  } else {
    const parts = memoryParts(mem.peak_by_category, "memory.peak_by_category.");
    const framework = (mem.device_bytes ?? mem.total_bytes) - mem.total_bytes;
    if (framework > 0) parts.push({group: "framework", label: "allocator reserve, CUDA context, cuBLAS workspace", key: "memory.device_bytes", value: framework});
    const shown = mem.device_bytes ?? mem.total_bytes;
    box.append(bar(`whole model on one GPU, peak of the step: ${fmtGB(shown)} on the device, ${mem.fits_one_gpu ? "fits" : "does not fit"} on one ${gpu}`,
                   parts, shown, mem.gpu_bytes, `${gpu}: ${fmtGB(mem.gpu_bytes)}`, W));
    rows.push(...groupRows(parts.filter((p) => p.key !== "memory.device_bytes"), "whole model (txcalc memory)"));
    if (framework > 0) rows.push([swatch("framework"), "framework: allocator reserve, CUDA context, cuBLAS workspace", fmtGB(framework)]);
    rows.push(["", "total (peak over the step)", fig("memory.total_bytes", mem.total_bytes, fmtGB(mem.total_bytes))]);
    if (mem.device_bytes !== undefined) rows.push(["", "on the device (nvidia-smi)", fig("memory.device_bytes", mem.device_bytes, fmtGB(mem.device_bytes))]);
    rows.push(["", "GPU memory", fig("memory.gpu_bytes", mem.gpu_bytes, fmtGB(mem.gpu_bytes))]);
    if (t === "train" && ans && ans.best) {
      const b = ans.best;
      const bparts = memoryParts(b.memory_bytes, "answer.best.memory_bytes.");
      box.append(bar(`per GPU in the planner's best layout (${b.layout_name}, fullest stage): ${fmtGB(b.total_bytes)}`,
                     bparts, b.total_bytes, ans.gpu_usable_bytes, `${ans.gpu}: ${fmtGB(ans.gpu_usable_bytes)} usable`, W));
      rows.push(...groupRows(bparts, `per GPU, best layout ${b.layout_name}`));
    }
  }
  table($("memory-table"), ["", "category", "GiB"], rows);
}

// a group's colour in the memory table: the bar's own fill (an SVG square, no style attribute)
function swatch(grp) {
  const s = svg("svg", {viewBox: "0 0 12 12", width: 12, height: 12, class: "swatch", "data-group": grp});
  s.append(svg("rect", {x: 0, y: 0, width: 12, height: 12, rx: 2, fill: GROUP_COLORS[grp]}));
  return s;
}

// --- charts: hand-written SVG from /api/charts (txcalc/web/charts.py) -------------------------
function ticks(lo, hi, log) {
  if (log) {
    const out = [];
    for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
      for (const m of [1, 2, 5]) { const v = m * 10 ** e; if (v >= lo * 0.999 && v <= hi * 1.001) out.push(v); }
    }
    return out.length >= 2 ? out : [lo, hi];
  }
  const span = hi - lo || 1, step0 = 10 ** Math.floor(Math.log10(span / 4));
  const step = [1, 2, 5, 10].map((m) => m * step0).find((st) => span / st <= 6);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) out.push(v);
  return out;
}

// the axis's values in the unit its labels show (bytes: GiB), so that ticks fall on round labels
const SHOWN = {bytes: GIB};

function fmtAxis(v, unit) {
  if (unit === "bytes") return fmtNum(v / GIB, v / GIB < 10 ? 1 : 0);
  if (unit === "s") return v < 1 ? fmtNum(v * 1e3, v < 0.01 ? 1 : 0) + " ms" : fmtNum(v, 1) + " s";
  if (Math.abs(v) >= 1e4) return fmtSI(v, "").trim();
  return fmtNum(v, v < 10 ? 2 : 0);
}

function lineChart(c, W) {
  const H = 240, L = 52, R = 12, T = 22, B = 40;
  const pts = c.series.flatMap((s) => s.points);
  const s = svg("svg", {viewBox: `0 0 ${W} ${H + 20 * c.series.length}`, width: "100%", role: "img",
                        "aria-label": c.title, class: "chart", "data-chart": c.id});
  if (!pts.length) { s.append(svg("text", {x: L, y: T + 40, class: "cap-label"}, "no point answered")); return s; }
  const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
  if (c.limit && c.limit.value) ys.push(c.limit.value);
  let [x0, x1] = [Math.min(...xs), Math.max(...xs)], [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (!c.y.log) { y0 = 0; y1 *= 1.05; } else { y0 /= 1.3; y1 *= 1.3; }
  if (x0 === x1) { x0 = c.x.log ? x0 / 2 : x0 - 1; x1 = c.x.log ? x1 * 2 : x1 + 1; }
  const f = (log) => (log ? Math.log10 : (v) => v);
  const fx = f(c.x.log), fy = f(c.y.log);
  const X = (v) => L + (fx(v) - fx(x0)) / (fx(x1) - fx(x0)) * (W - L - R);
  const Y = (v) => T + (1 - (fy(v) - fy(y0)) / (fy(y1) - fy(y0))) * (H - T - B);
  const axes = svg("g", {class: "axes"});
  axes.append(svg("line", {x1: L, x2: W - R, y1: H - B, y2: H - B}), svg("line", {x1: L, x2: L, y1: T, y2: H - B}));
  let lastRight = -Infinity;
  const k = SHOWN[c.x.unit] || 1, ky = SHOWN[c.y.unit] || 1;
  for (const v of ticks(x0 / k, x1 / k, c.x.log).map((t) => t * k)) {
    const x = X(v), label = fmtAxis(v, c.x.unit), half = 3.4 * label.length;
    axes.append(svg("line", {x1: x, x2: x, y1: H - B, y2: H - B + 4}));
    if (x - half > lastRight + 4 && x + half <= W) {  // no overlapping labels
      axes.append(svg("text", {x, y: H - B + 16, "text-anchor": "middle", class: "tick"}, label));
      lastRight = x + half;
    }
  }
  for (const v of ticks((y0 || (c.y.log ? 1e-9 : 0)) / ky, y1 / ky, c.y.log).map((t) => t * ky)) {
    const y = Y(v);
    axes.append(svg("line", {x1: L - 4, x2: W - R, y1: y, y2: y, class: "grid"}));
    axes.append(svg("text", {x: L - 6, y: y + 4, "text-anchor": "end", class: "tick"}, fmtAxis(v, c.y.unit)));
  }
  axes.append(svg("text", {x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle", class: "axis-label"}, c.x.label));
  axes.append(svg("text", {x: 4, y: T - 10, class: "axis-label"}, c.y.label));
  s.append(axes);
  if (c.limit && c.limit.value) {
    s.append(svg("line", {x1: L, x2: W - R, y1: Y(c.limit.value), y2: Y(c.limit.value), class: "cap limit"}));
    s.append(svg("text", {x: W - R, y: Y(c.limit.value) - 4, "text-anchor": "end", class: "cap-label"}, `${c.limit.name}: ${fmtAxis(c.limit.value, c.y.unit)}${c.y.unit === "bytes" ? " GiB" : ""}`));
  }
  c.series.forEach((ser, i) => {
    const color = COLORS[i % COLORS.length];
    const d = ser.points.map((p, j) => `${j ? "L" : "M"}${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join(" ");
    s.append(svg("path", {d, fill: "none", stroke: color, "stroke-width": 2, class: "series", "data-series": ser.name}));
    for (const p of ser.points) {
      const dot = svg("circle", {cx: X(p[0]), cy: Y(p[1]), r: 3, fill: color});
      dot.append(svg("title", {}, `${ser.name}: ${fmtAxis(p[0], c.x.unit)} ${c.x.unit} -> ${fmtAxis(p[1], c.y.unit)}${c.y.unit === "bytes" ? " GiB" : ""}`));
      s.append(dot);
    }
    const item = svg("g", {class: "legend-item", "data-series": ser.name});
    item.append(svg("rect", {x: L, y: H + 20 * i, width: 12, height: 12, fill: color}));
    item.append(svg("text", {x: L + 18, y: H + 20 * i + 11, class: "legend-text"}, ser.name));
    s.append(item);
  });
  return s;
}

function renderCharts(list) {
  if (last) last.charts = list;
  const box = $("charts");
  box.replaceChildren();
  // drawn at the width of one grid cell (two side by side from 616 px: app.css's minmax(300px))
  const cols = box.clientWidth >= 616 ? 2 : 1;
  const W = Math.max(300, Math.min(640, ((box.clientWidth || 640) - 8 * (cols - 1)) / cols));
  for (const c of list || []) {
    const fig_ = el("figure", {class: "chart-box"}, el("div", {class: "chart-title"}, c.title), lineChart(c, W));
    const cap = el("figcaption", {}, "each point: ", el("code", {}, c.command));
    if (c.left_out.length) cap.append(" (not answered: " + c.left_out.join(", ") + ")");
    fig_.append(cap);
    box.append(fig_);
  }
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
      ["global batch, sequences", "answer.global_batch", a.global_batch, fmtInt(a.global_batch)],
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

function renderCommands(c, t) {
  if (!c) { $("cli").textContent = ""; return; }
  $("cli").textContent = PANELS.map((p) => c.commands[p] + " --json").join("\n");
  $("report-link").href = c.report.url;
  $("report-link").textContent = {train: "Full training report", finetune: "Full fine-tuning report",
                                   serve: "Full serving report"}[t];
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
  // "": the CLI's default, which each answer's "assumed" states
  fill("precision", ["", ...OPTIONS.precisions], (v) => v || "auto (bf16-mixed; fp16-mixed on T4, V100)");
  fill("optimizer", ["", ...OPTIONS.optimizers], (v) => v || "auto (adamw; fine-tuning: the recipe's)");
  fill("mode", ["", ...OPTIONS.serve_modes], (v) => v || "auto");
  $("mode").closest("label").hidden = OPTIONS.serve_modes.length === 0;
  fill("attn", OPTIONS.attn);
  // auto: the command's default (none for training; gradient checkpointing, full, when
  // fine-tuning: txcalc.answers.common.default_recompute)
  fill("recompute", ["", ...OPTIONS.recompute], (v) => v || "auto");
  fill("plan_recompute", ["", ...OPTIONS.recompute], (v) => v || "auto");
  fill("finetune", OPTIONS.finetune_modes);
  fill("lora_targets", OPTIONS.lora_targets);
  fill("base_format", OPTIONS.base_formats);
  fill("weights", ["", ...OPTIONS.weights], (v) => v || "auto (the released format, else bf16)");
  fill("kv_dtype", ["", ...OPTIONS.kv_dtypes], (v) => v || "auto (the weights' 16-bit type)");
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
  let resized = null;
  window.addEventListener("resize", () => {
    clearTimeout(resized);
    resized = setTimeout(() => {
      if (!last) return;
      const charts = last.charts;
      render(last.t, last.res, last.cmds, last.form);
      renderCharts(charts);
    }, 150);
  });
  showTask();
  update();
}

document.addEventListener("DOMContentLoaded", start);
