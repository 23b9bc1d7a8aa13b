// gvs console: keeps the page's <main> current from the server's event
// stream (/events, server-sent events). The server renders the HTML; this
// script only swaps it in. No library, nothing fetched from elsewhere.
"use strict";
(function () {
  var page = document.body.dataset.page;
  var live = document.getElementById("live");
  if (!page || page === "login" || !live || !window.EventSource) {
    return;
  }
  var query = window.location.search.replace(/^\?/, "");
  var es = new EventSource("/events?page=" + encodeURIComponent(page) + (query ? "&" + query : ""));
  es.addEventListener("open", function () { live.className = "live on"; });
  es.addEventListener("error", function () { live.className = "live off"; });
  es.addEventListener("main", function (e) {
    document.getElementById("main").innerHTML = e.data;
    document.body.dataset.updated = String(Date.now());
  });
  es.addEventListener("denied", function () {
    es.close();
    window.location.reload();
  });
})();
