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

// Links that download what a view shows (all its rows, its own filters and order).
function exportLinks(view, params, id) {
  const link = (format, text) => el("a", {class: "export", download: "", text,
    dataset: {format},
    href: "/export/table?" + new URLSearchParams({view, format, ...params})});
  return el("span", {class: "exports", id: id || `export-${view}`}, "export: ",
            link("csv", "CSV"), " · ", link("parquet", "Parquet"));
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
  // The findings come first on the page; a warehouse built before fct_findings says so there.
  const [data, found] = await Promise.all([
    api("overview", {run}), api("findings", {run}).catch((error) => ({error: error.message}))]);
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
  const others = (await api("runs")).runs.map((r) => r.run_id).filter((name) => name !== run);
  const compareWith = el("select", {id: "compare-with"},
    el("option", {value: "", text: "compare with…"}),
    ...others.map((name) => el("option", {value: name, text: name})));
  compareWith.addEventListener("change", () => {
    if (compareWith.value) go("compare", {run, other: compareWith.value});
  });
  view.replaceChildren(
    el("h1", {text: run}),
    el("p", {class: "meta", text: [data.layout, `timing: ${data.timing}`]
      .filter(Boolean).join(" · ")}),
    el("p", {}, el("a", {href: href("timeline", {run}), id: "open-timeline",
                         text: "open the timeline"}), " · ",
       el("a", {href: href("pipeline", {run}), id: "open-pipeline", text: "the pipeline"}), " · ",
       el("a", {href: href("annotations", {run}), id: "open-annotations",
                text: "the annotation tree"}), " · ", compareWith),
    ...data.notes.map((text) => el("p", {class: "note", text})),
    section("What to change", findingsPanel(found)),
    section("Headline (the report's figures)", cards),
    section("Worst offenders", offenders),
    section("Iterations side by side", exportLinks("iterations", {run}),
            iterationsTable(run, data.iterations)),
    section("Rank × iteration", exportLinks("heatmap", {run}), heatmapPanel(run, data.step_parts)),
    section("Top kernels over the run", table(data.top_kernels, {class: "top-kernels"})));
}

