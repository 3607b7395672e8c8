// Refreshes the overview's counts every 2 s from /ui/stats.
(function () {
  function dur(sec) { return sec < 1 ? Math.round(sec * 1000) + "ms" : sec.toFixed(1) + "s"; }
  function mb(n) { return (n / 1048576).toFixed(1) + " MB"; }
  function memory(r) {
    return r.maxmemory > 0 ? mb(r.used_memory) + " of " + mb(r.maxmemory) + " (" + Math.round(100 * r.used_memory / r.maxmemory) + " %)" : mb(r.used_memory) + ", no limit";
  }
  function set(id, v) { var e = document.getElementById(id); if (e) { e.textContent = v; } }
  function refresh() {
    fetch("/ui/stats", { credentials: "same-origin" }).then(function (r) { return r.ok ? r.json() : null; }).then(function (s) {
      if (!s) { return; }
      set("t-scheduled", s.total.scheduled); set("t-due", s.total.due_now); set("t-inflight", s.total.in_flight);
      set("t-dead", s.total.dead); set("t-overdue", dur(s.total.oldest_overdue_seconds));
      var body = document.querySelector("#shards tbody");
      if (body) {
        body.innerHTML = "";
        s.shards.forEach(function (r) {
          var tr = document.createElement("tr");
          [r.shard, r.scheduled, r.due_now, r.in_flight, r.dead, dur(r.oldest_overdue_seconds), r.next_due || ""].forEach(function (v) {
            var td = document.createElement("td"); td.textContent = v; tr.appendChild(td);
          });
          body.appendChild(tr);
        });
      }
      var redis = document.querySelector("#redis tbody");
      if (redis && s.redis) {
        redis.innerHTML = "";
        s.redis.forEach(function (r) {
          var tr = document.createElement("tr");
          var status = r.full ? "full" : r.evicts_messages ? "unsafe" : "ok";
          [r.master, memory(r), r.maxmemory_policy || "unknown", r.persistence, status].forEach(function (v, i) {
            var td = document.createElement("td"); td.textContent = v;
            if (i === 4 && status !== "ok") { td.className = "error"; }
            tr.appendChild(td);
          });
          redis.appendChild(tr);
        });
      }
      set("updated", "Updated " + new Date().toLocaleTimeString() + ".");
    }).catch(function () {});
  }
  setInterval(refresh, 2000);
})();
