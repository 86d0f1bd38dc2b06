"use strict";
// rlm eval's page: each arm's figures, accuracy against context size and against cost,
// and every item under every arm linked to its run's trace.  No network, no dependencies:
// the plots are SVG drawn from the data in the page.
(function (R) {
  const data = R.data;
  const el = R.el;
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563",
    "#ca8a04"];
  const W = 560, H = 320, M = {l: 56, r: 16, t: 16, b: 48};
  const color = (i) => COLORS[i % COLORS.length];
  const share = (v) => (v === null || v === undefined ? "—" : v.toFixed(3));
  const ci = (c) => (!c || c[0] === null ? "—" : "[" + c[0].toFixed(2) + ", " + c[1].toFixed(2) + "]");

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(NS, tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined) node.setAttribute(key, String(value));
    }
    for (const child of children) {
      if (child !== null && child !== undefined) {
        node.append(child instanceof Node ? child : document.createTextNode(String(child)));
      }
    }
    return node;
  }

  function header() {
    const status = document.getElementById("eval-status");
    status.className = "badge " + (data.status === "complete" ? "ok" : "running");
    status.textContent = data.status;
    document.getElementById("eval-source").textContent = data.eval_id + " · " + data.dataset +
      " · " + (data.provider || "") + " " + (data.model || "");
    const s = data.scoring || {};
    let line = "scorer: " + s.scorer;
    if (s.judge) line += " · judge " + s.judge.model + ": " + s.judge.verdicts + " verdicts, " +
      s.judge.cached + " from the cache, " + R.usd(s.judge.cost);
    document.getElementById("scoring").textContent = line;
  }

  function armsTable() {
    const heads = ["arm", "accuracy", "95% CI", "cost/item", "cost", "tokens", "calls/item",
      "p50", "p95", "failures", "pending"];
    const rows = data.arms.map((arm, i) => el("tr", {"data-arm": arm.name},
      el("td", {}, el("span", {class: "swatch", style: "background:" + color(i)}), arm.name,
        arm.arm !== arm.name ? el("div", {class: "muted", text: arm.arm}) : null),
      el("td", {class: "num", text: share(arm.accuracy)}),
      el("td", {class: "num", text: ci(arm.ci95)}),
      el("td", {class: "num", text: R.usd(arm.cost_mean)}),
      el("td", {class: "num", text: R.usd(arm.cost_total)}),
      el("td", {class: "num", text: R.num(arm.tokens_input + arm.tokens_output)}),
      el("td", {class: "num", text: arm.calls_mean === null ? "—" : arm.calls_mean.toFixed(1)}),
      el("td", {class: "num", text: R.secs(arm.latency_p50)}),
      el("td", {class: "num", text: R.secs(arm.latency_p95)}),
      el("td", {text: Object.entries(arm.failures).map(([k, n]) => k + " " + n).join(", ") || "—"}),
      el("td", {class: "num", text: R.num(arm.pending)})));
    document.getElementById("arms-table").append(el("table", {class: "grid-table"},
      el("thead", {}, el("tr", {}, heads.map((h) => el("th", {text: h})))), el("tbody", {}, rows)));
  }

  // The frame of a plot: title, axes, ticks and labels; y is accuracy from 0 to 1.
  function frame(id, title, xLabel, xTicks) {
    const plot = svg("svg", {class: "plot", viewBox: "0 0 " + W + " " + H, role: "img",
      "aria-label": title, "data-plot": id}, svg("title", {}, title));
    const pw = W - M.l - M.r, ph = H - M.t - M.b;
    const y = (v) => M.t + (1 - v) * ph;
    for (const v of [0, 0.25, 0.5, 0.75, 1]) {
      plot.append(svg("line", {class: "gridline", x1: M.l, x2: W - M.r, y1: y(v), y2: y(v)}),
        svg("text", {x: M.l - 8, y: y(v) + 4, "text-anchor": "end"}, v.toFixed(2)));
    }
    for (const [x, label] of xTicks) {
      plot.append(svg("text", {x: x, y: H - M.b + 16, "text-anchor": "middle"}, label));
    }
    plot.append(
      svg("line", {class: "axis", x1: M.l, x2: W - M.r, y1: y(0), y2: y(0)}),
      svg("line", {class: "axis", x1: M.l, x2: M.l, y1: M.t, y2: y(0)}),
      svg("text", {class: "x-label", x: M.l + pw / 2, y: H - 8, "text-anchor": "middle"}, xLabel),
      svg("text", {class: "y-label", x: 14, y: M.t + ph / 2, "text-anchor": "middle",
        transform: "rotate(-90 14 " + (M.t + ph / 2) + ")"}, "accuracy (95% interval)"));
    return {plot, y, pw};
  }

  function point(x, y, acc, interval, colour, label) {
    const g = svg("g", {}, svg("title", {}, label));
    if (interval && interval[0] !== null) {
      g.append(svg("line", {x1: x, x2: x, y1: y(interval[0]), y2: y(interval[1]),
        stroke: colour, "stroke-width": 1.5}));
    }
    g.append(svg("circle", {cx: x, cy: y(acc), r: 4, fill: colour}));
    return g;
  }

  function figure(id, title, plot, note) {
    const legend = el("div", {class: "legend"}, data.arms.map((arm, i) => el("span", {},
      el("span", {class: "swatch", style: "background:" + color(i)}), arm.name + " ")));
    const box = document.getElementById(id);
    box.append(el("figcaption", {text: title}), plot, legend);
    if (note) box.append(el("div", {class: "muted", text: note}));
  }

  function sizePlot() {
    const title = "Accuracy against context size, per arm";
    const tiers = data.tiers;
    const pw = W - M.l - M.r;
    const x = (i) => M.l + (i + 0.5) * pw / Math.max(1, tiers.length);
    const {plot, y} = frame("accuracy-by-size", title, "context size (characters)",
      tiers.map((t, i) => [x(i), t]));
    data.arms.forEach((arm, i) => {
      const points = arm.tiers.map((t, j) => [j, t]).filter(([, t]) => t.accuracy !== null);
      const series = svg("g", {class: "series", "data-arm": arm.name, "data-points": points.length});
      if (points.length > 1) {
        series.append(svg("polyline", {fill: "none", stroke: color(i), "stroke-width": 2,
          points: points.map(([j, t]) => x(j) + "," + y(t.accuracy)).join(" ")}));
      }
      for (const [j, t] of points) {
        series.append(point(x(j), y, t.accuracy, t.ci95, color(i), arm.name + " · " + tiers[j] +
          ": " + share(t.accuracy) + " " + ci(t.ci95) + " over " + t.finished + " items"));
      }
      plot.append(series);
    });
    figure("plot-size", title, plot, null);
  }

  function costPlot() {
    const title = "Accuracy against mean cost per item, per arm";
    const costs = data.arms.map((a) => a.cost_mean).filter((c) => c !== null);
    const top = Math.max(0, ...costs);
    const span = top > 0 ? top * 1.15 : 1;
    const pw = W - M.l - M.r;
    const x = (c) => M.l + (c / span) * pw;
    const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => [x(f * span), top > 0 ? R.usd(f * span) : "$0"]);
    const {plot, y} = frame("accuracy-by-cost", title, "mean cost per item (USD)",
      top > 0 ? ticks : [[x(0), "$0"]]);
    data.arms.forEach((arm, i) => {
      const series = svg("g", {class: "series", "data-arm": arm.name,
        "data-points": arm.accuracy === null ? 0 : 1});
      if (arm.accuracy !== null) {
        const cx = x(arm.cost_mean || 0);
        series.append(point(cx, y, arm.accuracy, arm.ci95, color(i), arm.name + ": " +
          share(arm.accuracy) + " " + ci(arm.ci95) + " at " + R.usd(arm.cost_mean) + " per item"),
        svg("text", {x: cx + 7, y: y(arm.accuracy) - 6, fill: color(i)}, arm.name));
      }
      plot.append(series);
    });
    const note = top > 0 ? null : "No arm spent anything here (a free or unpriced model): " +
      "every point sits at $0.";
    figure("plot-cost", title, plot, note);
  }

  function cell(outcome) {
    if (!outcome) return el("td", {}, "—");
    let mark;
    if (outcome.state === "pending") mark = el("span", {class: "score none", text: "pending"});
    else if (outcome.state === "unscored") mark = el("span", {class: "score none", text: "scorer error"});
    else if (outcome.failure) mark = el("span", {class: "score wrong", text: "✗ " + outcome.failure});
    else mark = el("span", {class: "score " + (outcome.score >= 1 ? "right" : "wrong"),
      text: (outcome.score >= 1 ? "✓ " : "✗ ") + outcome.score.toFixed(2)});
    const link = outcome.link ? el("a", {href: outcome.link, class: "trace-link"}, "trace") : null;
    const said = outcome.error || outcome.output;
    return el("td", {"data-arm": outcome.arm}, mark, " ", link,
      said ? el("span", {class: "out", text: said}) : null);
  }

  function itemsTable() {
    const byItem = new Map();
    for (const o of data.items) {
      if (!byItem.has(o.item)) byItem.set(o.item, {first: o, arms: {}});
      byItem.get(o.item).arms[o.arm] = o;
    }
    const heads = ["item", "tier", "chars", ...data.arms.map((a) => a.name)];
    const rows = [...byItem.values()].map((row) => el("tr", {"data-item": row.first.item},
      el("td", {text: row.first.item}), el("td", {text: row.first.tier}),
      el("td", {class: "num", text: R.num(row.first.context_chars)}),
      data.arms.map((a) => cell(row.arms[a.name]))));
    document.getElementById("items-count").textContent = R.count(byItem.size, "item");
    document.getElementById("items-table").append(el("table", {class: "grid-table"},
      el("thead", {}, el("tr", {}, heads.map((h) => el("th", {text: h})))), el("tbody", {}, rows)));
  }

  try {
    header();
    armsTable();
    sizePlot();
    costPlot();
    itemsTable();
    document.body.dataset.ready = "1";
  } catch (err) {
    document.getElementById("notices").append(el("div", {class: "notice"},
      "This page could not draw the eval: " + err));
    document.body.dataset.ready = "error";
    throw err;
  }
})(window.RLM);