// The run's fired findings as /api/findings ranks them (fct_findings, summed over iterations),
// each with its figure against the threshold, the change to make and a link to the view that
// shows its evidence; then the rules that could not be evaluated, and why. Every figure is the
// server's [mart value, text]: the page formats nothing.
function findingsPanel(found) {
  if (found.error) return el("p", {class: "note", id: "findings-error", text: found.error});
  const spec = found.findings;
  const at = Object.fromEntries(spec.columns.map((column, index) => [column.key, index]));
  const figure = (row, column, extra) => el(
    "span", {class: "figure " + (extra || ""), text: row.cells[at[column]][1],
             dataset: {column, value: row.cells[at[column]][0] ?? ""}});
  const rows = spec.rows.map((finding) => {
    const shown = (column) => finding.cells[at[column]][1];
    const has = (column) => finding.cells[at[column]][0] !== null;
    const link = finding.link
      ? el("a", {class: "finding-link", href: href(finding.link.view, finding.link.params),
                 text: finding.link.text, dataset: {view: finding.link.view}})
      : el("span", {class: "meta", text: `not in the viewer: ${shown("shown_in")}`});
    return el("tr", {dataset: {rule: finding.key.rule_id,
                             iteration: String(finding.key.evidence_iteration)}},
      el("td", {class: "num"}, figure(finding, "rank")),
      el("td", {},
         el("div", {class: "finding-title", text: shown("title")}),
         el("div", {class: "meta"}, el("code", {text: shown("rule_id")}),
            has("subject") ? ` · ${shown("subject")}` : "",
            has("iterations_fired") ? ` · fired in ${shown("iterations_fired")} iterations` : "",
            has("history") ? ` · ${shown("history")}` : "")),
      el("td", {}, el("span", {class: `severity ${shown("severity")}`, text: shown("severity")})),
      el("td", {class: "num"}, figure(finding, "time_at_stake_ns", "stake"),
         el("div", {class: "meta"}, figure(finding, "share"), ` ${found.share_of}`)),
      el("td", {},
         el("div", {}, el("code", {text: shown("figure_name")}), " = ", figure(finding, "figure")),
         el("div", {class: "meta"}, `fires ${shown("fires_when")} `, figure(finding, "threshold"),
            ` · ${shown("evidence_mart")} · priced ${shown("priced_by")}`)),
      // One chip per flag, with its value (--recompute-granularity selective), never split.
      el("td", {class: "change"}, el("div", {text: shown("recommendation")}),
         has("megatron_flags") ? el("div", {class: "flags"}, ...shown("megatron_flags")
           .split(/ (?=--)/).map((flag) => el("code", {text: flag}))) : null),
      el("td", {}, link));
  });
  const head = el("tr", {}, ...[["#", true], ["finding"], ["severity"], ["time at stake", true],
                                ["evidence against the threshold"], ["change (Megatron-LM)"],
                                ["shown in"]].map(([text, numeric]) => el(
    "th", {class: numeric ? "num" : null, text})));
  const fired = spec.rows.length
    ? el("table", {class: "findings"}, el("thead", {}, head), el("tbody", {}, ...rows))
    : el("p", {class: "meta", id: "no-findings", text: "No rule fired for this run."});
  const skipped = found.not_evaluated.length ? el("div", {class: "not-evaluated"},
    el("span", {class: "meta", text: "Not evaluated:"}),
    el("ul", {}, ...found.not_evaluated.map((rule) => el(
      "li", {dataset: {rule: rule.rule_id}}, el("code", {text: rule.rule_id}),
      ` ${rule.title ?? ""} (${rule.iterations} iteration${rule.iterations === 1 ? "" : "s"}): ` +
      rule.reason)))) : null;
  return el("div", {id: "findings"},
    el("p", {class: "meta", text: "fct_findings' fired rules, ranked by the time at stake " +
      "over the run's iterations (the evidence is the iteration with the most at stake), as " +
      "tracehouse findings prints them."}), fired, skipped);
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
  const canvas = el("canvas", {id: "heatmap"});
  const ctx = canvasContext(canvas, width, height,
                            {left, top, cellW, cellH, ranks, iterations, part: data.part});
  ctx.fillStyle = "#39424b";
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
    el("p", {}, el("a", {id: "open-stragglers", text: "who waited for whom in this iteration",
                         href: href("stragglers", {run, iteration})})),
    exportLinks("iteration", {run, iteration}),
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
    el("p", {}, data.window ? el("a", {id: "rank-timeline", text: "this step on the timeline",
                         href: href("timeline", {run, ranks: rank, start: data.window[0],
                                                 end: data.window[1]})}) : null, " · ",
       el("a", {id: "rank-annotations", text: "its annotation tree",
                href: href("annotations", {run, rank})})),
    section("The step and its parts", bar, parts),
    section("Its kernels, in figures", figures),
    section("Kernels", kernels));
  const where = {run, rank, iteration};
  for (const key of ["phase", "microbatch", "chunk"]) {
    if (params.get(key) !== null) where[key] = params.get(key);
  }
  const block = ["phase", "microbatch", "chunk"].filter((key) => key in where)
    .map((key) => `${key} ${where[key]}`).join(" · ");
  if (block) kernels.before(el("p", {class: "note", id: "kernel-block",
                                     text: `Only the kernels of ${block}.`}));
  // A block's kernels in time order; else the longest first.
  kernelsPanel(kernels, where, {sort: block ? "ts_ns" : "dur_ns", desc: block ? "" : "1",
                                q: "", offset: 0});
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
  const pager = el("div", {class: "toolbar"}, search, exportLinks("kernels", {...where, ...state}),
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
    onRow: (key) => go("kernel", {run: where.run, trace: key.trace_id, slice: key.slice_id}),
  });
  holder.replaceChildren(pager, el("div", {class: "scroll"}, grid));
  if (state.q) {
    search.focus();
    search.setSelectionRange(search.value.length, search.value.length);
  }
}

