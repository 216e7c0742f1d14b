// The admin UI's only script besides htmx (no inline script anywhere: CSP default-src 'self').
// Every htmx request carries the session's CSRF token from <meta name="csrf-token">.
(function () {
  "use strict";
  document.addEventListener("htmx:configRequest", function (event) {
    var meta = document.querySelector('meta[name="csrf-token"]');
    if (meta && meta.content) {
      event.detail.headers["X-CSRF-Token"] = meta.content;
    }
  });
  // Forms with data-confirm="question" ask before they submit (no inline onsubmit).
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
      event.preventDefault();
    }
  }, true);
})();
