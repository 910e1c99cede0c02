/* tim-report: draws each chart of the page from the specs in #tim-specs (JSON, not script), with Vega's expression
   interpreter (ast: true; vega-embed carries one) so that no code is generated at run time: the page's
   Content-Security-Policy allows no eval. */
(function () {
  "use strict";
  // A link into a folded section (a headline card's #g-ess into the glossary) opens the folds around its target.
  function unfold() {
    var target = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
    for (var el = target; el; el = el.parentElement) {
      if (el.tagName === "DETAILS") { el.open = true; }
    }
    if (target) { target.scrollIntoView(); }
  }
  window.addEventListener("hashchange", unfold);
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