async function kernelView(params) {
  const run = params.get("run");
  const data = await api("kernel", {run, trace: params.get("trace"), slice: params.get("slice")});
  const field = (column) => data.fields.find((f) => f.column === column);
  const name = field("name");
  const rank = field("rank").value[0];
  const iteration = field("iteration").value[0] === null ? "whole" : field("iteration").value[0];
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

// ------------------------------------------------------------------ timeline
//
// The server sends, per lane and pixel bucket, the longest kernel there (Perfetto's level of
// detail): the page draws each at its true start and length, at least one pixel wide. Wheel
// zooms around the pointer, dragging pans; the old answer is redrawn at once on the new axis and
// the new one fetched (an older request still in flight is abandoned).

function niceStep(span, target) {
  const raw = span / target, power = Math.pow(10, Math.floor(Math.log10(raw)));
  return [1, 2, 5, 10].map((m) => m * power).find((step) => step >= raw) || power * 10;
}

function timeText(ns) {
  const abs = Math.abs(ns);
  if (abs >= 1e9) return (ns / 1e9).toFixed(3) + " s";
  if (abs >= 1e6) return (ns / 1e6).toFixed(3) + " ms";
  if (abs >= 1e3) return (ns / 1e3).toFixed(1) + " µs";
  return ns.toFixed(0) + " ns";
}

// Size a canvas for the screen's pixel ratio, record `dataset` on it (where the tests and the
// pointer handlers read its geometry), and return its 2-D context in CSS pixels.
function canvasContext(canvas, width, height, dataset) {
  const ratio = window.devicePixelRatio || 1;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  canvas.style.width = width + "px";
  canvas.style.height = height + "px";
  Object.assign(canvas.dataset, dataset);
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  ctx.font = "11px system-ui, sans-serif";
  ctx.textBaseline = "middle";
  return ctx;
}

// Time ticks along the top of a canvas, with faint grid lines down to `bottom` (0: none).
function drawTimeAxis(ctx, start, end, xOf, top, bottom) {
  const tick = niceStep(end - start, 8);
  ctx.fillStyle = "#5b6670";
  ctx.strokeStyle = "#eef1f4";
  for (let t = Math.ceil(start / tick) * tick; t < end; t += tick) {
    const x = xOf(t);
    ctx.fillText(timeText(t), x + 2, top / 2);
    if (bottom) { ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, bottom); ctx.stroke(); }
  }
}

// Wheel zooms around the pointer, dragging pans; `state.start`/`state.end` is the window in ns.
// `redraw` runs at once on every change, `settle` once the change is made (to fetch).
function attachPanZoom(canvas, state, left, width, redraw, settle) {
  let drag = null, dragged = false;
  canvas.addEventListener("wheel", (event) => {
    event.preventDefault();
    const bounds = canvas.getBoundingClientRect();
    const at = state.start + (event.clientX - bounds.left - left) / (width() - left) *
               (state.end - state.start);
    const factor = event.deltaY > 0 ? 1.25 : 0.8;
    state.start = Math.round(at - (at - state.start) * factor);
    state.end = Math.round(at + Math.max(500, (state.end - at) * factor));
    settle();
  }, {passive: false});
  canvas.addEventListener("mousedown", (event) => {
    drag = {x: event.clientX, start: state.start, end: state.end};
    dragged = false;
  });
  window.addEventListener("mouseup", () => {
    if (drag && dragged) settle();
    drag = null;
  });
  canvas.addEventListener("mousemove", (event) => {
    if (!drag || event.buttons !== 1 || Math.abs(event.clientX - drag.x) <= 3) return;
    dragged = true;
    const shift = (event.clientX - drag.x) / (width() - left) * (drag.end - drag.start);
    state.start = Math.round(drag.start - shift);
    state.end = Math.round(drag.end - shift);
    redraw();
  });
  return {dragging: () => drag !== null && dragged,
          wasDrag: () => { const was = dragged; dragged = false; return was; }};
}

