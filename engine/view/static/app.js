// engine view: the page. Every text from the results reaches the DOM as a text node (h() below), never as
// HTML; the server's Content-Security-Policy forbids inline scripts besides.
"use strict";

const main = () => document.getElementById("main");

// Replace the page's content (null and false children are left out, as in h()).
function show(...children) {
  main().replaceChildren();
  append(main(), children);
}

// h("tag", {class, title, href, onclick, ...}, child, ...): strings and numbers become text nodes.
function h(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "href") node.setAttribute("href", safeHref(value));
    else if (key === "value") node.value = value;
    else if (key === "checked") node.checked = !!value;
    else node.setAttribute(key, String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function safeHref(value) {
  const text = String(value);
  return text.startsWith("#") ? text : "#/";
}

function route(page, params) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== "" && v !== false) query.set(k, v);
  const text = query.toString();
  return "#/" + page + (text ? "?" + text : "");
}

async function api(path, params) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== "" && v !== false) query.set(k, v);
  const response = await fetch("/api/" + path + (query.toString() ? "?" + query : ""), {credentials: "same-origin"});
  const data = await response.json().catch(() => ({error: "the server sent no JSON (" + response.status + ")"}));
  if (!response.ok || data.error) throw new Error(data.error || ("HTTP " + response.status));
  return data;
}

const fmt = {
  num(v, digits = 3) { return v === null || v === undefined ? "–" : Number(v).toFixed(digits); },
  pct(v) { return v === null || v === undefined ? "–" : (100 * v).toFixed(1) + "%"; },
  ci(v, lo, hi, pct) {
    const f = pct ? fmt.pct : (x) => fmt.num(x);
    return f(v) + (lo === null || lo === undefined ? "" : " [" + f(lo) + ", " + f(hi) + "]");
  },
  money(v) { return v === null || v === undefined ? "–" : "$" + (Math.abs(v) >= 0.01 || v === 0 ? Number(v).toFixed(4) : Number(v).toPrecision(2)); },
  secs(v) { return v === null || v === undefined ? "–" : Number(v).toFixed(3) + " s"; },
  case(c) { return c === null || c === undefined || c < 0 ? "" : "#" + c; },
};

function table(header, rows, onRow) {
  return h("table", {}, h("thead", {}, h("tr", {}, header.map((c) => h("th", {}, c)))),
    h("tbody", {}, rows.map((cells, i) => h("tr", onRow ? {class: "link", onclick: () => onRow(i)} : {},
      cells.map((c) => (c instanceof Node && c.tagName === "TD") ? c : h("td", typeof c === "number" ? {class: "num"} : {}, c))))));
}

function crumbs(...links) {
  const nav = document.getElementById("crumbs");
  nav.replaceChildren(...links.map(([text, href]) => h("a", {href}, text)));
}

function done(page) {
  document.body.dataset.page = page;
  document.body.dataset.ready = "yes";
}

// ---- runs ------------------------------------------------------------------------------------------------
async function runsPage() {
  crumbs(["runs", "#/"]);
  const runs = await api("runs");
  const chosen = new Set();
  const compare = h("button", {id: "compare", disabled: true, onclick: () => {
    const [a, b] = [...chosen];
    location.hash = route("diff", {a, b});
  }}, "Compare the two chosen runs");
  const rows = runs.map((r) => [
    h("td", {}, h("input", {type: "checkbox", title: "choose for comparison", onclick: (e) => {
      e.stopPropagation();
      if (e.target.checked) chosen.add(r.run); else chosen.delete(r.run);
      compare.disabled = chosen.size !== 2;
    }})),
    h("td", {}, h("a", {href: route("run", {run: r.run})}, r.run)),
    r.started_at || "–", r.error ? h("span", {class: "err"}, r.error) : (r.complete ? "complete" : "incomplete"),
    r.tests ?? "–", r.rows ?? "–", r.errors ?? "–", fmt.money(r.cost),
    (r.models || []).map((m) => h("div", {}, m.model + ": " + fmt.pct(m.pass_rate))),
  ]);
  show(h("h1", {}, "Runs"),
    h("p", {class: "hint"}, "Open a run, or tick two runs and compare them: the tests whose verdict changed."),
    table(["", "run", "started (UTC)", "state", "tests", "rows", "errors", "cost", "pass rate per model"], rows), compare);
  done("runs");
}

