// Refreshes the overview's counts every 2 s from /ui/stats.
(function () {
  function dur(sec) { return sec < 1 ? Math.round(sec * 1000) + "ms" : sec.toFixed(1) + "s"; }
  function mb(n) { return (n / 1048576).toFixed(1) + " MB"; }
  function memory(r) {
    return r.maxmemory > 0 ? mb(r.used_memory) + " of " + mb(r.maxmemory) + " (" + Math.round(100 * r.used_memory / r.maxmemory) + " %)" : mb(r.used_memory) + ", no limit";
  }
  function set(id, v) { var e = document.getElementById(id); if (e) { e.textContent = v; } }
  // The fleet's rates: the last interval's value and a sparkline, drawn as
  // the server draws them (console/rates.go).
  function latenessText(ms, over) {
    if (ms === null || ms === undefined) { return "-"; }
    var t = ms >= 1000 ? (ms / 1000) + "s" : ms + "ms";
    return (over ? "> " : "≤ ") + t;
  }
  function spark(id, v) {
    var e = document.getElementById("s-" + id);
    if (!e) { return; }
    var top = Math.max.apply(null, v.concat([0])), pts = [];
    v.forEach(function (x, j) {
      var px = v.length > 1 ? j * 120 / (v.length - 1) : 0;
      var py = top > 0 ? 27 - x / top * 26 : 27;
      pts.push(px.toFixed(1) + "," + py.toFixed(1));
    });
    e.setAttribute("points", pts.join(" "));
  }
  function rates(r) {
    var p = r.points || [], last = p[p.length - 1];
    [["enqueued", "enqueued_per_second"], ["published", "published_per_second"], ["dead", "dead_per_second"]].forEach(function (m) {
      set("r-" + m[0], last ? last[m[1]].toFixed(1) + "/s" : "-");
      spark(m[0], p.map(function (x) { return x[m[1]]; }));
    });
    set("r-lateness", last ? latenessText(last.lateness_p99_ms, last.lateness_p99_over) : "-");
    if (last) {
      var sec = Math.round(r.sampled_seconds), span = sec >= 60 ? Math.floor(sec / 60) + "m" + (sec % 60) + "s" : sec + "s";
      set("rates-window", "the last " + span + ": " + r.published_per_second.toFixed(1) +
        "/s published, lateness p99 " + latenessText(r.lateness_p99_ms, r.lateness_p99_over));
    }
    spark("lateness", p.map(function (x) { return x.lateness_p99_ms || 0; }));
  }
  function shardRows(sel, shards) {
    var body = document.querySelector(sel);
    if (!body) { return; }
    body.innerHTML = "";
    shards.forEach(function (r) {
      var tr = document.createElement("tr");
      [r.shard, r.scheduled, r.due_now, r.in_flight, r.dead, dur(r.oldest_overdue_seconds), r.next_due || ""].forEach(function (v) {
        var td = document.createElement("td"); td.textContent = v; tr.appendChild(td);
      });
      body.appendChild(tr);
    });
  }
  function skew(shards) {
    var total = 0, fullest = shards[0];
    shards.forEach(function (r) { total += r.scheduled; if (r.scheduled > fullest.scheduled) { fullest = r; } });
    if (total === 0) { return shards.length + " shards, none holds a scheduled message."; }
    var mean = total / shards.length;
    return shards.length + " shards, " + Math.round(mean) + " scheduled each on average; the fullest, shard " + fullest.shard +
      ", holds " + fullest.scheduled + " (" + (fullest.scheduled / mean).toFixed(1) + "× the average).";
  }
  function refresh() {
    fetch("/ui/stats", { credentials: "same-origin" }).then(function (r) { return r.ok ? r.json() : null; }).then(function (s) {
      if (!s) { return; }
      set("t-scheduled", s.total.scheduled); set("t-due", s.total.due_now); set("t-inflight", s.total.in_flight);
      set("t-dead", s.total.dead); set("t-overdue", dur(s.total.oldest_overdue_seconds)); set("t-far", s.total.far || 0);
      shardRows("#shards tbody", s.shards);
      if (document.getElementById("busiest")) { // many shards: the busiest and the spread, as console/shards.go has them
        shardRows("#busiest tbody", s.shards.slice().sort(function (a, b) {
          return (b.due_now - a.due_now) || (b.scheduled - a.scheduled) || (a.shard - b.shard);
        }).slice(0, 8));
        set("shard-skew", skew(s.shards));
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
      if (s.rates) { rates(s.rates); }
      set("updated", "Updated " + new Date().toLocaleTimeString() + ".");
    }).catch(function () {});
  }
  setInterval(refresh, 2000);
})();
