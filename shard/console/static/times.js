// Adds the browser's local time beside each UTC time the page shows.
(function () {
  document.querySelectorAll("time[datetime]").forEach(function (t) {
    var d = new Date(t.getAttribute("datetime"));
    if (isNaN(d)) { return; }
    var s = document.createElement("span");
    s.className = "local";
    s.textContent = "· " + d.toLocaleString() + " local";
    // The space outside the span lets a narrow screen put the local time
    // on its own line (the span itself does not wrap).
    t.after(document.createTextNode(" "), s);
  });
})();
// The due chart's bars: each tooltip gets its window in local time too.
(function () {
  document.querySelectorAll("#due-chart rect.bar").forEach(function (r) {
    var from = new Date(r.dataset.from), to = new Date(r.dataset.to), t = r.querySelector("title");
    if (isNaN(from) || isNaN(to) || !t) { return; }
    t.textContent += " (" + from.toLocaleString() + " - " + to.toLocaleTimeString() + " local)";
  });
})();
