// tracehouse serve: the page. Plain JavaScript, no build step, nothing loaded from elsewhere.
//
// Every string that comes from the warehouse (run, kernel and rank names) is put on the page
// with textContent or drawn with fillText, never parsed as HTML: a kernel called
// <script>alert(1)</script> shows as those characters. Figures arrive as [raw, text] pairs,
// already formatted by the server with the report's formatters; the raw value goes into
// data-value. Views are addressed by the URL's hash (#/run?run=...), so the back button works
// and a view can be linked.
"use strict";

const view = document.getElementById("view");
const crumbs = document.getElementById("crumbs");
const tooltip = document.getElementById("tooltip");

// ------------------------------------------------------------------ small helpers

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function href(path, params) {
  return "#/" + path + (params ? "?" + new URLSearchParams(params).toString() : "");
}

function go(path, params) {
  location.hash = href(path, params);
}

async function api(path, params) {
  const response = await fetch("/api/" + path + "?" + new URLSearchParams(params || {}));
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function setCrumbs(items) {
  crumbs.replaceChildren();
  items.forEach((item, index) => {
    if (index) crumbs.append(el("span", {class: "sep", text: "›"}));
    crumbs.append(item.href ? el("a", {href: item.href, text: item.label})
                            : el("span", {text: item.label}));
  });
}

function runCrumbs(run) {
  return [{label: "runs", href: href("")}, {label: run, href: href("run", {run})}];
}

function valueCell(tag, pair, numeric, extraClass) {
  const [raw, text] = pair;
  const classes = [numeric ? "num" : "", extraClass || ""].join(" ").trim();
  const node = el(tag, {class: classes || null, dataset: {value: raw === null ? "" : String(raw)}});
  if (extraClass === "name") {
    // Long C++ names are clipped to a few lines; the whole name is the tooltip.
    node.append(el("div", {class: "clip", title: text, text}));
  } else {
    node.textContent = text;
  }
  return node;
}

// A table from the server's {columns, rows: [{key, cells: [[raw, text]]}]}.
function table(spec, options) {
  options = options || {};
  const head = el("tr", {}, ...spec.columns.map((column) => {
    const th = el("th", {class: column.numeric ? "num" : null, text: column.label,
                         dataset: {key: column.key}});
    if (options.sortable && options.sortable.includes(column.key)) {
      th.classList.add("sortable");
      th.addEventListener("click", () => options.onSort(column.key));
    }
    return th;
  }));
  const body = spec.rows.map((row) => {
    const tr = el("tr", {class: options.onRow ? "link" : null},
                  ...row.cells.map((pair, index) => valueCell(
                      "td", pair, spec.columns[index].numeric,
                      spec.columns[index].key === "name" ? "name" : "")));
    if (options.onRow) tr.addEventListener("click", () => options.onRow(row.key));
    return tr;
  });
  return el("table", {class: options.class || null}, el("thead", {}, head),
            el("tbody", {}, ...body));
}

function section(title, ...children) {
  return el("section", {}, el("h2", {text: title}), ...children);
}

function showTooltip(event, text) {
  tooltip.textContent = text;
  tooltip.hidden = false;
  tooltip.style.left = (event.clientX + 14) + "px";
  tooltip.style.top = (event.clientY + 12) + "px";
}

function hideTooltip() { tooltip.hidden = true; }

function ms(ns) { return ns === null ? "—" : (ns / 1e6).toFixed(3) + " ms"; }

// Sequential blues, light (low) to dark (high).
const RAMP = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];

function rampColour(fraction) {
  const f = Math.min(1, Math.max(0, fraction)) * (RAMP.length - 1);
  const low = Math.floor(f), high = Math.min(RAMP.length - 1, low + 1), t = f - low;
  const rgb = RAMP[low].map((c, i) => Math.round(c + (RAMP[high][i] - c) * t));
  return `rgb(${rgb[0]},${rgb[1]},${rgb[2]})`;
}

// ------------------------------------------------------------------ views

async function runsView() {
  setCrumbs([{label: "runs"}]);
  const data = await api("runs");
  const rows = data.runs.map((run) => ({
    key: {run: run.run_id},
    cells: [[run.run_id, run.run_id], [run.timing, run.timing], [run.layout, run.layout || "—"],
            run.ranks, run.iterations, run.mean_step],
  }));
  const spec = {columns: [{key: "run", label: "run"}, {key: "timing", label: "timing"},
                          {key: "layout", label: "layout"},
                          {key: "ranks", label: "ranks", numeric: true},
                          {key: "iterations", label: "iterations", numeric: true},
                          {key: "mean_step", label: "mean step", numeric: true}], rows};
  view.replaceChildren(
    el("h1", {text: "Runs"}),
    data.runs.length ? table(spec, {onRow: (key) => go("run", key), class: "runs"})
                     : el("p", {class: "note",
                                text: "The warehouse has no runs in fct_run_summary yet."}));
}

