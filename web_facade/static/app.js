// The agentik chat page. It talks to the public /agentik API only (docs/agentik-api.md):
// conversations, history, turns streamed as server-sent events, the live event stream of the
// open conversation, human-in-the-loop answers. Plain modern JavaScript modules, no build step;
// marked and DOMPurify are vendored next to it (VENDORED.md).

import { API, TOKEN_KEY, HttpError, call, pause, stream, whenUnauthenticated } from "./api.js";
import { copyCode } from "./markdown.js";
import { View, element, seconds } from "./view.js";

const $ = (id) => document.getElementById(id);
const NARROW = window.matchMedia("(max-width: 720px)");

let current = null; // the open View
let conversations = [];
let renaming = false; // a title is being edited in the list
let agents = []; // the agents the server serves (docs/agents.md), the default one first

// -- the turn this tab started, kept across a reload -------------------------------------

// {after}: the event id before the turn began; a reload replays the turn from there.
const runKey = (id) => `agentik.run.${id}`;
const saveRun = (id, after) => sessionStorage.setItem(runKey(id), JSON.stringify({ after }));
const clearRun = (id) => sessionStorage.removeItem(runKey(id));
function loadRun(id) {
  try {
    return JSON.parse(sessionStorage.getItem(runKey(id)) || "null");
  } catch {
    return null;
  }
}

// -- status and busy state -------------------------------------------------------------------

const ANSWERING = "The agent is answering…";

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

function showError(error) {
  setStatus(error.message || String(error), true);
}

// Busy shows Stop and holds Send; it never wipes a message that says what went wrong.
function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").hidden = !busy;
  if (busy) setStatus(ANSWERING);
  else if ($("status").textContent === ANSWERING) setStatus("");
}

function askForToken(message) {
  $("token-form").hidden = false;
  setStatus(message || "This server needs a token.", true);
}
whenUnauthenticated(askForToken);

// Why the server refused a send; the typed message stays in the composer.
function refusal(error) {
  if (error.code === "busy") return "Not sent: the agent is still answering. Your message is kept: send it once the turn ends.";
  if (error.code === "input_required") return "Not sent: this conversation waits for your answer above. Your message is kept.";
  return `Not sent: ${error.message}. Your message is kept.`;
}

// -- turns ------------------------------------------------------------------------------------

const actions = {
  busy: (busy) => setBusy(busy),
  turnEnded: () => {
    if (current) clearRun(current.id);
    loadConversations().catch(showError);
  },
  resume: (view, decisions) => resume(view, decisions).catch(showError),
  retry: (text) => send(text).catch(showError),
  edit: (view, messageId, text) => editAndResend(view, messageId, text).catch(showError),
  status: (text) => setStatus(text, true),
};

// Sends one message. The composer is emptied only once the server has accepted it: a refused
// send (409 busy, 409 input_required, ...) keeps the text and says why.
async function send(text, fromComposer = false) {
  if (!current) await createConversation(text);
  const view = current;
  await giveTitle(view, text);
  saveRun(view.id, view.lastEventId);
  $("send").disabled = true;
  let taken = false;
  const onOpen = () => {
    taken = true;
    if (fromComposer && $("input").value.trim() === text) $("input").value = "";
  };
  try {
    const onFrame = (frame) => view.frame(frame);
    await stream("POST", `${API}/${view.id}/send`, { body: { text }, signal: view.signal, onFrame, onOpen });
  } catch (error) {
    // Once taken, the turn goes on in the engine whatever happens to this stream: the
    // conversation's follow shows the rest.
    if (view.signal.aborted || taken) return;
    clearRun(view.id);
    if (current === view) {
      setBusy(view.running !== null);
      setStatus(error instanceof HttpError ? refusal(error) : `Not sent: ${error.message}`, true);
    }
  }
}

