(function () {
  "use strict";
  var specs = JSON.parse(document.getElementById("tim-specs").textContent);
  var dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  specs.forEach(function (c) {
    var el = document.getElementById("chart-" + c.id);
    if (!el) { return; }
    var spec = c.spec;
    if (dark) { spec = JSON.parse(JSON.stringify(spec).split('"#111"').join('"#eee"')); }
    var opts = {mode: "vega-lite", renderer: "svg", actions: false, config: {background: null}};
    if (dark) { opts.theme = "dark"; }
    window.vegaEmbed(el, spec, opts).catch(function (err) {
      el.textContent = "This chart could not be drawn: " + err;
      console.error(err);
    });
  });
})();
