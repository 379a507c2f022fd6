// The Leasehold console: follows /api/events (server-sent events, read with fetch so the bearer
// token goes in the Authorization header, never in a URL) and renders each state. Every name,
// holder and value is set as text (textContent), never as HTML.
"use strict";

const TOKEN_KEY = "leasehold-console-token";
const RETRY_MS = 2000;
const ARMED_MS = 5000;

let following = null; // the AbortController of the current stream
let retry = null;

const $ = (id) => document.getElementById(id);

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

function headers(extra) {
  const all = Object.assign({}, extra);
  if (token()) {
    all["Authorization"] = "Bearer " + token();
  }
  return all;
}

function show(id, text) {
  const element = $(id);
  element.textContent = text;
  element.hidden = !text;
}

// A refusal or failure in words: what the server said, and what gRPC code and HTTP status it was.
function described(problem, httpStatus) {
  const words = problem.words ? problem.words + "." : "";
  const code = problem.code ? " (" + problem.code + (httpStatus ? ", HTTP " + httpStatus : "") + ")" : "";
  return (problem.message || "no message") + code + (words ? "\n" + words : "");
}

async function problemOf(response) {
  try {
    return await response.json();
  } catch (_) {
    return { message: response.statusText || "the server answered " + response.status };
  }
}

function setStatus(text, live) {
  const status = $("status");
  status.textContent = text;
  status.className = live ? "status live" : "status";
}

function follow() {
  if (following) {
    following.abort();
  }
  clearTimeout(retry);
  const controller = new AbortController();
  following = controller;
  const prefix = $("prefix").value;
  setStatus("Connecting…", false);
  run(controller, prefix).catch((error) => {
    if (controller.signal.aborted) {
      return;
    }
    lost("The connection to the server was lost: " + error.message);
  });
}

function lost(why) {
  document.body.classList.add("stale");
  show("problem", why + "\nTrying again in " + RETRY_MS / 1000 + " s.");
  setStatus("Not connected.", false);
  retry = setTimeout(follow, RETRY_MS);
}

async function run(controller, prefix) {
  const response = await fetch("api/events?prefix=" + encodeURIComponent(prefix), {
    headers: headers({ Accept: "text/event-stream" }),
    signal: controller.signal,
    cache: "no-store",
  });
  if (!response.ok) {
    const problem = await problemOf(response);
    document.body.classList.add("stale");
    setStatus("Not connected.", false);
    const refused = response.status === 401 || response.status === 403;
    const hint = refused ? "\nEnter a token with the admin role, then Use token." : "";
    show("problem", described(problem, response.status) + hint);
    if (!refused) {
      retry = setTimeout(follow, RETRY_MS);
    }
    return;
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) {
      break;
    }
    buffered += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffered.indexOf("\n\n")) >= 0) {
      const block = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      heard(block);
    }
  }
  if (!controller.signal.aborted) {
    lost("The server ended the stream.");
  }
}

// One server-sent event: `event: state` or `event: problem`, its JSON in `data:` lines.
function heard(block) {
  let kind = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) {
      kind = line.slice(6).trim();
    } else if (line.startsWith("data:")) {
      data.push(line.slice(5).replace(/^ /, ""));
    }
  }
  if (data.length === 0) {
    return; // a keep-alive comment
  }
  const body = JSON.parse(data.join("\n"));
  if (kind === "state") {
    render(body);
  } else if (kind === "problem") {
    document.body.classList.add("stale");
    show("problem", "The server could not read the state: " + described(body) + "\nShowing the last state read; it updates again once the server can read.");
    setStatus("Connected, but the last read failed.", false);
  }
}

function ttl(ms) {
  if (ms >= 4294967295) {
    return "no expiry";
  }
  return (ms / 1000).toFixed(1) + " s";
}

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) {
    td.className = className;
  }
  row.appendChild(td);
  return td;
}

function revokeButton(kind, name, number, label) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "revoke";
  button.textContent = label;
  button.dataset.kind = kind;
  button.dataset.name = name;
  button.dataset.number = number;
  button.addEventListener("click", () => clicked(button));
  return button;
}

function empty(body, columns, text) {
  const row = document.createElement("tr");
  row.className = "empty";
  const td = cell(row, text);
  td.colSpan = columns;
  body.appendChild(row);
}

