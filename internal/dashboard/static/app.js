// agq dashboard: refreshes the live parts of the page ([data-live]) by
// fetching the page again every data-refresh seconds while the page is
// open and visible. Nothing polls when no page is open or the tab is
// hidden; nothing here ever sees a key (the session cookie is HttpOnly).
(function () {
  "use strict";
  var seconds = parseInt(document.body.getAttribute("data-refresh"), 10);
  if (!seconds || !window.fetch || !window.DOMParser) return;
  var status = document.getElementById("live-status");
  var busy = false;

  function refresh() {
    if (busy || document.visibilityState !== "visible") return;
    busy = true;
    fetch(window.location.href, { headers: { "X-AGQ-Live": "1" }, credentials: "same-origin", cache: "no-store" })
      .then(function (res) {
        if (res.status === 401) { window.location.reload(); throw new Error("signed out"); }
        if (!res.ok) throw new Error("HTTP " + res.status);
        return res.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (el) {
          var fresh = doc.getElementById(el.id);
          // A form being used (focused) is not replaced under the user.
          if (fresh && !el.contains(document.activeElement)) el.innerHTML = fresh.innerHTML;
        });
        if (status) status.textContent = "live: updated " + new Date().toLocaleTimeString();
      })
      .catch(function (err) {
        if (status) status.textContent = "live: " + err.message + "; retrying";
      })
      .then(function () { busy = false; });
  }

  setInterval(refresh, seconds * 1000);
  document.addEventListener("visibilitychange", refresh);
})();
