// Live refresh: every few seconds fetch the page's live part and swap it in, so counts,
// states and new jobs appear without a reload. Paused while the tab is hidden.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var status = document.getElementById("live-status");
  if (!live || !live.dataset.refresh) {
    return;
  }
  var every = Math.max(Number(live.dataset.refresh) || 2, 0.5) * 1000;

  function show(text) {
    if (status) {
      status.textContent = text;
    }
  }

  function later() {
    window.setTimeout(tick, every);
  }

  function tick() {
    if (document.hidden) {
      later();
      return;
    }
    fetch(window.location.href, {
      headers: { "X-Pgfleet-Fragment": "1" },
      credentials: "same-origin",
      cache: "no-store",
    })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        // The server escaped every value; this is its own markup, not user input.
        live.innerHTML = html;
        live.dataset.refreshed = String(Date.now());
        show("live · " + new Date().toLocaleTimeString());
      })
      .catch(function (error) {
        show("live refresh failed (" + error.message + "), retrying");
      })
      .then(later);
  }

  later();
})();