// ---- one run ---------------------------------------------------------------------------------------------
async function runPage(params) {
  const run = params.get("run");
  crumbs(["runs", "#/"], [run, route("run", {run})]);
  const filters = Object.fromEntries(["suite", "tag", "class", "failed", "errors", "q", "offset"].map((k) => [k, params.get(k) || ""]));
  const [summary, grid] = await Promise.all([api("summary", {run}), api("grid", {run, ...filters, limit: 50})]);
  const models = table(["model", "tests", "rows", "mean score [CI]", "pass rate [CI]", "errors", "cost", "latency p50", "notes"],
    summary.models.map((m) => [m.model, m.tests, m.rows, fmt.ci(m.mean_score, m.score_lo, m.score_hi),
      fmt.ci(m.pass_rate, m.pass_lo, m.pass_hi, true), m.error_rows, fmt.money(m.cost), fmt.secs(m.latency_p50), m.notes || ""]));
  const comparisons = summary.comparisons.length ? table(["A", "B", "tests", "mean A − B [CI]", "only A / only B pass", "McNemar p", "verdict"],
    summary.comparisons.map((c) => [c.model_a, c.model_b, c.tests, fmt.ci(c.mean_diff, c.diff_lo, c.diff_hi),
      c.only_a + " / " + c.only_b, fmt.num(c.mcnemar_p), c.verdict])) : h("p", {class: "hint"}, "No paired comparison (one model).");

  const select = (name, values, label) => h("label", {}, label, h("select", {name},
    h("option", {value: ""}, "all"), values.map((v) => { const o = h("option", {value: v}, v); if (v === filters[name]) o.selected = true; return o; })));
  const form = h("form", {class: "filters", id: "filters", onsubmit: (e) => {
    e.preventDefault();
    const data = new FormData(form);
    location.hash = route("run", {run, suite: data.get("suite"), tag: data.get("tag"), class: data.get("class"),
      failed: data.get("failed") ? "1" : "", errors: data.get("errors") ? "1" : "", q: data.get("q")});
  }},
  select("suite", summary.suites, "suite"), select("tag", summary.tags, "tag"), select("class", summary.classes, "class"),
  h("label", {}, h("input", {type: "checkbox", name: "failed", id: "failed", checked: filters.failed === "1"}), "failed only"),
  h("label", {}, h("input", {type: "checkbox", name: "errors", checked: filters.errors === "1"}), "errors only"),
  h("input", {type: "search", name: "q", placeholder: "search prompts and answers", value: filters.q}),
  h("button", {type: "submit", id: "apply"}, "Apply"));

  const offset = grid.offset;
  const pageTo = (o) => { location.hash = route("run", {run, ...filters, offset: o}); };
  const pager = h("div", {class: "pager"},
    h("button", {disabled: offset <= 0, onclick: () => pageTo(Math.max(0, offset - grid.limit))}, "← previous"),
    h("span", {}, grid.total ? `tests ${offset + 1}–${Math.min(offset + grid.limit, grid.total)} of ${grid.total}` : "no test matches"),
    h("button", {disabled: offset + grid.limit >= grid.total, onclick: () => pageTo(offset + grid.limit)}, "next →"));
  const cell = (c) => {
    if (!c.rows) return h("td", {}, h("span", {class: "cell none"}, "–"));
    const unscored = c.unscored || 0, errors = c.rows - c.scored - unscored;
    const kind = !c.scored ? (errors ? "error" : "none") : c.passed === c.scored ? "pass" : c.passed === 0 ? "fail" : "mixed";
    const title = [errors ? errors + " error rows" : "", unscored ? unscored + " rows recorded unscored (eval: {none: true})" : ""];
    return h("td", {}, h("span", {class: "cell " + kind, title: title.filter(Boolean).join("; ")},
      c.scored ? `${c.passed}/${c.scored}` + (errors ? ` +${errors}!` : "") : errors ? `${errors} errors` : `${unscored} unscored`));
  };
  const gridTable = table(["test", "status", ...grid.models], grid.rows.map((r) => [
    h("td", {}, h("a", {href: route("test", {run, suite: r.suite, test_id: r.test_id, case: r.case_index})},
      r.suite + "/" + r.test_id + fmt.case(r.case_index))),
    h("td", {title: r.reason}, r.status), ...r.cells.map(cell)]),
  (i) => { const r = grid.rows[i]; location.hash = route("test", {run, suite: r.suite, test_id: r.test_id, case: r.case_index}); });
  gridTable.id = "grid";

  show(h("h1", {}, "Run " + run), h("p", {class: "hint"}, summary.interval),
    h("ul", {class: "notes"}, summary.notes.map((n) => h("li", {}, n))),
    h("h2", {}, "Models"), models, h("h2", {}, "Paired comparisons (best model against each other)"), comparisons,
    h("h2", {}, "Tests × models"), h("p", {class: "hint"}, "Each cell: passed / scored attempts (+N! error rows). Click a test to read every attempt."),
    form, pager, gridTable);
  done("run");
}

