// takohost console: the live instance page, the terminate confirmation, the go-to-instance
// shortcut and copy-link. No framework, no build.
"use strict";

(function () {
  // Live: while the instance is not terminal, ask every data-poll-ms whether it changed
  // (204: no), and swap in the new live part when it did. What the reader was at survives the
  // swap: the focused element (by id, else by its place among the focusable elements of its
  // lane or of the live part), each scrolled panel's position, the page's scroll and the open
  // <details>. The logs panel shows its newest line (the bottom) unless the reader scrolled up.
  var FOCUSABLE = "a[href], button, input, select, textarea, [tabindex]";
  function follow(root) {
    Array.prototype.forEach.call(root.querySelectorAll("pre[data-follow]"), function (pre) {
      pre.scrollTop = pre.scrollHeight;
    });
  }

  function indexIn(scope, el) {
    return Array.prototype.indexOf.call(scope.querySelectorAll(FOCUSABLE), el);
  }

  function remember(live) {
    var state = {focus: null, panels: [], x: window.scrollX, y: window.scrollY};
    var active = document.activeElement;
    if (active && active !== live && live.contains(active)) {
      var lane = active.closest("[data-lane]");
      state.focus = {
        id: active.id || null,
        lane: lane ? lane.getAttribute("data-lane") : null,
        index: indexIn(lane || live, active)
      };
    }
    Array.prototype.forEach.call(live.querySelectorAll("pre, .scroll"), function (panel, i) {
      var bottom = panel.scrollHeight - panel.scrollTop - panel.clientHeight < 4;
      state.panels.push({key: panelKey(panel, i), top: panel.scrollTop, bottom: bottom,
                         follows: panel.hasAttribute("data-follow")});
    });
    return state;
  }

  // A panel is known by its test id or label (stable when other panels come or go), else its place.
  function panelKey(panel, i) {
    return panel.getAttribute("data-testid") || panel.getAttribute("aria-label") || "#" + i;
  }

  function restore(live, state) {
    var panels = {};
    Array.prototype.forEach.call(live.querySelectorAll("pre, .scroll"), function (panel, i) {
      panels[panelKey(panel, i)] = panel;
    });
    state.panels.forEach(function (p) {
      var panel = panels[p.key];
      if (!panel) { return; }
      panel.scrollTop = (p.follows && p.bottom) ? panel.scrollHeight : p.top;
    });
    var f = state.focus;
    if (f) {
      var target = f.id ? document.getElementById(f.id) : null;
      if (!target) {
        var scope = live;
        if (f.lane !== null) {
          scope = Array.prototype.filter.call(live.querySelectorAll("[data-lane]"), function (l) {
            return l.getAttribute("data-lane") === f.lane;
          })[0] || live;
        }
        var all = scope.querySelectorAll(FOCUSABLE);
        target = all[Math.min(f.index, all.length - 1)] || null;
      }
      if (target && typeof target.focus === "function") { target.focus({preventScroll: true}); }
    }
    window.scrollTo(state.x, state.y);
  }

  function startLive(live) {
    follow(live);
    var url = live.getAttribute("data-live-url");
    var every = parseInt(live.getAttribute("data-poll-ms"), 10) || 1000;
    var busy = false;
    function tick() {
      if (live.getAttribute("data-terminal") === "true") { return; }
      if (busy || document.hidden) { schedule(); return; }
      busy = true;
      var sep = url.indexOf("?") < 0 ? "?" : "&";
      fetch(url + sep + "v=" + encodeURIComponent(live.getAttribute("data-version")),
            {credentials: "same-origin", headers: {"Accept": "application/json"}})
        .then(function (r) {
          if (r.status === 204) { return null; }
          if (r.status === 401) { window.location.reload(); return null; }
          if (!r.ok) { throw new Error("HTTP " + r.status); }
          return r.json();
        })
        .then(function (data) {
          if (!data) { return; }
          var openDetails = Array.prototype.map.call(live.querySelectorAll("details[open] > summary"),
                                                     function (s) { return s.textContent; });
          var state = remember(live);
          live.innerHTML = data.html;
          Array.prototype.forEach.call(live.querySelectorAll("details > summary"), function (s) {
            if (openDetails.indexOf(s.textContent) >= 0) { s.parentNode.open = true; }
          });
          live.setAttribute("data-version", data.v);
          restore(live, state);
          live.setAttribute("data-terminal", data.terminal ? "true" : "false");
          if (data.terminal) {  // an ended instance takes no actions: say so instead of the forms
            Array.prototype.forEach.call(document.querySelectorAll(".action-forms"), function (f) { f.hidden = true; });
            Array.prototype.forEach.call(document.querySelectorAll(".terminal-note"), function (n) { n.hidden = false; });
          }
          live.dispatchEvent(new CustomEvent("console:updated", {bubbles: true}));
        })
        .catch(function () { /* keep the page as it is; try again */ })
        .then(function () { busy = false; schedule(); });
    }
    function schedule() {
      if (live.getAttribute("data-terminal") !== "true") { window.setTimeout(tick, every); }
    }
    schedule();
  }

  // "/" focuses the header's go-to-instance box (unless typing in a field already).
  function goShortcut(ev) {
    if (ev.key !== "/" || ev.ctrlKey || ev.metaKey || ev.altKey) { return; }
    var t = ev.target, tag = t && t.tagName;
    if (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || (t && t.isContentEditable)) { return; }
    var box = document.getElementById("goto");
    if (box) { ev.preventDefault(); box.focus(); box.select(); }
  }

  // Copy link: the page's URL by workflow name, absolute, to the clipboard (a selected text field
  // to copy by hand where the clipboard is refused).
  function copyLink(button) {
    var url = new URL(button.getAttribute("data-copy"), window.location.href).href;
    var status = button.parentNode.querySelector("[role=status]");
    function done(text) { if (status) { status.textContent = text; } }
    function byHand() {
      var field = document.createElement("input");
      field.value = url; field.setAttribute("aria-label", "Link to this page"); field.readOnly = true;
      button.parentNode.appendChild(field); field.select();
      done(document.execCommand && document.execCommand("copy") ? "Link copied." : "Copy the selected link.");
    }
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(url).then(function () { done("Link copied."); }, byHand);
    } else { byHand(); }
  }

  // Times: "3 min ago" (the UTC instant is the tooltip) and "for 12 s" of a step in flight, kept
  // current every second (the server wrote them at render time). Mirrors where.relative_text.
  function duration(seconds) {
    if (seconds < 10) { return seconds.toPrecision(3).replace(/\.?0+$/, "") + " s"; }
    if (seconds < 60) { return Math.round(seconds) + " s"; }
    if (seconds < 3600) { return Math.floor(seconds / 60) + " min " + Math.floor(seconds % 60) + " s"; }
    if (seconds < 86400) { return Math.floor(seconds / 3600) + " h " + Math.floor(seconds % 3600 / 60) + " min"; }
    return Math.floor(seconds / 86400) + " d " + Math.floor(seconds % 86400 / 3600) + " h";
  }
  function relative(seconds) {
    var ahead = seconds < 0, s = Math.abs(seconds), units = [[60, "s", 1], [3600, "min", 60], [86400, "h", 3600], [Infinity, "d", 86400]];
    if (s < 5) { return "just now"; }
    for (var i = 0; i < units.length; i++) {
      if (s < units[i][0]) {
        var amount = Math.floor(s / units[i][2]) + " " + units[i][1];
        return ahead ? "in " + amount : amount + " ago";
      }
    }
  }
  function refreshTimes() {
    var now = Date.now();
    Array.prototype.forEach.call(document.querySelectorAll("time[data-rel]"), function (t) {
      var at = Date.parse(t.getAttribute("datetime"));
      if (!isNaN(at)) { t.textContent = relative((now - at) / 1000); }
    });
    Array.prototype.forEach.call(document.querySelectorAll(".elapsed[data-since]"), function (e) {
      var at = Date.parse(e.getAttribute("data-since"));
      if (!isNaN(at)) { e.textContent = duration(Math.max(0, (now - at) / 1000)); }
    });
  }
  window.setInterval(refreshTimes, 1000);

  // A list that refreshes itself (an instance list's first page): fetch the page again and swap
  // in the same element of the answer, while the tab is visible and no field inside has focus.
  function startRefresh(box) {
    var every = parseInt(box.getAttribute("data-refresh-ms"), 10) || 5000;
    window.setInterval(function () {
      if (document.hidden || box.contains(document.activeElement)) { return; }
      fetch(window.location.href, {credentials: "same-origin"})
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (!html) { return; }
          var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(box.id);
          if (fresh) { box.innerHTML = fresh.innerHTML; refreshTimes(); }
        })
        .catch(function () { /* try again next time */ });
    }, every);
  }

  document.addEventListener("keydown", goShortcut);
  document.addEventListener("click", function (ev) {
    var button = ev.target.closest && ev.target.closest("button[data-copy]");
    if (button) { copyLink(button); }
  });

  document.addEventListener("DOMContentLoaded", function () {
    var live = document.getElementById("live");
    if (live) { startLive(live); }
    Array.prototype.forEach.call(document.querySelectorAll("[data-refresh-ms]"), startRefresh);
    Array.prototype.forEach.call(document.querySelectorAll("form[data-confirm]"), function (form) {
      form.addEventListener("submit", function (ev) {
        if (!window.confirm(form.getAttribute("data-confirm"))) { ev.preventDefault(); }
      });
    });
  });
})();
