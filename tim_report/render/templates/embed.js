/* tim-report: draws each chart of the page from the specs in #tim-specs (JSON, not script), with Vega's expression
   interpreter (ast: true; vega-embed carries one) so that no code is generated at run time: the page's
   Content-Security-Policy allows no eval. */
(function () {
  "use strict";
  // Python's format(x, ".{d}g"), exponent written compactly (1.2e-4): catalogue/numbers.py's fmt for a float.
  function fmt(x, d) {
    if (x === null || x === undefined || isNaN(x)) { return "—"; }
    if (!isFinite(x)) { return x > 0 ? "∞" : "−∞"; }
    if (x === 0) { return "0"; }
    d = d || 3;
    var a = Math.abs(x);
    if (a > 0.99 && a < 1) { d = Math.max(d, 2 - Math.floor(Math.log10(1 - a))); }
    var parts = x.toExponential(d - 1).split("e"), exp = parseInt(parts[1], 10);
    var strip = function (s) { return s.indexOf(".") < 0 ? s : s.replace(/0+$/, "").replace(/\.$/, ""); };
    if (exp < -4 || exp >= d) { return strip(parts[0]) + "e" + exp; }
    return strip(x.toFixed(Math.max(0, d - 1 - exp)));
  }
  function fixed(x) { return x === null || !isFinite(x) ? "—" : x.toFixed(4); }
  var VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍", "\u00a0": "⍽", "\u200b": "⟨zwsp⟩", "\ufeff": "⟨bom⟩",
                 "\u007f": "␡"};
  function visible(t) {  // render/token_text.py's visible: whitespace and control characters as symbols
    if (t === null || t === undefined) { return ""; }
    var out = String(t).replace(/[\u0000-\u001f\u007f\u00a0\u200b\ufeff ]/g, function (c) {
      return VISIBLE[c] || String.fromCharCode(0x2400 + c.charCodeAt(0));
    });
    return out || "∅";
  }
  // The sampled sequences' token tables, drawn from samples.js (one copy of the rows, not table markup): the
  // columns, marks and shading render/views.py's token_rows gave the page's own tables.
  function drawTokenTables() {
    var data = window.timSamples, section = document.getElementById("samples");
    if (!data || !section) { return; }
    var b5 = parseFloat(section.dataset.b5), b2 = parseFloat(section.dataset.b2), hot = parseFloat(section.dataset.hot);
    var head = ["pos", "", "token", "diff", "r", "rollout logp", "trainer logp", "p_rollout", "p_trainer"];
    section.querySelectorAll("[data-sample]").forEach(function (holder) {
      var s = data.samples[parseInt(holder.dataset.sample, 10)], rows = s && s.rows;
      if (!rows) { return; }
      var n = (rows.rollout_logp || rows.trainer_logp || []).length;
      var off = {}, bad = {};
      (rows.unmasked || []).forEach(function (i) { off[i] = true; });
      (rows.invalid || []).forEach(function (i) { bad[i] = true; });
      var order = holder.dataset.rows ? holder.dataset.rows.split(" ").map(Number) : Array.from({length: n}, function (_, i) { return i; });
      var table = document.createElement("table"), thead = table.createTHead(), tr = thead.insertRow();
      table.className = "tok";
      head.forEach(function (h) { var th = document.createElement("th"); th.textContent = h; tr.appendChild(th); });
      var body = table.createTBody();
      order.forEach(function (i) {
        var ro = rows.rollout_logp ? rows.rollout_logp[i] : null, tl = rows.trainer_logp ? rows.trainer_logp[i] : null;
        var diff = ro === null || tl === null ? null : tl - ro;
        var r = diff === null ? null : Math.exp(Math.min(Math.max(diff, -20), 20));
        var rCls = "", mark = "";
        if (r !== null && (r < 1 / b5 || r > b5)) { rCls = "o5"; mark = r > 1 ? "▲" : "▼"; }
        else if (r !== null && (r < 1 / b2 || r > b2)) { rCls = "o2"; mark = r > 1 ? "△" : "▽"; }
        var isHot = diff !== null && Math.abs(diff) > hot;
        var flag = (isHot ? "●" : "") + (off[i] ? "m" : "") + (bad[i] ? "✗" : "");
        var row = body.insertRow();
        var cls = [isHot ? "hot" : "", off[i] ? "off" : ""].filter(Boolean).join(" ");
        if (cls) { row.className = cls; }
        [String(i), flag, visible(rows.token ? rows.token[i] : rows.token_id ? "[" + rows.token_id[i] + "]" : null), fmt(diff), (mark ? mark + " " : "") + fmt(r, 5),
         fixed(ro), fixed(tl), fmt(ro === null ? null : Math.exp(ro), 4), fmt(tl === null ? null : Math.exp(tl), 4)
        ].forEach(function (text, k) {
          var td = row.insertCell();
          td.textContent = text;
          if (k === 4 && rCls) { td.className = rCls; }
        });
      });
      holder.appendChild(table);
    });
  }
  // A link into a folded section (a headline card's #g-ess into the glossary) opens the folds around its target.
  function unfold() {
    var target = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
    for (var el = target; el; el = el.parentElement) {
      if (el.tagName === "DETAILS") { el.open = true; }
    }
    if (target) { target.scrollIntoView(); }
  }
  window.addEventListener("hashchange", unfold);
  drawTokenTables();
  unfold();
  var holder = document.getElementById("tim-specs");
  if (!holder) { return; }
  var specs = JSON.parse(holder.textContent);
  var dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  specs.forEach(function (c) {
    var el = document.getElementById("chart-" + c.id);
    if (!el) { return; }
    var spec = c.spec;
    if (dark) { spec = JSON.parse(JSON.stringify(spec).split('"#111"').join('"#eee"')); }
    var opts = {mode: "vega-lite", renderer: "svg", actions: false, config: {background: null},
                ast: true, defaultStyle: false, tooltip: {disableDefaultStyle: true, theme: dark ? "dark" : "light"}};
    if (dark) { opts.theme = "dark"; }
    window.vegaEmbed(el, spec, opts).catch(function (err) {
      el.textContent = "This chart could not be drawn: " + err;
      console.error(err);
    });
  });
})();