// ---- one test --------------------------------------------------------------------------------------------
function pre(text, cls) { return h("pre", {class: "text" + (cls ? " " + cls : "")}, text === null || text === undefined ? "" : String(text)); }

function parseJSON(text) { try { return JSON.parse(text); } catch (e) { return undefined; } }

function contentText(content) {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((p) => p.text ?? (p.image_file ? "[image " + (p.image_file.path || "") + "]" : JSON.stringify(p))).join("\n");
  return JSON.stringify(content, null, 2);
}

function messagesSent(prompt) {
  const parsed = typeof prompt === "string" ? parseJSON(prompt) : undefined;
  if (!Array.isArray(parsed)) return pre(prompt);
  return h("div", {}, parsed.map((m) => h("div", {class: "msg " + (m.role || "")}, h("div", {class: "role"}, m.role || "?"), pre(contentText(m.content)))));
}

function evaluatorTree(nodes) {
  return h("div", {class: "tree"}, (nodes || []).map((n) => {
    const depth = String(n.path || "").split("/").length - 1;
    const node = h("div", {class: "node"},
      h("span", {class: "badge " + (n.error ? "error" : n.passed ? "pass" : "fail")}, n.error ? "error" : n.passed ? "pass" : "fail"),
      h("b", {}, n.path || n.kind), " ", n.name ? "(" + n.name + ") " : "", "score " + fmt.num(n.score),
      n.weight !== null && n.weight !== undefined && n.weight !== 1 ? " × " + n.weight : "",
      n.reason ? h("div", {class: "reason"}, n.reason) : null,
      n.kind === "judge" ? h("div", {class: "figures"}, `judge ${n.judge_model || "?"} (${n.judge_scale || "?"}): grade ${n.judge_grade ?? "–"}` +
        (n.judge_grades && n.judge_grades.length ? "; samples " + n.judge_grades.join(", ") : "") +
        `; ${n.judge_calls ?? 0} calls, ${n.judge_cached ?? 0} cached, cost ${fmt.money(n.judge_cost)}`) : null);
    node.style.paddingLeft = (depth * 18) + "px";
    return node;
  }));
}

