// One open conversation drawn in the log: its messages, tool calls, prompts and per-turn
// footers (timing, tokens, an error with a retry). It takes events from any number of streams
// (its own send, the live follow of /events) and handles each event id once.

import { renderMarkdown } from "./markdown.js";

export function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

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

export function seconds(ms) {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

function tokens(usage) {
  if (!usage || !usage.total_tokens) return "";
  return `${usage.total_tokens} tokens (${usage.input_tokens || 0} in, ${usage.output_tokens || 0} out)`;
}

const TERMINAL = new Set(["end", "interrupted", "error"]);

export class View {
  // actions: {busy(running), turnEnded(), resume(view, decisions), retry(text), status(text),
  //           edit(view, messageId, text)}
  constructor(id, log, actions) {
    this.id = id;
    this.log = log;
    this.actions = actions;
    this.lastEventId = 0;
    this.replayedUpTo = 0; // events up to this id were replays when the view opened
    this.running = null; // the run id of the turn in flight
    this.closer = new AbortController(); // aborts every stream of this view
    this.bubbles = new Map(); // message id -> {root, text, raw, markdown}
    this.toolCalls = new Map(); // tool call id -> {root, summary, args, result, started}
    this.users = new Set(); // user message ids shown
    this.prompted = new Set(); // interrupt ids asked
    this.runs = new Map(); // run id -> {text, last, footer, started, firstToken, live}
    this.idless = new Set(); // id-less frames already handled
    this.order = []; // stored message ids, in the conversation's order
  }

  get signal() {
    return this.closer.signal;
  }

  close() {
    this.closer.abort();
  }

  scroll() {
    this.log.scrollTop = this.log.scrollHeight;
  }

  note(text, className = "note") {
    this.log.append(element("p", className, text));
    this.scroll();
  }

  /** The conversation's oldest part was summarised (or left out) for the model; the
   * summary opens on a click (docs/conversations.md). Text only: never parsed as HTML. */
  compacted(data) {
    const how = data.mode === "summarize" ? "summarised" : "left out";
    const box = element("details", "note compacted");
    box.append(element("summary", "", `Earlier messages ${how} for the model (${data.covered} messages)`));
    if (data.summary) box.append(element("p", "", data.summary));
    this.log.append(box);
    this.scroll();
  }

  /** The engine answering died mid-answer and another asks the LLM again: the cut text
   * goes (the new answer comes as a new message), and a note says why
   * (docs/reliability.md). */
  superseded(messageId) {
    const bubble = this.bubbles.get(messageId);
    if (bubble) {
      bubble.root.remove();
      this.bubbles.delete(messageId);
    }
    this.note("The answer was cut; asking again.", "note retried");
  }

  run(runId) {
    let found = this.runs.get(runId);
    if (!found) {
      found = { text: "", last: null, footer: null, live: false };
      this.runs.set(runId, found);
    }
    return found;
  }

  bubble(messageId, className = "msg assistant", runId = "") {
    let found = this.bubbles.get(messageId);
    if (!found) {
      const root = element("div", className);
      root.dataset.messageId = messageId;
      const text = element("div", "text");
      root.append(text);
      this.log.append(root);
      found = { root, text, raw: "", markdown: className.includes("assistant") };
      this.bubbles.set(messageId, found);
      if (runId) this.run(runId).last = root;
    }
    return found;
  }

  // Assistant text is Markdown, drawn again at most once a frame while it streams; a long
  // answer (some 50 ms to draw 20 kB) at most every 150 ms.
  setText(bubble, text) {
    bubble.raw = text;
    if (!bubble.markdown) {
      bubble.text.textContent = text;
      return;
    }
    if (bubble.pending) return;
    const draw = () => {
      bubble.pending = false;
      renderMarkdown(bubble.text, bubble.raw);
      this.scroll();
    };
    bubble.pending = true;
    if (text.length > 4000) setTimeout(draw, 150);
    else requestAnimationFrame(draw);
  }

  reasoning(messageId, runId) {
    const root = element("div", "msg assistant");
    const details = element("details", "reasoning");
    details.append(element("summary", "", "Reasoning"));
    const text = element("div", "text");
    details.append(text);
    root.append(details);
    this.log.append(root);
    this.bubbles.set(messageId, { root, text, raw: "", markdown: false });
    if (runId) this.run(runId).last = root;
  }

  toolCall(messageId, id, name, runId) {
    let found = this.toolCalls.get(id);
    if (!found) {
      const root = element("details", "tool-call");
      root.open = true;
      root.dataset.toolCallId = id;
      const summary = element("summary", "", `Tool call: ${name}`);
      const timing = element("span", "timing");
      summary.append(timing);
      const args = element("pre", "args");
      const result = element("pre", "result", "(no result yet)");
      root.append(summary, args, result);
      this.bubble(messageId, "msg assistant", runId).root.append(root);
      found = { root, timing, args, result, started: 0 };
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

  toolResult(id, content, isError, took) {
    const call = this.toolCalls.get(id);
    if (!call) return;
    call.done = true;
    call.result.classList.remove("progress");
    call.result.textContent = `→ ${prettyJson(content)}`;
    call.root.classList.toggle("error", Boolean(isError));
    if (took !== undefined && took >= 0) call.timing.textContent = ` · ${seconds(took)}`;
  }

  // A stored message: from the history or a `message` event. Idempotent, so a replayed
  // turn corrects whatever its deltas drew twice.
  message(message) {
    const runId = message.run_id || "";
    if (!this.order.includes(message.id)) this.order.push(message.id);
    if (message.role === "user") {
      if (this.users.has(message.id)) return;
      this.users.add(message.id);
      const bubble = this.bubble(message.id, "msg user", runId);
      this.setText(bubble, messageText(message));
      this.editable(bubble, message.id);
      if (runId) this.run(runId).text = messageText(message);
    } else if (message.role === "assistant") {
      const bubble = this.bubble(message.id, "msg assistant", runId);
      this.setText(bubble, messageText(message));
      bubble.root.classList.toggle("interrupted", message.status === "interrupted");
      bubble.created = message.created_at;
      for (const call of message.tool_calls || []) {
        const shown = this.toolCall(message.id, call.id, call.name, runId);
        shown.args.textContent = prettyJson(call.arguments);
        shown.created = message.created_at;
      }
    } else if (message.role === "tool") {
      const call = this.toolCalls.get(message.tool_call_id);
      const took = call && call.created && Date.parse(message.created_at) - Date.parse(call.created);
      this.toolResult(message.tool_call_id, messageText(message), message.status === "error", took || undefined);
    }
    this.scroll();
  }

  // "Edit and resend" on a user message: a new conversation holding what came before it
  // (a fork), where the edited text is sent; this one stays as it is.
  editable(bubble, messageId) {
    // Its words come from the style sheet (::before), so the bubble's text stays the message's.
    const edit = element("button", "edit");
    edit.type = "button";
    edit.setAttribute("aria-label", "Edit and resend");
    edit.title = "Edit and resend: continue in a copy of this conversation from here";
    edit.addEventListener("click", () => {
      const box = element("form", "edit-box");
      const input = element("textarea", "edit-text");
      input.value = bubble.raw;
      input.setAttribute("aria-label", "Edited message");
      const resend = element("button", "resend", "Resend in a copy");
      resend.type = "submit";
      const cancel = element("button", "cancel", "Cancel");
      cancel.type = "button";
      box.append(input, resend, cancel);
      bubble.text.hidden = true;
      edit.hidden = true;
      bubble.root.append(box);
      input.focus();
      const close = () => {
        box.remove();
        bubble.text.hidden = false;
        edit.hidden = false;
      };
      cancel.addEventListener("click", close);
      box.addEventListener("submit", (event) => {
        event.preventDefault();
        const text = input.value.trim();
        if (!text) return;
        close();
        this.actions.edit(this, messageId, text);
      });
    });
    bubble.root.append(edit);
  }

  // -- events --------------------------------------------------------------------------------

  // One SSE frame, from whichever stream; unknown events are ignored, as the API asks.
  frame(frame) {
    if (frame.id) {
      const id = Number(frame.id);
      if (id <= this.lastEventId) return; // another stream of this view handled it
      this.lastEventId = id;
    } else if (this.idless.has(frame.data)) {
      return;
    } else {
      this.idless.add(frame.data);
    }
    let data;
    try {
      data = JSON.parse(frame.data);
    } catch {
      return;
    }
    const live = !frame.id || Number(frame.id) > this.replayedUpTo;
    if (data.run_id && !TERMINAL.has(data.type) && data.type !== "input_required") {
      this.started(data.run_id, live);
    }
    this.handle(data, live);
  }

  started(runId, live) {
    if (this.running === runId) return;
    this.running = runId;
    const run = this.run(runId);
    run.live = live;
    run.started = live ? performance.now() : 0;
    run.firstToken = 0;
    this.actions.busy(true);
  }

  handle(data, live) {
    const now = performance.now();
    switch (data.type) {
      case "message":
        this.message(data.message);
        break;
      case "start_reasoning":
        this.reasoning(data.message_id, data.run_id);
        break;
      case "start_response":
        this.bubble(data.message_id, "msg assistant", data.run_id);
        break;
      case "append_text": {
        const run = this.run(data.run_id);
        if (!run.firstToken) run.firstToken = now;
        const bubble = this.bubble(data.message_id, "msg assistant", data.run_id);
        this.setText(bubble, bubble.raw + data.text);
        break;
      }
      case "tool_call_start": {
        const run = this.run(data.run_id);
        if (!run.firstToken) run.firstToken = now;
        this.toolCall(data.message_id, data.tool_call_id, data.name, data.run_id).started = live ? now : 0;
        break;
      }
      case "tool_call_args": {
        const call = this.toolCalls.get(data.tool_call_id);
        if (call) call.args.append(data.delta);
        break;
      }
      case "tool_call_end": {
        const call = this.toolCalls.get(data.tool_call_id);
        if (call && call.started) call.started = now; // the call runs from here
        break;
      }
      case "tool_call_result": {
        const call = this.toolCalls.get(data.tool_call_id);
        const took = call && call.started ? now - call.started : undefined;
        this.toolResult(data.tool_call_id, data.content, data.is_error, took);
        break;
      }
      case "custom":
        if (data.name === "tool_progress") this.toolProgress(data.value);
        break;
      case "compacted":
        this.compacted(data);
        break;
      case "retry":
        this.superseded(data.message_id);
        break;
      case "input_required":
        this.prompt(data.interrupts);
        break;
      case "end":
        this.ended(data, now);
        break;
      case "interrupted":
        this.ended(data, now);
        this.note("Stopped.");
        break;
      case "error":
        this.ended(data, now);
        this.outcome(data.run_id, { error: data });
        break;
    }
  }

  ended(data, now) {
    const run = data.run_id ? this.run(data.run_id) : null;
    if (run && run.started) {
      const parts = [];
      if (run.firstToken) parts.push(`first token ${seconds(run.firstToken - run.started)}`);
      parts.push(`took ${seconds(now - run.started)}`);
      this.outcome(data.run_id, { usage: data.usage, timing: parts.join(" · ") });
    } else if (run && data.usage) {
      this.outcome(data.run_id, { usage: data.usage });
    }
    if (this.running === (data.run_id || this.running)) {
      this.running = null;
      this.actions.busy(false);
    }
    this.actions.turnEnded();
  }

  // -- per-turn footers --------------------------------------------------------------------------

  footer(runId) {
    const run = this.run(runId);
    if (!run.footer) {
      run.footer = element("div", "turn-footer");
      run.footer.dataset.runId = runId;
    }
    if (run.last && run.last.isConnected) run.last.after(run.footer);
    else this.log.append(run.footer);
    return run.footer;
  }

  // How a turn ended: {timing?, usage?, error?}. From live events, or (after a reload) from
  // the replayed event log, see app.js.
  outcome(runId, { timing, usage, error }) {
    const footer = this.footer(runId || "");
    const said = [timing, tokens(usage)].filter(Boolean).join(" · ");
    if (said) {
      let line = footer.querySelector(".turn-usage");
      if (!line) footer.prepend((line = element("span", "turn-usage")));
      line.textContent = said;
    }
    if (error && !footer.querySelector(".turn-error")) {
      const box = element("div", "turn-error");
      box.append(element("span", "", `Error: ${error.message} (${error.code})`));
      const text = this.run(runId || "").text;
      if (text) {
        const retry = element("button", "retry", "Retry");
        retry.type = "button";
        retry.addEventListener("click", () => this.actions.retry(text));
        box.append(retry);
      }
      footer.append(box);
    }
    this.scroll();
  }

  // -- human in the loop ---------------------------------------------------------------------------

  // One panel for what the turn waits for; once every interrupt has a decision, they go to
  // /resume together (the API wants them all).
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
        // An approved call runs from now: the wait for a person is not its time.
        const now = performance.now();
        for (const call of this.toolCalls.values()) if (!call.done) call.started = now;
        this.note(summary);
        this.actions.resume(this, [...decisions.values()]);
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
        this.actions.status(`The arguments are not JSON: ${error.message}`);
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
