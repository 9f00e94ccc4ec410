// Sample drill-down of the trustmh report. Data comes from the JSON block and is only ever put on the
// page through textContent, so a reply containing markup shows as text and runs nothing.
(function () {
  "use strict";
  var section = document.getElementById("samples");
  var dataEl = document.getElementById("samples-data");
  if (!section || !dataEl) return;
  var pageSize = Number(section.getAttribute("data-page-size") || "50");  // 0: every row at once
  var data = null;
  var view = [];
  var page = 0;
  var $ = function (id) { return document.getElementById(id); };
  var controls = ["f-model", "f-task", "f-status", "f-sort"].map($);
  var search = $("f-search");
  var tbody = $("sample-rows");

  var el = trustmhDom.el, show = trustmhDom.show;  // dom.js, inlined before this script

  function haystack(r) {
    // Built once per row on first search; lower-cased text of everything a reader might look for.
    if (r._h === undefined) {
      var parts = [r.id, r.v, r.r, r.j, r.jr, show(r.tg), show(r.pa), JSON.stringify(r.lb)];
      (data.prompts[r.p] || []).forEach(function (m) { parts.push(m.content); });
      if (r.er) parts.push(r.er.kind, r.er.message);
      r._h = parts.filter(function (x) { return x; }).join("\n").toLowerCase();
    }
    return r._h;
  }

  function worstFirst(a, b) {
    // Scored rows by their 0..1 score, then rows without a per-sample score, unscored, errors; stable.
    var rank = { ok: 0, no_answer: 0, unscored: 1, error: 2 };
    var sa = a.s === null ? 2 : a.s, sb = b.s === null ? 2 : b.s;
    if (sa !== sb) return sa - sb;
    if (rank[a.st] !== rank[b.st]) return rank[a.st] - rank[b.st];
    return a._i - b._i;
  }

  function apply() {
    var m = controls[0].value, t = controls[1].value, st = controls[2].value, sort = controls[3].value;
    var q = search.value.trim().toLowerCase();
    view = data.rows.filter(function (r) {
      return (m === "" || r.e === Number(m)) && (t === "" || r.t === Number(t)) &&
        (st === "" || r.st === st) && (q === "" || haystack(r).indexOf(q) !== -1);
    });
    if (sort === "worst") view.sort(worstFirst);
    page = 0;
    render();
  }

  // A value's name in words where the report knows it (data.words), its column name beside.
  function named(k) {
    var w = data.words && Object.prototype.hasOwnProperty.call(data.words, k) ? data.words[k] : null;
    return w ? w + " [" + k + "]" : k;
  }

  function detail(r) {
    var box = el("div", "detail");
    function block(title, text, cls) {
      if (text === null || text === undefined || text === "") return;
      box.appendChild(el("h6", null, title));
      box.appendChild(el("pre", cls || null, text));
    }
    (data.prompts[r.p] || []).forEach(function (msg) { block("prompt · " + msg.role, msg.content); });
    block("target", r.tg === null ? null : show(r.tg));
    if (r.er) block("error", r.er.kind + ": " + (r.er.message || ""), "bad");
    block("reply", r.r, "reply");
    block("judge output", r.j);
    if (!r.j && r.jr) block("judge", r.jr);
    block("parsed", r.pa === null ? null : show(r.pa));
    var lines = [];
    Object.keys(r.va).forEach(function (k) { lines.push(named(k) + " = " + show(r.va[k])); });
    block("values", lines.join("\n"));
    lines = [];
    Object.keys(r.un).forEach(function (k) { lines.push(k + ": " + r.un[k]); });
    block("unscored", lines.join("\n"));
    lines = [];
    Object.keys(r.lb).forEach(function (k) { lines.push(k + " = " + show(r.lb[k])); });
    block("groups", lines.join("\n"));
    block("notes", r.no.join("\n"));
    return box;
  }

  function row(r) {
    var task = data.tasks[r.t];
    var tr = el("tr", "sample " + r.st);
    var score = r.pv === null || r.pv === undefined ? "–" : named(task.primary) + " = " + show(r.pv);
    tr.appendChild(el("td", "score", score));
    tr.appendChild(el("td", "status", r.st));
    tr.appendChild(el("td", null, data.entries[r.e]));
    tr.appendChild(el("td", null, task.id));
    tr.appendChild(el("td", "mono", r.v ? r.id + " · " + r.v : r.id));
    var text = r.r === null ? (r.er ? "[" + r.er.kind + "]" : "") : r.r;
    tr.appendChild(el("td", "preview", text.length > 160 ? text.slice(0, 160) + "…" : text));
    tr.tabIndex = 0;
    var open = null;
    function toggle() {
      if (open) { open.remove(); open = null; tr.classList.remove("open"); return; }
      open = el("tr", "detail-row");
      var td = el("td");
      td.colSpan = 6;
      td.appendChild(detail(r));
      open.appendChild(td);
      tr.after(open);
      tr.classList.add("open");
    }
    tr.addEventListener("click", toggle);
    tr.addEventListener("keydown", function (ev) { if (ev.key === "Enter") toggle(); });
    return tr;
  }

  function render() {
    var size = pageSize > 0 ? pageSize : Math.max(view.length, 1);
    var pages = Math.max(1, Math.ceil(view.length / size));
    page = Math.min(Math.max(page, 0), pages - 1);
    var frag = document.createDocumentFragment();
    view.slice(page * size, (page + 1) * size).forEach(function (r) { frag.appendChild(row(r)); });
    if (!view.length) frag.appendChild(el("tr")).appendChild(el("td", "na", "no sample matches")).colSpan = 6;
    tbody.replaceChildren(frag);
    $("page-info").textContent = "page " + (page + 1) + " of " + pages;
    $("prev").disabled = page === 0;
    $("next").disabled = page >= pages - 1;
    $("f-count").textContent = view.length + " of " + data.rows.length + " samples";
    if (!document.body.hasAttribute("data-samples-ready")) {
      document.body.setAttribute("data-samples-ready", "1");
      if (window.performance && performance.mark) performance.mark("trustmh-samples-ready");  // for bench/
    }
  }

  function load() {
    data = JSON.parse(dataEl.textContent);
    data.rows.forEach(function (r, i) { r._i = i; });
    controls.forEach(function (c) { c.addEventListener("change", apply); });
    var timer = null;
    search.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(apply, 150); });
    $("prev").addEventListener("click", function () { page -= 1; render(); });
    $("next").addEventListener("click", function () { page += 1; render(); });
    document.addEventListener("click", function (ev) {
      var b = ev.target.closest ? ev.target.closest("[data-show-task]") : null;
      if (!b) return;
      controls[1].value = b.getAttribute("data-show-task");
      apply();
      section.scrollIntoView();
    });
    apply();
  }

  if (pageSize > 0) {
    // Paged: parse the samples after the first frame, so the leaderboard paints without waiting for them.
    requestAnimationFrame(function () { setTimeout(load, 0); });
  } else {
    load();
  }
})();
