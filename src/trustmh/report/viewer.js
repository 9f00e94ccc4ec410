// trustmh view: pages through a run's samples from the local server's API. Everything a run holds is put
// on the page through textContent only, so a reply containing markup shows as text and runs nothing.
// The view lives in the address bar (model and task by name, outcome, order, search, page, the opened
// sample and its side-by-side view), so a copied URL opens the same view; other parameters are kept.
(function () {
  "use strict";
  var $ = function (id) { return document.getElementById(id); };
  var meta = null, page = 0, total = 0, seq = 0, loads = 0, opened = null, side = false;
  var url = new URLSearchParams(location.search);
  var asked = Number(url.get("size"));  // ?size=N rows a page (1 to 200)
  var size = asked >= 1 && asked <= 200 ? Math.floor(asked) : 50;
  var controls = ["f-model", "f-task", "f-status", "f-sort"].map($);
  var search = $("f-search");
  var OWN = ["model", "task", "status", "sort", "q", "page", "open", "side"];

  var el = trustmhDom.el, show = trustmhDom.show;  // dom.js, inlined before this script

  // The token of the URL `trustmh view` printed: every API call carries it (the server refuses any without).
  var token = new URLSearchParams(location.search).get("t") || "";

  function get(path) {
    return fetch(path, { credentials: "same-origin", headers: { "X-Trustmh-Token": token } }).then(function (r) {
      return r.json().then(function (body) {
        if (!r.ok) throw new Error(body.error || ("HTTP " + r.status));
        return body;
      });
    });
  }

  function option(select, value, label) {
    var o = el("option", null, label);
    o.value = value;
    select.appendChild(o);
  }

  function query() {
    var p = new URLSearchParams();
    if (controls[0].value !== "") p.set("model", controls[0].value);
    if (controls[1].value !== "") p.set("task", controls[1].value);
    if (controls[2].value !== "") p.set("status", controls[2].value);
    p.set("sort", controls[3].value);
    if (search.value.trim()) p.set("q", search.value.trim());
    p.set("page", String(page));
    p.set("size", String(size));
    return p.toString();
  }

  // The view in the address bar: models and tasks by name (numbers change with the runs given), the rest
  // as the controls hold them; parameters that are not the view's own stay as they are.
  function remember() {
    var p = new URLSearchParams(location.search);
    OWN.forEach(function (k) { p.delete(k); });
    if (controls[0].value !== "") p.set("model", meta.entries[Number(controls[0].value)]);
    if (controls[1].value !== "") p.set("task", meta.tasks[Number(controls[1].value)]);
    if (controls[2].value !== "") p.set("status", controls[2].value);
    if (controls[3].value !== "worst") p.set("sort", controls[3].value);
    if (search.value.trim()) p.set("q", search.value.trim());
    if (page) p.set("page", String(page + 1));
    if (opened !== null) p.set("open", String(opened));
    if (opened !== null && side) p.set("side", "1");
    var text = p.toString();
    history.replaceState(null, "", location.pathname + (text ? "?" + text : "") + location.hash);
  }

  function restore() {
    var m = meta.entries.indexOf(url.get("model")), t = meta.tasks.indexOf(url.get("task"));
    if (m >= 0) controls[0].value = String(m);
    if (t >= 0) controls[1].value = String(t);
    if (meta.statuses.indexOf(url.get("status")) >= 0) controls[2].value = url.get("status");
    if (url.get("sort") === "data") controls[3].value = "data";
    search.value = (url.get("q") || "").slice(0, 200);
    var pg = Number(url.get("page"));
    page = pg >= 1 && pg < 1e9 ? Math.floor(pg) - 1 : 0;
    var o = Number(url.get("open"));
    opened = url.get("open") !== null && o >= 0 && o < meta.total ? Math.floor(o) : null;
    side = opened !== null && url.get("side") === "1";
  }

  function block(box, title, text, cls) {
    if (text === null || text === undefined || text === "") return;
    box.appendChild(el("h6", null, title));
    box.appendChild(el("pre", cls || null, text));
  }

  function detail(s) {
    var box = el("div", "detail");
    (s.prompt || []).forEach(function (m) { block(box, "prompt · " + m.role, show(m.content)); });
    block(box, "target", s.tg === null ? null : show(s.tg));
    if (s.er) block(box, "error", (s.er.kind || "") + ": " + (s.er.message || ""), "bad");
    block(box, "reply", s.r === null ? null : show(s.r), "reply");
    if (s.ja) block(box, "the reply addresses the judge (flagged; still scored as judged)", s.ja, "bad");
    block(box, "judge output", s.j === null ? null : show(s.j));
    if (!s.j && s.jr) block(box, "judge", show(s.jr));
    block(box, "parsed", s.pa === null ? null : show(s.pa));
    [["values", s.va, " = "], ["unscored", s.un, ": "], ["groups", s.lb, " = "]].forEach(function (part) {
      var lines = Object.keys(part[1] || {}).map(function (k) { return k + part[2] + show(part[1][k]); });
      block(box, part[0], lines.join("\n"));
    });
    block(box, "notes", (s.no || []).join("\n"));
    var button = el("button", "side-button", "every model's reply to this item, side by side");
    button.type = "button";
    var area = el("div", "side-area");
    box.appendChild(button);
    box.appendChild(area);
    button.addEventListener("click", function () { sideBySide(s.i, area, true); });
    if (side && s.i === opened) sideBySide(s.i, area, false);
    return box;
  }

  function sideBySide(i, area, asked) {
    area.textContent = "loading…";
    get("/api/item?i=" + i).then(function (res) {
      area.textContent = "";
      area.appendChild(el("h6", null, meta.tasks[res.t] + " · item " + res.id + (res.v ? " · " + res.v : "") +
        ": " + res.models.length + " model" + (res.models.length === 1 ? "" : "s")));
      var grid = el("div", "side");
      res.models.forEach(function (m) {
        var col = el("div", "model-reply");
        col.setAttribute("data-model", meta.entries[m.e]);
        col.appendChild(el("h6", null, meta.entries[m.e] + " · " + m.st + (m.pv === null || m.pv === undefined ? "" :
          " · " + show(m.pv))));
        if (m.er) block(col, "error", (m.er.kind || "") + ": " + (m.er.message || ""), "bad");
        block(col, "reply", m.r === null ? null : show(m.r), "reply");
        block(col, "judge output", m.j === null ? (m.jr || null) : show(m.j));
        var lines = Object.keys(m.va || {}).map(function (k) { return k + " = " + show(m.va[k]); });
        block(col, "values", lines.join("\n"));
        grid.appendChild(col);
      });
      area.appendChild(grid);
      area.setAttribute("data-side", String(res.models.length));
      if (asked) { side = true; opened = i; remember(); }
    }, function (e) { area.textContent = "could not load: " + e.message; });
  }

  // A sample opened from the address bar that is not on the page shown: above the table.
  function openApart(i) {
    var box = $("v-open");
    box.textContent = "";
    get("/api/sample?i=" + i).then(function (s) {
      box.appendChild(el("h6", null, "opened sample: " + meta.entries[s.e] + " · " + meta.tasks[s.t] + " · " + s.id));
      box.appendChild(detail(s));
      box.setAttribute("data-opened", String(i));
    }, function (e) { box.textContent = "could not load sample " + i + ": " + e.message; });
  }

  function row(r) {
    var task = meta.tasks[r.t];
    var tr = el("tr", "sample " + r.st);
    tr.setAttribute("data-i", String(r.i));
    tr.appendChild(el("td", "score", r.pv === null || r.pv === undefined ? "–" : show(r.pv)));
    tr.appendChild(el("td", "status", r.st));
    tr.appendChild(el("td", null, meta.entries[r.e]));
    tr.appendChild(el("td", null, task));
    tr.appendChild(el("td", "mono", r.v ? r.id + " · " + r.v : r.id));
    tr.appendChild(el("td", "preview", r.preview));
    tr.tabIndex = 0;
    var open = null;
    function toggle() {
      if (open) {
        open.remove(); open = null; tr.classList.remove("open"); tr.removeAttribute("data-opened");
        if (opened === r.i) { opened = null; side = false; remember(); }
        return;
      }
      open = el("tr", "detail-row");
      var td = el("td", "na", "loading…");
      td.colSpan = 6;
      open.appendChild(td);
      tr.after(open);
      tr.classList.add("open");
      if (opened !== r.i) side = false;
      opened = r.i;
      $("v-open").textContent = "";
      remember();
      var mine = open;
      get("/api/sample?i=" + r.i).then(function (s) {
        td.textContent = "";
        td.className = "";
        td.appendChild(detail(s));
        if (mine === open) tr.setAttribute("data-opened", "1");
      }, function (e) { td.textContent = "could not load: " + e.message; });
    }
    tr.addEventListener("click", toggle);
    tr.addEventListener("keydown", function (ev) { if (ev.key === "Enter") toggle(); });
    tr.toggle = toggle;
    return tr;
  }

  function load(first) {
    var mine = ++seq;
    $("v-status").textContent = "loading…";
    document.body.removeAttribute("data-ready");
    if (!first) {  // another page or filter: the sample that was open is no longer on it
      opened = null;
      side = false;
      $("v-open").textContent = "";
      remember();
    }
    get("/api/rows?" + query()).then(function (res) {
      if (mine !== seq) return;  // a later request is on its way
      total = res.total;
      var pages = Math.max(1, Math.ceil(total / size));
      var frag = document.createDocumentFragment(), want = null;
      res.rows.forEach(function (r) {
        var tr = row(r);
        if (first && r.i === opened) want = tr;
        frag.appendChild(tr);
      });
      if (!res.rows.length) frag.appendChild(el("tr")).appendChild(el("td", "na", "no sample matches")).colSpan = 6;
      $("v-rows").replaceChildren(frag);
      $("page-info").textContent = "page " + (page + 1) + " of " + pages;
      $("prev").disabled = page === 0;
      $("next").disabled = page >= pages - 1;
      $("f-count").textContent = total + " of " + meta.total + " samples";
      $("v-status").textContent = "";
      if (first && opened !== null) {
        var keepSide = side;
        if (want) { want.toggle(); side = keepSide; } else { openApart(opened); }
      }
      document.body.setAttribute("data-ready", "1");
      document.body.setAttribute("data-loads", String(++loads));  // pages shown so far (for tests, bench/)
    }, function (e) { if (mine === seq) $("v-status").textContent = "error: " + e.message; });
  }

  function refilter() { page = 0; load(); }

  get("/api/meta").then(function (m) {
    meta = m;
    $("v-runs").textContent = "runs " + m.runs.join(", ") + " · " + m.entries.length + " models · " +
      m.tasks.length + " tasks · " + m.total + " samples";
    m.entries.forEach(function (label, i) { option(controls[0], String(i), label); });
    m.tasks.forEach(function (t, i) { option(controls[1], String(i), t); });
    var skipped = Object.keys(m.skipped);
    if (skipped.length) {
      $("v-skipped").hidden = false;
      $("v-skipped").textContent = "lines of samples.jsonl left out: " +
        skipped.map(function (k) { return m.skipped[k] + " × " + k; }).join(", ");
    }
    restore();
    controls.forEach(function (c) { c.addEventListener("change", refilter); });
    var timer = null;
    search.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(refilter, 250); });
    $("prev").addEventListener("click", function () { page -= 1; load(); });
    $("next").addEventListener("click", function () { page += 1; load(); });
    load(true);
  }, function (e) { $("v-runs").textContent = "error: " + e.message; });
})();
