/**
 * The dashboard's one script, served by the worker at /assets/dashboard.js. Every page works
 * without it; with it, times show in the viewer's zone, costs and time-left tick, copy buttons
 * appear, and the live regions follow the page's server-sent event stream.
 */
export const CLIENT_SCRIPT = `"use strict";
(function () {
  var pad = function (n) { return String(n).padStart(2, "0"); };
  var fmtTime = new Intl.DateTimeFormat(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" });

  function localizeTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      if (el.dataset.localized) return;
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d.getTime())) return;
      el.textContent = fmtTime.format(d);
      el.title = d.toISOString().replace("T", " ").replace(/\\.\\d+Z$/, " UTC");
      el.dataset.localized = "1";
    });
  }

  function duration(ms) {
    var s = Math.max(0, Math.round(ms / 1000));
    var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
    if (h >= 48) return Math.floor(h / 24) + " d " + (h % 24) + " h";
    if (h > 0) return h + " h " + pad(m) + " min";
    if (m > 0) return m + " min " + pad(sec) + " s";
    return sec + " s";
  }

  var moneyFormats = {};
  function money(amount, currency) {
    var f = moneyFormats[currency] || (moneyFormats[currency] = new Intl.NumberFormat("en-US", { style: "currency", currency: currency, minimumFractionDigits: 4, maximumFractionDigits: 4 }));
    return f.format(amount);
  }

  // Ticking values count from the moment this page received them, so a skewed clock does not matter.
  function stamp(root) {
    var now = Date.now();
    root.querySelectorAll("[data-cost], [data-left-ms]").forEach(function (el) { el.dataset.seen = String(now); });
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("[data-cost][data-rate-h]").forEach(function (el) {
      var cost = Number(el.dataset.cost) + Number(el.dataset.rateH) * (now - Number(el.dataset.seen)) / 3600000;
      if (el.dataset.cap) cost = Math.min(cost, Math.max(Number(el.dataset.cap), Number(el.dataset.cost)));
      el.textContent = money(cost, el.dataset.currency || "USD");
    });
    document.querySelectorAll("[data-left-ms]").forEach(function (el) {
      el.textContent = duration(Number(el.dataset.leftMs) - (now - Number(el.dataset.seen)));
    });
  }

  function fallbackCopy(text) {
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "visually-hidden";
    document.body.appendChild(area);
    area.select();
    try { document.execCommand("copy"); } catch (e) {}
    document.body.removeChild(area);
  }

  function enableCopy(root) {
    root.querySelectorAll("button[data-copy]").forEach(function (button) { button.hidden = false; });
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button[data-copy]");
    if (!button) return;
    var text = button.dataset.copy;
    var done = function () {
      button.textContent = "Copied";
      announce("Copied " + text);
      setTimeout(function () { button.textContent = "Copy"; }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { fallbackCopy(text); done(); });
    } else { fallbackCopy(text); done(); }
  });

  function announce(text) {
    var el = document.getElementById("announcer");
    if (el) el.textContent = text;
  }

  function enhance(root) { localizeTimes(root); stamp(root); enableCopy(root); }

  function statuses(root) {
    var out = {};
    root.querySelectorAll("[data-lease-id][data-status]").forEach(function (el) { out[el.dataset.leaseId] = el.dataset.status; });
    return out;
  }

  // Replaces a live region's content, keeping keyboard focus on the same control when it is still there.
  function replace(id, html) {
    var region = document.getElementById(id);
    if (!region) return;
    var before = statuses(region);
    var focused = document.activeElement && region.contains(document.activeElement) ? document.activeElement.getAttribute("data-focus-key") : null;
    region.innerHTML = html;
    enhance(region);
    if (focused) {
      var again = region.querySelector('[data-focus-key="' + focused + '"]');
      if (again) again.focus();
    }
    var after = statuses(region), changes = [];
    Object.keys(after).forEach(function (leaseId) {
      if (before[leaseId] && before[leaseId] !== after[leaseId]) changes.push(leaseId + " is now " + after[leaseId]);
    });
    if (changes.length) announce(changes.join(". "));
    tick();
  }

  function follow(url) {
    var source = new EventSource(url);
    ["leases", "lease", "alarms"].forEach(function (name) {
      source.addEventListener(name, function (event) {
        var message = JSON.parse(event.data);
        replace(message.target, message.html);
      });
    });
    source.addEventListener("event", function (event) {
      var message = JSON.parse(event.data);
      var list = document.getElementById("events");
      if (!list || list.querySelector('[data-seq="' + message.seq + '"]')) return;
      var empty = document.getElementById("events-empty");
      if (empty) empty.remove();
      list.insertAdjacentHTML("beforeend", message.html);
      enhance(list);
    });
    source.addEventListener("ended", function () {
      source.close();
      location.assign("/login?expired=1&next=" + encodeURIComponent(location.pathname + location.search));
    });
  }

  function confirmTyped(root) {
    root.querySelectorAll("[data-confirm-phrase]").forEach(function (form) {
      var input = form.querySelector("input[name=confirm]");
      var button = form.querySelector("button[type=submit]");
      if (!input || !button) return;
      var update = function () { button.disabled = input.value.trim() !== form.dataset.confirmPhrase; };
      input.addEventListener("input", update);
      update();
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    enhance(document);
    confirmTyped(document);
    setInterval(tick, 1000);
    var live = document.body.dataset.live;
    if (live && window.EventSource) follow(live);
  });
})();
`;