// Edit and resend: the conversation is copied up to the message before the edited one (POST
// .../fork), the copy opened and the edited text sent there; the original is left as it was.
// The first message has nothing before it: the edited text starts a new conversation.
async function editAndResend(view, messageId, text) {
  const index = view.order.indexOf(messageId);
  const before = index > 0 ? view.order[index - 1] : "";
  if (before) {
    const copy = await call("POST", `${API}/${view.id}/fork`, { up_to_message_id: before });
    await loadConversations();
    await openConversation(copy.id);
  } else {
    newChat();
  }
  await send(text);
}

async function resume(view, decisions) {
  saveRun(view.id, view.lastEventId);
  const onFrame = (frame) => view.frame(frame);
  try {
    await stream("POST", `${API}/${view.id}/resume`, { body: { decisions }, signal: view.signal, onFrame });
  } catch (error) {
    if (!view.signal.aborted && current === view) showError(error);
  }
}

async function stop() {
  if (!current) return;
  try {
    await call("POST", `${API}/${current.id}/interrupt`);
  } catch (error) {
    showError(error);
  }
}

// Follows the open conversation's events for as long as it is open, whoever starts its turns
// (this tab, another tab, the CLI, an A2A peer). A broken stream resumes with Last-Event-ID.
async function follow(view) {
  let delay = 250;
  const onFrame = (frame) => view.frame(frame);
  const onOpen = () => (delay = 250);
  while (!view.signal.aborted) {
    const path = `${API}/${view.id}/events`;
    try {
      await stream("GET", path, { signal: view.signal, onFrame, onOpen, lastEventId: view.lastEventId });
    } catch (error) {
      if (view.signal.aborted) return;
      if (error instanceof HttpError && error.status < 500 && error.status !== 429) {
        if (error.status === 404) view.note("This conversation was deleted.");
        return;
      }
    }
    await pause(delay, view.signal);
    delay = Math.min(delay * 2, 8000);
  }
}

// Turns that ended before the page opened: their errors (with a retry) and token counts are
// not in the stored messages, so read them from the conversation's retained events, up to
// where the page opened (a turn in flight then shows its own outcome live).
async function replayOutcomes(view, conversation, messages) {
  const outcomes = new Map();
  const caughtUp = new AbortController();
  view.signal.addEventListener("abort", () => caughtUp.abort());
  const onFrame = (frame) => {
    const id = Number(frame.id || 0);
    if (id > conversation.last_event_id) return;
    if (id === conversation.last_event_id) caughtUp.abort();
    let data;
    try {
      data = JSON.parse(frame.data);
    } catch {
      return;
    }
    if (["end", "interrupted", "error"].includes(data.type) && data.run_id) outcomes.set(data.run_id, data);
  };
  try {
    const path = `${API}/${view.id}/events?after=0&until_idle=true`;
    await stream("GET", path, { signal: caughtUp.signal, onFrame });
  } catch (error) {
    if (!caughtUp.signal.aborted) throw error;
  }
  if (view.signal.aborted) return;
  const spans = new Map(); // run id -> [first created_at, last created_at]
  for (const message of messages) {
    const span = spans.get(message.run_id) || [message.created_at, message.created_at];
    span[1] = message.created_at;
    spans.set(message.run_id, span);
  }
  for (const [runId, data] of outcomes) {
    const run = view.runs.get(runId);
    if (!run || run.live) continue;
    const span = spans.get(runId);
    const took = span ? Date.parse(span[1]) - Date.parse(span[0]) : NaN;
    view.outcome(runId, {
      timing: took > 0 ? `took ${seconds(took)}` : "",
      usage: data.usage,
      error: data.type === "error" ? data : null,
    });
  }
}

// -- conversations ----------------------------------------------------------------------------

function titleOf(text) {
  const line = text.replace(/\s+/g, " ").trim();
  return line.length > 60 ? `${line.slice(0, 59)}…` : line;
}

// A conversation is stored on its first message, titled after it.
async function createConversation(text) {
  const body = { title: titleOf(text) };
  if (agents.length > 1) body.agent = $("agent").value;
  const conversation = await call("POST", API, body);
  await loadConversations();
  await openConversation(conversation.id);
}

