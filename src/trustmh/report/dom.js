// DOM helpers shared by the report's drill-down (report.js) and `trustmh view` (viewer.js); each page
// inlines this file before its own script. Text reaches the page through textContent only.
var trustmhDom = {
  el: function (tag, cls, text) {
    var n = document.createElement(tag);
    if (cls) n.className = cls;
    if (text !== undefined && text !== null) n.textContent = String(text);
    return n;
  },
  show: function (v) {
    if (v === null || v === undefined) return "–";
    if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toFixed(3);
    if (typeof v === "string") return v;
    return JSON.stringify(v);
  }
};
