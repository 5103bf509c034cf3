// The agentik chat page. It talks to the public /agentik API only (docs/agentik-api.md):
// conversations, history, turns streamed as server-sent events, human-in-the-loop answers.
// Plain modern JavaScript, no build step, no dependencies.

const TOKEN_KEY = "agentik.token";
const API = "agentik/conversations";

const $ = (id) => document.getElementById(id);

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

class HttpError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// -- HTTP ------------------------------------------------------------------------------

function headers(extra) {
  const all = { ...extra };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) all.Authorization = `Bearer ${token}`;
  return all;
}

function init(method, body, signal) {
  const extra = body === undefined ? {} : { "Content-Type": "application/json" };
  const request = { method, headers: headers(extra), signal };
  if (body !== undefined) request.body = JSON.stringify(body);
  return request;
}

async function httpError(response) {
  let code = `http_${response.status}`;
  let message = response.statusText || code;
  try {
    const body = await response.json();
    ({ code, message } = body.error);
  } catch {
    // not our JSON error shape: keep the status line
  }
  if (response.status === 401) askForToken(message);
  return new HttpError(response.status, code, message);
}

async function call(method, path, body) {
  const response = await fetch(path, init(method, body));
  if (!response.ok) throw await httpError(response);
  return response.status === 204 ? null : response.json();
}

// Reads an SSE response (fetch, since EventSource cannot POST or send Authorization) and
// calls onFrame({id, event, data}) per frame. Resolves when the server ends the stream.
async function stream(method, path, body, signal, onFrame) {
  const response = await fetch(path, init(method, body, signal));
  if (!response.ok) throw await httpError(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let frame = {};
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n")) >= 0) {
      let line = buffer.slice(0, end);
      buffer = buffer.slice(end + 1);
      if (line.endsWith("\r")) line = line.slice(0, -1);
      if (line === "") {
        if (frame.data !== undefined) onFrame(frame);
        frame = {};
      } else if (!line.startsWith(":")) {
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "data") frame.data = frame.data === undefined ? value : `${frame.data}\n${value}`;
        else if (field === "id" || field === "event") frame[field] = value;
      }
    }
  }
}

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

// -- rendering a conversation --------------------------------------------------------------

function prettyJson(value) {
  if (typeof value !== "string") return JSON.stringify(value, null, 2);
  try {
    return JSON.stringify(JSON.parse(value), null, 2);
  } catch {
    return value;
  }
}

function messageText(message) {
  return (message.content || [])
    .map((part) => (part.type === "text" ? part.text : part.type === "image" ? "[image]" : ""))
    .join("");
}

// One open conversation: its elements by message and tool call id, and its event position.
class View {
  constructor(id, log) {
    this.id = id;
    this.log = log;
    this.lastEventId = 0;
    this.finished = true;
    this.controller = null;
    this.bubbles = new Map(); // message id -> {root, text}
    this.toolCalls = new Map(); // tool call id -> {root, args, result}
    this.users = new Set(); // user message ids shown
    this.prompted = new Set(); // interrupt ids asked
  }

  close() {
    if (this.controller) this.controller.abort();
  }

  scroll() {
    this.log.scrollTop = this.log.scrollHeight;
  }

  note(text, className = "note") {
    this.log.append(element("p", className, text));
    this.scroll();
  }

  bubble(messageId, className = "msg assistant") {
    let found = this.bubbles.get(messageId);
    if (!found) {
      const root = element("div", className);
      root.dataset.messageId = messageId;
      const text = element("div", "text");
      root.append(text);
      this.log.append(root);
      found = { root, text };
      this.bubbles.set(messageId, found);
    }
    return found;
  }

  reasoning(messageId) {
    const root = element("div", "msg assistant");
    const details = element("details", "reasoning");
    details.append(element("summary", "", "Reasoning"));
    const text = element("div", "text");
    details.append(text);
    root.append(details);
    this.log.append(root);
    this.bubbles.set(messageId, { root, text });
  }

