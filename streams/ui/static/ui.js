// faultstream incident explorer: live update of the incident list, folded verdicts and client-side filters.
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

  // the other verdicts of an incident fold under its row: a button shows or hides them
  function foldButton(group, count) {
    var b = document.createElement("button");
    b.type = "button";
    b.className = "fold";
    b.setAttribute("data-fold", group);
    b.setAttribute("aria-expanded", "false");
    b.title = "show the other verdicts of this incident";
    b.textContent = "+" + count;
    return b;
  }

  function setFold(table, group, open) {
    Array.prototype.forEach.call(table.tBodies[0].rows, function (tr) {
      if (tr.getAttribute("data-member-of") === group) { tr.classList.toggle("hidden", !open); }
    });
    var b = table.querySelector("button.fold[data-fold='" + CSS.escape(group) + "']");
    if (b) {
      b.setAttribute("aria-expanded", open ? "true" : "false");
      b.textContent = (open ? "-" : "+") + b.textContent.replace(/^[-+]/, "");
    }
  }

  function foldable(table, opened) {
    table.addEventListener("click", function (ev) {
      var b = ev.target.closest("button.fold");
      if (!b) { return; }
      var group = b.getAttribute("data-fold");
      var open = b.getAttribute("aria-expanded") !== "true";
      opened[group] = open;
      setFold(table, group, open);
    });
  }

  function row(spec, known) {
    var tr = document.createElement("tr");
    tr.setAttribute("data-id", spec.id);
    tr.setAttribute("data-revision", String(spec.revision));
    if (spec.classes) { tr.className = spec.classes; }
    if (known[spec.id] !== String(spec.revision)) { tr.classList.add("new"); }
    spec.cells.forEach(function (c) { tr.appendChild(cell(c)); });
    return tr;
  }

  function liveTable(table) {
    var url = table.getAttribute("data-live-url");
    var every = Math.max(1, parseFloat(table.getAttribute("data-interval") || "5")) * 1000;
    var status = document.getElementById("live-status");
    var known = {};
    var opened = {};
    Array.prototype.forEach.call(table.tBodies[0].rows, function (tr) {
      if (tr.getAttribute("data-id")) { known[tr.getAttribute("data-id")] = tr.getAttribute("data-revision"); }
    });
    foldable(table, opened);
    function render(data) {
      var body = document.createElement("tbody");
      var fresh = {};
      data.rows.forEach(function (spec) {
        var head = row(spec, known);
        head.setAttribute("data-group", spec.group);
        var members = spec.members || [];
        if (members.length) { head.cells[0].insertBefore(foldButton(spec.group, members.length), head.cells[0].firstChild); }
        body.appendChild(head);
        fresh[spec.id] = String(spec.revision);
        members.forEach(function (m) {
          var tr = row(m, known);
          tr.setAttribute("data-member-of", spec.group);
          tr.classList.add("member", "hidden");
          body.appendChild(tr);
          fresh[m.id] = String(m.revision);
        });
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
      Object.keys(opened).forEach(function (g) { if (opened[g]) { setFold(table, g, true); } });
      known = fresh;
      var count = document.getElementById("live-count");
      if (count) { count.textContent = String(data.count); }
      var verdicts = document.getElementById("live-verdicts");
      if (verdicts) { verdicts.textContent = String(data.verdicts); }
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
