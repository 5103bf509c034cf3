// AG-UI conformance: drives agentik's POST /agui with the official client
// (@ag-ui/client HttpAgent), whose own pipeline validates every event against the
// @ag-ui/core schemas and verifies the event order. A run whose stream breaks a
// rule rejects `runAgent`. Each scenario prints one JSON summary line for the
// Python test that runs it; the script itself checks nothing about agentik's
// behaviour beyond what the client enforces, so the assertions live in Python.
//
// usage: node agui_conformance.mjs <base url> <scenario> <thread id> [<path>, default /agui]
import { randomUUID } from "node:crypto";
import { HttpAgent } from "@ag-ui/client";

const [baseUrl, scenario, threadId, path = "/agui"] = process.argv.slice(2);

// The client reports every deviation it repairs (stripped fields, dropped events) with
// console.warn: collect them, a conformant stream causes none.
const warnings = [];
console.warn = (...args) => warnings.push(args.map(String).join(" "));

const CONFIRM_ORDER = {
  name: "confirm_order",
  description: "Ask the user to confirm an order in the browser.",
  parameters: {
    type: "object",
    properties: { item: { type: "string" } },
    required: ["item"],
  },
};

function newAgent() {
  return new HttpAgent({ url: `${baseUrl}${path}`, threadId });
}

function userMessage(content) {
  return { id: randomUUID(), role: "user", content };
}

/** One run: every event the client let through, the finish params, the error if any. */
async function run(agent, parameters = {}, onEvent = () => {}, subscriber = {}) {
  const events = [];
  let finished = null;
  let error = null;
  try {
    await agent.runAgent(parameters, {
      ...subscriber,
      onEvent: ({ event }) => {
        events.push(event);
        return onEvent(event);
      },
      onRunFinishedEvent: ({ outcome, pendingToolCallIds }) => {
        finished = { outcome, pendingToolCallIds: pendingToolCallIds ?? null };
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
    runError: events.find((e) => e.type === "RUN_ERROR") ?? null,
    usage: events.find((e) => e.type === "RUN_FINISHED")?.usage ?? null,
    text: events
      .filter((e) => e.type === "TEXT_MESSAGE_CONTENT")
      .map((e) => e.delta)
      .join(""),
    reasoning: events
      .filter((e) => e.type === "REASONING_MESSAGE_CONTENT")
      .map((e) => e.delta)
      .join(""),
    toolResults: events.filter((e) => e.type === "TOOL_CALL_RESULT").map((e) => e.content),
    toolCalls: events.filter((e) => e.type === "TOOL_CALL_START").map((e) => e.toolCallName),
  };
}

function summary(agent) {
  return {
    messages: agent.messages.map((m) => ({
      id: m.id,
      role: m.role,
      content: m.content ?? null,
      toolCalls: (m.toolCalls ?? []).map((c) => c.function.name),
    })),
    state: agent.state,
  };
}

const SCENARIOS = {
  async plain_text() {
    const agent = newAgent();
    agent.addMessage(userMessage("hello from the official client"));
    return { runs: [await run(agent)], ...summary(agent) };
  },

  async usage() {
    const agent = newAgent();
    agent.addMessage(userMessage("[[cached:2]] count my tokens"));
    return { runs: [await run(agent)], ...summary(agent) };
  },

  async backend_tool() {
    const agent = newAgent();
    agent.addMessage(userMessage('[[tool:calculate {"expression": "6*7"}]]'));
    return { runs: [await run(agent)], ...summary(agent) };
  },

  async frontend_tool() {
    const agent = newAgent();
    const tools = [CONFIRM_ORDER];
    agent.addMessage(userMessage('[[tool:confirm_order {"item": "tea"}]]'));
    const first = await run(agent, { tools });
    // The application runs its tool and answers in the next run.
    for (const id of first.finished?.pendingToolCallIds ?? []) {
      agent.addMessage({ id: randomUUID(), role: "tool", toolCallId: id, content: "confirmed: tea" });
    }
    const second = await run(agent, { tools });
    return { runs: [first, second], ...summary(agent) };
  },

  async mixed_tools() {
    const agent = newAgent();
    const tools = [CONFIRM_ORDER];
    agent.addMessage(
      userMessage('[[tool:confirm_order {"item": "cake"}]] [[tool:calculate {"expression": "2+3"}]]'),
    );
    const first = await run(agent, { tools });
    for (const id of first.finished?.pendingToolCallIds ?? []) {
      agent.addMessage({ id: randomUUID(), role: "tool", toolCallId: id, content: "confirmed: cake" });
    }
    const second = await run(agent, { tools });
    return { runs: [first, second], ...summary(agent) };
  },

  async state() {
    const agent = newAgent();
    agent.addMessage(userMessage('[[tool:update_state {"state": {"count": 1, "items": []}}]]'));
    const first = await run(agent);
    const afterFirst = structuredClone(agent.state);
    agent.addMessage(
      userMessage(
        '[[tool:update_state {"patch": [{"op": "replace", "path": "/count", "value": 2},' +
          ' {"op": "add", "path": "/items/-", "value": "tea"}]}]]',
      ),
    );
    const second = await run(agent);
    return { runs: [first, second], afterFirst, ...summary(agent) };
  },

  async state_for_a_new_client() {
    // A second client of the same thread starts with no state: the run tells it the
    // thread's state first, so the delta that follows applies.
    const agent = newAgent();
    agent.addMessage(userMessage('[[tool:update_state {"patch": [{"op": "replace", "path": "/count", "value": 3}]}]]'));
    return { runs: [await run(agent)], ...summary(agent) };
  },

  async reasoning() {
    const agent = newAgent();
    agent.addMessage(userMessage("[[reason]] why is the sky blue"));
    const first = await run(agent);
    // The client keeps a reasoning message in its history and sends it back.
    agent.addMessage(userMessage("and at night?"));
    const second = await run(agent);
    return { runs: [first, second], ...summary(agent) };
  },

  async llm_failure() {
    const agent = newAgent();
    agent.addMessage(userMessage("[[error:500]] this will fail"));
    const first = await run(agent);
    agent.addMessage(userMessage("try again"));
    const second = await run(agent);
    return { runs: [first, second], ...summary(agent) };
  },

  async interrupt() {
    const agent = newAgent();
    agent.addMessage(userMessage("[[hang]] tell me a long story"));
    let asked = null;
    const interrupt = async () => {
      const response = await fetch(`${baseUrl}/agentik/conversations/${threadId}/interrupt`, {
        method: "POST",
      });
      return response.json();
    };
    const result = await run(agent, {}, (event) => {
      if (event.type === "TEXT_MESSAGE_CONTENT" && asked === null) {
        asked = interrupt();
      }
    });
    return { runs: [result], interrupted: await asked, ...summary(agent) };
  },

  async multi_turn_new_messages_only() {
    // A client that holds no history: every turn is a fresh agent with one new message.
    // The last one takes the snapshot as its whole history, in the server's order (by
    // default HttpAgent keeps the messages it has in place and appends the others).
    const runs = [];
    let last = null;
    const texts = ["first turn alpha", "second turn beta", "third turn gamma"];
    const adopt = {
      onMessagesSnapshotEvent: ({ event }) => ({ messages: event.messages, stopPropagation: true }),
    };
    for (const [index, text] of texts.entries()) {
      last = newAgent();
      last.addMessage(userMessage(text));
      runs.push(await run(last, {}, () => {}, index === texts.length - 1 ? adopt : {}));
    }
    return { runs, ...summary(last) };
  },
};

const result = await SCENARIOS[scenario]();
console.log(JSON.stringify({ scenario, threadId, warnings, ...result }));