async function overviewView(params) {
  const run = params.get("run");
  setCrumbs(runCrumbs(run).slice(0, 1).concat([{label: run}]));
  const data = await api("overview", {run});
  const cards = el("div", {class: "cards"}, ...data.headline.map((figure) => el(
    "div", {class: "card", dataset: {label: figure.label}},
    el("div", {class: "label", text: figure.label}),
    el("div", {class: "value", text: figure.value}),
    el("div", {class: "sub", text: figure.note}))));
  const offenders = el("table", {class: "offenders"},
    el("thead", {}, el("tr", {}, ...["what", "who", "how much", "why"].map(
      (text) => el("th", {text})))),
    el("tbody", {}, ...data.offenders.map((o) => el(
      "tr", {}, el("td", {text: o.what}), el("td", {text: o.who}),
      el("td", {class: "num", text: o.figure}), el("td", {text: o.note})))));
  view.replaceChildren(
    el("h1", {text: run}),
    el("p", {class: "meta", text: [data.layout, `timing: ${data.timing}`]
      .filter(Boolean).join(" · ")}),
    ...data.notes.map((text) => el("p", {class: "note", text})),
    section("Headline (the report's figures)", cards),
    section("Worst offenders", offenders),
    section("Iterations side by side", iterationsTable(run, data.iterations)),
    section("Rank × iteration", heatmapPanel(run, data.step_parts)),
    section("Top kernels over the run", table(data.top_kernels, {class: "top-kernels"})));
}

function iterationsTable(run, spec) {
  if (!spec.iterations.length) return el("p", {class: "note", text: "No iterations with a step."});
  const head = el("tr", {}, el("th", {text: "figure"}), ...spec.iterations.map((it) => el(
    "th", {class: "num"}, el("button", {class: "link", text: `iteration ${it.label}`,
                                        dataset: {iteration: String(it.key)},
                                        onclick: () => go("iteration", {run, iteration: it.key})}))));
  const rows = spec.rows.map((row) => el(
    "tr", {dataset: {figure: row.label}}, el("th", {text: row.label}),
    ...row.cells.map((pair) => valueCell("td", pair, true))));
  return el("div", {class: "scroll"},
            el("table", {class: "iterations"}, el("thead", {}, head), el("tbody", {}, ...rows)));
}

function heatmapPanel(run, parts) {
  const select = el("select", {id: "heatmap-part"}, ...parts.map(
    (part) => el("option", {value: part.column, text: part.label})));
  const holder = el("div", {class: "scroll", id: "heatmap-holder"});
  const legend = el("div", {class: "legend"});
  const draw = async () => {
    holder.replaceChildren(el("p", {class: "meta", text: "loading…"}));
    const data = await api("heatmap", {run, part: select.value});
    drawHeatmap(holder, legend, run, data);
  };
  select.addEventListener("change", () => { draw().catch(showError); });
  draw().catch(showError);
  return el("div", {}, el("div", {class: "toolbar"}, el("label", {text: "show "}, select),
                          legend), holder);
}

