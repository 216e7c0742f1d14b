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

  // The record editor's file fields (templates/records/editor.html): files dropped on a field's drop
  // zone go into its file input (added to those already chosen, for a multi-file field), and the
  // names chosen are listed; a table's or editor's thumbnail that fails to load (a file Pillow cannot
  // read answers itself) is replaced by its name.
  function showChosen(input) {
    var zone = input.closest(".drop-zone");
    var list = zone && zone.querySelector(".chosen-files");
    if (list) {
      list.textContent = Array.from(input.files).map(function (file) { return file.name; }).join(", ");
    }
  }
  document.addEventListener("change", function (event) {
    var input = event.target;
    if (input instanceof HTMLInputElement && input.type === "file" && input.closest(".drop-zone")) {
      showChosen(input);
    }
  });
  ["dragenter", "dragover"].forEach(function (kind) {
    document.addEventListener(kind, function (event) {
      var zone = event.target instanceof Element ? event.target.closest(".drop-zone") : null;
      if (zone) {
        event.preventDefault();
        zone.classList.add("dragging");
      }
    });
  });
  document.addEventListener("dragleave", function (event) {
    var zone = event.target instanceof Element ? event.target.closest(".drop-zone") : null;
    if (zone && !zone.contains(event.relatedTarget)) {
      zone.classList.remove("dragging");
    }
  });
  document.addEventListener("drop", function (event) {
    var zone = event.target instanceof Element ? event.target.closest(".drop-zone") : null;
    if (!zone || !event.dataTransfer || !event.dataTransfer.files.length) {
      return;
    }
    event.preventDefault();
    zone.classList.remove("dragging");
    var input = zone.querySelector('input[type="file"]');
    var files = new DataTransfer();
    if (input.multiple) {
      Array.from(input.files).forEach(function (file) { files.items.add(file); });
      Array.from(event.dataTransfer.files).forEach(function (file) { files.items.add(file); });
    } else {
      files.items.add(event.dataTransfer.files[0]);
    }
    input.files = files.files;
    showChosen(input);
  });
  document.addEventListener("error", function (event) {
    var image = event.target;
    if (image instanceof HTMLImageElement && (image.classList.contains("thumb") || image.classList.contains("preview"))) {
      var name = document.createElement("span");
      name.className = "file-name";
      name.textContent = image.alt;
      image.replaceWith(name);
    }
  }, true);

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
