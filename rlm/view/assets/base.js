"use strict";
// Shared helpers of the rlm view page: DOM building, number formats, folded texts.
// Everything lives on window.RLM; no network, no dependencies.
window.RLM = (function () {
  const data = JSON.parse(document.getElementById("rlm-data").textContent);
  let blobs = null;  // the compressed full texts, parsed on the first unfold

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const nf = new Intl.NumberFormat("en-US");
  function num(n) { return n === null || n === undefined ? "—" : nf.format(n); }
  // "1 iteration", "2 iterations": a count with its noun in the right number.
  function count(n, noun, nouns = noun + "s") { return num(n) + " " + (n === 1 ? noun : nouns); }
  function secs(s) {
    if (s === null || s === undefined || isNaN(s)) return "—";
    const a = Math.abs(s);
    if (a === 0) return "0 s";
    if (a < 0.001) return (s * 1e6).toFixed(0) + " µs";
    if (a < 1) return (s * 1000).toFixed(a < 0.01 ? 2 : a < 0.1 ? 1 : 0) + " ms";
    if (a < 120) return s.toFixed(a < 10 ? 2 : 1) + " s";
    return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
  }
  function usd(c) {
    if (c === null || c === undefined) return "—";
    if (c === 0) return "$0";
    return "$" + (c < 0.01 ? c.toPrecision(2) : c.toFixed(c < 1 ? 4 : 2));
  }
  function textLength(value) {
    if (value === null || value === undefined) return 0;
    return typeof value === "string" ? value.length : value.n;
  }
  function plain(value) {  // the inline part of a text, for one-line previews
    if (value === null || value === undefined) return "";
    return typeof value === "string" ? value : value.head;
  }

  async function inflate(index) {
    if (blobs === null) blobs = JSON.parse(document.getElementById("rlm-blobs").textContent);
    const bytes = Uint8Array.from(atob(blobs[index]), (ch) => ch.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return await new Response(stream).text();
  }

  // A text as the page shows it: short ones whole, long ones folded with their full length.
  function textView(value, opts) {
    const o = opts || {};
    const cls = o.cls || "";
    if (value === null || value === undefined) {
      return o.absent === false ? null : el("div", {class: "absent", text: o.absent || "not recorded in this trace"});
    }
    if (typeof value === "string") return el("pre", {class: cls}, value);
    const pre = el("pre", {class: cls}, value.head);
    const wrap = el("div", {class: "folded"}, pre);
    if (value.b >= 0) {
      const btn = el("button", {class: "fold-btn", type: "button",
        onclick: async () => {
          btn.disabled = true;
          btn.textContent = "unfolding…";
          try {
            pre.textContent = await inflate(value.b);
            btn.remove();
          } catch (err) {
            btn.textContent = "could not unfold: " + err;
          }
        }}, "… show all " + num(value.n) + " chars");
      wrap.append(btn);
    } else {
      pre.append("\n\n[… " + num(value.n - value.head.length - value.tail.length) +
        " chars only in the trace file …]\n\n" + value.tail);
      wrap.append(el("div", {class: "absent", text: num(value.n) + " chars in all; the middle is in the trace file"}));
    }
    return wrap;
  }

  function badge(status) { return el("span", {class: "badge " + (status || "")}, status || "unknown"); }

  return {data, el, num, count, secs, usd, textView, textLength, plain, badge};
})();
