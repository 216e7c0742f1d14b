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

  // The record editor's relation pickers (templates/records/editor.html): a search answered by the
  // server (htmx) lists records; clicking one puts its id in the relation's input (replacing the
  // value, or added up to data-max ids) and shows it with its label; x removes one.
  function idsOf(input) {
    return input.value.split(/[\s,]+/).filter(Boolean);
  }
  function chip(id, label) {
    var item = document.createElement("li");
    item.dataset.id = id;
    if (label) {
      var text = document.createElement("span");
      text.className = "relation-label";
      text.textContent = label;
      item.append(text, " ");
    }
    var code = document.createElement("code");
    code.textContent = id;
    var remove = document.createElement("button");
    remove.type = "button";
    remove.className = "relation-remove link";
    remove.setAttribute("aria-label", "Remove " + id);
    remove.textContent = "\u00d7";
    item.append(code, " ", remove);
    return item;
  }
  function pick(picker, id, label) {
    var input = picker.querySelector(".relation-ids");
    var chosen = picker.querySelector(".relation-chosen");
    var note = picker.querySelector(".relation-note");
    var ids = idsOf(input);
    var max = parseInt(picker.dataset.max, 10) || 1;
    if (note) { note.textContent = ""; }
    if (picker.dataset.multi !== "true") {
      ids = [id];
      chosen.replaceChildren();
    } else if (ids.indexOf(id) >= 0) {
      return;
    } else if (ids.length >= max) {
      if (note) { note.textContent = "At most " + max + " records: remove one first."; }
      return;
    } else {
      ids.push(id);
    }
    input.value = ids.join(", ");
    chosen.append(chip(id, label));
    if (picker.dataset.multi !== "true") {
      picker.querySelector(".relation-options").replaceChildren();
    }
  }
  document.addEventListener("click", function (event) {
    var target = event.target instanceof Element ? event.target : null;
    var option = target && target.closest(".relation-option");
    var remove = target && target.closest(".relation-remove");
    var picker = target && target.closest(".relation-picker");
    if (!picker || !(option || remove)) {
      return;
    }
    if (option) {
      pick(picker, option.dataset.id, option.dataset.label);
      return;
    }
    var item = remove.closest("li");
    var input = picker.querySelector(".relation-ids");
    input.value = idsOf(input).filter(function (id) { return id !== item.dataset.id; }).join(", ");
    item.remove();
  });
  // Ids typed or pasted into the input: drop the labels of ids no longer there, list new ones bare.
  document.addEventListener("input", function (event) {
    var input = event.target;
    if (!(input instanceof HTMLInputElement) || !input.classList.contains("relation-ids")) {
      return;
    }
    var chosen = input.closest(".relation-picker").querySelector(".relation-chosen");
    var ids = idsOf(input);
    var shown = {};
    Array.from(chosen.children).forEach(function (item) {
      if (ids.indexOf(item.dataset.id) < 0 || shown[item.dataset.id]) { item.remove(); } else { shown[item.dataset.id] = true; }
    });
    ids.forEach(function (id) { if (!shown[id]) { shown[id] = true; chosen.append(chip(id, "")); } });
  });

  // The records table's live indicator (#live-status, templates/records/index.html): what htmx's SSE
  // extension reports of the page's stream. "open" while connected; "connecting" while the browser
  // reconnects; "off" once the extension closed it (it retries later, and then reports again).
  function liveStatus(state, title) {
    var status = document.getElementById("live-status");
    if (status) {
      status.dataset.state = state;
      status.title = title;
    }
  }
  document.addEventListener("htmx:sseOpen", function () {
    liveStatus("open", "Live: the table updates itself");
  });
  document.addEventListener("htmx:sseError", function (event) {
    var source = event.detail && event.detail.source;
    if (source && source.readyState === EventSource.CONNECTING) {
      liveStatus("connecting", "Reconnecting to live updates");
    } else {
      liveStatus("off", "Live updates are off; reload the page to see changes");
    }
  });
  document.addEventListener("htmx:sseClose", function () {
    liveStatus("off", "Live updates are off; reload the page to see changes");
  });
})();
