// faultstream incident explorer: live update of the incident list and client-side filters.
// Every text from the server is set with textContent (never innerHTML): a log line stays text.
(function () {
  "use strict";

  function cell(spec) {
    var td = document.createElement("td");
    if (spec.cls) { td.className = spec.cls; }
    if (spec.href) {
      var a = document.createElement("a");
      a.href = spec.href;
      a.textContent = spec.text;
      td.appendChild(a);
    } else if (spec.badge) {
      var span = document.createElement("span");
      span.className = "badge " + spec.badge;
      span.textContent = spec.text;
      td.appendChild(span);
    } else {
      td.textContent = spec.text;
    }
    if (spec.sub) {
      var div = document.createElement("div");
      div.className = "muted small";
      div.textContent = spec.sub;
      td.appendChild(div);
    }
    return td;
  }

  function liveTable(table) {
    var url = table.getAttribute("data-live-url");
    var every = Math.max(1, parseFloat(table.getAttribute("data-interval") || "5")) * 1000;
    var status = document.getElementById("live-status");
    var known = {};
    Array.prototype.forEach.call(table.tBodies[0].rows, function (tr) {
      known[tr.getAttribute("data-id")] = tr.getAttribute("data-revision");
    });
    function render(data) {
      var body = document.createElement("tbody");
      var fresh = {};
      data.rows.forEach(function (row) {
        var tr = document.createElement("tr");
        tr.setAttribute("data-id", row.id);
        tr.setAttribute("data-revision", String(row.revision));
        if (row.classes) { tr.className = row.classes; }
        if (known[row.id] !== String(row.revision)) { tr.className += " new"; }
        row.cells.forEach(function (spec) { tr.appendChild(cell(spec)); });
        body.appendChild(tr);
        fresh[row.id] = String(row.revision);
      });
      if (!data.rows.length) {
        var tr = document.createElement("tr");
        var td = document.createElement("td");
        td.colSpan = table.tHead.rows[0].cells.length;
        td.className = "muted";
        td.textContent = "No verdict matches these filters.";
        tr.appendChild(td);
        body.appendChild(tr);
      }
      table.replaceChild(body, table.tBodies[0]);
      known = fresh;
      var count = document.getElementById("live-count");
      if (count) { count.textContent = String(data.count); }
      if (status) { status.textContent = "live: refreshed " + data.refreshed + " UTC"; }
    }
    function poll() {
      if (document.hidden) { return; }
      fetch(url, { headers: { "Accept": "application/json" }, credentials: "same-origin" })
        .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
        .then(render)
        .catch(function (err) { if (status) { status.textContent = "live update failed: " + err.message; } });
    }
    setInterval(poll, every);
  }

  function autoSubmit(form) {
    Array.prototype.forEach.call(form.querySelectorAll("select"), function (sel) {
      sel.addEventListener("change", function () { form.submit(); });
    });
  }

  function evidenceFilter(box) {
    var table = document.getElementById(box.getAttribute("data-evidence-filter"));
    if (!table) { return; }
    var text = box.querySelector("input[type=search]");
    var roles = box.querySelectorAll("input[type=checkbox]");
    var shown = box.querySelector(".shown");
    function apply() {
      var want = {};
      Array.prototype.forEach.call(roles, function (c) { want[c.value] = c.checked; });
      var needle = (text && text.value || "").toLowerCase();
      var n = 0;
      Array.prototype.forEach.call(table.tBodies[0].rows, function (tr) {
        var ok = want[tr.getAttribute("data-role")] !== false &&
          (!needle || tr.textContent.toLowerCase().indexOf(needle) >= 0);
        tr.classList.toggle("hidden", !ok);
        if (ok) { n += 1; }
      });
      if (shown) { shown.textContent = n + " shown"; }
    }
    if (text) { text.addEventListener("input", apply); }
    Array.prototype.forEach.call(roles, function (c) { c.addEventListener("change", apply); });
    apply();
  }

  document.addEventListener("DOMContentLoaded", function () {
    Array.prototype.forEach.call(document.querySelectorAll("table[data-live-url]"), liveTable);
    Array.prototype.forEach.call(document.querySelectorAll("form.filters[data-auto]"), autoSubmit);
    Array.prototype.forEach.call(document.querySelectorAll("[data-evidence-filter]"), evidenceFilter);
  });
})();
