"""The inline stylesheet and script of the HTML report (no network, no libraries).

The script reads the JSON in #report-data and builds every view with DOM calls; text from the results
is only ever set with textContent.
"""

from __future__ import annotations

CSS = """
:root { --fg:#1d232a; --muted:#5d6b78; --line:#d9dee3; --bg:#ffffff; --accent:#2458a6; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       background: var(--bg); margin: 0; padding: 0 24px 48px; }
header { border-bottom: 2px solid var(--line); margin-bottom: 12px; }
h1 { font-size: 22px; margin: 18px 0 4px; } h2 { font-size: 17px; margin: 26px 0 6px; }
.hint, #meta { color: var(--muted); margin: 2px 0 8px; }
table { border-collapse: collapse; margin: 6px 0 12px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: #f3f5f7; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.ci svg { vertical-align: middle; }
.status { padding: 1px 6px; border-radius: 8px; font-size: 12px; }
.status.floor { background:#fde2e1; } .status.saturated { background:#e1f3e4; }
.status.uninformative { background:#f1ecd8; } .status.discriminating { background:#e2ebfa; }
.test-link { color: var(--accent); cursor: pointer; text-decoration: underline; }
#heatmap { overflow: auto; max-height: 640px; border: 1px solid var(--line); }
#heatmap rect.cell { cursor: pointer; } #heatmap rect.cell:hover { stroke: #000; stroke-width: 1; }
#scatter circle.dot { cursor: pointer; opacity: .75; }
pre { white-space: pre-wrap; word-break: break-word; background: #f6f8fa; border: 1px solid var(--line);
      padding: 8px; margin: 4px 0 10px; max-height: 320px; overflow: auto; }
.attempt { border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; margin: 8px 0; }
.attempt h4 { margin: 0 0 6px; }
.pass { color: #1b7a34; font-weight: 600; } .fail { color: #b3261e; font-weight: 600; }
.transcript .msg { margin: 4px 0; } .transcript .role { font-weight: 600; color: var(--muted); margin-right: 6px; }
.transcript .call { font-family: ui-monospace, monospace; font-size: 12px; margin-left: 18px; }
.transcript details { margin-left: 18px; } .transcript summary { cursor: pointer; color: var(--muted); }
.lists { display: grid; grid-template-columns: repeat(auto-fit, minmax(320px, 1fr)); gap: 16px; }
.lists ul { padding-left: 18px; margin: 4px 0; } .lists li { margin: 2px 0; }
"""