async function timelineView(params) {
  const run = params.get("run");
  const choices = await api("timeline_choices", {run});
  setCrumbs(runCrumbs(run).concat([{label: "timeline"}]));
  const first = choices.iterations[0] || {start: 0, end: 1};
  const state = {
    run,
    selection: params.get("group") ? {group: params.get("group"), index: params.get("index")}
                                   : {ranks: params.get("ranks") ||
                                             choices.ranks.slice(0, 8).join(",")},
    start: Number(params.get("start") ?? first.start),
    end: Number(params.get("end") ?? first.end),
    data: null, pending: null, timer: null,
  };
  const ranksInput = el("input", {id: "timeline-ranks", size: 14,
                                  value: state.selection.ranks || ""});
  const groupSelect = el("select", {id: "timeline-group"},
    el("option", {value: "", text: "ranks:"}),
    ...Object.entries(choices.groups).flatMap(([kind, indexes]) => indexes.map((index) => el(
      "option", {value: `${kind}:${index}`, text: `${kind} group ${index}`}))));
  if (state.selection.group) groupSelect.value = `${state.selection.group}:${state.selection.index}`;
  const status = el("span", {class: "meta", id: "timeline-status"});
  const exports = el("span", {id: "timeline-exports"});
  const canvas = el("canvas", {id: "timeline"});
  const holder = el("div", {class: "scroll", id: "timeline-holder"}, canvas);
  const iterationButtons = choices.iterations.map((it) => el("button", {
    text: `iteration ${it.label}`, dataset: {iteration: String(it.key)},
    onclick: () => { state.start = it.start; state.end = it.end; refresh(); }}));
  const zoom = (factor) => {
    const middle = (state.start + state.end) / 2, half = (state.end - state.start) * factor / 2;
    state.start = Math.round(middle - half);
    state.end = Math.round(middle + Math.max(half, 500));
    refresh();
  };
  const applySelection = () => {
    const [group, index] = groupSelect.value.split(":");
    state.selection = group ? {group, index} : {ranks: ranksInput.value};
    refresh();
  };
  groupSelect.addEventListener("change", applySelection);
  ranksInput.addEventListener("change", () => { groupSelect.value = ""; applySelection(); });
  view.replaceChildren(
    el("h1", {text: `${run} · timeline`}),
    el("p", {class: "meta", text: "Kernels by stream, and each rank's Megatron step frames " +
             "(CPU steps), on the run's reference clock (times after its first step); each " +
             "pixel shows its longest kernel or frame (zoomed out over many ranks, how busy " +
             "each rank was: the depth of a cell is its busy share, its colour the kind that " +
             "kept it busiest). Scroll to zoom, drag to " +
             "pan, click a kernel to open it. Lines join the members of a collective in " +
             "arrival order; a red dot marks the last to arrive, the one the others waited for."}),
    el("div", {class: "toolbar"}, groupSelect, ranksInput, ...iterationButtons,
       el("button", {text: "zoom in", id: "zoom-in", onclick: () => zoom(0.5)}),
       el("button", {text: "zoom out", id: "zoom-out", onclick: () => zoom(2)}), exports),
    el("p", {}, status),
    holder);

  const LEFT = 230, TOP = 24;
  const layout = () => {
    const lanes = state.data ? state.data.lanes.length : 1;
    const laneH = Math.max(3, Math.min(18, Math.floor(640 / Math.max(1, lanes))));
    const width = Math.max(600, holder.clientWidth - 4);
    return {laneH, width, height: TOP + laneH * lanes + 6};
  };
  const xOf = (ns, box) => LEFT + (ns - state.start) / (state.end - state.start) * (box.width - LEFT);

  function draw() {
    const data = state.data;
    if (!data) return;
    const box = layout();
    const ctx = canvasContext(canvas, box.width, box.height, {
      left: LEFT, top: TOP, laneH: box.laneH, width: box.width, start: state.start,
      end: state.end, lanes: data.lanes.length, exact: data.exact});
    drawTimeAxis(ctx, state.start, state.end, (t) => xOf(t, box), TOP, box.height);
    data.lanes.forEach((lane, i) => {
      const y = TOP + i * box.laneH;
      if (i % 2) { ctx.fillStyle = "#f8fafc"; ctx.fillRect(LEFT, y, box.width - LEFT, box.laneH); }
      if (box.laneH >= 9 || i % Math.ceil(10 / box.laneH) === 0) {
        ctx.fillStyle = "#39424b";
        ctx.fillText(lane.label, 4, y + box.laneH / 2, LEFT - 8);
      }
    });
    const rects = data.rects, busy = data.mode === "busy";
    for (let i = 0; i < rects.ts.length; i++) {
      const x0 = Math.max(LEFT, xOf(rects.ts[i], box));
      const x1 = Math.min(box.width, xOf(rects.ts[i] + rects.dur[i], box));
      if (x1 < LEFT || x0 > box.width) continue;
      ctx.fillStyle = data.colors[data.kind_names[rects.kind[i]]] || "#7f7f7f";
      // A busy cell's depth is its busy share (a faint trace of any work stays visible).
      ctx.globalAlpha = busy ? Math.max(0.12, Math.min(1, rects.busy[i] / Math.max(1, rects.dur[i]))) : 1;
      ctx.fillRect(x0, TOP + rects.lane[i] * box.laneH + 1, Math.max(1, x1 - x0),
                   Math.max(1, box.laneH - 2));
    }
    ctx.globalAlpha = 1;
    ctx.lineWidth = 1;
    for (const link of data.links) {
      ctx.strokeStyle = "rgba(29,35,42,0.55)";
      ctx.beginPath();
      link.members.forEach(([lane, arrival], k) => {
        const x = xOf(arrival, box), y = TOP + lane * box.laneH + box.laneH / 2;
        if (k) ctx.lineTo(x, y); else ctx.moveTo(x, y);
      });
      ctx.stroke();
      const last = link.members[link.members.length - 1];
      ctx.fillStyle = "#d62728";
      ctx.beginPath();
      ctx.arc(xOf(last[1], box), TOP + last[0] * box.laneH + box.laneH / 2, 2.5, 0, 7);
      ctx.fill();
    }
  }

  function rectAt(event) {
    const data = state.data;
    if (!data) return -1;
    const box = layout(), bounds = canvas.getBoundingClientRect();
    const x = event.clientX - bounds.left, lane = Math.floor((event.clientY - bounds.top - TOP) / box.laneH);
    let best = -1;
    for (let i = 0; i < data.rects.ts.length; i++) {
      if (data.rects.lane[i] !== lane) continue;
      const x0 = xOf(data.rects.ts[i], box), x1 = Math.max(x0 + 1, xOf(data.rects.ts[i] + data.rects.dur[i], box));
      if (x >= x0 - 1 && x <= x1 + 1 && (best < 0 || data.rects.dur[i] > data.rects.dur[best])) best = i;
    }
    return best;
  }

  async function fetchData() {
    const token = {};
    state.pending = token;
    const query = {run, start: Math.round(state.start), end: Math.round(state.end),
                   px: Math.round(layout().width - LEFT), ...state.selection};
    const shown = {run, ...state.selection, start: query.start, end: query.end};
    history.replaceState(null, "", href("timeline", shown));
    exports.replaceChildren(exportLinks("timeline", shown), " · ",
      el("a", {id: "open-perfetto", download: "", text: "open in Perfetto (.pftrace)",
               href: "/export/perfetto?" + new URLSearchParams(shown)}));
    document.body.dataset.state = "loading";
    let data;
    try {
      data = await api("timeline", query);
    } catch (error) {
      if (state.pending === token) {
        status.textContent = error.message;
        document.body.dataset.state = "ready";
      }
      return;
    }
    if (state.pending !== token) return;  // a newer request is on its way
    state.data = data;
    const drawn = data.rects.ts.length;
    status.textContent = (data.mode === "busy"
      ? `busy time per ${timeText(data.step)} cell: ${drawn} cells drawn, zoom in for kernels`
      : `${data.exact ? "exact" : "per pixel"}: ${drawn} of ` +
        `${data.rects.n.reduce((a, b) => a + b, 0)} slices drawn`) +
      ` · ${data.links.length} collectives linked` +
      (data.links_left_out ? ` (${data.links_left_out} more: zoom in)` : "");
    draw();
    document.body.dataset.state = "ready";
  }

  function refresh() {
    draw();
    clearTimeout(state.timer);
    state.timer = setTimeout(fetchData, 60);
  }

  const gesture = attachPanZoom(canvas, state, LEFT, () => layout().width, draw, refresh);
  canvas.addEventListener("mousemove", (event) => {
    if (gesture.dragging()) { hideTooltip(); return; }
    const i = rectAt(event);
    if (i < 0) { hideTooltip(); return; }
    const data = state.data, rects = data.rects;
    if (data.mode === "busy") {
      const share = (ns) => `${Math.round(100 * ns / Math.max(1, rects.dur[i]))}%`;
      showTooltip(event, `${data.lanes[rects.lane[i]].label}\n${share(rects.busy[i])} busy over ` +
        `${timeText(rects.dur[i])} at ${timeText(rects.ts[i])}: compute ${share(rects.compute[i])}, ` +
        `communication ${share(rects.communication[i])}, memory ${share(rects.memory[i])}` +
        "\nzoom in for its kernels");
      return;
    }
    showTooltip(event, `${data.names[rects.name[i]]}\n${data.lanes[rects.lane[i]].label} · ` +
      `${data.kind_names[rects.kind[i]]} · ${timeText(rects.dur[i])} at ${timeText(rects.ts[i])}` +
      (rects.n[i] > 1 ? `\nthe longest of ${rects.n[i]} kernels in this pixel: zoom in` : ""));
  });
  canvas.addEventListener("mouseleave", hideTooltip);
  canvas.addEventListener("click", (event) => {
    if (gesture.wasDrag()) return;
    const i = rectAt(event);
    if (i < 0 || state.data.mode === "busy" ||
        state.data.lanes[state.data.rects.lane[i]].stream === "cpu") return;
    hideTooltip();
    go("kernel", {run, trace: state.data.traces[state.data.rects.trace[i]],
                  slice: state.data.rects.slice[i]});
  });
  await fetchData();
}