function transcript(messages, events) {
  const byCall = new Map((events || []).map((e) => [e.call_id, e]));
  return h("div", {class: "conversation"}, (messages || []).map((m) => {
    const figures = m.role === "assistant" ? [
      m.latency_s !== null && m.latency_s !== undefined ? "latency " + fmt.secs(m.latency_s) : null,
      m.ttft_visible_s !== null && m.ttft_visible_s !== undefined ? "TTFT " + fmt.secs(m.ttft_visible_s) : null,
      m.prompt_tokens !== null && m.prompt_tokens !== undefined ? `${m.prompt_tokens}+${m.completion_tokens ?? "?"} tokens` : null,
      m.retries ? m.retries + " retries" : null, m.truncated ? "truncated" : null].filter(Boolean).join(", ") : "";
    const toolFigures = m.role === "tool" ? [m.tool_name, m.tool_status, m.tool_latency_s !== null && m.tool_latency_s !== undefined ? fmt.secs(m.tool_latency_s) : null,
      m.tool_rule !== null && m.tool_rule !== undefined ? "rule " + m.tool_rule : null].filter((x) => x !== null && x !== undefined).join(" · ") : "";
    return h("div", {class: "msg " + (m.role || "")},
      h("div", {class: "role"}, `turn ${m.turn ?? "?"} · ${m.role}` + (figures ? " · " + figures : "") + (toolFigures ? " · " + toolFigures : "")),
      m.reasoning ? h("details", {}, h("summary", {}, "reasoning"), pre(m.reasoning)) : null,
      m.content ? pre(m.content) : null,
      (m.tool_calls || []).map((c) => {
        const event = byCall.get(c.id);
        return h("div", {class: "call"}, h("span", {class: "badge"}, "call"), h("b", {}, c.name), " ",
          event ? h("span", {class: "figures"}, `${event.status} in ${fmt.secs(event.latency_s)}`) : null, pre(c.arguments));
      }));
  }));
}

function diffBlock(text) {
  const block = h("pre", {class: "text diff"});
  for (const line of String(text).split("\n")) {
    const cls = line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del" : "";
    block.appendChild(h("span", cls ? {class: cls} : {}, line + "\n"));
  }
  return block;
}

function attemptCard(run, a, index, onLabel) {
  const verdict = a.passed === null || a.passed === undefined ? "error" : a.passed ? "pass" : "fail";
  const note = h("input", {type: "text", placeholder: "note (optional)", class: "note", value: a.review ? a.review.note || "" : ""});
  const right = h("button", {class: "right" + (a.review && a.review.label === "right" ? " on" : ""), title: "the verdict is right (r)",
    onclick: () => onLabel(index, "right")}, "✓ verdict right");
  const wrong = h("button", {class: "wrong" + (a.review && a.review.label === "wrong" ? " on" : ""), title: "the verdict is wrong (w)",
    onclick: () => onLabel(index, "wrong")}, "✗ verdict wrong");
  const status = h("span", {class: "figures status"}, a.review ? `labelled ${a.review.label} by ${a.review.reviewer}` : "not labelled");
  const error = a.error_kind ? h("p", {class: "err"}, a.error_kind + ": " + (a.error_message || "")) : null;
  const figures = [`latency ${fmt.secs(a.latency_s)}`, `TTFT ${fmt.secs(a.ttft_visible_s)}`,
    `tokens ${a.prompt_tokens ?? "?"}+${a.completion_tokens ?? "?"}`, `cost ${fmt.money(a.cost)}`,
    a.finish_reason ? "finish " + a.finish_reason : null, a.served_model ? "served by " + a.served_model : null].filter(Boolean).join(" · ");
  const agent = a.turns !== null && a.turns !== undefined;
  const card = h("div", {class: "attempt", tabindex: "0", dataset: {index: String(index), model: a.model, attempt: String(a.attempt)}},
    h("div", {class: "head"}, h("span", {class: "badge " + verdict}, verdict), h("b", {}, "attempt " + a.attempt),
      a.variant ? h("span", {class: "badge"}, "variant " + a.variant) : null, "score " + fmt.num(a.score)),
    h("div", {class: "review"}, right, wrong, note, status),
    h("div", {class: "figures"}, figures), error,
    h("h3", {}, "Messages sent"), messagesSent(a.prompt),
    a.reasoning ? h("details", {}, h("summary", {}, "reasoning"), pre(a.reasoning)) : null,
    h("h3", {}, agent ? "Final answer" : "Answer"), pre(a.answer, "answer"),
    (a.tool_calls || []).length ? [h("h3", {}, "Tool calls"), a.tool_calls.map((c) => h("div", {}, h("b", {}, c.name), c.valid_json === false ? " (arguments not JSON)" : "", pre(c.arguments)))] : null,
    a.golden !== null && a.golden !== undefined ? [h("h3", {}, "Golden"), pre(a.golden)] : null,
    h("h3", {}, "Evaluators"), evaluatorTree(a.evaluators),
    agent ? [h("h3", {}, `Conversation: ${a.turns} turns, ${a.tool_calls_made ?? 0} tool calls, outcome ${a.outcome}`),
      transcript(a.transcript, a.tool_events),
      a.state ? [h("h3", {}, "Final state"), pre(a.state)] : null] : null,
    a.workspace_diff !== null && a.workspace_diff !== undefined ? [h("h3", {}, "Workspace diff"),
      a.workspace_diff ? diffBlock(a.workspace_diff) : h("p", {class: "hint"}, "nothing changed"),
      (a.workspace_files || []).length ? h("p", {class: "figures"}, "files: " + a.workspace_files.join(", ")) : null] : null,
    a.notes ? h("p", {class: "figures"}, "notes: " + a.notes) : null);
  return {card, note, right, wrong, status};
}