function render(state) {
  document.body.classList.remove("stale");
  show("problem", "");
  setStatus("Live: updated " + new Date().toLocaleTimeString() + "; the server reads every " + state.poll_ms + " ms.", true);

  const locks = $("locks").tBodies[0];
  locks.replaceChildren();
  let holdings = 0;
  for (const lock of state.locks) {
    lock.holders.forEach((held, i) => {
      holdings += 1;
      const row = document.createElement("tr");
      row.dataset.name = lock.name;
      if (i === 0) {
        const name = cell(row, lock.name, "name");
        name.rowSpan = lock.holders.length;
        let mode = lock.mode === "shared" ? "shared (readers)" : lock.limit > 1 ? "semaphore, " + lock.limit + " permits" : "lock";
        const modeCell = cell(row, mode);
        modeCell.rowSpan = lock.holders.length;
      }
      cell(row, held.holder, "holder");
      cell(row, held.fencing_token, "number");
      cell(row, ttl(held.ttl_ms), "number");
      if (i === 0) {
        const waiting = cell(row, String(lock.waiting), "number");
        waiting.rowSpan = lock.holders.length;
      }
      const action = document.createElement("td");
      action.appendChild(revokeButton("lock", lock.name, held.fencing_token, "Revoke"));
      row.appendChild(action);
      locks.appendChild(row);
    });
  }
  if (state.locks.length === 0) {
    empty(locks, 7, "No lock held" + (state.locks_truncated ? " among those listed." : "."));
  }
  const plural = (n, word) => n + " " + word + (n === 1 ? "" : "s");
  $("lock-count").textContent = "(" + plural(state.locks.length, "name") + ", " + plural(holdings, "holding") + ")";
  show("locks-note", state.locks_truncated ? "More locks are held than the server lists at once (1,000): narrow the prefix." : "");

  const elections = $("elections").tBodies[0];
  elections.replaceChildren();
  for (const election of state.elections) {
    const row = document.createElement("tr");
    row.dataset.name = election.election;
    cell(row, election.election, "name");
    cell(row, election.value, "value");
    cell(row, election.term, "number");
    cell(row, ttl(election.ttl_ms), "number");
    cell(row, String(election.waiting), "number");
    const action = document.createElement("td");
    action.appendChild(revokeButton("election", election.election, election.term, "Revoke leader"));
    row.appendChild(action);
    elections.appendChild(row);
  }
  if (state.elections.length === 0) {
    empty(elections, 6, state.elections_error ? "Elections could not be listed." : "No election has a leader.");
  }
  $("election-count").textContent = "(" + state.elections.length + ")";
  const note = state.elections_error ? "Elections: " + state.elections_error : state.elections_truncated ? "More elections have a leader than the server lists at once (1,000): narrow the prefix." : "";
  show("elections-note", note);
}

// A Revoke button asks to be clicked twice: the first click arms it for a few seconds.
function clicked(button) {
  if (!button.classList.contains("armed")) {
    button.classList.add("armed");
    button.textContent = "Confirm revoke";
    setTimeout(() => {
      button.classList.remove("armed");
      button.textContent = button.dataset.kind === "lock" ? "Revoke" : "Revoke leader";
    }, ARMED_MS);
    return;
  }
  button.disabled = true;
  revoke(button.dataset.kind, button.dataset.name, button.dataset.number);
}

async function revoke(kind, name, number) {
  const asked = { kind: kind, name: name };
  if (kind === "lock") {
    asked.fencing_token = number;
  } else {
    asked.term = number;
  }
  show("outcome", "");
  let response;
  try {
    response = await fetch("api/revoke", {
      method: "POST",
      headers: headers({ "Content-Type": "application/json" }),
      body: JSON.stringify(asked),
      cache: "no-store",
    });
  } catch (error) {
    show("problem", "Revoke of \u201c" + name + "\u201d failed: the server could not be reached (" + error.message + ").");
    return;
  }
  if (!response.ok) {
    const problem = await problemOf(response);
    show("problem", "Revoke of \u201c" + name + "\u201d failed: " + described(problem, response.status));
    return;
  }
  const answer = await response.json();
  if (kind === "lock") {
    if (answer.revoked.length === 0) {
      show("outcome", "Nothing revoked: \u201c" + name + "\u201d was no longer held with fencing token " + number + ".");
    } else {
      const ended = answer.revoked.map((held) => "holder " + held.holder + ", fencing token " + held.fencing_token).join("; ");
      show("outcome", "Revoked \u201c" + name + "\u201d (" + ended + ").");
    }
  } else if (answer.revoked) {
    show("outcome", "Revoked the leader of \u201c" + name + "\u201d (value " + answer.value + ", term " + answer.term + ").");
  } else {
    show("outcome", "Nothing revoked: \u201c" + name + "\u201d was no longer led in term " + number + ".");
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("token").value = token();
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
    follow();
  });
  $("forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    $("token").value = "";
    follow();
  });
  let typing = null;
  $("prefix").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(follow, 250);
  });
  $("filter-form").addEventListener("submit", (event) => {
    event.preventDefault();
    follow();
  });
  follow();
});
