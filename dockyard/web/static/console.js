// dockyard console: the live parts, and nothing the pages need to work without it.
// - [data-live="URL"]: re-fetched every 2 s while the page is visible; the server
//   renders just that region (its `fragment` query), which replaces the region's content.
// - [data-until="ISO time"]: a countdown, against the server's clock (which may be a
//   manual one): the server's "now" rides on every page and region as data-server-now.
"use strict";

let offset = 0; // the server's clock minus this browser's, in ms

function readServerNow(root) {
  const marks = root.querySelectorAll("[data-server-now]");
  const mark = marks.length ? marks[marks.length - 1] : null;
  const value = mark ? Date.parse(mark.dataset.serverNow) : NaN;
  if (!Number.isNaN(value)) offset = value - Date.now();
}

function words(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60), r = s % 60;
  const two = (n) => String(n).padStart(2, "0");
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${two(m)}m`;
  if (m) return `${m}m ${two(r)}s`;
  return `${r}s`;
}

function tick() {
  const now = Date.now() + offset;
  document.querySelectorAll("[data-until]").forEach((el) => {
    const until = Date.parse(el.dataset.until);
    if (!Number.isNaN(until)) el.textContent = `${words((until - now) / 1000)} left`;
  });
}

async function refresh(region) {
  if (document.hidden || region.dataset.busy) return;
  region.dataset.busy = "1";
  try {
    const response = await fetch(region.dataset.live, { credentials: "same-origin" });
    if (response.redirected || response.status === 401) {
      window.location.reload(); // signed out: the page says so
    } else if (response.ok) {
      const html = await response.text();
      // Keep the reader's place: a focused control inside is left alone this round.
      if (!region.contains(document.activeElement) || document.activeElement === document.body) {
        region.innerHTML = html;
        readServerNow(region);
        tick();
      }
    }
  } catch (_) {
    // The server is away for a moment (a restart): the next round tries again.
  } finally {
    delete region.dataset.busy;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  readServerNow(document);
  tick();
  setInterval(tick, 1000);
  setInterval(() => document.querySelectorAll("[data-live]").forEach(refresh), 2000);
});