async function testPage(params) {
  const run = params.get("run");
  const suite = params.get("suite"), testId = params.get("test_id"), caseIndex = params.get("case") || "-1";
  crumbs(["runs", "#/"], [run, route("run", {run})], [suite + "/" + testId + fmt.case(Number(caseIndex)), location.hash]);
  const data = await api("test", {run, suite, test_id: testId, case: caseIndex});
  const cards = [];
  let focus = 0;
  const setFocus = (i) => {
    if (!cards.length) return;
    focus = Math.max(0, Math.min(cards.length - 1, i));
    cards.forEach((c, j) => c.card.classList.toggle("focus", j === focus));
    cards[focus].card.scrollIntoView({block: "nearest", inline: "nearest"});
  };
  const onLabel = async (i, label) => {
    setFocus(i);
    const a = data.attempts[i], c = cards[i];
    c.status.textContent = "saving…";
    try {
      const response = await fetch("/api/label", {method: "POST", credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-Engine-View": "1"},
        body: JSON.stringify({run, model: a.model, suite: a.suite, test_id: a.test_id, case_index: a.case_index,
          attempt: a.attempt, test_hash: a.test_hash, label, note: c.note.value || null})});
      const reply = await response.json();
      if (!response.ok || reply.error) throw new Error(reply.error || ("HTTP " + response.status));
      c.right.classList.toggle("on", label === "right");
      c.wrong.classList.toggle("on", label === "wrong");
      c.status.textContent = `labelled ${label} by ${document.getElementById("who").dataset.name || "you"}`;
    } catch (e) {
      c.status.textContent = "not saved: " + e.message;
    }
  };
  const byModel = new Map();
  data.attempts.forEach((a, i) => {
    const made = attemptCard(run, a, i, onLabel);
    cards.push(made);
    if (!byModel.has(a.model)) byModel.set(a.model, []);
    byModel.get(a.model).push(made.card);
  });
  const t = data.test || {};
  show(
    h("h1", {}, suite + "/" + testId + fmt.case(Number(caseIndex))),
    h("p", {}, t.status ? h("span", {class: "badge"}, t.status) : null, t.reason || ""),
    (t.tags || []).length ? h("p", {class: "figures"}, "tags: " + t.tags.join(", ")) : null,
    h("p", {class: "keys"}, "Keys: ", h("kbd", {}, "j"), "/", h("kbd", {}, "n"), " next attempt · ", h("kbd", {}, "k"), "/", h("kbd", {}, "p"),
      " previous · ", h("kbd", {}, "r"), " verdict right · ", h("kbd", {}, "w"), " verdict wrong (the note box takes what you type)"),
    data.total > data.shown ? h("p", {class: "hint"}, `${data.shown} of ${data.total} attempts shown`) : null,
    h("div", {class: "columns"}, [...byModel.entries()].map(([model, list]) => h("div", {class: "column"}, h("h2", {}, model), list))));
  document.onkeydown = (e) => {
    if (document.body.dataset.page !== "test" || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.target && (e.target.tagName === "INPUT" || e.target.tagName === "TEXTAREA" || e.target.tagName === "SELECT")) return;
    if (e.key === "j" || e.key === "n" || e.key === "ArrowDown") { setFocus(focus + 1); e.preventDefault(); }
    else if (e.key === "k" || e.key === "p" || e.key === "ArrowUp") { setFocus(focus - 1); e.preventDefault(); }
    else if (e.key === "r" && cards.length) { onLabel(focus, "right"); }
    else if (e.key === "w" && cards.length) { onLabel(focus, "wrong"); }
  };
  setFocus(0);
  window.scrollTo(0, 0);
  done("test");
}

