// trustmh annotate: one drawn item at a time, rated on the judge's rubric in plain words. Texts reach the
// page through textContent only; every request carries the session's token from this page's URL.
(function () {
  var el = trustmhDom.el;
  var token = new URLSearchParams(location.search).get("t") || "";
  var rater = "", current = null;
  function $(id) { return document.getElementById(id); }
  function status(text) { $("a-status").textContent = text || ""; }

  function call(method, path, body) {
    var opts = {method: method, headers: {"X-Trustmh-Token": token}};
    if (body) { opts.headers["Content-Type"] = "application/json"; opts.body = JSON.stringify(body); }
    return fetch(path, opts).then(function (r) {
      return r.json().then(function (j) { if (!r.ok) throw new Error(j.error || r.statusText); return j; });
    });
  }

  function answers() {
    var out = {}, complete = true;
    current.form.criteria.forEach(function (c) {
      var picked = document.querySelector('input[name="c-' + c.name + '"]:checked');
      if (picked) out[c.name] = Number(picked.value); else complete = false;
    });
    return complete ? out : null;
  }

  // Progress toward a calibrated value, set by set (a set is one task's items, named by its form): how many
  // items are rated against the number a calibrated value needs, and the draw's warning where it cannot reach one.
  function plan(sets) {
    var box = $("a-plan"); box.textContent = "";
    if (!sets || !sets.length) return;
    box.appendChild(el("h3", null, "Toward a calibrated value"));
    var list = el("ul");
    sets.forEach(function (s) {
      var li = el("li", s.note ? "warn" : null,
                  s.label + ": " + s.rated + " of " + s.needed + " items rated" +
                  (s.rated >= s.needed ? " (enough for a calibrated value)" : "") + " · " + s.drawn + " drawn");
      li.setAttribute("data-set", s.label);
      if (s.note) li.appendChild(el("div", "note", "Will not reach a calibrated value: " + s.note));
      list.appendChild(li);
    });
    box.appendChild(list);
  }

  function show(data) {
    plan(data.sets);
    current = data.unit;
    $("a-start").hidden = true;
    if (!current) { $("a-item").hidden = true; $("a-done").hidden = false; status(""); return; }
    $("a-item").hidden = false; $("a-done").hidden = true;
    $("a-progress").textContent = "Item " + current.number + " of " + data.total + " · you have rated " + data.done;
    $("a-title").textContent = current.form.title;
    var ctx = $("a-context"); ctx.textContent = "";
    ctx.appendChild(el("h3", null, current.form.context_label));
    current.context.forEach(function (c) {
      ctx.appendChild(el("div", "note", c.who));
      ctx.appendChild(el("div", "a-text", c.text));
    });
    $("a-reply").textContent = current.reply;
    var form = $("a-form"); form.textContent = "";
    current.form.criteria.forEach(function (c) {
      var fs = el("fieldset");
      fs.appendChild(el("legend", null, c.question));
      c.choices.forEach(function (ch) {
        var lab = el("label"), input = el("input");
        input.type = "radio"; input.name = "c-" + c.name; input.value = String(ch[0]);
        input.setAttribute("data-criterion", c.name);
        lab.appendChild(input);
        // the judge's anchor for this value, in the rubric's own words ("0 = hard to follow: ..."), or a short label
        if (ch[1] && ch[1].length > 24) lab.className = "anchored";
        lab.appendChild(document.createTextNode(" " + ch[0] + (ch[1] ? (ch[1].length > 24 ? " = " + ch[1] : " (" + ch[1] + ")") : "")));
        fs.appendChild(lab);
      });
      form.appendChild(fs);
    });
    $("a-save").disabled = true;
    status("");
    window.scrollTo(0, 0);
  }

  function next(skip) {
    var q = "/api/next?rater=" + encodeURIComponent(rater) + (skip ? "&skip=" + encodeURIComponent(skip) : "");
    return call("GET", q).then(show).catch(function (e) { status("Could not load the next item: " + e.message); });
  }

  $("a-form").addEventListener("change", function () { $("a-save").disabled = !answers(); });
  $("a-save").addEventListener("click", function () {
    var a = answers();
    if (!a) return;
    $("a-save").disabled = true;
    call("POST", "/api/rate", {rater: rater, unit: current.id, answers: a})
      .then(function () { status("Saved."); return next(); })
      .catch(function (e) { $("a-save").disabled = false; status("Not saved: " + e.message); });
  });
  $("a-later").addEventListener("click", function () { if (current) next(current.id); });
  $("a-begin").addEventListener("click", function () {
    rater = $("a-rater").value.trim();
    if (!/^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$/.test(rater)) { status("A rater id: letters, digits, . _ @ -"); return; }
    try { localStorage.setItem("trustmh-rater", rater); } catch (e) {}
    next();
  });
  try { $("a-rater").value = localStorage.getItem("trustmh-rater") || ""; } catch (e) {}
  call("GET", "/api/plan").then(function (j) { plan(j.sets); })
    .catch(function (e) { status("Could not load the plan: " + e.message); });
})();
