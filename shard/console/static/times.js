// Adds the browser's local time beside each UTC time the page shows.
(function () {
  document.querySelectorAll("time[datetime]").forEach(function (t) {
    var d = new Date(t.getAttribute("datetime"));
    if (isNaN(d)) { return; }
    var s = document.createElement("span");
    s.className = "local";
    s.textContent = " · " + d.toLocaleString() + " local";
    t.after(s);
  });
})();