// ------------------------------------------------------------------ pipeline

const BUBBLE_SHADE = "#f3d9d9";

async function pipelineView(params) {
  const run = params.get("run");
  const query = {run};
  if (params.get("group") !== null) query.group = params.get("group");
  if (params.get("iteration") !== null) query.iteration = params.get("iteration");
  const data = await api("pipeline", query);
  setCrumbs(runCrumbs(run).concat([{label: `pipeline group ${data.group}`}]));
  const state = {start: 0, end: Math.max(1, data.span)};
  const chooser = el("select", {id: "pipeline-choice"}, ...data.choices.map((choice) => el(
    "option", {value: `${choice.group}|${choice.key}`,
               text: `pp group ${choice.group} · iteration ${choice.iteration}`})));
  chooser.value = `${data.group}|${data.iteration_key}`;
  chooser.addEventListener("change", () => {
    const [group, iteration] = chooser.value.split("|");
    go("pipeline", {run, group, iteration});
  });
  const canvas = el("canvas", {id: "pipeline"});
  const holder = el("div", {class: "scroll"}, canvas);
  const colours = data.colors;  // the report's phase palette (reports/style.py)
  const swatched = (colour, text) => {
    const swatch = el("span", {class: "swatch"});
    swatch.style.background = colour;
    return el("span", {}, swatch, text);
  };
  const legend = el("div", {class: "legend"},
    ...["forward", "backward", "recompute"].map((phase) => swatched(colours[phase], phase)),
    swatched(BUBBLE_SHADE, "the stage waits (bubble)"));
  view.replaceChildren(
    el("h1", {text: `${run} · pipeline group ${data.group} · iteration ${data.iteration}`}),
    el("p", {class: "meta", text: `${data.stages.length} stages · ${data.microbatches ?? "?"} ` +
      `microbatches · ${data.vpp_size ?? 1} virtual chunk(s) per stage. Each block is a ` +
      "microbatch's forward or backward work on a stage (fct_microbatch_phases), first kernel " +
      "to last; the shaded rest of the stage's window is its bubble (fct_pipeline_bubbles). " +
      "Scroll to zoom, drag to pan, click a block for its kernels."}),
    el("div", {class: "toolbar"}, chooser, legend,
       exportLinks("pipeline", {run, group: data.group, iteration: data.iteration_key})),
    holder,
    section("Bubbles per stage (fct_pipeline_bubbles)", table(data.bubbles, {class: "bubbles"})),
    section("What fills them (fct_pipeline_bubble_parts)", table(data.parts, {class: "parts"})));

  const LEFT = 230, TOP = 24, ROW = 34;
  const width = () => Math.max(600, holder.clientWidth - 4);
  const xOf = (ns) => LEFT + (ns - state.start) / (state.end - state.start) * (width() - LEFT);
  const row = Object.fromEntries(data.stages.map((stage, i) => [stage.stage, i]));
  function draw() {
    const w = width(), h = TOP + ROW * data.stages.length + 6;
    const ctx = canvasContext(canvas, w, h, {left: LEFT, top: TOP, row: ROW, width: w,
                                            start: state.start, end: state.end,
                                            blocks: data.blocks.length});
    drawTimeAxis(ctx, state.start, state.end, xOf, TOP, 0);
    ctx.save();
    ctx.beginPath();
    ctx.rect(LEFT, 0, w - LEFT, h);
    ctx.clip();
    data.stages.forEach((stage, i) => {
      ctx.fillStyle = BUBBLE_SHADE;
      ctx.fillRect(xOf(0), TOP + i * ROW + 3, xOf(data.span) - xOf(0), ROW - 6);
    });
    ctx.strokeStyle = "#9aa3ab";
    for (const part of data.schedule_parts) {
      const x = xOf(part.start), y = TOP + row[part.stage] * ROW;
      ctx.beginPath(); ctx.moveTo(x, y + 1); ctx.lineTo(x, y + ROW - 1); ctx.stroke();
    }
    for (const block of data.blocks) {
      const x0 = xOf(block.start), x1 = Math.max(x0 + 1, xOf(block.end));
      const y = TOP + row[block.stage] * ROW + 5;
      ctx.fillStyle = colours[block.phase] || "#7f7f7f";
      ctx.fillRect(x0, y, x1 - x0, ROW - 10);
      const text = (block.phase || "?")[0].toUpperCase() + block.microbatch +
                   (block.chunk === null ? "" : `c${block.chunk}`);
      if (x1 - x0 > ctx.measureText(text).width + 4) {
        ctx.fillStyle = "#fff";
        ctx.fillText(text, x0 + 2, y + (ROW - 10) / 2);
      }
    }
    ctx.restore();
    ctx.fillStyle = "#39424b";
    data.stages.forEach((stage, i) => ctx.fillText(stage.label, 4, TOP + i * ROW + ROW / 2, LEFT - 8));
  }
  function blockAt(event) {
    const bounds = canvas.getBoundingClientRect();
    const x = event.clientX - bounds.left, i = Math.floor((event.clientY - bounds.top - TOP) / ROW);
    const stage = data.stages[i];
    if (!stage) return null;
    return data.blocks.find((b) => b.stage === stage.stage && x >= xOf(b.start) - 1 &&
                                   x <= Math.max(xOf(b.start) + 1, xOf(b.end)) + 1) || null;
  }
  const gesture = attachPanZoom(canvas, state, LEFT, width, draw, draw);
  canvas.addEventListener("mousemove", (event) => {
    const block = gesture.dragging() ? null : blockAt(event);
    if (!block) { hideTooltip(); return; }
    showTooltip(event, `${block.phase} · microbatch ${block.microbatch}` +
      (block.chunk === null ? "" : ` · chunk ${block.chunk}`) + ` · rank ${block.rank}\n` +
      block.figures.map(([label, value]) => `${label} ${value[1]}`).join(" · "));
  });
  canvas.addEventListener("mouseleave", hideTooltip);
  canvas.addEventListener("click", (event) => {
    if (gesture.wasDrag()) return;
    const block = blockAt(event);
    if (!block) return;
    hideTooltip();
    const where = {run, rank: block.rank, iteration: data.iteration_key, phase: block.phase,
                   microbatch: block.microbatch};
    if (block.chunk !== null) where.chunk = block.chunk;
    go("rank", where);
  });
  draw();
}

