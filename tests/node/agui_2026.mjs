// AG-UI's 2026 additions as the official client sees them: capabilities discovery,
// ACTIVITY events, token usage on RUN_FINISHED and RUN_ERROR, and image input parts.
// Drives agentik with @ag-ui/client's HttpAgent (whose pipeline validates every event
// against the @ag-ui/core schemas and verifies their order) and validates the capabilities
// with @ag-ui/core's AgentCapabilitiesSchema. Prints one JSON summary line; the Python test
// that runs it holds the assertions.
//
// usage: node agui_2026.mjs <base url> <scenario> <thread id>
import { randomUUID } from "node:crypto";
import { HttpAgent } from "@ag-ui/client";
import { AgentCapabilitiesSchema } from "@ag-ui/core/schemas";

const [baseUrl, scenario, threadId] = process.argv.slice(2);

const warnings = [];
console.warn = (...args) => warnings.push(args.map(String).join(" "));

// A 1x1 transparent PNG.
const PNG =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

/**
 * HttpAgent with AbstractAgent's optional getCapabilities(): HttpAgent 1.0.0 leaves it out,
 * so it reads agentik's `<agent url>/capabilities` and holds it to the SDK's schema.
 */
class CapableHttpAgent extends HttpAgent {
  async getCapabilities() {
    const response = await fetch(`${this.url}/capabilities`);
    if (!response.ok) {
      throw new Error(`HTTP ${response.status}: ${await response.text()}`);
    }
    return AgentCapabilitiesSchema.parse(await response.json());
  }
}

function newAgent(path = "/agui") {
  return new CapableHttpAgent({ url: `${baseUrl}${path}`, threadId });
}

async function run(agent, message) {
  agent.addMessage({ id: randomUUID(), role: "user", content: message });
  const events = [];
  let error = null;
  try {
    await agent.runAgent({}, { onEvent: ({ event }) => void events.push(event) });
  } catch (caught) {
    error = String(caught?.message ?? caught);
  }
  const types = events.map((e) => e.type);
  return {
    error,
    types,
    terminal: ["RUN_FINISHED", "RUN_ERROR"].includes(types.at(-1)),
    runStarted: events.find((e) => e.type === "RUN_STARTED") ?? null,
    activities: events.filter((e) => e.type.startsWith("ACTIVITY_")),
    finishedUsage: events.find((e) => e.type === "RUN_FINISHED")?.usage ?? null,
    runError: events.find((e) => e.type === "RUN_ERROR") ?? null,
    text: events
      .filter((e) => e.type === "TEXT_MESSAGE_CONTENT")
      .map((e) => e.delta)
      .join(""),
  };
}

function activityMessages(agent) {
  return agent.messages
    .filter((m) => m.role === "activity")
    .map((m) => ({ id: m.id, activityType: m.activityType, content: m.content }));
}

const SCENARIOS = {
  async capabilities() {
    const agents = {};
    for (const path of ["/agui", "/agui/lead", "/agui/reader"]) {
      agents[path] = await newAgent(path).getCapabilities();
    }
    let missing = null;
    try {
      await newAgent("/agui/nobody").getCapabilities();
    } catch (caught) {
      missing = String(caught.message);
    }
    return { runs: [], agents, missing };
  },

  async activity() {
    const agent = newAgent("/agui/lead");
    const first = await run(agent, "ask the reader");
    return { runs: [first], activityMessages: activityMessages(agent) };
  },

  async usage_on_error() {
    const agent = newAgent();
    return { runs: [await run(agent, "use a tool, then fail")] };
  },

  async document() {
    const agent = newAgent("/agui/lead");
    const pdf = Buffer.from("%PDF-1.4\n%%EOF\n").toString("base64");
    const parts = [
      { type: "text", text: "summarise this report" },
      {
        type: "document",
        source: { type: "data", value: pdf, mimeType: "application/pdf" },
        metadata: { filename: "report.pdf" },
      },
    ];
    const seen = await run(agent, parts);
    return { runs: [seen], messages: agent.messages.map((m) => m.content ?? null) };
  },

  async image() {
    const agent = newAgent();
    const parts = [
      { type: "text", text: "what is in this picture?" },
      { type: "image", source: { type: "data", value: PNG, mimeType: "image/png" } },
    ];
    const seen = await run(agent, parts);
    const textOnly = newAgent("/agui/reader");
    const refused = await run(textOnly, parts);
    return { runs: [seen], refused, messages: agent.messages.map((m) => m.content) };
  },
};

const result = await SCENARIOS[scenario]();
console.log(JSON.stringify({ scenario, threadId, warnings, ...result }));
