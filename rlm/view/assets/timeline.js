"use strict";
// The timeline: one canvas, drawn from the columnar arrays in data.timeline.
// Rows: requests in flight vs capacity, one row per lane (attempts packed into
// tracks), one row per call (its steps, code, sandbox start, bridge calls).
// Bars narrower than a pixel are merged per pixel column, so 10,000 attempts
// cost one pass and a few hundred rectangles.
(function (R) {
  const {data, el, num, secs, usd} = R;
  const tl = data.timeline;
  const A = tl.attempts;
  const nAttempts = (A.request_id || []).length;
  const END = Math.max(tl.end, 1e-6);
  const LABEL_W = 130, AXIS_H = 22, PAD_R = 12;
  const MAX_TRACKS = 48;
  const C = {
    queued: "#cbd5e1", pacing: "#fbbf24", root: "#2563eb", sub: "#0ea5e9", error: "#dc2626",
    r429: "#f97316", cancelled: "#94a3b8", backoff: "#fca5a5", exec: "#16a34a", execBad: "#dc2626",
    sandbox: "#8b5cf6", bridge: "#f59e0b", life: "#e2e8f0", grid: "#f1f5f9", text: "#334155",
    muted: "#64748b", inflight: "#2563eb", waiting: "#cbd5e1", capacity: "#dc2626", total: "#94a3b8",
  };

  // -- layout: lanes packed into tracks by their in-flight interval ----------------------------
  const track = new Int32Array(nAttempts);
  const laneTracks = [0, 0];
  for (const lane of [0, 1]) {
    const rows = [];
    for (let i = 0; i < nAttempts; i++) if (A.lane[i] === lane) rows.push(i);
    rows.sort((a, b) => A.sent[a] - A.sent[b]);
    const ends = [];
    for (const i of rows) {
      let best = -1;
      for (let k = 0; k < ends.length; k++) if (ends[k] <= A.sent[i]) { best = k; break; }
      if (best < 0 && ends.length < MAX_TRACKS) { best = ends.length; ends.push(0); }
      if (best < 0) {  // more overlap than tracks: the track that frees first
        best = 0;
        for (let k = 1; k < ends.length; k++) if (ends[k] < ends[best]) best = k;
      }
      ends[best] = Math.max(ends[best], A.end[i]);
      track[i] = best;
    }
    laneTracks[lane] = Math.max(1, ends.length);
  }

  function index(table, key) {  // call_id -> row indices of a columnar table
    const out = new Map();
    (table[key] || []).forEach((id, i) => {
      if (!out.has(id)) out.set(id, []);
      out.get(id).push(i);
    });
    return out;
  }
  const stepsOf = new Map();
  for (let i = 0; i < nAttempts; i++) {
    if (!A.step[i]) continue;
    if (!stepsOf.has(A.call_id[i])) stepsOf.set(A.call_id[i], []);
    stepsOf.get(A.call_id[i]).push(i);
  }
  const execsOf = index(tl.execs, "call_id");
  const sandboxesOf = index(tl.sandboxes, "call_id");
  const bridgesOf = index(tl.bridges, "call_id");
  const backoffsOf = index(tl.backoffs, "call_id");
  const lastAttempt = new Map();  // request_id -> row of its latest attempt (for back-off placement)

  const rows = [{kind: "curve", h: 74, label: "in flight"}];
  for (const lane of [0, 1]) {
    const th = laneTracks[lane] <= 8 ? 9 : laneTracks[lane] <= 20 ? 5 : 3;
    rows.push({kind: "lane", lane, th, h: Math.max(22, laneTracks[lane] * th + 8),
      label: (lane === 0 ? "root lane" : "sub lane")});
  }
  for (const call of data.calls) rows.push({kind: "call", call, h: 22, label: call.id});
  let y = AXIS_H;
  for (const row of rows) { row.y = y; y += row.h; }
  const totalH = y + 6;

  // -- series for the curve row ------------------------------------------------------------------
  const waitingPts = [];
  for (let i = 0; i < nAttempts; i++) {
    if (A.sent[i] > A.queued[i]) { waitingPts.push([A.queued[i], 1], [A.sent[i], -1]); }
  }
  waitingPts.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const waiting = [];
  let w = 0, peakWaiting = 0;
  for (const [t, d] of waitingPts) { w += d; waiting.push([t, w]); peakWaiting = Math.max(peakWaiting, w); }
  const peakInFlight = tl.in_flight.reduce((m, p) => Math.max(m, p[1]), 0);
  const rootPermits = (data.run.config || {}).root_permits || 0;

  // -- view state ---------------------------------------------------------------------------------
  const box = document.getElementById("timeline");
  const spacer = document.getElementById("tl-spacer");
  const canvas = document.getElementById("tl-canvas");
  const tip = document.getElementById("tl-tip");
  const ctx = canvas.getContext("2d");
  let v0 = 0, v1 = END, W = 800, H = 400, dpr = 1, drag = null;
  spacer.style.height = totalH + "px";
  box.style.height = Math.min(totalH + 2, 560) + "px";

  const X = (t) => LABEL_W + (t - v0) / (v1 - v0) * (W - LABEL_W - PAD_R);
  const T = (x) => v0 + (x - LABEL_W) / (W - LABEL_W - PAD_R) * (v1 - v0);

  function attemptColor(i) {
    const s = A.status[i];
    if (s === 3) return C.r429;
    if (s === 1 || s === -1 && A.end[i] >= END) return C.error;
    if (s === 2) return C.cancelled;
    return A.lane[i] === 0 ? C.root : C.sub;
  }
  const PRIORITY = {[C.error]: 4, [C.r429]: 3, [C.cancelled]: 1};

  // Bars wider than a pixel are drawn; narrower ones are merged per pixel column.
  function makeAgg() { return new Map(); }
  function aggAdd(agg, key, x, color) {
    let cols = agg.get(key);
    if (!cols) { cols = new Map(); agg.set(key, cols); }
    const c = Math.floor(x);
    const prev = cols.get(c);
    if (!prev || (PRIORITY[color] || 0) > (PRIORITY[prev] || 0)) cols.set(c, color);
  }
  function aggDraw(agg, yOf, h) {
    for (const [key, cols] of agg) {
      const yy = yOf(key);
      for (const [c, color] of cols) { ctx.fillStyle = color; ctx.fillRect(c, yy, 1, h); }
    }
  }
  function bar(t0, t1, yy, h, color, agg, key) {
    let x0 = X(t0), x1 = X(t1);
    if (x1 < LABEL_W || x0 > W - PAD_R) return false;
    x0 = Math.max(x0, LABEL_W); x1 = Math.min(x1, W - PAD_R);
    if (x1 - x0 < 1 && agg) { aggAdd(agg, key, x0, color); return true; }
    ctx.fillStyle = color;
    ctx.fillRect(x0, yy, Math.max(1, x1 - x0), h);
    return true;
  }

  // -- drawing ---------------------------------------------------------------------------------------
  function niceStep(span) {
    const raw = span / Math.max(2, (W - LABEL_W) / 110);
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }

  function drawCurve(row, top) {
    const h = row.h - 10, base = top + row.h - 4;
    const scale = Math.max(tl.max_concurrent || 1, peakInFlight, 1);
    ctx.fillStyle = C.muted; ctx.font = "10px system-ui";
    ctx.fillText(num(scale), LABEL_W - 26, top + 12);
    if (peakWaiting > 0) {  // waiting for a permit or a pacing slot, on its own scale
      ctx.fillStyle = "rgba(148,163,184,0.35)";
      stepPath(waiting.concat([[END, -1]]), (v) => base - v / peakWaiting * h, true, base);
    }
    if (tl.max_concurrent) {
      ctx.strokeStyle = C.total; ctx.setLineDash([4, 3]); ctx.beginPath();
      const yy = base - tl.max_concurrent / scale * h;
      ctx.moveTo(LABEL_W, yy); ctx.lineTo(W - PAD_R, yy); ctx.stroke(); ctx.setLineDash([]);
    }
    if (tl.capacity.length) {  // the sub lane's permits (+ the root's reserved ones), AIMD visible
      ctx.strokeStyle = C.capacity; ctx.lineWidth = 1;
      const cap = tl.capacity.map(([t, n]) => [t, n + rootPermits]).concat([[END, -1]]);
      stepPath(cap, (v) => base - v / scale * h, false, base, cap[0][1]);
    }
    ctx.strokeStyle = C.inflight; ctx.lineWidth = 1.5;
    stepPath(tl.in_flight.concat([[END, -1]]), (v) => base - v / scale * h, false, base);
    ctx.lineWidth = 1;
  }

  // A step function through points [t, value] (value < 0: just extend the line to t).
  // Points falling in one pixel column collapse to a 1 px spike up to their maximum.
  function stepPath(points, yOf, fill, base, initial) {
    ctx.beginPath();
    let cur = -1, max = 0, value = initial || 0, prevEnd = initial || 0, started = false;
    const emit = () => {
      if (!started) { ctx.moveTo(cur, fill ? base : yOf(prevEnd)); started = true; }
      ctx.lineTo(cur, yOf(prevEnd));
      ctx.lineTo(cur, yOf(max));
      ctx.lineTo(cur + 1, yOf(max));
      ctx.lineTo(cur + 1, yOf(value));
      prevEnd = value;
    };
    for (const [t, v] of points) {
      const col = Math.floor(Math.min(Math.max(X(t), LABEL_W), W - PAD_R));
      if (col !== cur) {
        if (cur >= 0) emit();
        cur = col; max = value;
      }
      if (v >= 0) { value = v; max = Math.max(max, v); }
    }
    if (cur >= 0) emit();
    if (fill) { ctx.lineTo(cur + 1, base); ctx.closePath(); ctx.fill(); } else ctx.stroke();
  }

  function drawLane(row, top, counts) {
    const agg = makeAgg(), waits = makeAgg();
    const th = row.th;
    for (let i = 0; i < nAttempts; i++) {
      if (A.lane[i] !== row.lane) continue;
      const yy = top + 4 + track[i] * th;
      if (A.sent[i] - A.queued[i] > 0) bar(A.queued[i], A.sent[i], yy, 1, A.sent[i] > A.paced[i] ? C.pacing : C.queued, waits, track[i]);
      if (bar(A.sent[i], A.end[i], yy, th - 1, attemptColor(i), agg, track[i])) counts[row.lane]++;
      if (A.attempt[i] > 1) { ctx.fillStyle = "#0f172a"; const x = X(A.sent[i]); if (x >= LABEL_W && x <= W) ctx.fillRect(x, yy - 1, 1.5, th + 1); }
      lastAttempt.set(A.request_id[i], i);
    }
    aggDraw(waits, (k) => top + 4 + k * th, 1);
    aggDraw(agg, (k) => top + 4 + k * th, th - 1);
    const bo = tl.backoffs;
    for (let k = 0; k < (bo.t0 || []).length; k++) {
      if (bo.lane[k] !== row.lane) continue;
      const prev = lastAttempt.get(bo.request_id[k]);
      const yy = top + 4 + (prev === undefined ? 0 : track[prev]) * th + th - 2;
      bar(bo.t0[k], bo.t1[k], yy, 2, C.backoff, null, 0);
    }
  }

  function drawCall(row, top) {
    const call = row.call;
    const mid = top + 3;
    if (R.selectedId === call.id) { ctx.fillStyle = "#dbeafe"; ctx.fillRect(0, top, W, row.h); }
    bar(call.t0, call.t1 === null ? END : call.t1, top + 9, 3, C.life, null, 0);
    for (const i of sandboxesOf.get(call.id) || []) bar(tl.sandboxes.t0[i], tl.sandboxes.t1[i], top + 15, 4, C.sandbox, null, 0);
    for (const i of bridgesOf.get(call.id) || []) bar(tl.bridges.t0[i], tl.bridges.t1[i], top + 16, 2, C.bridge, null, 0);
    for (const i of stepsOf.get(call.id) || []) {
      bar(A.queued[i], A.paced[i], mid, 11, C.queued, null, 0);
      bar(A.paced[i], A.sent[i], mid, 11, C.pacing, null, 0);
      bar(A.sent[i], A.end[i], mid, 11, attemptColor(i), null, 0);
    }
    for (const i of execsOf.get(call.id) || []) bar(tl.execs.t0[i], tl.execs.t1[i], mid, 11, tl.execs.ok[i] ? C.exec : C.execBad, null, 0);
    for (const i of backoffsOf.get(call.id) || []) {
      if (tl.backoffs.lane[i] === (call.depth === 0 ? 0 : 1)) bar(tl.backoffs.t0[i], tl.backoffs.t1[i], mid + 4, 3, C.backoff, null, 0);
    }
  }

  function draw() {
    const scroll = box.scrollTop;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H);
    ctx.font = "11px system-ui, sans-serif";
    const step = niceStep(v1 - v0);
    ctx.strokeStyle = C.grid; ctx.lineWidth = 1;
    for (let t = Math.ceil(v0 / step) * step; t <= v1; t += step) {
      const x = Math.round(X(t)) + 0.5;
      ctx.beginPath(); ctx.moveTo(x, AXIS_H); ctx.lineTo(x, H); ctx.stroke();
    }
    const counts = [0, 0];
    for (const row of rows) {
      const top = row.y - scroll;
      if (top + row.h < AXIS_H || top > H) { if (row.kind === "lane") counts[row.lane] += countLane(row.lane); continue; }
      ctx.save();
      ctx.beginPath(); ctx.rect(0, Math.max(top, AXIS_H), W, row.h); ctx.clip();
      if (row.kind === "curve") drawCurve(row, top);
      else if (row.kind === "lane") drawLane(row, top, counts);
      else drawCall(row, top);
      ctx.fillStyle = row.kind === "call" ? C.text : "#0f172a";
      ctx.font = (row.kind === "call" ? "11px ui-monospace, monospace" : "bold 11px system-ui");
      const label = row.kind === "call" ? "  ".repeat(Math.min(row.call.depth, 6)) + row.label : row.label;
      ctx.fillText(label.length > 20 ? label.slice(0, 19) + "…" : label, 6, top + 14);
      if (row.kind === "lane" && row.h >= 34) { ctx.fillStyle = C.muted; ctx.font = "10px system-ui"; ctx.fillText(laneTracks[row.lane] + " tracks", 6, top + 26); }
      ctx.strokeStyle = C.grid; ctx.beginPath(); ctx.moveTo(0, top + row.h - 0.5); ctx.lineTo(W, top + row.h - 0.5); ctx.stroke();
      ctx.restore();
    }
    // the axis stays on top while the rows scroll
    ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, W, AXIS_H);
    ctx.fillStyle = C.muted; ctx.font = "11px system-ui";
    for (let t = Math.ceil(v0 / step) * step; t <= v1; t += step) ctx.fillText(secs(+t.toPrecision(12)), X(t) + 3, 14);
    ctx.strokeStyle = C.line || "#e2e8f0"; ctx.beginPath(); ctx.moveTo(0, AXIS_H - 0.5); ctx.lineTo(W, AXIS_H - 0.5); ctx.stroke();
    if (drag && Math.abs(drag.x1 - drag.x0) > 2) {
      ctx.fillStyle = "rgba(37,99,235,0.12)";
      ctx.fillRect(Math.min(drag.x0, drag.x1), AXIS_H, Math.abs(drag.x1 - drag.x0), H - AXIS_H);
    }
    box.dataset.bars = counts[0] + counts[1];
    box.dataset.barsRoot = counts[0];
    box.dataset.barsSub = counts[1];
    box.dataset.v0 = v0;
    box.dataset.v1 = v1;
    document.getElementById("tl-range").textContent = secs(v0) + " – " + secs(v1);
  }
  function countLane(lane) {  // bars of a lane scrolled out of sight still count as drawn rows
    let n = 0;
    for (let i = 0; i < nAttempts; i++) if (A.lane[i] === lane && A.end[i] >= v0 && A.sent[i] <= v1) n++;
    return n;
  }

  function resize() {
    dpr = window.devicePixelRatio || 1;
    W = Math.max(400, box.clientWidth);
    H = Math.max(100, box.clientHeight);
    canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);
    canvas.style.width = W + "px"; canvas.style.height = H + "px";
    draw();
  }

  // -- hover, zoom, click -------------------------------------------------------------------------
  function rowAt(yy) {
    const abs = yy + box.scrollTop;
    for (const row of rows) if (abs >= row.y && abs < row.y + row.h) return row;
    return null;
  }
  function attemptText(i) {
    const statusNames = {"-1": "no answer in the trace", 0: "ok", 1: "error", 2: "cancelled", 3: "429 rate limited"};
    const lines = ["request " + A.request_id[i] + " · attempt " + A.attempt[i] + " · " + (A.lane[i] ? "sub" : "root") + " lane",
      "call " + A.call_id[i] + (A.step[i] ? " (a step)" : " (a sub-query it asked for)"),
      "queued " + secs(A.paced[i] - A.queued[i]) + " · pacing " + secs(A.sent[i] - A.paced[i]) + " · in flight " + secs(A.end[i] - A.sent[i]),
      "sent at " + secs(A.sent[i]) + " · " + statusNames[A.status[i]] + (A.http[i] ? " (HTTP " + A.http[i] + ")" : "") +
        (A.ttft && A.ttft[i] !== null && A.ttft[i] !== undefined ? " · first token after " + secs(A.ttft[i]) : ""),
      num(A.input_tokens[i]) + " in / " + num(A.output_tokens[i]) + " out tokens · " + usd(A.cost[i])];
    if (A.error[i]) lines.push(String(A.error[i]).slice(0, 300));
    return lines.join("\n");
  }
  function near(t0, t1, t, slack) { return t >= t0 - slack && t <= t1 + slack; }

  function hit(x, yy) {
    const row = rowAt(yy);
    if (!row || x < LABEL_W) return row && row.kind === "call" ? {row, text: "call " + row.call.id + " · " + row.call.status} : null;
    const t = T(x), slack = (v1 - v0) / (W - LABEL_W) * 2;
    const top = row.y - box.scrollTop;
    if (row.kind === "curve") {
      const at = (pts) => { let v = 0; for (const [pt, n] of pts) { if (pt > t) break; v = n; } return v; };
      const cap = tl.capacity.length ? at(tl.capacity) + rootPermits : null;
      return {row, text: "at " + secs(t) + "\nin flight " + at(tl.in_flight) + (cap !== null ? " · capacity " + cap : "") +
        (tl.max_concurrent ? " · max concurrent " + tl.max_concurrent : "") + "\nwaiting for a permit or slot " + at(waiting)};
    }
    if (row.kind === "lane") {
      const k = Math.floor((yy - top - 4) / row.th);
      let found = -1;
      for (let i = 0; i < nAttempts; i++) {
        if (A.lane[i] === row.lane && track[i] === k && near(A.queued[i], A.end[i], t, slack)) {
          found = i;
          if (near(A.sent[i], A.end[i], t, slack)) break;
        }
      }
      return found >= 0 ? {row, text: attemptText(found)} : null;
    }
    const call = row.call;
    for (const i of stepsOf.get(call.id) || []) if (near(A.queued[i], A.end[i], t, slack)) return {row, text: "step of " + attemptText(i)};
    for (const i of execsOf.get(call.id) || []) {
      const e = tl.execs;
      if (near(e.t0[i], e.t1[i], t, slack)) return {row, text: "code block " + e.block[i] + " of step " + e.iteration[i] + " · " + (e.ok[i] ? "ok" : "failed") + "\nran " + secs(e.t1[i] - e.t0[i]) + " from " + secs(e.t0[i])};
    }
    for (const i of sandboxesOf.get(call.id) || []) {
      const s = tl.sandboxes;
      if (near(s.t0[i], s.t1[i], t, slack)) return {row, text: "sandbox start (pid " + s.pid[i] + ")\n" + secs(s.t1[i] - s.t0[i]) + ", ready at " + secs(s.t1[i])};
    }
    for (const i of bridgesOf.get(call.id) || []) {
      const b = tl.bridges;
      if (near(b.t0[i], b.t1[i], t, slack)) return {row, text: "bridge call × " + num(b.items[i]) + " items · " + (b.failed[i] || 0) + " failed\n" + secs(b.t1[i] - b.t0[i])};
    }
    return {row, text: "call " + call.id + " · " + call.status + " · " + secs(call.duration_s)};
  }

  canvas.addEventListener("mousemove", (ev) => {
    const r = canvas.getBoundingClientRect();
    const x = ev.clientX - r.left, yy = ev.clientY - r.top;
    if (drag) { drag.x1 = Math.max(LABEL_W, Math.min(W - PAD_R, x)); draw(); return; }
    const h = yy > AXIS_H ? hit(x, yy) : null;
    if (!h) { tip.hidden = true; return; }
    tip.textContent = h.text;
    tip.hidden = false;
    tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - 390) + "px";
    tip.style.top = (ev.clientY + 14) + "px";
  });
  canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
  canvas.addEventListener("mousedown", (ev) => {
    const x = ev.clientX - canvas.getBoundingClientRect().left;
    if (x >= LABEL_W) drag = {x0: x, x1: x};
  });
  window.addEventListener("mouseup", (ev) => {
    if (!drag) return;
    const {x0, x1} = drag;
    drag = null;
    if (Math.abs(x1 - x0) > 4) { zoomTo(T(Math.min(x0, x1)), T(Math.max(x0, x1))); return; }
    const r = canvas.getBoundingClientRect();
    const row = rowAt(ev.clientY - r.top);
    if (row && row.kind === "call") R.select(row.call.id, true);
    draw();
  });
  function zoomTo(a, b) {
    const span = Math.max(b - a, END * 1e-6, 1e-6);
    v0 = Math.max(0, a); v1 = Math.min(END, v0 + span);
    if (v1 - v0 < span) v0 = Math.max(0, v1 - span);
    draw();
  }
  function zoomBy(f) { const c = (v0 + v1) / 2, half = (v1 - v0) / 2 * f; zoomTo(c - half, c + half); }
  document.getElementById("tl-in").addEventListener("click", () => zoomBy(0.5));
  document.getElementById("tl-out").addEventListener("click", () => zoomBy(2));
  document.getElementById("tl-reset").addEventListener("click", () => zoomTo(0, END));
  canvas.addEventListener("dblclick", () => zoomTo(0, END));
  canvas.addEventListener("wheel", (ev) => {
    if (!ev.ctrlKey && !ev.metaKey) return;  // plain wheel scrolls the rows
    ev.preventDefault();
    const x = ev.clientX - canvas.getBoundingClientRect().left;
    const t = T(Math.max(LABEL_W, x)), f = ev.deltaY > 0 ? 1.5 : 1 / 1.5;
    zoomTo(t - (t - v0) * f, t + (v1 - t) * f);
  }, {passive: false});
  box.addEventListener("scroll", () => requestAnimationFrame(draw));
  window.addEventListener("resize", resize);

  function legend() {
    const item = (color, text) => el("span", {}, el("i", {style: "background:" + color}), text);
    document.getElementById("tl-legend").append(
      item(C.queued, "queued for a permit"), item(C.pacing, "pacing wait"), item(C.root, "root step in flight"),
      item(C.sub, "sub-lane request in flight"), item(C.r429, "429"), item(C.error, "error"), item(C.backoff, "retry back-off"),
      item(C.exec, "code"), item(C.sandbox, "sandbox start"), item(C.bridge, "bridge call"),
      item(C.inflight, "in flight"), item(C.capacity, "capacity"),
      el("span", {}, num(nAttempts) + " attempts · " + num(new Set(A.request_id).size) + " requests · peak " + peakInFlight + " in flight" +
        (peakWaiting ? " · peak " + num(peakWaiting) + " waiting" : "")));
  }

  R.renderTimeline = function () { legend(); resize(); };
  R.onSelect = () => requestAnimationFrame(draw);
})(window.RLM);