// A conversation made elsewhere (the CLI, the API, A2A) may have no title: its first message
// gives it one.
async function giveTitle(view, text) {
  if (view.title || !text.trim()) return;
  view.title = titleOf(text);
  await call("POST", `${API}/${view.id}/rename`, { title: view.title }).catch(() => {});
  await loadConversations();
}

function shortDate(iso) {
  const date = new Date(iso);
  const today = new Date().toDateString() === date.toDateString();
  return today
    ? date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
    : date.toLocaleDateString([], { year: "numeric", month: "short", day: "numeric" });
}

async function loadConversations() {
  const page = await call("GET", `${API}?limit=100`);
  conversations = page.items;
  const open = current && conversations.find((c) => c.id === current.id);
  if (open) $("current-title").textContent = open.title || "Untitled";
  if (open) showAgent(open.agent);
  if (renaming) return; // drawn again once the title is in
  const list = $("conversations");
  list.replaceChildren(...conversations.map(listItem));
  filterList();
}

function listItem(conversation) {
  const item = element("li");
  item.dataset.id = conversation.id;
  if (current && current.id === conversation.id) item.classList.add("current");
  const open = element("button", "open");
  open.type = "button";
  open.append(element("span", "title", conversation.title || "Untitled"));
  if (agents.length > 1 && conversation.agent) open.append(element("span", "agent", conversation.agent));
  const when = element("time", "date", shortDate(conversation.updated_at));
  when.dateTime = conversation.updated_at;
  open.append(when);
  open.title = `Last message ${new Date(conversation.updated_at).toLocaleString()}`;
  open.addEventListener("click", () => openConversation(conversation.id).catch(showError));
  const rename = element("button", "rename", "✎");
  rename.type = "button";
  rename.title = "Rename";
  rename.addEventListener("click", () => startRename(item, conversation));
  const remove = element("button", "delete", "×");
  remove.type = "button";
  remove.title = "Delete this conversation";
  remove.addEventListener("click", () => deleteConversation(conversation.id).catch(showError));
  item.append(open, rename, remove);
  return item;
}

function startRename(item, conversation) {
  const input = element("input", "rename-title");
  input.value = conversation.title || "";
  input.setAttribute("aria-label", "New title");
  item.replaceChildren(input);
  renaming = true;
  input.focus();
  input.select();
  let done = false;
  const finish = async (save) => {
    if (done) return;
    done = true;
    renaming = false;
    const title = input.value.trim();
    if (save && title && title !== conversation.title) {
      await call("POST", `${API}/${conversation.id}/rename`, { title }).catch(showError);
    }
    await loadConversations();
  };
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter") finish(true).catch(showError);
    if (event.key === "Escape") finish(false).catch(showError);
  });
  input.addEventListener("blur", () => finish(true).catch(showError));
}

function filterList() {
  const wanted = $("search").value.trim().toLowerCase();
  for (const item of $("conversations").children) {
    const title = item.querySelector(".title")?.textContent.toLowerCase() ?? "";
    item.hidden = Boolean(wanted) && !title.includes(wanted);
  }
}

function closeView() {
  if (current) current.close();
  current = null;
  $("log").replaceChildren();
  $("current-title").textContent = "New chat";
  showAgent("");
  setBusy(false);
  setStatus(""); // a refusal spoke of the conversation left
  for (const item of $("conversations").children) item.classList.remove("current");
}

// "New chat" only empties the page: the conversation is made by the first message.
function newChat() {
  closeView();
  history.replaceState(null, "", location.pathname);
  if (NARROW.matches) document.body.classList.add("sidebar-hidden");
  $("input").focus();
}

async function deleteConversation(id) {
  await call("DELETE", `${API}/${id}`);
  clearRun(id);
  if (current && current.id === id) newChat();
  await loadConversations();
}

async function loadMessages(id) {
  const messages = [];
  let after = "";
  for (;;) {
    const page = await call("GET", `${API}/${id}/messages?limit=500${after}`);
    messages.push(...page.items);
    if (!page.has_more || page.items.length === 0) return messages;
    after = `&after=${page.items[page.items.length - 1].id}`;
  }
}