  toolCall(messageId, id, name) {
    let found = this.toolCalls.get(id);
    if (!found) {
      const root = element("details", "tool-call");
      root.open = true;
      root.dataset.toolCallId = id;
      root.append(element("summary", "", `Tool call: ${name}`));
      const args = element("pre", "args");
      const result = element("pre", "result", "(no result yet)");
      root.append(args, result);
      this.bubble(messageId).root.append(root);
      found = { root, args, result };
      this.toolCalls.set(id, found);
    }
    return found;
  }

  // What a running tool reports (an MCP server's progress, a remote agent's status), in
  // place of its result until the result comes.
  toolProgress(value) {
    const call = value && this.toolCalls.get(value.tool_call_id);
    if (!call || call.done) return;
    const total = value.total ? `/${value.total}` : "";
    const said = value.message ? String(value.message) : `${value.progress}${total}`;
    call.result.textContent = `… ${said}`;
    call.result.classList.add("progress");
  }

  toolResult(id, content, isError) {
    const call = this.toolCalls.get(id);
    if (!call) return;
    call.done = true;
    call.result.classList.remove("progress");
    call.result.textContent = `→ ${prettyJson(content)}`;
    call.root.classList.toggle("error", Boolean(isError));
  }

  // A stored message: from the history or a `message` event. Idempotent, so a replayed
  // turn corrects whatever its deltas drew twice.
  message(message) {
    if (message.role === "user") {
      if (this.users.has(message.id)) return;
      this.users.add(message.id);
      this.bubble(message.id, "msg user").text.textContent = messageText(message);
    } else if (message.role === "assistant") {
      const bubble = this.bubble(message.id);
      bubble.text.textContent = messageText(message);
      bubble.root.classList.toggle("interrupted", message.status === "interrupted");
      for (const call of message.tool_calls || []) {
        this.toolCall(message.id, call.id, call.name).args.textContent = prettyJson(call.arguments);
      }
    } else if (message.role === "tool") {
      this.toolResult(message.tool_call_id, messageText(message), message.status === "error");
    }
    this.scroll();
  }

  // One SSE frame of a turn; unknown events are ignored, as the API asks.
  frame(frame) {
    if (frame.id) this.lastEventId = Number(frame.id);
    let data;
    try {
      data = JSON.parse(frame.data);
    } catch {
      return;
    }
    switch (data.type) {
      case "message":
        this.message(data.message);
        break;
      case "start_reasoning":
        this.reasoning(data.message_id);
        break;
      case "start_response":
        this.bubble(data.message_id);
        break;
      case "append_text":
        this.bubble(data.message_id).text.append(data.text);
        this.scroll();
        break;
      case "tool_call_start":
        this.toolCall(data.message_id, data.tool_call_id, data.name);
        break;
      case "tool_call_args": {
        const call = this.toolCalls.get(data.tool_call_id);
        if (call) call.args.append(data.delta);
        break;
      }
      case "tool_call_result":
        this.toolResult(data.tool_call_id, data.content, data.is_error);
        break;
      case "custom":
        if (data.name === "tool_progress") this.toolProgress(data.value);
        break;
      case "input_required":
        this.prompt(data.interrupts);
        break;
      case "end":
        this.finish();
        break;
      case "interrupted":
        this.finish();
        this.note("Stopped.");
        break;
      case "error":
        this.finish();
        this.note(`Error: ${data.message} (${data.code})`, "note error");
        break;
    }
  }

  finish() {
    this.finished = true;
    clearRun(this.id);
  }

  // The approval / question flow: one panel for what the turn waits for; once every
  // interrupt has a decision, they go to /resume together (the API wants them all).
  prompt(interrupts) {
    const fresh = interrupts.filter((interrupt) => !this.prompted.has(interrupt.id));
    if (fresh.length === 0) return;
    const panel = element("div", "prompt");
    const decisions = new Map();
    const decide = (interrupt, item, decision, summary) => {
      decisions.set(interrupt.id, { interrupt_id: interrupt.id, ...decision });
      item.replaceChildren(element("p", "note", summary));
      if (decisions.size === fresh.length) {
        panel.remove();
        this.note(summary);
        resume(this, [...decisions.values()]);
      }
    };
    for (const interrupt of fresh) {
      this.prompted.add(interrupt.id);
      const item = element("div", "interrupt");
      item.dataset.interruptId = interrupt.id;
      if (interrupt.kind === "question") this.question(interrupt, item, decide);
      else this.approval(interrupt, item, decide);
      panel.append(item);
    }
    this.log.append(panel);
    this.scroll();
  }