JS = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var SVGNS = "http://www.w3.org/2000/svg";

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    if (attrs) { Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); }); }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }
  function svg(tag, attrs, text) {
    var node = document.createElementNS(SVGNS, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = String(text); }
    return node;
  }
  function fmt(x, digits) { return (x === null || x === undefined) ? "-" : Number(x).toFixed(digits === undefined ? 3 : digits); }
  function pct(x) { return (x === null || x === undefined) ? "-" : (100 * x).toFixed(1) + "%"; }
  function colour(score) { return score === null ? "#d7dbe0" : "hsl(" + Math.round(120 * score) + ",62%,46%)"; }
  function testName(t) { return t.suite + "/" + t.test_id + (t.case_index >= 0 ? "#" + t.case_index : ""); }
  function table(headers, rows, id) {
    var t = el("table", id ? { id: id } : null), head = el("tr");
    headers.forEach(function (h) { head.appendChild(el("th", null, h)); });
    t.appendChild(head);
    rows.forEach(function (cells) {
      var tr = el("tr");
      cells.forEach(function (c) {
        if (c instanceof Node) { var td = el("td"); td.appendChild(c); tr.appendChild(td); }
        else { tr.appendChild(el("td", typeof c === "number" ? { "class": "num" } : null, c)); }
      });
      t.appendChild(tr);
    });
    return t;
  }
  function testLink(t) {
    var a = el("span", { "class": "test-link", "data-test": t.index }, testName(t));
    a.addEventListener("click", function () { showTest(t.index); });
    return a;
  }

  // Header
  document.getElementById("meta").textContent = data.rows + " rows; runs: " + (data.runs.join(", ") || "-") +
      "; from " + (data.sources.join(", ") || "-") + "; generated " + data.generated;
  var summary = document.getElementById("summary");
  (data.summary || []).forEach(function (n) { summary.appendChild(el("li", null, n)); });
  var notes = document.getElementById("notes");
  data.notes.forEach(function (n) { notes.appendChild(el("li", null, n)); });

  // Models with CI bars
  function ciBar(mean, lo, hi) {
    var s = svg("svg", { width: 160, height: 14, "class": "cibar" });
    s.appendChild(svg("rect", { x: 0, y: 6, width: 160, height: 2, fill: "#e5e8eb" }));
    if (mean !== null) {
      s.appendChild(svg("rect", { x: 160 * (lo === null ? mean : lo), y: 3, height: 8, fill: "#9db7e0",
                                  width: Math.max(1, 160 * ((hi === null ? mean : hi) - (lo === null ? mean : lo))) }));
      s.appendChild(svg("rect", { x: 160 * mean - 1, y: 1, width: 2, height: 12, fill: "#1d3f77" }));
    }
    return s;
  }
  function rateWait(m) {
    if (m.rate_limit_wait_s === null || m.rate_limit_wait_s === undefined) return "-";
    return fmt(m.rate_limit_wait_s, 1) + " (" + (m.rate_limited_rows || 0) + " rows)";
  }
  function fingerprints(m) {
    var found = m.fingerprints || [];
    if (!found.length) return "-";
    return found.join(", ") + (m.more_fingerprints ? " and " + m.more_fingerprints + " more" : "");
  }
  var modelRows = data.models.map(function (m) {
    var bar = el("span", { "class": "ci" }); bar.appendChild(ciBar(m.mean_score, m.score_lo, m.score_hi));
    return [m.model, m.tests, m.clusters === null ? "-" : m.clusters,
            fmt(m.mean_score) + " [" + fmt(m.score_lo) + ", " + fmt(m.score_hi) + "]", bar,
            fmt(m.pass_rate) + " [" + fmt(m.pass_lo) + ", " + fmt(m.pass_hi) + "]", pct(m.error_rate),
            pct(m.truncation_rate), fmt(m.latency_p50, 2), fmt(m.ttft_provider_p50, 2), fmt(m.ttft_visible_p50, 2),
            m.completion_tokens === null ? "-" : fmt(m.completion_tokens, 1),
            m.cost === null ? "-" : fmt(m.cost, 4), rateWait(m), fingerprints(m), m.notes];
  });
  document.getElementById("interval").textContent = "Mean over tests; intervals: " + data.interval + ".";
  document.getElementById("models").appendChild(table(["model", "tests", "clusters", "score [CI]", "", "pass rate [CI]",
      "errors", "truncated", "p50 latency s", "p50 TTFT provider s", "p50 TTFT visible s", "tokens out", "cost",
      "rate-limit wait s", "fingerprints", "notes"], modelRows, "models-table"));
  if (data.comparisons.length) {
    document.getElementById("comparisons").appendChild(table(["A", "B", "tests (clusters)", "win / tie / loss",
        "only A / only B pass", "McNemar p", "verdict"], data.comparisons.map(function (c) {
      return [c.model_a, c.model_b, c.tests + " (" + c.clusters + ")", c.wins + " / " + c.ties + " / " + c.losses, c.only_a + " / " + c.only_b,
              fmt(c.mcnemar_p, 4), c.verdict];
    }), "comparisons-table"));
  }

  if (data.variants && data.variants.length) {
    var variants = document.getElementById("variants");
    document.getElementById("section-variants").hidden = false;
    variants.appendChild(el("p", { "class": "hint" }, "Per model, each variant scored over the same tests (mean over " +
        "tests; " + data.interval + "); the model table pools a test's variants."));
    variants.appendChild(table(["model", "variant", "tests", "score [CI]", "pass rate [CI]", "errors", "tokens out"],
        data.variants.map(function (v) {
      return [v.model, v.variant, v.tests, fmt(v.mean_score) + " [" + fmt(v.score_lo) + ", " + fmt(v.score_hi) + "]",
              fmt(v.pass_rate) + " [" + fmt(v.pass_lo) + ", " + fmt(v.pass_hi) + "]", pct(v.error_rate),
              v.completion_tokens === null ? "-" : fmt(v.completion_tokens, 1)];
    }), "variants-table"));
    if (data.variant_comparisons && data.variant_comparisons.length) {
      variants.appendChild(el("h3", null, "Paired variant comparisons"));
      variants.appendChild(el("p", { "class": "hint" }, "Per model: its best variant against each other one, " +
          "paired by test; a verdict needs the paired interval and McNemar to agree (the rule used for models)."));
      variants.appendChild(table(["model", "A", "B", "tests (clusters)", "mean A−B [CI]", "only A / only B pass",
          "McNemar p", "verdict"], data.variant_comparisons.map(function (c) {
        return [c.model, c.variant_a, c.variant_b, c.tests + " (" + c.clusters + ")",
                fmt(c.mean_diff) + " [" + fmt(c.diff_lo) + ", " + fmt(c.diff_hi) + "]", c.only_a + " / " + c.only_b,
                fmt(c.mcnemar_p, 4), c.verdict];
      }), "variant-comparisons-table"));
    }
  }

  // Judges: the section `engine analyze` prints (engine.judge.trust.judge_report)
  function figures(st) {
    if (!st) { return "-"; }
    var parts = ["n=" + st.n, "agreement " + fmt(st.agreement)];
    [["within_one", "within one"], ["kappa", "κ"], ["weighted_kappa", "weighted κ"], ["alpha_ordinal", "α ordinal"]]
        .forEach(function (p) { if (st[p[0]] !== null && st[p[0]] !== undefined) { parts.push(p[1] + " " + fmt(st[p[0]])); } });
    if (["kappa", "weighted_kappa", "alpha_ordinal"].every(function (k) { return st[k] === null || st[k] === undefined; })) {
      parts.push("κ undefined (no variation beyond chance to measure)");
    }
    if (st.errors) { parts.push(st.errors + " judge errors"); }
    if (st.note) { parts.push(st.note); }
    return parts.join(", ");
  }
  if (data.judges && data.judges.judges.length) {
    var jbox = document.getElementById("judges");
    document.getElementById("section-judges").hidden = false;
    jbox.appendChild(table(["judge", "scale", "verdicts", "errors", "pass rate", "paid calls", "cost"],
        data.judges.judges.map(function (j) {
      return [j.judge_model, j.scale, j.rows, j.errors, fmt(j.pass_rate), j.judge_calls,
              j.judge_cost === null ? "-" : String(Number(Number(j.judge_cost).toPrecision(6)))];
    }), "judges-table"));
    jbox.appendChild(el("h3", null, "Agreement"));
    var rows = [];
    data.judges.judges.forEach(function (j) {
      var c = j.calibration;
      rows.push([j.judge_model, "calibration labels", c === null ? "none (run `engine validate --judges` on a suite with calibration:)" :
          (!c.nodes ? c.stale + " record(s) stale (the test changed since); run `engine validate --judges` again" :
           figures(c) + (c.stale ? "; " + c.stale + " stale" : ""))]);
      var sc = j.self_consistency;
      if (sc) {
        rows.push([j.judge_model, "itself, across samples", sc.rows + " rows sampled, modal share " + fmt(sc.modal_share) +
            ", unanimous " + fmt(sc.unanimous) + ", α (" + sc.alpha_metric + ") " + fmt(sc.alpha) + (sc.note ? " - " + sc.note : "")]);
      }
      j.vs_deterministic.forEach(function (o) { rows.push([j.judge_model, "deterministic: " + o.evaluator, figures(o)]); });
    });
    data.judges.pairs.forEach(function (p) {
      rows.push([p.judge_a, "judge " + p.judge_b + " (" + p.scale + ", on " + p.compared + ")", figures(p)]);
    });
    jbox.appendChild(table(["judge", "against", "figures"], rows, "judge-agreement-table"));
  }

  if (data.agents && data.agents.length) {
    var agents = document.getElementById("agents");
    document.getElementById("section-agents").hidden = false;
    agents.appendChild(el("p", { "class": "hint" }, "Multi-turn conversations: means per conversation, counts over all " +
        "(no interval). Invented tools: calls to a tool the test did not offer; bad args: arguments that were not " +
        "JSON or did not fit the tool."));
    agents.appendChild(table(["model", "conversations", "turns", "prose turns", "tool calls", "invented tools",
        "bad args", "completed", "escalated", "capped", "stuck", "failed", "error"], data.agents.map(function (r) {
      return [r.model, r.conversations, fmt(r.mean_turns, 2), fmt(r.mean_prose_turns, 2), fmt(r.mean_tool_calls, 2),
              r.invented_tools + " (" + pct(r.invented_rate) + ")", r.bad_tool_args + " (" + pct(r.bad_args_rate) + ")",
              r.completed, r.escalated, r.capped, r.stuck, r.failed, r.error + (r.other_outcome ? " (+" + r.other_outcome + " other)" : "")];
    }), "agents-table"));
  }

  // One conversation: the model's turns in order, each tool result folded under its call.
  function transcriptView(messages) {
    var box = el("div", { "class": "transcript" });
    messages.forEach(function (m) {
      if (m.role === "tool") {
        var fold = el("details", { "class": "tool-result" });
        fold.appendChild(el("summary", null, "result of " + (m.tool_name || "?") + " · " + (m.tool_status || "?")));
        fold.appendChild(el("pre", null, m.content === null ? "" : m.content));
        box.appendChild(fold);
        return;
      }
      var line = el("div", { "class": "msg" });
      line.appendChild(el("span", { "class": "role" }, m.role + (m.turn ? " · turn " + m.turn : "")));
      if (m.content) { line.appendChild(document.createTextNode(m.content)); }
      box.appendChild(line);
      m.tool_calls.forEach(function (c) { box.appendChild(el("div", { "class": "call" }, "→ " + c.name + "(" + (c.arguments || "") + ")")); });
    });
    return box;
  }

  function passkTable(rows, id) {
    return table(["model", "suite", "k", "tests", "pass@k [CI]", "pass^k [CI]", "left out (< k attempts)"], rows.map(function (r) {
      return [r.model, r.suite, String(r.k), r.tests, fmt(r.pass_at_k) + " [" + fmt(r.pass_at_k_lo) + ", " + fmt(r.pass_at_k_hi) + "]",
              fmt(r.pass_hat_k) + " [" + fmt(r.pass_hat_k_lo) + ", " + fmt(r.pass_hat_k_hi) + "]", r.cells_short];
    }), id);
  }
  // Shown when some test has two or more attempts (as in `engine analyze`): the folded rows, then every row.
  if (data.passk.length && data.passk.some(function (r) { return r.k > 1; })) {
    var pbox = document.getElementById("passk");
    document.getElementById("section-passk").hidden = false;
    pbox.appendChild(passkTable(data.passk_shown.length ? data.passk_shown : data.passk, "passk-table"));
    if (data.passk_fold) {
      pbox.appendChild(el("p", { "class": "hint" }, data.passk_fold.replace("--full shows them", "every row below")));
      var all = el("details");
      all.appendChild(el("summary", null, "every pass@k row (" + data.passk.length + ")"));
      all.appendChild(passkTable(data.passk, "passk-all-table"));
      pbox.appendChild(all);
    }
  }

  // IRT (engine report --irt): the tables `engine analyze --irt` prints, as given
  if (data.irt) {
    document.getElementById("section-irt").hidden = false;
    data.irt.notes.forEach(function (n) { document.getElementById("irt-notes").appendChild(el("li", null, n)); });
    data.irt.tables.forEach(function (t, i) {
      var box = document.getElementById("irt");
      box.appendChild(el("h3", null, t.title));
      box.appendChild(table(t.header, t.rows, "irt-table-" + i));
    });
  }

  // Heatmap: shown tests (rows) × models (columns)
  (function () {
    var models = data.model_names, shown = data.shown, cw = 34, ch = 14, left = 260, top = 90;
    var s = svg("svg", { id: "heatmap-svg", width: left + cw * models.length + 20, height: top + ch * shown.length + 10 });
    models.forEach(function (m, j) {
      var x = left + j * cw + cw / 2;
      s.appendChild(svg("text", { x: x, y: top - 6, transform: "rotate(-50 " + x + " " + (top - 6) + ")",
                                  "font-size": 11 }, m));
    });
    shown.forEach(function (ti, r) {
      var t = data.tests[ti], y = top + r * ch;
      var label = svg("text", { x: left - 6, y: y + ch - 3, "text-anchor": "end", "font-size": 11, "class": "row-label" },
                      testName(t));
      label.style.cursor = "pointer";
      label.addEventListener("click", function () { showTest(ti); });
      s.appendChild(label);
      t.scores.forEach(function (score, j) {
        var rect = svg("rect", { "class": "cell", x: left + j * cw, y: y, width: cw - 1, height: ch - 1,
                                 fill: colour(score), "data-test": ti, "data-model": models[j] });
        rect.appendChild(svg("title", {}, testName(t) + " · " + models[j] + ": " + fmt(score)));
        rect.addEventListener("click", function () { showTest(ti); });
        s.appendChild(rect);
      });
    });
    var box = document.getElementById("heatmap");
    if (data.tests.length > shown.length) {
      box.appendChild(el("p", { "class": "hint" }, "Showing " + shown.length + " of " + data.tests.length +
          " tests (evenly over difficulty, flagged tests included)."));
    }
    box.appendChild(s);
  })();

  // Scatter: difficulty (x) vs item-rest r (y, -1 at the bottom to 1 at the top)
  (function () {
    var w = 640, h = 360, pad = 44;
    var s = svg("svg", { id: "scatter-svg", width: w, height: h });
    s.appendChild(svg("rect", { x: pad, y: 10, width: w - pad - 10, height: h - pad - 10, fill: "#fafbfc", stroke: "#d9dee3" }));
    [0, 0.25, 0.5, 0.75, 1].forEach(function (v) {
      var x = pad + v * (w - pad - 10), y = 10 + (1 - v) * (h - pad - 10);
      s.appendChild(svg("text", { x: x, y: h - pad + 16, "text-anchor": "middle", "font-size": 11 }, v));
      s.appendChild(svg("text", { x: pad - 6, y: y + 4, "text-anchor": "end", "font-size": 11 }, 2 * v - 1));
    });
    s.appendChild(svg("text", { x: w / 2, y: h - 6, "text-anchor": "middle", "font-size": 12 }, "difficulty (mean score)"));
    s.appendChild(svg("text", { x: 12, y: h / 2, transform: "rotate(-90 12 " + h / 2 + ")", "text-anchor": "middle",
                                "font-size": 12 }, "item-rest r"));
    var palette = { floor: "#c0392b", saturated: "#27ae60", uninformative: "#b7950b", discriminating: "#2458a6" };
    data.tests.forEach(function (t) {
      if (t.difficulty === null) { return; }
      var r = t.item_rest_r === null ? 0 : t.item_rest_r;
      var dot = svg("circle", { "class": "dot", cx: pad + t.difficulty * (w - pad - 10), r: 4,
                                cy: 10 + (1 - (r + 1) / 2) * (h - pad - 10), fill: palette[t.status] || "#7f8c8d",
                                "data-test": t.index });
      dot.appendChild(svg("title", {}, testName(t) + " (" + t.status + "): difficulty " + fmt(t.difficulty) +
                                       ", item-rest r " + fmt(t.item_rest_r) + ", BH q " + fmt(t.q_value, 4)));
      dot.addEventListener("click", function () { showTest(t.index); });
      s.appendChild(dot);
    });
    document.getElementById("scatter").appendChild(s);
  })();

  // Lists
  (function () {
    var box = el("div", { "class": "lists" });
    var rule = data.correction === "holm" ? "Holm-adjusted p" : "BH q";
    var ranked = data.tests.filter(function (t) { return t.status === "discriminating"; }).sort(function (a, b) {
      return (b.item_rest_r === null ? -2 : b.item_rest_r) - (a.item_rest_r === null ? -2 : a.item_rest_r); });
    [["discriminating", "Discriminating: pass rates differ between models beyond sampling noise (" + rule + " ≤ " +
      data.alpha + "), ranked by item-rest r", ranked],
     ["floor", "Floor: no model passes most of its attempts - check the golden and the evaluator"],
     ["saturated", "Saturated: every model passes most of its attempts - drop or make harder"],
     ["fallback-left-out", "Not classed: failing rows were served by a fallback model and left out"],
     ["uninformative", "Uninformative: no evidence the models' pass rates differ"],
     ["flaky", "Flaky: attempts at temperature 0 disagree"],
     ["mixed", "Attempts that disagree at temperature > 0 (sampling, not a flag)"]].forEach(function (pair) {
      var chosen = pair[2] || data.tests.filter(function (t) {
        if (pair[0] === "flaky") { return t.flaky; }
        if (pair[0] === "mixed") { return t.mixed_models && !t.flaky; }
        return t.status === pair[0];
      });
      var div = el("div", { id: "list-" + pair[0] });
      div.appendChild(el("h3", null, pair[1] + " (" + chosen.length + ")"));
      var ul = el("ul");
      chosen.slice(0, 200).forEach(function (t) {
        var li = el("li"); li.appendChild(testLink(t));
        var why = pair[0] === "flaky" ? "models: " + t.flaky_models + " (" + t.pass_counts + ")" :
            pair[0] === "mixed" ? "passes / attempts: " + t.mixed_models :
            pair[0] === "discriminating" ? "item-rest r " + fmt(t.item_rest_r) + ", q " + fmt(t.q_value, 4) + "; " + t.pass_counts :
            t.reason;
        li.appendChild(document.createTextNode(" - " + why));
        ul.appendChild(li);
      });
      if (chosen.length > 200) { ul.appendChild(el("li", { "class": "hint" }, "… " + (chosen.length - 200) + " more: `engine analyze --format csv` lists every test")); }
      div.appendChild(ul);
      box.appendChild(div);
    });
    document.getElementById("lists").appendChild(box);
    document.getElementById("suites").appendChild(table(["suite", "tests", "saturated", "floor", "uninformative",
        "discriminating", "flaky", "health"], data.suites.map(function (s) {
      return [s.suite, s.tests, pct(s.saturated), pct(s.floor), pct(s.uninformative), pct(s.discriminating),
              pct(s.flaky), pct(s.health)];
    }), "suites-table"));
  })();

  // Drill-down
  function showTest(index) {
    var t = data.tests[index], box = document.getElementById("drilldown");
    while (box.firstChild) { box.removeChild(box.firstChild); }
    box.setAttribute("data-test", index);
    box.appendChild(el("h3", { id: "drill-title" }, testName(t)));
    var status = el("p");
    status.appendChild(el("span", { "class": "status " + t.status }, t.status));
    status.appendChild(document.createTextNode(" " + t.reason + " · difficulty " + fmt(t.difficulty) + " · item-rest r " +
        fmt(t.item_rest_r) + " · passes: " + t.pass_counts + (t.flaky ? " · flaky: " + t.flaky_models : "")));
    box.appendChild(status);
    var attempts = data.drill[String(index)] || [];
    if (!attempts.length) { box.appendChild(el("p", { "class": "hint" }, "No stored attempt for this test.")); }
    if (attempts.length && attempts[0].prompt) {
      box.appendChild(el("h4", null, "Prompt"));
      box.appendChild(el("pre", { "class": "prompt" }, attempts[0].prompt));
    }
    if (attempts.length && attempts[0].golden) {
      box.appendChild(el("h4", null, "Golden"));
      box.appendChild(el("pre", null, attempts[0].golden));
    }
    attempts.forEach(function (a) {
      var div = el("div", { "class": "attempt" });
      var h = el("h4", null, a.model + " · attempt " + a.attempt + " of " + a.attempts + " · score " + fmt(a.score) + " · ");
      h.appendChild(el("span", { "class": a.passed ? "pass" : "fail" }, a.passed === null ? "error" : (a.passed ? "pass" : "fail")));
      div.appendChild(h);
      if (a.error) { div.appendChild(el("p", { "class": "fail" }, a.error)); }
      if (a.agent) {
        div.appendChild(el("p", { "class": "hint" }, "conversation " + a.agent.outcome + " · " + a.agent.turns + " turns (" +
            a.agent.prose_turns + " without a tool call) · " + a.agent.tool_calls_made + " tool calls · " +
            a.agent.invented_tools + " invented · " + a.agent.bad_tool_args + " bad arguments" +
            (a.agent.state ? " · final state " + a.agent.state : "")));
        if (a.agent.workspace_diff !== null && a.agent.workspace_diff !== undefined) {
          div.appendChild(el("p", { "class": "hint" }, "workspace · " + a.agent.failed_commands + " failed commands · " +
              a.agent.refused_paths + " refused paths"));
          var wd = el("details", { "class": "transcript" });
          wd.appendChild(el("summary", null, a.agent.workspace_diff ? "workspace diff" : "workspace unchanged"));
          wd.appendChild(el("pre", { "class": "answer" }, a.agent.workspace_diff));
          div.appendChild(wd);
        }
      }
      if (a.transcript && a.transcript.length) { div.appendChild(transcriptView(a.transcript)); }
      div.appendChild(el("pre", { "class": "answer" }, a.answer === null ? "(no answer)" : a.answer));
      if (a.evaluators.length) {
        div.appendChild(table(["evaluator", "score", "weight", "verdict", "reason"], a.evaluators.map(function (e) {
          return [e.path + (e.name ? " (" + e.name + ")" : ""), fmt(e.score), fmt(e.weight, 2),
                  e.error ? "error" : (e.passed ? "pass" : "fail"), e.reason || ""];
        })));
      }
      box.appendChild(div);
    });
  }
  window.showTest = showTest;
  // Open on the test most worth a look: a floor test, else the discriminating one with the highest item-rest r.
  var first = data.tests.filter(function (t) { return t.status === "floor"; })[0] ||
      data.tests.filter(function (t) { return t.status === "discriminating"; }).sort(function (a, b) {
        return (b.item_rest_r === null ? -2 : b.item_rest_r) - (a.item_rest_r === null ? -2 : a.item_rest_r); })[0] ||
      data.tests[0];
  // report.html#test=SUITE/TEST_ID (or #test=N, the index) opens that test instead.
  var hash = (typeof location !== "undefined" && location.hash) || "";
  var wanted = decodeURIComponent((hash.match(/^#test=(.+)$/) || [])[1] || "");
  var named = wanted ? data.tests.filter(function (t) { return testName(t) === wanted || String(t.index) === wanted; })[0] : null;
  first = named || first;
  if (first) { showTest(first.index); }
  document.body.setAttribute("data-rendered", "yes");
})();
"""