// ------------------------------------------------------------------ annotation tree

async function annotationsView(params) {
  const run = params.get("run"), rank = params.get("rank") || "0", q = params.get("q") || "";
  setCrumbs(runCrumbs(run).concat([{label: `annotations · rank ${rank}`}]));
  const rankInput = el("input", {id: "tree-rank", size: 6, value: rank});
  const search = el("input", {id: "tree-search", type: "search", value: q,
                              placeholder: "search range names"});
  const submit = () => go("annotations", {run, rank: rankInput.value,
                                          ...(search.value ? {q: search.value} : {})});
  rankInput.addEventListener("change", submit);
  search.addEventListener("change", submit);
  const holder = el("div", {id: "tree"});
  view.replaceChildren(
    el("h1", {text: `${run} · annotation ranges · rank ${rank}`}),
    el("p", {class: "meta", text: "User annotations and NVTX ranges as a tree " +
      "(fct_annotation_ranges): CPU span, GPU projection (first to last kernel launched in it " +
      "or below) and kernel counts, one tree per thread. Open a range for its children; " +
      "search finds ranges at any depth."}),
    el("div", {class: "toolbar"}, el("label", {text: "rank "}, rankInput), search,
       exportLinks("annotations", {run, rank, ...(q ? {q} : {})})), holder);
  const data = await api("annotations", {run, rank, ...(q ? {q} : {})});
  holder.replaceChildren(q ? treeLevel(run, rank, data, true) : threadTrees(run, rank, data));
}