async function openConversation(id) {
  closeView();
  const view = new View(id, $("log"), actions);
  current = view;
  history.replaceState(null, "", `#${id}`);
  for (const item of $("conversations").children) item.classList.toggle("current", item.dataset.id === id);
  if (NARROW.matches) document.body.classList.add("sidebar-hidden");

  const conversation = await call("GET", `${API}/${id}`);
  showAgent(conversation.agent);
  const messages = await loadMessages(id);
  if (current !== view) return;
  // Opened by a link to a conversation made since the list was read: read it again.
  if (!conversations.some((c) => c.id === id)) await loadConversations();
  const active = conversation.active_run_id;
  const saved = active ? loadRun(id) : null;
  for (const message of messages) {
    // The turn in flight is replayed from its start by the follow, deltas and all.
    if (!(saved && message.run_id === active)) view.message(message);
  }
  view.replayedUpTo = conversation.last_event_id;
  view.lastEventId = saved ? Math.min(saved.after, conversation.last_event_id) : conversation.last_event_id;
  if (active) {
    view.running = active;
    setBusy(true);
  } else {
    clearRun(id);
    if (conversation.pending_interrupts.length) view.prompt(conversation.pending_interrupts);
  }
  follow(view).catch(showError);
  if (conversation.last_event_id > 0) replayOutcomes(view, conversation, messages).catch(() => {});
  view.title = conversation.title;
  $("current-title").textContent = conversation.title || "Untitled";
  const first = messages.find((m) => m.role === "user");
  if (first) await giveTitle(view, first.content.map((part) => part.text || "").join(""));
}

// -- the page ------------------------------------------------------------------------------------

// With several agents, a picker chooses the agent of the next new conversation, and each
// conversation shows its own.
async function loadAgents() {
  agents = (await call("GET", "agentik/agents")).items;
  const picker = $("agent");
  picker.replaceChildren(
    ...agents.map((agent) => {
      const option = element("option", "", agent.description ? `${agent.name} — ${agent.description}` : agent.name);
      option.value = agent.name;
      option.selected = agent.default;
      return option;
    }),
  );
  $("agent-picker").hidden = agents.length < 2;
}

function showAgent(name) {
  $("current-agent").textContent = agents.length > 1 && name ? name : "";
}

async function start() {
  $("forget-token").hidden = !sessionStorage.getItem(TOKEN_KEY);
  try {
    await loadAgents();
    await loadConversations();
  } catch (error) {
    if (!(error instanceof HttpError && error.status === 401)) showError(error);
    return;
  }
  const wanted = location.hash.slice(1);
  const id = conversations.some((c) => c.id === wanted) ? wanted : conversations[0]?.id;
  if (id) await openConversation(id);
}

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("input").value.trim();
  if (!text || $("send").disabled) return;
  send(text, true).catch(showError);
});
$("input").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});
$("input").addEventListener("input", () => {
  if ($("status").classList.contains("error")) setStatus("");
});
$("stop").addEventListener("click", () => stop());
window.addEventListener("hashchange", () => {
  const id = location.hash.slice(1);
  if (id && id !== current?.id) openConversation(id).catch(showError);
});
$("new-conversation").addEventListener("click", newChat);
$("search").addEventListener("input", filterList);
$("menu").addEventListener("click", () => document.body.classList.toggle("sidebar-hidden"));
// At phone width the sidebar lies over the conversation: a tap beside it or Escape closes it.
const hideOverlay = () => NARROW.matches && document.body.classList.add("sidebar-hidden");
document.querySelector("main").addEventListener("click", (event) => {
  if (!event.target.closest("#menu")) hideOverlay();
});
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape") hideOverlay();
});
$("log").addEventListener("click", (event) => {
  const button = event.target.closest("button.copy");
  if (button) copyCode(button);
});
$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const token = $("token").value.trim();
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token").value = "";
  $("token-form").hidden = true;
  setStatus("");
  start().catch(showError);
});
$("forget-token").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  location.reload();
});

if (NARROW.matches) document.body.classList.add("sidebar-hidden");
start().catch(showError);
