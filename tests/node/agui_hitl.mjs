// Human in the loop as the official client (@ag-ui/client HttpAgent) sees it: a run ends
// with outcome interrupt, the client keeps the interrupts (agent.pendingInterrupts), and
// the next run carries `resume`. The client's pipeline validates every event and its order
// and rejects a run on any breach; it also refuses, by itself, a run that leaves a pending
// interrupt unanswered. Prints one JSON summary line; the Python test holds the assertions.
//
// usage: node agui_hitl.mjs <base url> <scenario> <thread id>
import { randomUUID } from "node:crypto";
import { HttpAgent } from "@ag-ui/client";

const [baseUrl, scenario, threadId] = process.argv.slice(2);

// Every deviation the client repairs is a console.warn: a conformant stream causes none.
const warnings = [];
console.warn = (...args) => warnings.push(args.map(String).join(" "));

function userMessage(content) {
  return { id: randomUUID(), role: "user", content };
}

/** One run: the event types, the finish (outcome, interrupts), text, tool results, error. */
async function run(agent, parameters = {}) {
  const events = [];
  let finished = null;
  let error = null;
  try {
    await agent.runAgent(parameters, {
      onEvent: ({ event }) => {
        events.push(event);
      },
      onRunFinishedEvent: ({ outcome, interrupts, pendingToolCallIds }) => {
        finished = { outcome, interrupts: interrupts ?? null, pendingToolCallIds: pendingToolCallIds ?? null };
      },
    });
  } catch (caught) {
    error = String(caught?.message ?? caught);
  }
  const types = events.map((e) => e.type);
  return {
    error,
    types,
    terminal: ["RUN_FINISHED", "RUN_ERROR"].includes(types.at(-1)),
    finished,
    runStarted: events.find((e) => e.type === "RUN_STARTED") ?? null,
    text: events
      .filter((e) => e.type === "TEXT_MESSAGE_CONTENT")
      .map((e) => e.delta)
      .join(""),
    toolCalls: events
      .filter((e) => e.type === "TOOL_CALL_START")
      .map((e) => ({ id: e.toolCallId, name: e.toolCallName })),
    toolResults: events
      .filter((e) => e.type === "TOOL_CALL_RESULT")
      .map((e) => ({ toolCallId: e.toolCallId, content: e.content })),
    pendingInterrupts: agent.pendingInterrupts.map((i) => i.id),
  };
}

function summary(agent) {
  return {
    messages: agent.messages.map((m) => ({
      id: m.id,
      role: m.role,
      content: m.content ?? null,
      toolCallId: m.toolCallId ?? null,
      toolCalls: (m.toolCalls ?? []).map((c) => ({ id: c.id, name: c.function.name })),
    })),
  };
}

/** Ask, stop on the interrupt, then answer every pending interrupt with `entry`. */
async function askThenResume(text, entry) {
  const agent = new HttpAgent({ url: `${baseUrl}/agui`, threadId });
  agent.addMessage(userMessage(text));
  const first = await run(agent);
  const resume = agent.pendingInterrupts.map((i) => ({ interruptId: i.id, ...entry }));
  const second = await run(agent, { resume });
  return { runs: [first, second], resume, ...summary(agent) };
}

const SCENARIOS = {
  approve: () => askThenResume("calculate 2+2", { status: "resolved", payload: { approved: true } }),

  edit: () =>
    askThenResume("calculate 2+2", {
      status: "resolved",
      payload: { approved: true, arguments: { expression: "6*7" } },
    }),

  decline: () => askThenResume("calculate 2+2", { status: "cancelled" }),

  answer: () =>
    askThenResume("ask me your favourite colour", {
      status: "resolved",
      payload: { answer: "teal" },
    }),

  async unanswered() {
    // The client itself refuses a run that does not answer its pending interrupts; a
    // second client of the thread (which knows none) is refused by the server with 409.
    const agent = new HttpAgent({ url: `${baseUrl}/agui`, threadId });
    agent.addMessage(userMessage("calculate 2+2"));
    const first = await run(agent);
    agent.addMessage(userMessage("never mind"));
    const refusedByClient = await run(agent);
    const other = new HttpAgent({ url: `${baseUrl}/agui`, threadId });
    other.addMessage(userMessage("never mind"));
    const refusedByServer = await run(other);
    return { runs: [first], refusedByClient, refusedByServer };
  },
};

const result = await SCENARIOS[scenario]();
console.log(JSON.stringify({ ...result, warnings }));
