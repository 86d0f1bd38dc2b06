"use strict";
// Overview, "where the time went", the call tree and a call's steps.
(function (R) {
  const {data, el, num, count, secs, usd, textView, textLength, plain, badge} = R;
  const run = data.run;
  const calls = data.calls;
  const byId = new Map(calls.map((c) => [c.id, c]));
  // Why a text is missing: the run chose --trace-content meta, or its rlm wrote no content.
  const ABSENT = run.content === "meta" ? "not recorded (this run used --trace-content meta)"
    : run.content === "full" ? "not recorded" : "not in this trace (it was written by an rlm that recorded no content)";
  const attempts = data.timeline.attempts;
  const attemptsOf = new Map();  // request_id -> attempt rows
  (attempts.request_id || []).forEach((rid, row) => {
    if (!attemptsOf.has(rid)) attemptsOf.set(rid, []);
    attemptsOf.get(rid).push(row);
  });
  R.byId = byId;

  // -- overview -------------------------------------------------------------------------
  function stat(label, value, sub) {
    return el("div", {class: "stat"}, el("div", {class: "label"}, label),
      el("div", {class: "value"}, value), sub ? el("div", {class: "sub"}, sub) : null);
  }

  function settingChips(config) {
    const keys = [["model", "model"], ["sub_model", "sub-model"], ["provider", "provider"],
      ["max_depth", "max depth"], ["max_iterations", "max iterations"],
      ["max_concurrent", "max concurrent"], ["root_permits", "root permits"], ["rpm", "rpm"],
      ["tpm", "tpm"], ["burst", "burst"], ["max_retries", "max retries"], ["adaptive", "adaptive"],
      ["max_llm_calls", "max LLM calls"], ["max_input_tokens", "max input tokens"],
      ["max_output_tokens", "max output tokens"], ["max_total_tokens", "max total tokens"],
      ["max_cost", "max cost $"], ["timeout", "timeout s"], ["exec_timeout", "exec timeout s"]];
    const chips = [];
    for (const [key, label] of keys) {
      const v = config[key];
      if (v === null || v === undefined || v === "") continue;
      chips.push(el("span", {class: "chip", title: key}, label + " " + v));
    }
    return chips;
  }

  function volleyAnswers(summary) {
    return num(summary.succeeded) + " of " + num(summary.total_tasks) + " tasks answered" +
      (summary.failed ? ", " + num(summary.failed) + " failed" : "") +
      ": each task's answer is under its call below";
  }

  function renderOverview() {
    const status = run.status || "unfinished";
    document.getElementById("run-status").replaceWith(Object.assign(badge(status), {id: "run-status"}));
    document.getElementById("run-source").textContent = data.source + (run.wall_time ? " · started " + run.wall_time : "");
    if (run.kind === "volley") document.getElementById("run-kind").textContent = "rlm volley " + (run.volley_id || "");
    const notices = document.getElementById("notices");
    for (const text of data.notices) notices.append(el("div", {class: "notice"}, text));
    const tokens = num(run.input_tokens) + " in / " + num(run.output_tokens) + " out";
    const section = document.getElementById("overview");
    section.append(
      el("div", {class: "qa"},
        el("div", {class: "k"}, "Query"), textView(run.query, {absent: "no run_started event"}),
        el("div", {class: "k"}, run.kind === "volley" ? "Answers" : "Answer"),
        run.kind === "volley"
          ? el("div", {class: "muted"}, volleyAnswers(run.summary || {}))
          : textView(run.answer, {absent: run.content === "meta" ? ABSENT : "no answer"}),
        run.error ? el("div", {class: "k"}, "Error") : null,
        run.error ? el("pre", {class: "err"}, run.error) : null,
        run.system_prompt ? el("div", {class: "k"}, "System prompt") : null,
        run.system_prompt ? el("details", {id: "system-prompt"}, el("summary", {}, num(textLength(run.system_prompt)) + " chars, sent at the start of every call"),
          textView(run.system_prompt)) : null),
      el("div", {class: "grid"},
        stat("Status", badge(status)),
        stat("Duration", secs(run.duration_s === undefined || run.duration_s === null ? data.timeline.end : run.duration_s)),
        stat("LLM calls", num(run.llm_calls), count(run.requests, "request") + " · " + count(run.attempts, "attempt") +
          ((run.cached_requests || []).length ? " · " + num(run.cached_requests.length) + " from cache" : "")),
        stat("Tokens", tokens, num(run.cached_tokens) + " cached input"),
        stat("Cost", usd(run.cost), run.unpriced_calls ? num(run.unpriced_calls) + " unpriced calls" : null),
        stat("Calls", num(run.calls), "deepest at depth " + calls.reduce((m, c) => Math.max(m, c.depth), 0)),
        stat("Context", num(run.context_chars) + " chars", run.context_docs > 1 ? num(run.context_docs) + " documents" : null)),
      el("div", {class: "settings", id: "settings"}, settingChips(run.config || {})),
      el("div", {class: "settings", id: "isolation"},
        el("span", {class: "muted"}, "Isolation layers:"),
        run.isolation.length ? run.isolation.map((l) => el("span", {class: "chip layer"}, l))
          : el("span", {class: "absent"}, "no sandbox was started")));
  }

  // -- where the time went ----------------------------------------------------------------
  function barList(rows, total) {
    const box = el("div", {class: "bars"});
    for (const [label, value, title] of rows) {
      if (value === undefined || value === null) continue;
      const pct = total > 0 ? Math.min(100, 100 * value / total) : 0;
      box.append(el("div", {title: title || ""}, label),
        el("div", {class: "track"}, el("div", {class: "fill", style: "width:" + pct.toFixed(2) + "%"})),
        el("div", {class: "num"}, secs(value)));
    }
    return box;
  }

  function renderTime() {
    const t = data.time;
    const root = t.root;
    const bench = t.bench;
    const summary = run.summary || {};
    const left = run.kind === "volley" ? el("div", {}, el("h3", {}, "The volley's tasks"),
      el("div", {class: "muted"}, num(summary.succeeded) + " succeeded · " + num(summary.failed) + " failed · " +
        num(summary.cancelled) + " cancelled · " + count(summary.total_retries, "retry", "retries") + " · at most " +
        num(summary.max_concurrent_used) + " at once")) : el("div", {},
      el("h3", {}, "The root call's wall time"),
      barList([
        ["root-model steps", root.root_steps_s, "root steps: queued + pacing + in flight"],
        ["fan-out (bridge calls)", root.fan_out_s, "llm_query / llm_query_batched waiting for sub-queries and child calls"],
        ["code", root.code_s, "REPL code outside bridge calls"],
        ["retry back-off", root.retry_backoff_s, "waiting before a root step was retried"],
        ["other", root.other_s, "scheduling, sandbox teardown, anything not above"],
        ["sandbox start", root.sandbox_start_s, "overlaps the first step (it starts while the model thinks)"]], t.t));
    const rightRows = [["run T", t.t, "run start to run_finished"]];
    if (bench.t_star !== undefined) {
      rightRows.push(["physical limit T*", bench.t_star, "the same work on a zero-overhead runtime with the latencies this run saw (as rlm bench)"],
        ["start-up", bench.startup_s, "run start to the first sub-query, minus root steps"],
        ["fan-out overhead", bench.fanout_overhead_s, "T − T* − start-up − tail"],
        ["tail", bench.tail_s, "last sub-query to the end, minus root steps"]);
    }
    if (bench.skipped) {
      rightRows.push(["start-up", bench.startup_s, "run start to the first sub-query, minus root steps"],
        ["tail", bench.tail_s, "last sub-query to the end, minus root steps"]);
    }
    rightRows.push(["queue wait (all attempts)", t.queue_wait_s, "summed over attempts: waiting for a permit"],
      ["pacing wait (all attempts)", t.pace_wait_s, "summed: waiting for an rpm/tpm slot"],
      ["back-off (all retries)", t.backoff_s, "summed: back-off before retries"]);
    const right = el("div", {},
      el("h3", {}, bench.eta !== undefined ? "Against the physical limit (an rlm bench run)" : "Waits and retries"),
      bench.eta !== undefined && bench.eta !== null
        ? el("div", {class: "muted"}, "η = T*/T = " + bench.eta.toFixed(3) + " · " + num(bench.n_sub) + " sub-lane requests · " +
          num(t.retries) + " retries · " + num(t.rate_limited) + " × 429")
        : el("div", {class: "muted"}, num(t.retries) + " retries · " + num(t.rate_limited) + " × 429" +
          (bench.skipped ? " · T* is not replayed for runs over 2,000 requests (" + num(bench.skipped) + " here): rlm bench measures it" : "")),
      barList(rightRows, Math.max(t.t, t.queue_wait_s > t.t ? 0 : t.t)));
    document.getElementById("time").append(el("div", {class: "section-head"}, el("h2", {}, "Where the time went")),
      el("div", {class: "time-cols"}, left, right));
  }

  // -- the call tree ------------------------------------------------------------------------
  const childrenOf = new Map();
  const roots = [];
  for (const c of calls) {
    if (c.parent !== null && byId.has(c.parent)) {
      if (!childrenOf.has(c.parent)) childrenOf.set(c.parent, []);
      childrenOf.get(c.parent).push(c);
    } else {
      roots.push(c);
    }
  }
  const nodes = new Map();

  function nodeFor(call) {
    const kids = childrenOf.get(call.id) || [];
    const steps = call.steps.length;
    const label = el("div", {class: "node", role: "treeitem", "data-call": call.id, tabindex: "-1",
      onclick: () => select(call.id, true)},
      el("span", {class: "twist"}, kids.length ? "▾" : ""),
      el("span", {class: "dot " + call.status, title: call.status}),
      el("span", {class: "id"}, call.id),
      el("span", {class: "meta"}, [count(steps, "step"), secs(call.duration_s),
        num(call.llm_calls) + " LLM", num(call.input_tokens + call.output_tokens) + " tok"].join(" · ")));
    nodes.set(call.id, label);
    const li = el("li", {}, label);
    if (kids.length) {
      const ul = el("ul", {role: "group"}, kids.map(nodeFor));
      li.append(ul);
      label.firstChild.addEventListener("click", (ev) => {
        ev.stopPropagation();
        ul.hidden = !ul.hidden;
        label.firstChild.textContent = ul.hidden ? "▸" : "▾";
      });
    }
    return li;
  }

  function renderTree() {
    const tree = document.getElementById("tree");
    tree.append(el("ul", {role: "tree"}, roots.map(nodeFor)));
    document.getElementById("calls-count").textContent = count(calls.length, "call") +
      (roots.length > 1 ? " · " + roots.length + " roots" : "");
  }

  // -- one call's steps ------------------------------------------------------------------------
  function callLink(id) {
    return el("a", {class: "call-link", onclick: () => select(id, true)}, id);
  }

  // A row of small labels; each its own element so the row's gap separates them.
  function labelRow(...parts) {
    return el("div", {class: "label-row"}, parts.filter((p) => p !== null).map((p) => p instanceof Node ? p : el("span", {}, p)));
  }

  function blockView(block) {
    const state = block.ok ? "ok" : "failed";
    return el("div", {class: "block " + (block.ok ? "" : "failed ") + (block.final ? "final" : ""), "data-block": block.block},
      labelRow(el("b", {}, "code block " + block.block), badge(state), secs(block.duration_s),
        num(block.output_chars) + " chars printed", block.final ? el("b", {}, "→ FINAL") : null),
      textView(block.code, {cls: "code", absent: "code " + ABSENT}),
      textLength(block.output) ? el("div", {class: "label-row"}, "output" + (textLength(block.output) < block.output_chars ? " (first " + num(textLength(block.output)) + " of " + num(block.output_chars) + " chars)" : "")) : null,
      textLength(block.output) ? textView(block.output, {cls: "output"}) : null,
      block.error ? el("div", {class: "label-row"}, "error") : null,
      block.error ? textView(block.error, {cls: "err"}) : null);
  }

  const cached = new Set(run.cached_requests || []);
  function attemptSummary(rid) {
    const rows = attemptsOf.get(rid) || [];
    if (!rows.length) return ["—", "—", cached.has(rid) ? "from cache" : "—"];
    const last = rows[rows.length - 1];
    const statusNames = {"-1": "no answer", 0: "ok", 1: "error", 2: "cancelled", 3: "429"};
    const status = statusNames[attempts.status[last]] + (rows.length > 1 ? " after " + rows.length + " attempts" : "");
    return [secs(attempts.end[last] - attempts.sent[last]),
      num(attempts.input_tokens[last]) + " / " + num(attempts.output_tokens[last]), status];
  }

  function itemsTable(bridge) {
    const n = Math.max(bridge.requests.length, bridge.prompts ? bridge.prompts.length : 0);
    if (!n) return null;
    const table = el("table", {class: "items"},
      el("colgroup", {}, el("col", {style: "width:40px"}), el("col", {}), el("col", {}),
        el("col", {style: "width:70px"}), el("col", {style: "width:90px"}), el("col", {style: "width:90px"})),
      el("thead", {}, el("tr", {}, ["#", "prompt", "answer", "latency", "tokens in/out", "status"].map((h) => el("th", {}, h)))));
    const body = el("tbody");
    table.append(body);
    let shown = 0;
    const more = el("button", {type: "button"});
    function addRows(rows) {
      const stop = Math.min(n, shown + rows);
      for (let i = shown; i < stop; i++) {
        const rid = bridge.requests[i];
        const [lat, tok, status] = rid === undefined ? ["—", "—", "—"] : attemptSummary(rid);
        body.append(el("tr", {},
          el("td", {}, i + 1),
          el("td", {}, bridge.prompts ? textView(bridge.prompts[i], {absent: "—"}) : el("span", {class: "absent"}, ABSENT)),
          el("td", {}, bridge.answers ? textView(bridge.answers[i], {absent: "—"}) : el("span", {class: "absent"}, ABSENT)),
          el("td", {}, lat), el("td", {}, tok), el("td", {}, status)));
      }
      shown = stop;
      more.textContent = "show " + num(Math.min(200, n - shown)) + " more of " + num(n - shown);
      more.hidden = shown >= n;
    }
    more.addEventListener("click", () => addRows(200));
    addRows(50);
    const hidden = bridge.items - n;
    return el("div", {}, table, more,
      hidden > 0 ? el("div", {class: "absent"}, "the page lists the first " + num(n) + " items; the other " + num(hidden) + " are in the trace") : null);
  }

  function bridgeView(bridge) {
    const kids = bridge.children || [];
    return el("div", {class: "bridge", "data-bridge": bridge.bridge_id},
      labelRow(el("b", {}, bridge.fn + " × " + num(bridge.items)), bridge.mode,
        bridge.speculative ? (bridge.cancelled ? "sent ahead, cancelled (not needed)" : "sent ahead") : null,
        secs(bridge.duration_s), bridge.cancelled ? null : (bridge.failed_items || 0) + " failed"),
      kids.length ? el("div", {}, "child calls: ", kids.slice(0, 300).map((id, i) => [i ? ", " : "", callLink(id)]),
        kids.length > 300 ? " … and " + num(kids.length - 300) + " more (in the tree)" : "") : null,
      itemsTable(bridge));
  }

  // A step's bridge calls, a page at a time: a loop of thousands of llm_query calls would
  // otherwise build hundreds of thousands of elements and take the browser many seconds.
  const BRIDGE_PAGE = 50;
  function bridgesView(bridges) {
    if (!bridges.length) return null;
    const box = el("div", {class: "bridges"});
    const more = el("button", {type: "button", class: "more-bridges"});
    let shown = 0;
    function add(n) {
      const stop = Math.min(bridges.length, shown + n);
      for (let i = shown; i < stop; i++) box.insertBefore(bridgeView(bridges[i]), more);
      shown = stop;
      more.textContent = "show " + num(Math.min(BRIDGE_PAGE, bridges.length - shown)) +
        " more of " + count(bridges.length - shown, "bridge call");
      more.hidden = shown >= bridges.length;
    }
    box.append(more);
    more.addEventListener("click", () => add(BRIDGE_PAGE));
    add(BRIDGE_PAGE);
    return box;
  }

  // Loops whose llm_query calls auto-batching sent ahead (loop_batched events).
  function loopsView(loops) {
    if (!loops || !loops.length) return null;
    return el("div", {class: "loops"}, loops.map((loop) =>
      el("div", {class: "loop", "data-loop": loop.loop},
        labelRow(el("b", {}, "loop at line " + loop.line + " ran concurrently"),
          count(loop.calls, "call") + " sent ahead", num(loop.used) + " used",
          num(loop.cancelled) + " cancelled", "window " + num(loop.window), secs(loop.duration_s)))));
  }

  function requestView(request) {
    if (!request) return null;
    return el("details", {},
      el("summary", {}, "request: " + num(request.reused) + " messages sent before + " + num(request.new.length) + " new"),
      request.new.map((m) => el("div", {class: "message"}, el("div", {class: "label-row"}, el("b", {}, m.role)),
        m.ref === "system_prompt" ? el("div", {class: "absent"}, "the system prompt (in the overview)")
          : m.ref === "reply" ? el("div", {class: "absent"}, "the previous step's reply (above)")
            : textView(m.content))));
  }

  // What of a step's input the provider's prompt cache served (read) and stored (written).
  function cacheNote(step) {
    const parts = [];
    if (step.cached_input_tokens) parts.push(num(step.cached_input_tokens) + " from the prompt cache");
    if (step.cache_write_tokens) parts.push(num(step.cache_write_tokens) + " written to it");
    return parts.length ? " (" + parts.join(", ") + ")" : "";
  }

  function stepView(call, step, index) {
    const isLast = index === call.steps.length - 1;
    const finalHere = isLast && call.status === "answered" && (step.has_final || step.blocks.some((b) => b.final));
    return el("div", {class: "step", "data-step": index + 1},
      el("div", {class: "step-head"}, el("span", {class: "n"}, step.forced_final ? "Forced final step" : "Step " + (step.iteration || index + 1)),
        el("span", {class: "muted"}, "at " + secs(step.t) + " · " + num(step.input_tokens) + " in" + cacheNote(step) + " / " + num(step.output_tokens) + " out · " +
          count(step.code_blocks, "code block") + (step.has_final ? " · FINAL in reply" : ""))),
      requestView(step.request),
      el("div", {class: "label-row"}, "reply" + (step.reply_chars !== undefined ? " (" + num(step.reply_chars) + " chars" +
        (step.reply_cut_chars ? ", the conversation kept all but the last " + num(step.reply_cut_chars) : "") + ")" : "")),
      textView(step.reply, {absent: "the reply's text is " + ABSENT}),
      step.blocks.map(blockView),
      loopsView(step.loops),
      bridgesView(step.bridges),
      finalHere ? el("div", {class: "final-line"}, el("b", {}, "FINAL "), textView(call.answer)) : null);
  }

  function renderDetail(call) {
    const detail = document.getElementById("detail");
    detail.replaceChildren(
      el("div", {class: "call-head"}, el("span", {class: "id"}, call.task ? "task " + call.task + " (" + call.id + ")" : call.id), badge(call.status),
        el("span", {class: "muted"}, [call.model, "depth " + call.depth, count(call.iterations, "iteration"),
          secs(call.duration_s), count(call.llm_calls, "LLM call"), num(call.input_tokens) + " in / " + num(call.output_tokens) + " out",
          usd(call.cost)].join(" · ")),
        call.parent ? el("span", {}, "parent ", callLink(call.parent)) : null),
      el("div", {class: "qa"},
        el("div", {class: "k"}, "Query"), textView(call.query),
        el("div", {class: "k"}, "Answer"), textView(call.answer, {absent: "no answer"}),
        call.error ? el("div", {class: "k"}, "Error") : null,
        call.error ? el("pre", {class: "err"}, call.error) : null),
      ...(call.steps.length ? call.steps.map((s, i) => stepView(call, s, i)) : [el("div", {class: "absent"}, "no steps recorded")]));
  }

  let selected = null;
  function select(id, scroll) {
    const call = byId.get(id);
    if (!call) return;
    if (selected && nodes.has(selected)) nodes.get(selected).classList.remove("selected");
    selected = id;
    const node = nodes.get(id);
    node.classList.add("selected");
    for (let p = node.parentElement; p && p.id !== "tree"; p = p.parentElement) {
      if (p.tagName === "UL" && p.hidden) p.hidden = false;
    }
    renderDetail(call);
    document.body.dataset.selected = id;
    R.selectedId = id;
    if (R.onSelect) R.onSelect();
    if (scroll) {
      history.replaceState(null, "", "#call=" + encodeURIComponent(id));
      document.getElementById("calls-section").scrollIntoView({block: "start"});
    }
  }
  R.select = select;

  R.renderCalls = function () {
    renderOverview();
    renderTime();
    renderTree();
    const m = /call=([^&]+)/.exec(location.hash);
    const wanted = m ? decodeURIComponent(m[1]) : null;
    if (calls.length) select(wanted && byId.has(wanted) ? wanted : roots[0].id, false);
    else document.getElementById("detail").append(el("div", {class: "absent"}, "the trace has no calls"));
  };
  R.plainText = plain;
})(window.RLM);
