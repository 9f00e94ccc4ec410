// trustmh view: pages through a run's samples from the local server's API. Everything a run holds is put
// on the page through textContent only, so a reply containing markup shows as text and runs nothing.
(function () {
  "use strict";
  var $ = function (id) { return document.getElementById(id); };
  var meta = null, page = 0, total = 0, seq = 0, loads = 0;
  var asked = Number(new URLSearchParams(location.search).get("size"));  // ?size=N rows a page (1 to 200)
  var size = asked >= 1 && asked <= 200 ? Math.floor(asked) : 50;
  var controls = ["f-model", "f-task", "f-status", "f-sort"].map($);
  var search = $("f-search");

  var el = trustmhDom.el, show = trustmhDom.show;  // dom.js, inlined before this script

  function get(path) {
    return fetch(path, { credentials: "same-origin" }).then(function (r) {
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

  function detail(s) {
    var box = el("div", "detail");
    function block(title, text, cls) {
      if (text === null || text === undefined || text === "") return;
      box.appendChild(el("h6", null, title));
      box.appendChild(el("pre", cls || null, text));
    }
    (s.prompt || []).forEach(function (m) { block("prompt · " + m.role, show(m.content)); });
    block("target", s.tg === null ? null : show(s.tg));
    if (s.er) block("error", (s.er.kind || "") + ": " + (s.er.message || ""), "bad");
    if (s.cv) conversation(box, s.cv); else block("reply", s.r === null ? null : show(s.r), "reply");
    if (s.ja) block("the reply addresses the judge (flagged; still scored as judged)", s.ja, "bad");
    block("judge output", s.j === null ? null : show(s.j));
    if (!s.j && s.jr) block("judge", show(s.jr));
    block("parsed", s.pa === null ? null : show(s.pa));
    [["values", s.va, " = "], ["unscored", s.un, ": "], ["groups", s.lb, " = "]].forEach(function (part) {
      var lines = Object.keys(part[1] || {}).map(function (k) { return k + part[2] + show(part[1][k]); });
      block(part[0], lines.join("\n"));
    });
    block("notes", (s.no || []).join("\n"));
    return box;
  }

  // A conversation: its messages turn by turn, and beside them the judge's walk through the rubric (each
  // question, the answer it read and why), then the ratings per dimension. Text only, never HTML.
  function conversation(box, cv) {
    var wrap = el("div", "conversation");
    var talk = el("ol", "turns");
    var n = { user: 0, chatbot: 0 };
    cv.turns.forEach(function (t) {
      n[t.role] += 1;
      var li = el("li", "turn " + t.role);
      li.appendChild(el("b", null, (t.role === "user" ? "person " : "chatbot ") + n[t.role]));
      li.appendChild(el("pre", t.error ? "bad" : null, t.text));
      talk.appendChild(li);
    });
    talk.appendChild(el("li", "ended", "ended: " + (cv.ended || "?")));
    var walk = el("ol", "walk");
    cv.path.forEach(function (p) {
      var li = el("li", "step" + (String(p.answer).toLowerCase() === "yes" && p.severity ? " flag" : ""));
      li.appendChild(el("b", null, "Q" + p.q + " · " + (p.dimension || "")));
      li.appendChild(el("div", "question", p.question || ""));
      li.appendChild(el("div", "answer", "→ " + show(p.answer) + (p.severity ? " (" + p.severity + ")" : "")));
      if (p.reasoning) li.appendChild(el("small", null, p.reasoning));
      walk.appendChild(li);
    });
    Object.keys(cv.ratings || {}).forEach(function (d) { walk.appendChild(el("li", "rating", d + ": " + cv.ratings[d])); });
    var left = el("div", "side"), right = el("div", "side");
    left.appendChild(el("h6", null, "conversation"));
    left.appendChild(talk);
    right.appendChild(el("h6", null, "the judge's path through the rubric"));
    right.appendChild(walk);
    wrap.appendChild(left);
    wrap.appendChild(right);
    box.appendChild(wrap);
  }

  function row(r) {
    var task = meta.tasks[r.t];
    var tr = el("tr", "sample " + r.st);
    tr.appendChild(el("td", "score", r.pv === null || r.pv === undefined ? "–" : show(r.pv)));
    tr.appendChild(el("td", "status", r.st));
    tr.appendChild(el("td", null, meta.entries[r.e]));
    tr.appendChild(el("td", null, task));
    tr.appendChild(el("td", "mono", r.v ? r.id + " · " + r.v : r.id));
    tr.appendChild(el("td", "preview", r.preview));
    tr.tabIndex = 0;
    var open = null;
    function toggle() {
      if (open) { open.remove(); open = null; tr.classList.remove("open"); return; }
      open = el("tr", "detail-row");
      var td = el("td", "na", "loading…");
      td.colSpan = 6;
      open.appendChild(td);
      tr.after(open);
      tr.classList.add("open");
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
    return tr;
  }

  function load() {
    var mine = ++seq;
    $("v-status").textContent = "loading…";
    document.body.removeAttribute("data-ready");
    get("/api/rows?" + query()).then(function (res) {
      if (mine !== seq) return;  // a later request is on its way
      total = res.total;
      var pages = Math.max(1, Math.ceil(total / size));
      var frag = document.createDocumentFragment();
      res.rows.forEach(function (r) { frag.appendChild(row(r)); });
      if (!res.rows.length) frag.appendChild(el("tr")).appendChild(el("td", "na", "no sample matches")).colSpan = 6;
      $("v-rows").replaceChildren(frag);
      $("page-info").textContent = "page " + (page + 1) + " of " + pages;
      $("prev").disabled = page === 0;
      $("next").disabled = page >= pages - 1;
      $("f-count").textContent = total + " of " + meta.total + " samples";
      $("v-status").textContent = "";
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
    controls.forEach(function (c) { c.addEventListener("change", refilter); });
    var timer = null;
    search.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(refilter, 250); });
    $("prev").addEventListener("click", function () { page -= 1; load(); });
    $("next").addEventListener("click", function () { page += 1; load(); });
    load();
  }, function (e) { $("v-runs").textContent = "error: " + e.message; });
})();