// ---- two runs --------------------------------------------------------------------------------------------
async function diffPage(params) {
  const a = params.get("a"), b = params.get("b");
  crumbs(["runs", "#/"], [a + " → " + b, location.hash]);
  const data = await api("diff", {a, b});
  show(h("h1", {}, "Run " + a + " → " + b),
    h("h2", {}, "Per model"),
    table(["model", "tests", "pass→fail", "fail→pass", "changed tests", "mean A", "mean B", "Δ [CI]", "McNemar p", "verdict"],
      data.summary.map((s) => [s.model, s.tests, s.pass_to_fail, s.fail_to_pass, s.changed_tests, fmt.num(s.mean_a), fmt.num(s.mean_b),
        fmt.ci(s.mean_diff, s.diff_lo, s.diff_hi), fmt.num(s.mcnemar_p), s.verdict])),
    h("h2", {}, `Tests whose verdict changed (${data.flips.length})`),
    data.flips.length ? table(["model", "test", "change", "score A", "score B", "test changed"], data.flips.map((f) => [f.model,
      h("td", {}, h("a", {href: route("test", {run: b, suite: f.suite, test_id: f.test_id, case: f.case_index})}, f.suite + "/" + f.test_id + fmt.case(f.case_index))),
      f.change, fmt.num(f.score_a), fmt.num(f.score_b), f.hash_changed ? "yes" : ""])) : h("p", {class: "hint"}, "No verdict changed."));
  done("diff");
}

// ---- routing ---------------------------------------------------------------------------------------------
async function render() {
  document.body.dataset.ready = "no";
  const hash = location.hash || "#/";
  const [path, query] = hash.slice(2).split("?");
  const params = new URLSearchParams(query || "");
  try {
    if (path === "run") await runPage(params);
    else if (path === "test") await testPage(params);
    else if (path === "diff") await diffPage(params);
    else await runsPage();
  } catch (e) {
    show(h("h1", {}, "Cannot show this page"), h("p", {class: "err"}, e.message));
    done("error");
  }
}

window.addEventListener("hashchange", render);
window.addEventListener("DOMContentLoaded", async () => {
  try {
    const me = await api("me");
    const who = document.getElementById("who");
    who.dataset.name = me.reviewer;
    who.textContent = "reviewer: " + me.reviewer;
  } catch (e) { /* the pages say what failed */ }
  render();
});
