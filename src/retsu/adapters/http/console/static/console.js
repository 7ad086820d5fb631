// Retsu console: live refresh of the parts of a page marked data-refresh="<fragment url>".
// Every 5 s (paused while the tab is hidden) the fragment is fetched and swapped in; the
// rest of the page (and anything typed into it) stays. Without JavaScript the page is
// complete as served; only the refresh is missing.
(function () {
  "use strict";
  var INTERVAL_MS = 5000;

  // 24-hour UTC, as every other time in the console ("15:42:14 UTC"), whatever the
  // browser's locale and time zone.
  function utcTime(moment) {
    return moment.toISOString().slice(11, 19) + " UTC";
  }

  function stamp(indicator, ok) {
    if (!indicator) return;
    var now = new Date();
    indicator.classList.toggle("on", ok);
    indicator.classList.toggle("stale", !ok);
    indicator.textContent = ok
      ? "Live · updated " + utcTime(now)
      : "Live refresh failed at " + utcTime(now) + "; retrying";
  }

  function start(region) {
    var url = region.getAttribute("data-refresh");
    var indicator = document.querySelector("[data-live-indicator]");
    var busy = false;
    stamp(indicator, true);

    function refresh() {
      if (busy || document.hidden) return;
      busy = true;
      fetch(url, { credentials: "same-origin", cache: "no-store", headers: { accept: "text/html" } })
        .then(function (response) {
          // Redirected (signed out, session expired): leave the page as it is.
          if (!response.ok || response.redirected) throw new Error(String(response.status));
          return response.text();
        })
        .then(function (html) {
          var parsed = new DOMParser().parseFromString(html, "text/html");
          region.replaceChildren.apply(region, Array.prototype.slice.call(parsed.body.childNodes));
          stamp(indicator, true);
        })
        .catch(function () {
          stamp(indicator, false);
        })
        .then(function () {
          busy = false;
        });
    }

    window.setInterval(refresh, INTERVAL_MS);
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden) refresh();
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var regions = document.querySelectorAll("[data-refresh]");
    for (var i = 0; i < regions.length; i++) start(regions[i]);
  });
})();
