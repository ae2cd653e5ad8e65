// report.html's own script: sortable tables, the matrix filters, the
// flamegraph tabs and the charts (SVG drawn from the #chart-data blob).
// No library, no network. Errors are also written into #js-errors so that
// a test reading the DOM sees them.
"use strict";
(function () {
  var errs = document.getElementById("js-errors");
  function report(msg) {
    errs.hidden = false;
    var p = document.createElement("p");
    p.className = "js-error";
    p.textContent = String(msg);
    errs.appendChild(p);
  }
  window.addEventListener("error", function (e) { report(e.message); });

  var NS = "http://www.w3.org/2000/svg";
  function el(name, attrs, parent, text) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function num(v) {
    var a = Math.abs(v);
    if (a >= 1e6) return (v / 1e6).toPrecision(3) + "M";
    if (a >= 1e4) return (v / 1e3).toPrecision(3) + "k";
    if (a >= 100 || v === Math.round(v)) return String(Math.round(v));
    return String(parseFloat(v.toPrecision(3)));
  }
  function pctLabel(x) {
    if (x === 0) return "0%";
    var s = (100 * (1 - Math.pow(10, -x))).toFixed(Math.max(0, Math.round(x) - 2));
    return s + "%";
  }
  var COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];

  function ticksLin(lo, hi, n) {
    var span = hi - lo || 1, step = Math.pow(10, Math.floor(Math.log10(span / n)));
    if (span / step > n * 5) step *= 5; else if (span / step > n * 2) step *= 2;
    var out = [];
    for (var t = Math.ceil(lo / step) * step; t <= hi + 1e-9 * span; t += step) out.push(t);
    return out;
  }

  // One chart: see harness/src/html/chart.rs for the data's shape.
  function draw(fig, c) {
    var W = c.small ? 320 : 460, H = c.small ? 190 : 260, L = 58, R = 12, T = 38, B = 40;
    var pts = [];
    c.series.forEach(function (s) {
      s.points.forEach(function (p) { pts.push(p); });
      (s.band || []).forEach(function (b) { pts.push([b[0], b[1]]); pts.push([b[0], b[2]]); });
    });
    var ylog = c.ylog && pts.every(function (p) { return p[1] > 0; });
    var fy = ylog ? function (v) { return Math.log10(v); } : function (v) { return v; };
    var xs = pts.map(function (p) { return p[0]; }), ys = pts.map(function (p) { return fy(p[1]); });
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    if (!ylog) y0 = Math.min(0, y0);
    if (x1 === x0) { x0 -= 1; x1 += 1; }
    if (y1 === y0) { y1 += ylog ? 0.5 : Math.abs(y1) * 0.1 + 1; y0 -= ylog ? 0.5 : 0; }
    var sx = function (x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
    var sy = function (y) { return T + (1 - (fy(y) - y0) / (y1 - y0)) * (H - T - B); };
    var svg = el("svg", { "class": "plot", "data-kind": fig.classList[1] || "", viewBox: "0 0 " + W + " " + H,
      width: W, height: H, role: "img" }, fig);
    if (fig.dataset.case) svg.setAttribute("data-case", fig.dataset.case);
    el("title", {}, svg, c.title);
    el("text", { x: L, y: 15, "class": "ct" }, svg, c.title);
    var g = el("g", { "class": "axes" }, svg);
    // y ticks
    var yt = ylog ? [] : ticksLin(y0, y1, 5);
    // Log axes: powers of ten, and 2 and 5 times them when the range
    // spans less than three decades.
    var mults = y1 - y0 < 3 ? [1, 2, 5] : [1];
    if (ylog) for (var e = Math.floor(y0); e <= Math.ceil(y1); e++) mults.forEach(function (m) {
      var t = e + Math.log10(m);
      if (t >= y0 - 1e-9 && t <= y1 + 1e-9) yt.push(t);
    });
    if (ylog && yt.length < 2) yt = [y0, y1];
    yt.forEach(function (t) {
      var v = ylog ? Math.pow(10, t) : t, y = sy(v);
      el("line", { x1: L, x2: W - R, y1: y, y2: y, "class": "grid" }, g);
      el("text", { x: L - 4, y: y + 4, "text-anchor": "end" }, g, num(v));
    });
    var xt = c.x === "pct" ? [] : (c.xticks || ticksLin(x0, x1, 6));
    if (c.x === "pct") for (var k = 0; k <= Math.floor(x1 + 1e-9); k++) xt.push(k);
    xt.forEach(function (t) {
      var x = sx(t);
      el("line", { x1: x, x2: x, y1: T, y2: H - B, "class": "grid" }, g);
      el("text", { x: x, y: H - B + 14, "text-anchor": "middle" }, g, c.x === "pct" ? pctLabel(t) : num(t));
    });
    el("text", { x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle", "class": "al" }, g, c.xlabel);
    el("text", { x: 12, y: (T + H - B) / 2, "text-anchor": "middle", "class": "al",
      transform: "rotate(-90 12 " + (T + H - B) / 2 + ")" }, g, c.ylabel);
    var legend = [];
    c.series.forEach(function (s, i) {
      var col = COLORS[i % COLORS.length];
      if (s.band && s.band.length) {
        var up = s.band.map(function (b) { return sx(b[0]) + "," + sy(b[2]); });
        var down = s.band.slice().reverse().map(function (b) { return sx(b[0]) + "," + sy(b[1]); });
        el("polygon", { points: up.concat(down).join(" "), fill: col, "fill-opacity": 0.15, stroke: "none" }, svg);
      }
      var line = s.points.map(function (p) { return sx(p[0]) + "," + sy(p[1]); }).join(" ");
      el("polyline", { points: line, fill: "none", stroke: col, "stroke-width": 1.6, "class": "series",
        "data-series": s.name }, svg);
      if (s.points.length < 12) s.points.forEach(function (p) {
        el("circle", { cx: sx(p[0]), cy: sy(p[1]), r: 2.5, fill: col }, svg);
      });
      legend.push([s.name, col]);
    });
    // The legend: one row under the title, each name in its line's colour.
    var lx = L;
    legend.forEach(function (l) {
      var t = el("text", { x: lx, y: 29, style: "fill: " + l[1], "class": "lg" }, svg, "— " + l[0]);
      lx += 14 + 6 * (l[0].length + 2);
      return t;
    });
  }

  var data = JSON.parse(document.getElementById("chart-data").textContent);
  document.querySelectorAll("figure.chart[data-chart]").forEach(function (fig) {
    var c = data[fig.dataset.chart];
    if (!c || !c.series.some(function (s) { return s.points.length; })) {
      fig.classList.add("empty");
      fig.textContent = "no data";
      return;
    }
    try { draw(fig, c); } catch (e) { report(fig.dataset.chart + ": " + e); }
  });

  // Sortable tables: click a header; numbers sort by data-sort.
  document.querySelectorAll("table.sortable").forEach(function (t) {
    t.querySelectorAll("thead th").forEach(function (th, i) {
      th.addEventListener("click", function () {
        var asc = th.dataset.dir !== "asc";
        t.querySelectorAll("thead th").forEach(function (h) { delete h.dataset.dir; });
        th.dataset.dir = asc ? "asc" : "desc";
        var body = t.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        var key = function (r) {
          var c = r.cells[i];
          if (!c) return "";
          return c.dataset.sort !== undefined ? parseFloat(c.dataset.sort) : c.textContent.trim();
        };
        rows.sort(function (a, b) {
          var x = key(a), y = key(b), d;
          if (typeof x === "number" && typeof y === "number") d = x - y;
          else if (typeof x === "number") d = -1;
          else if (typeof y === "number") d = 1;
          else d = x < y ? -1 : x > y ? 1 : 0;
          return asc ? d : -d;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });

  // Matrix filters: a row shows when it matches every chosen value; a row
  // of skipped cases when one of the cases it lists does.
  var selects = document.querySelectorAll("select[data-filter]");
  function filter() {
    document.querySelectorAll(".case-row").forEach(function (r) {
      var show = true;
      selects.forEach(function (s) { if (s.value && r.dataset[s.dataset.filter] !== s.value) show = false; });
      r.hidden = !show;
    });
    document.querySelectorAll("tr.skipped-run").forEach(function (r) {
      r.hidden = !r.querySelector("li.case-row:not([hidden])");
    });
  }
  selects.forEach(function (s) { s.addEventListener("change", filter); });

  // Flamegraph tabs: one family at a time.
  document.querySelectorAll(".flames").forEach(function (box) {
    box.querySelectorAll("button.tab").forEach(function (b) {
      b.addEventListener("click", function () {
        box.querySelectorAll("button.tab").forEach(function (x) { x.classList.toggle("on", x === b); });
        box.querySelectorAll("iframe.flame").forEach(function (f) { f.hidden = f.dataset.family !== b.dataset.family; });
      });
    });
  });
  document.body.setAttribute("data-ready", "1");
})();
