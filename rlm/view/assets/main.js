"use strict";
// Draw everything, then record when the page was ready (the browser test reads it).
(function (R) {
  try {
    R.renderCalls();
    R.renderTimeline();
    document.body.dataset.ready = "1";
  } catch (err) {
    const box = document.getElementById("notices");
    box.append(R.el("div", {class: "notice"}, "This page could not draw the run: " + err));
    document.body.dataset.ready = "error";
    throw err;
  } finally {
    document.body.dataset.renderMs = performance.now().toFixed(1);
  }
})(window.RLM);
