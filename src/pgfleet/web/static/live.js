// Live refresh: every few seconds fetch the page's live part and swap it in, so counts,
// states and new jobs appear without a reload. Paused while the tab is hidden. Ticked
// boxes (data-keep) survive the swap, so a selection is never lost to a refresh.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var status = document.getElementById("live-status");

  // "this page" ticks or clears every job of the page.
  document.addEventListener("change", function (event) {
    var box = event.target;
    if (box && box.id === "select-page") {
      document.querySelectorAll("input.pick").forEach(function (pick) {
        pick.checked = box.checked;
      });
    }
  });

  function ticked() {
    var keep = {};
    document.querySelectorAll("#live input[type=checkbox][data-keep]").forEach(function (box) {
      if (box.checked) {
        keep[box.dataset.keep + ":" + box.value] = true;
      }
    });
    return keep;
  }

  function tick_again(keep) {
    document.querySelectorAll("#live input[type=checkbox][data-keep]").forEach(function (box) {
      box.checked = Boolean(keep[box.dataset.keep + ":" + box.value]);
    });
  }
  if (!live || !live.dataset.refresh) {
    return;
  }
  var every = Math.max(Number(live.dataset.refresh) || 2, 0.5) * 1000;
  // When what is shown was read: after a failed refresh the page says how old it is and
  // greys it out, so a number from before an outage never passes for a current one.
  var readAt = new Date();

  function show(text, stale) {
    if (status) {
      status.textContent = text;
      status.classList.toggle("stale", stale);
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
        if (response.status === 503) {
          throw new Error("database unreachable");
        }
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        // The server escaped every value; this is its own markup, not user input.
        var keep = ticked();
        live.innerHTML = html;
        tick_again(keep);
        live.dataset.refreshed = String(Date.now());
        live.classList.remove("stale");
        delete live.dataset.stale;
        readAt = new Date();
        show("live · " + readAt.toLocaleTimeString(), false);
      })
      .catch(function (error) {
        // fetch() itself fails when the UI is down: say so the same way.
        var reason = error instanceof TypeError ? "the UI is not answering" : error.message;
        live.classList.add("stale");
        live.dataset.stale = "1";
        show(reason + ": showing data from " + readAt.toLocaleTimeString() + ", retrying",
             true);
      })
      .then(later);
  }

  later();
})();