  approval(interrupt, item, decide) {
    const call = interrupt.tool_call || { name: "?", arguments: {} };
    item.append(element("p", "", interrupt.message || `Run the tool ${call.name}?`));
    item.append(element("pre", "args", prettyJson(call.arguments)));
    const editor = element("textarea", "edit-arguments");
    editor.rows = 4;
    editor.hidden = true;
    editor.value = prettyJson(call.arguments);
    const reason = element("input", "reason");
    reason.placeholder = "Reason (optional, the agent reads it)";
    const buttons = element("div", "buttons");
    const approve = element("button", "approve", "Approve");
    const edit = element("button", "edit", "Edit arguments");
    const decline = element("button", "decline", "Decline");
    for (const button of [approve, edit, decline]) button.type = "button";
    approve.addEventListener("click", () => {
      if (editor.hidden) {
        decide(interrupt, item, { approve: true }, `Approved ${call.name}.`);
        return;
      }
      let args;
      try {
        args = JSON.parse(editor.value);
      } catch (error) {
        setStatus(`The arguments are not JSON: ${error.message}`);
        return;
      }
      decide(interrupt, item, { approve: true, arguments: args }, `Approved ${call.name} with edited arguments.`);
    });
    edit.addEventListener("click", () => {
      editor.hidden = false;
      edit.hidden = true;
      approve.textContent = "Approve with these arguments";
      editor.focus();
    });
    decline.addEventListener("click", () => {
      const decision = { approve: false };
      if (reason.value.trim()) decision.reason = reason.value.trim();
      decide(interrupt, item, decision, `Declined ${call.name}.`);
    });
    buttons.append(approve, edit, decline);
    item.append(editor, reason, buttons);
  }

  question(interrupt, item, decide) {
    item.append(element("p", "question", interrupt.question || interrupt.message || "The agent asks:"));
    const answer = element("input", "answer");
    answer.placeholder = "Your answer";
    const buttons = element("div", "buttons");
    for (const choice of interrupt.choices || []) {
      const button = element("button", "choice", choice);
      button.type = "button";
      button.addEventListener("click", () => decide(interrupt, item, { answer: choice }, `You answered: ${choice}`));
      buttons.append(button);
    }
    const send = element("button", "send-answer", "Answer");
    const decline = element("button", "decline", "Decline to answer");
    send.type = decline.type = "button";
    const submit = () => {
      if (answer.value.trim()) decide(interrupt, item, { answer: answer.value }, `You answered: ${answer.value}`);
    };
    send.addEventListener("click", submit);
    answer.addEventListener("keydown", (event) => {
      if (event.key === "Enter") submit();
    });
    decline.addEventListener("click", () => decide(interrupt, item, { approve: false }, "Declined to answer."));
    buttons.append(send, decline);
    item.append(answer, buttons);
  }
}

// -- the page --------------------------------------------------------------------------

let current = null; // the open View
let conversations = [];

function setStatus(text) {
  $("status").textContent = text;
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").hidden = !busy;
  setStatus(busy ? "The agent is answering…" : "");
}

function askForToken(message) {
  $("token-form").hidden = false;
  setStatus(message || "This server needs a token.");
}

// Streams a turn into its view: `send`, `resume` or a follow of `/events`. When the stream
// ends without the turn's end (a facade restart), follows /events from the last id.
async function runTurn(view, method, path, body) {
  view.close();
  const controller = new AbortController();
  view.controller = controller;
  view.finished = false;
  if (current === view) setBusy(true);
  const onFrame = (frame) => view.frame(frame);
  try {
    await stream(method, path, body, controller.signal, onFrame);
    if (!view.finished) {
      const follow = `${API}/${view.id}/events?until_idle=true&after=${view.lastEventId}`;
      await stream("GET", follow, undefined, controller.signal, onFrame);
      view.finished = true; // until_idle: this stream ends once the turn has
    }
  } catch (error) {
    if (error.name === "AbortError") return;
    view.finished = true;
    if (current === view) setStatus(error.message);
    return;
  } finally {
    if (view.controller === controller) view.controller = null;
    if (current === view && view.controller === null) setBusy(false);
  }
  if (current === view) await loadConversations();
}

