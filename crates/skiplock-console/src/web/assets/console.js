// skiplock console: the only script. Pages work without it; it adds two things.
// 1. Auto-refresh of pages marked <main data-refresh="SECONDS">: the page is fetched again
//    and its <main> swapped in, unless the operator is typing or has turned it off.
// 2. A confirmation before buttons marked data-confirm="…".
(function () {
  "use strict";
  var main = document.querySelector("main[data-refresh]");
  var box = document.getElementById("auto-refresh");
  if (main && box) {
    var key = "skiplock.autorefresh";
    box.checked = localStorage.getItem(key) !== "off";
    box.addEventListener("change", function () { localStorage.setItem(key, box.checked ? "on" : "off"); });
    var every = Math.max(2, parseInt(main.getAttribute("data-refresh"), 10) || 5) * 1000;
    setInterval(function () {
      if (!box.checked || document.hidden) return;
      var a = document.activeElement;
      if (a && (a.tagName === "INPUT" || a.tagName === "SELECT" || a.tagName === "TEXTAREA")) return;
      fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (!html) return;
          var next = new DOMParser().parseFromString(html, "text/html").querySelector("main");
          var cur = document.querySelector("main");
          if (next && cur) { cur.innerHTML = next.innerHTML; }
          var stamp = document.getElementById("refreshed");
          if (stamp) { stamp.textContent = new Date().toLocaleTimeString(); }
        })
        .catch(function () {});
    }, every);
  }
  document.addEventListener("submit", function (e) {
    var b = e.submitter || e.target.querySelector("[data-confirm]");
    var msg = b && b.getAttribute && b.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) { e.preventDefault(); }
  });
})();