function drawHeatmap(holder, legend, run, data) {
  const ranks = data.ranks.length, iterations = data.iterations.length;
  const cellW = Math.max(48, Math.min(140, Math.floor(720 / Math.max(1, iterations))));
  const cellH = Math.max(2, Math.min(20, Math.floor(640 / Math.max(1, ranks))));
  const left = cellH >= 10 ? 180 : 60, top = 22;
  const width = left + cellW * iterations + 4, height = top + cellH * ranks + 4;
  const ratio = window.devicePixelRatio || 1;
  const canvas = el("canvas", {id: "heatmap", dataset: {
    left, top, cellW, cellH, ranks, iterations, part: data.part}});
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  canvas.style.width = width + "px";
  canvas.style.height = height + "px";
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#39424b";
  ctx.textBaseline = "middle";
  data.iterations.forEach((it, j) => {
    ctx.fillText(`it ${it.label}`, left + j * cellW + 4, top / 2);
  });
  const span = (data.max ?? 0) - (data.min ?? 0);
  data.ranks.forEach((rank, i) => {
    if (cellH >= 10) {
      ctx.fillStyle = "#39424b";
      ctx.fillText(rank.label, 4, top + i * cellH + cellH / 2, left - 8);
    } else if (i % Math.ceil(12 / cellH) === 0) {
      ctx.fillStyle = "#39424b";
      ctx.fillText(String(rank.rank), 4, top + i * cellH + cellH / 2);
    }
    for (let j = 0; j < iterations; j++) {
      const value = data.values[i * iterations + j];
      ctx.fillStyle = value === null ? "#eceff2"
        : rampColour(span > 0 ? (value - data.min) / span : 0.5);
      ctx.fillRect(left + j * cellW, top + i * cellH, cellW - 1, Math.max(1, cellH - 1));
    }
  });
  const cellAt = (event) => {
    const box = canvas.getBoundingClientRect();
    const j = Math.floor((event.clientX - box.left - left) / cellW);
    const i = Math.floor((event.clientY - box.top - top) / cellH);
    if (i < 0 || j < 0 || i >= ranks || j >= iterations) return null;
    return {rank: data.ranks[i], iteration: data.iterations[j],
            value: data.values[i * iterations + j]};
  };
  canvas.addEventListener("mousemove", (event) => {
    const cell = cellAt(event);
    if (!cell) { hideTooltip(); return; }
    showTooltip(event, `${cell.rank.label} · iteration ${cell.iteration.label}\n` +
                       `${data.label}: ${ms(cell.value)}`);
  });
  canvas.addEventListener("mouseleave", hideTooltip);
  canvas.addEventListener("click", (event) => {
    const cell = cellAt(event);
    if (!cell || cell.value === null) return;
    hideTooltip();
    go("rank", {run, rank: cell.rank.rank, iteration: cell.iteration.key});
  });
  holder.replaceChildren(canvas);
  const ramp = el("canvas", {class: "ramp"});
  ramp.width = 160;
  ramp.height = 10;
  const rampCtx = ramp.getContext("2d");
  for (let x = 0; x < 160; x++) {
    rampCtx.fillStyle = rampColour(x / 159);
    rampCtx.fillRect(x, 0, 1, 10);
  }
  legend.replaceChildren(el("span", {text: ms(data.min)}), ramp, el("span", {text: ms(data.max)}),
                         el("span", {text: "· click a cell for that rank's iteration"}));
}

async function iterationView(params) {
  const run = params.get("run"), iteration = params.get("iteration");
  const data = await api("iteration", {run, iteration});
  setCrumbs(runCrumbs(run).concat([{label: `iteration ${data.iteration}`}]));
  view.replaceChildren(
    el("h1", {text: `${run} · iteration ${data.iteration}`}),
    el("p", {class: "meta", text: "Every rank's step and its exclusive parts " +
                                  "(fct_rank_iterations), slowest first; click a rank."}),
    el("div", {class: "scroll"}, table(data.ranks, {
      class: "ranks", onRow: (key) => go("rank", {run, rank: key.rank, iteration})})));
}

const PART_COLOURS = {
  step_compute_ns: "#4c72b0", step_overlap_ns: "#8172b3",
  step_exposed_communication_ns: "#c44e52", step_exposed_memory_ns: "#dd8452",
  step_optimizer_ns: "#55a868", step_idle_ns: "#c9ced4",
};

async function rankView(params) {
  const run = params.get("run"), rank = params.get("rank"), iteration = params.get("iteration");
  const data = await api("rank_iteration", {run, rank, iteration});
  setCrumbs(runCrumbs(run).concat([
    {label: `iteration ${data.iteration}`, href: href("iteration", {run, iteration})},
    {label: data.label}]));
  const step = Number(data.step[0]) || 0;
  const bar = el("div", {class: "bar"}, ...data.parts.filter((p) => p.value[0] > 0).map((part) => {
    const span = el("span", {dataset: {column: part.column}});
    span.style.width = (100 * part.value[0] / step) + "%";
    span.style.background = PART_COLOURS[part.column] || "#999";
    span.addEventListener("mousemove", (e) => showTooltip(e, `${part.label}: ${part.value[1]}`));
    span.addEventListener("mouseleave", hideTooltip);
    return span;
  }));
  const parts = el("table", {class: "parts"},
    el("thead", {}, el("tr", {}, el("th", {text: "part of the step"}),
                       el("th", {class: "num", text: "time"}))),
    el("tbody", {},
       el("tr", {dataset: {column: "step_ns"}}, el("th", {text: "step"}),
          valueCell("td", data.step, true)),
       ...data.parts.map((part) => {
         const swatch = el("span", {class: "swatch"});
         swatch.style.background = PART_COLOURS[part.column] || "#999";
         return el("tr", {dataset: {column: part.column}},
                   el("td", {}, swatch, part.label), valueCell("td", part.value, true));
       })));
  const figures = el("dl", {class: "fields"}, ...data.figures.flatMap((figure) => [
    el("dt", {text: figure.label}), valueCell("dd", figure.value, true)]));
  const kernels = el("div", {id: "kernels"});
  view.replaceChildren(
    el("h1", {text: `${run} · ${data.label} · iteration ${data.iteration}`}),
    el("p", {class: "meta", text: `timing: ${data.timing} · step rule: ${data.step_rule}`}),
    section("The step and its parts", bar, parts),
    section("Its kernels, in figures", figures),
    section("Kernels", kernels));
  kernelsPanel(kernels, {run, rank, iteration}, {sort: "dur_ns", desc: "1", q: "", offset: 0});
}