async function send(text) {
  if (!current) await newConversation();
  const view = current;
  saveRun(view.id, view.lastEventId);
  const titled = conversations.find((c) => c.id === view.id)?.title;
  if (!titled) {
    call("POST", `${API}/${view.id}/rename`, { title: text.slice(0, 60) }).catch(() => {});
  }
  await runTurn(view, "POST", `${API}/${view.id}/send`, { text });
}

async function resume(view, decisions) {
  saveRun(view.id, view.lastEventId);
  await runTurn(view, "POST", `${API}/${view.id}/resume`, { decisions });
}

async function stop() {
  if (!current) return;
  try {
    await call("POST", `${API}/${current.id}/interrupt`);
  } catch (error) {
    setStatus(error.message);
  }
}

async function loadConversations() {
  const page = await call("GET", `${API}?limit=100`);
  conversations = page.items;
  const list = $("conversations");
  list.replaceChildren();
  for (const conversation of conversations) {
    const item = element("li");
    item.dataset.id = conversation.id;
    if (current && current.id === conversation.id) item.classList.add("current");
    const open = element("button", "open", conversation.title || "New chat");
    open.type = "button";
    open.title = new Date(conversation.updated_at).toLocaleString();
    open.addEventListener("click", () => openConversation(conversation.id).catch(showError));
    const remove = element("button", "delete", "×");
    remove.type = "button";
    remove.title = "Delete this conversation";
    remove.addEventListener("click", () => deleteConversation(conversation.id).catch(showError));
    item.append(open, remove);
    list.append(item);
  }
}

async function newConversation() {
  const conversation = await call("POST", API, {});
  await openConversation(conversation.id);
  await loadConversations();
}

async function deleteConversation(id) {
  await call("DELETE", `${API}/${id}`);
  clearRun(id);
  if (current && current.id === id) {
    current.close();
    current = null;
    $("log").replaceChildren();
    history.replaceState(null, "", location.pathname);
  }
  await loadConversations();
}

async function openConversation(id) {
  if (current) current.close();
  const view = new View(id, $("log"));
  current = view;
  view.log.replaceChildren();
  setBusy(false);
  history.replaceState(null, "", `#${id}`);
  for (const item of $("conversations").children) item.classList.toggle("current", item.dataset.id === id);

  const conversation = await call("GET", `${API}/${id}`);
  const active = conversation.active_run_id;
  const saved = active ? loadRun(id) : null;
  const messages = [];
  let after = "";
  for (;;) {
    const page = await call("GET", `${API}/${id}/messages?limit=500${after}`);
    messages.push(...page.items);
    if (!page.has_more || page.items.length === 0) break;
    after = `&after=${page.items[page.items.length - 1].id}`;
  }
  if (current !== view) return;
  for (const message of messages) {
    // The turn in flight is replayed from its start below, deltas and all.
    if (!(saved && message.run_id === active)) view.message(message);
  }
  view.lastEventId = conversation.last_event_id;
  if (active) {
    if (saved) view.lastEventId = Math.min(saved.after, conversation.last_event_id);
    await runTurn(view, "GET", `${API}/${id}/events?until_idle=true&after=${view.lastEventId}`);
  } else {
    clearRun(id);
    if (conversation.pending_interrupts.length) view.prompt(conversation.pending_interrupts);
  }
}

function showError(error) {
  setStatus(error.message || String(error));
}

async function start() {
  $("forget-token").hidden = !sessionStorage.getItem(TOKEN_KEY);
  try {
    await loadConversations();
  } catch (error) {
    showError(error);
    return;
  }
  const wanted = location.hash.slice(1);
  const id = conversations.some((c) => c.id === wanted) ? wanted : conversations[0]?.id;
  if (id) await openConversation(id);
}

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = $("input");
  const text = input.value.trim();
  if (!text || $("send").disabled) return;
  input.value = "";
  send(text).catch(showError);
});
$("input").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});
$("stop").addEventListener("click", () => stop());
$("new-conversation").addEventListener("click", () => newConversation().catch(showError));
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

start().catch(showError);