// The top level, one tree per thread when the rank's ranges lie on several (the steps on the
// main thread, NCCL ranges on autograd's): each thread a node of its own, the first open.
function threadTrees(run, rank, data) {
  const threads = [...new Set(data.nodes.map((node) => node.thread))];
  if (threads.length < 2) return treeLevel(run, rank, data, false);
  const list = el("ul", {class: "tree threads"});
  threads.forEach((thread, index) => {
    const nodes = data.nodes.filter((node) => node.thread === thread);
    const toggle = el("button", {class: "toggle", text: index ? "▸" : "▾"});
    const children = el("div", {class: "children"});
    const fill = () => children.replaceChildren(
      treeLevel(run, rank, {...data, nodes, left_out: false}, false));
    if (!index) fill();
    let open = !index;
    toggle.addEventListener("click", () => {
      open = !open;
      toggle.textContent = open ? "▾" : "▸";
      if (open) fill(); else children.replaceChildren();
    });
    list.append(el("li", {dataset: {thread}},
      el("div", {class: "node thread"}, toggle, el("span", {class: "name", text: thread}),
         el("span", {class: "figure",
                     text: `${nodes.length} range${nodes.length === 1 ? "" : "s"} at the top`})),
      children));
  });
  if (data.left_out) list.append(el("li", {class: "note", text: "More ranges than shown: " +
                                                                 "search to narrow them."}));
  return list;
}