async function kernelsPanel(holder, where, state) {
  const search = el("input", {type: "search", placeholder: "filter kernel names",
                              value: state.q, id: "kernel-filter"});
  let timer = null;
  search.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => kernelsPanel(holder, where, {...state, q: search.value, offset: 0}),
                       250);
  });
  let data;
  try {
    data = await api("kernels", {...where, ...state});
  } catch (error) {
    holder.replaceChildren(el("p", {class: "error", text: error.message}));
    return;
  }
  const last = Math.min(data.total, data.offset + data.page_rows);
  const pager = el("div", {class: "toolbar"}, search,
    el("span", {class: "meta", id: "kernel-count",
                text: `${data.offset + (data.total ? 1 : 0)}–${last} of ${data.total} kernels`}),
    el("button", {text: "previous", disabled: data.offset > 0 ? null : "",
                  onclick: () => kernelsPanel(holder, where,
                    {...state, offset: Math.max(0, data.offset - data.page_rows)})}),
    el("button", {text: "next", disabled: last < data.total ? null : "",
                  onclick: () => kernelsPanel(holder, where,
                    {...state, offset: data.offset + data.page_rows})}));
  const sortable = ["start_ns", "dur_ns", "name", "kind", "stream", "phase", "microbatch"];
  const grid = table(data.kernels, {
    class: "kernels", sortable,
    onSort: (key) => {
      const column = key === "start_ns" ? "ts_ns" : key;
      const desc = column === state.sort ? (state.desc === "1" ? "" : "1") : "";
      kernelsPanel(holder, where, {...state, sort: column, desc, offset: 0});
    },
    onRow: (key) => go("kernel", {run: where.run, rank: where.rank, iteration: where.iteration,
                                  trace: key.trace_id, slice: key.slice_id}),
  });
  holder.replaceChildren(pager, el("div", {class: "scroll"}, grid));
  if (state.q) {
    search.focus();
    search.setSelectionRange(search.value.length, search.value.length);
  }
}

async function kernelView(params) {
  const run = params.get("run"), rank = params.get("rank"), iteration = params.get("iteration");
  const data = await api("kernel", {run, trace: params.get("trace"), slice: params.get("slice")});
  const name = data.fields.find((field) => field.column === "name");
  setCrumbs(runCrumbs(run).concat([
    {label: `iteration ${iteration}`, href: href("iteration", {run, iteration})},
    {label: `rank ${rank}`, href: href("rank", {run, rank, iteration})},
    {label: "kernel"}]));
  view.replaceChildren(
    el("h1", {class: "kernel-name", text: name ? name.value[1] : "kernel"}),
    el("p", {class: "meta", text: "Every column fct_kernels holds for this kernel."}),
    el("dl", {class: "fields kernel"}, ...data.fields.flatMap((field) => [
      el("dt", {text: field.column}),
      valueCell("dd", field.value, false)])));
}

// ------------------------------------------------------------------ routing

const VIEWS = {"": runsView, run: overviewView, iteration: iterationView, rank: rankView,
               kernel: kernelView};

function showError(error) {
  view.replaceChildren(el("p", {class: "error", text: String(error.message || error)}));
  document.body.dataset.state = "error";
}

async function route() {
  const [path, query] = location.hash.replace(/^#\/?/, "").split("?");
  const render = VIEWS[path] || runsView;
  document.body.dataset.state = "loading";
  view.dataset.view = path || "runs";
  hideTooltip();
  try {
    await render(new URLSearchParams(query || ""));
    document.body.dataset.state = "ready";
  } catch (error) {
    showError(error);
  }
}

window.addEventListener("hashchange", route);
route();
