// The collections schema editor (templates/collections/form.html): add and remove field rows (a
// clone of <template id="field-row-template">), show the options of each row's type, keep the
// rule suggestions (<datalist>) in step with the field names, lock a field's view or write rule to
// "admins only", and swap the default rules when the type of a new collection changes. No inline
// script anywhere (CSP default-src 'self').
(function () {
  "use strict";
  var form = document.getElementById("collection-form");
  if (!form) {
    return;
  }
  var rows = document.getElementById("field-rows");
  var template = document.getElementById("field-row-template");
  var next = rows.querySelectorAll(".field-row").length;
  var SYSTEM = ["created", "id", "updated"];
  var AUTH = ["@request.auth.collection", "@request.auth.email", "@request.auth.id", "@request.auth.role",
              "@request.auth.verified"];

  function fieldNames() {
    var names = [];
    rows.querySelectorAll("input.field-name").forEach(function (input) {
      var value = input.value.trim();
      if (value && names.indexOf(value) < 0) {
        names.push(value);
      }
    });
    return names;
  }

  function fill(list, values) {
    if (!list) {
      return;
    }
    while (list.firstChild) {
      list.removeChild(list.firstChild);
    }
    values.forEach(function (value) {
      var option = document.createElement("option");
      option.value = value;
      list.appendChild(option);
    });
  }

  function refreshSuggestions() {
    var names = fieldNames();
    var base = SYSTEM.concat(names).concat(AUTH);
    fill(document.getElementById("suggest"), base);
    fill(document.getElementById("suggest-data"), base.concat(names.map(function (n) { return "@request.data." + n; })));
  }

  function addRow() {
    var index = String(next);
    next += 1;
    var clone = template.content.cloneNode(true);
    clone.querySelectorAll("[name], [id], label[for]").forEach(function (element) {
      if (element.name) {
        element.name = element.name.replace("__i__", index);
      }
      if (element.id) {
        element.id = element.id.replace("__i__", index);
      }
      if (element.htmlFor) {
        element.htmlFor = element.htmlFor.replace("__i__", index);
      }
    });
    var row = clone.querySelector(".field-row");
    row.dataset.row = index;
    rows.appendChild(clone);
    row.querySelector("input.field-name").focus();
  }

  document.getElementById("add-field").addEventListener("click", addRow);

  rows.addEventListener("click", function (event) {
    var button = event.target.closest(".remove-field");
    if (button) {
      button.closest(".field-row").remove();
      refreshSuggestions();
    }
  });

  rows.addEventListener("change", function (event) {
    if (event.target.classList.contains("field-type")) {
      event.target.closest(".field-row").dataset.type = event.target.value;
    }
    if (event.target.classList.contains("field-rule-lock")) {
      // A field's locked rule (admins only) has no expression either; empty means no restriction.
      var input = event.target.closest(".field-rule").querySelector(".field-rule-input");
      input.readOnly = event.target.checked;
      input.placeholder = event.target.checked ? "admins only" : "no restriction";
    }
  });

  rows.addEventListener("input", function (event) {
    if (event.target.classList.contains("field-name")) {
      refreshSuggestions();
    }
  });

  // A locked rule (admins only) has no expression: its input is read-only until unlocked.
  function showLock(lock) {
    var input = document.getElementById(lock.id.replace("lock-", "rule-input-"));
    input.readOnly = lock.checked;
    input.placeholder = lock.checked ? "admins only" : "everyone";
  }

  form.querySelectorAll("#rules input[type=checkbox]").forEach(function (lock) {
    lock.addEventListener("change", function () { showLock(lock); });
  });

  var type = document.getElementById("collection-type");
  if (type) {
    type.addEventListener("change", function () {
      var previous = form.dataset.type;
      var now = type.value;
      form.dataset.type = now;
      // Rules still at the previous type's defaults take the new type's defaults.
      form.querySelectorAll("#rules input[type=text]").forEach(function (input) {
        var lock = document.getElementById(input.id.replace("rule-input-", "lock-"));
        if (input.value === input.dataset[previous] &&
            lock.checked === (input.dataset[previous + "Locked"] === "true")) {
          input.value = input.dataset[now];
          lock.checked = input.dataset[now + "Locked"] === "true";
          showLock(lock);
        }
      });
      refreshSuggestions();
    });
  }
})();