function treeLevel(run, rank, data, showPath) {
  const list = el("ul", {class: "tree"});
  if (!data.nodes.length) list.append(el("li", {class: "meta", text: "no ranges"}));
  for (const node of data.nodes) {
    const toggle = el("button", {class: "toggle", text: node.children ? "▸" : "·",
                                 disabled: node.children ? null : ""});
    const children = el("div", {class: "children"});
    const row = el("div", {class: "node", dataset: {slice: String(node.key.slice)}},
      toggle, el("span", {class: "name", text: showPath ? node.path : node.name}),
      ...node.figures.map(([label, value]) => el(
        "span", {class: "figure", dataset: {label, value: String(value[0] ?? "")}},
        `${label} ${value[1]}`)),
      node.window ? el("a", {class: "to-timeline", text: "timeline",
                             href: href("timeline", {run, ranks: rank, start: node.window[0],
                                                     end: node.window[1]})}) : null);
    let open = false;
    toggle.addEventListener("click", async () => {
      open = !open;
      toggle.textContent = open ? "▾" : "▸";
      if (!open) { children.replaceChildren(); return; }
      const level = await api("annotations", {run, rank, trace: node.key.trace,
                                              slice: node.key.slice});
      children.replaceChildren(treeLevel(run, rank, level, false));
    });
    list.append(el("li", {}, row, children));
  }
  if (data.left_out) list.append(el("li", {class: "note", text: "More ranges than shown: " +
                                                                 "search to narrow them."}));
  return list;
}

// ------------------------------------------------------------------ stragglers

async function stragglersView(params) {
  const run = params.get("run"), iteration = params.get("iteration");
  const state = {sort: params.get("sort") || "start_skew_ns", q: params.get("q") || "",
                 offset: Number(params.get("offset") || 0)};
  const data = await api("stragglers", {run, iteration, ...state});
  setCrumbs(runCrumbs(run).concat([
    {label: `iteration ${data.iteration}`, href: href("iteration", {run, iteration})},
    {label: "who waited for whom"}]));
  const again = (change) => go("stragglers", {run, iteration, ...state, ...change});
  const filter = el("input", {id: "collective-filter", type: "search", value: state.q,
                              placeholder: "filter by op or group"});
  filter.addEventListener("change", () => again({q: filter.value, offset: 0}));
  const last = Math.min(data.total, data.offset + data.page_rows);
  const sortable = ["start_skew_ns", "last_rank_wait_caused_ns", "total_wait_ns",
                    "transfer_ns", "bytes"];
  view.replaceChildren(
    el("h1", {text: `${run} · iteration ${data.iteration} · who waited for whom`}),
    el("p", {class: "meta", text: "The ranks whose late arrivals made the others wait " +
      "(fct_stragglers; straggler rank 1 is the straggler), and the collectives with the " +
      "largest skew (fct_collectives). Click a collective to see its members on the timeline."}),
    section("Stragglers", exportLinks("stragglers", {run, iteration}),
            table(data.stragglers, {class: "stragglers",
              onRow: (key) => go("rank", {run, rank: key.rank, iteration})})),
    section("Collectives, largest first",
      el("div", {class: "toolbar"}, filter,
         el("span", {class: "meta", id: "collective-count",
                     text: `${data.offset + (data.total ? 1 : 0)}–${last} of ${data.total}`}),
         el("button", {text: "previous", disabled: data.offset > 0 ? null : "",
                       onclick: () => again({offset: Math.max(0, data.offset - data.page_rows)})}),
         el("button", {text: "next", disabled: last < data.total ? null : "",
                       onclick: () => again({offset: data.offset + data.page_rows})}),
         exportLinks("collectives", {run, iteration, ...state})),
      el("div", {class: "scroll"}, table(data.collectives, {
        class: "collectives", sortable,
        onSort: (key) => again({sort: key, offset: 0}),
        onRow: (key) => go("timeline", {run, ranks: key.ranks.join(","),
                                        start: key.window[0], end: key.window[1]})}))));
}

// ------------------------------------------------------------------ two runs

async function compareView(params) {
  const run = params.get("run"), other = params.get("other");
  setCrumbs(runCrumbs(run).concat([{label: `compared with ${other}`}]));
  const data = await api("compare", {run, other});
  view.replaceChildren(
    el("h1", {text: `${data.run_a} against ${data.run_b}`}),
    el("p", {class: "meta", text: "tracehouse compare's table: the runs' iterations paired " +
      "by order (fct_iteration_summary), A is the first run, B the second; the last row is " +
      "each run's own figures (fct_run_summary)."}),
    el("div", {class: "scroll"}, table(data.table, {class: "compare"})));
}

// ------------------------------------------------------------------ routing

const VIEWS = {"": runsView, run: overviewView, iteration: iterationView, rank: rankView,
               kernel: kernelView, timeline: timelineView, pipeline: pipelineView,
               annotations: annotationsView, stragglers: stragglersView,
               compare: compareView};

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
